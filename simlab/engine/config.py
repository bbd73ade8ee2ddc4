"""Sweep configuration: TOML tables -> a validated `SweepConfig` (docs/design.md, "Flow of
one sweep").

A config file has the tables
  [block]    fields of spec.BlockSpec          [inputs]  fields of spec.InputSpec
  [knobs]    fixed knob values (the rest take their defaults, simlab.core.knobs.KNOBS)
  [[axes]]   name, knobs (default [name]), and either space = "log" | "lin" with start, stop,
             num, or values = [...]: distinct values, ascending or descending (kept in the
             order given); num = 1 needs start == stop
  [sweep]    seeds, base_seed, micro_batch, chunk_size, memory_budget_mb, metrics,
             matmul_precision
Every check names the field (e.g. "axes[1].stop") and raises simlab.errors.ConfigError.
Experiment TOMLs (experiments/, found by `experiments_dir`) may add a [quick] table of smaller
sizes, applied by `apply_quick`, and [[figures]] tables (simlab.studies.reproduce).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from simlab.core import knobs as knob_registry
from simlab.core import spec
from simlab.errors import ConfigError

TABLES = ("block", "inputs", "knobs", "axes", "sweep")
# Keys an experiment TOML may add for `simlab reproduce`; a sweep ignores them.
EXPERIMENT_KEYS = ("quick", "figures", "experiment", "variants")
# Top-level keys of a config besides the tables: `plugins` (modules imported before anything is
# validated, simlab.plugins); `sources` and `lab`, which a sweep writes into its resolved config
# (the plugins behind the entries it uses; a custom lab's identity) and which are derived again,
# not read, when a resolved config is run again.
PLUGINS_KEY = "plugins"
DERIVED_KEYS = ("sources", "lab")
AXIS_FIELDS = ("name", "knobs", "space", "start", "stop", "num", "values")
SWEEP_DEFAULTS: dict[str, Any] = {
    "seeds": 1,
    "base_seed": 0,
    "micro_batch": None,
    "chunk_size": None,
    "memory_budget_mb": 1024.0,
    "metrics": None,
    "matmul_precision": "highest",
}
# jax.default_matmul_precision values: "highest" = full float32 matmuls on every backend (GPUs
# otherwise use TF32 and TPUs bfloat16 passes for float32); "high" (bf16_3x / TF32),
# "default" (the backend's fastest).
MATMUL_PRECISIONS = ("highest", "high", "default")
# Dimensions the results add themselves: no axis may take their names.
RESERVED_DIMS = ("seed", "layer")
# Sizes of a grid (each far beyond any sweep that fits a machine; the memory preflight,
# simlab.engine.sweep, refuses what does not fit long before these).
MAX_AXES = 8
MAX_AXIS_POINTS = 1 << 20
MAX_SEEDS = 1 << 20
# Fields that change only memory or speed, never the numbers: left out of the fingerprint.
NOT_FINGERPRINTED = ("chunk_size", "memory_budget_mb")
# The knobs every result before the knob registry was opened records; any other knob (a later
# built-in, a plugin's) is left out of the fingerprint while at its default, so that adding a
# knob does not change the fingerprint of results that never set it.
LEGACY_KNOBS = (
    "q_scale",
    "k_scale",
    "q_shift",
    "k_shift",
    "temperature",
    "drift_norm",
    "input_corr",
    "attn_residual",
    "mlp_residual",
    "qk_norm_gain",
)
# Fields added after results were committed: left out of the fingerprint while at this default,
# so results computed before the field existed keep their fingerprint (and still reload).
ADDED_DEFAULTS: dict[str, dict[str, Any]] = {
    "block": {"mlp_center": False, "qk_weights": "random", "pattern": "softmax"},
    "inputs": {"normalize": False},
}


@dataclasses.dataclass(frozen=True)
class Axis:
    """One named grid axis driving one or more knobs with the same values.

    space: "log" | "lin" (values from start, stop, num) or "values" (an explicit list).
    """

    name: str
    knobs: tuple[str, ...]
    space: str
    values: tuple[float, ...]
    start: float | None = None
    stop: float | None = None
    num: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The axis as a config table (loadable again by `parse_axis`)."""
        d: dict[str, Any] = {"name": self.name, "knobs": list(self.knobs)}
        if self.space == "values":
            d["values"] = list(self.values)
        else:
            d.update(space=self.space, start=self.start, stop=self.stop, num=self.num)
        return d

    def describe(self) -> dict[str, Any]:
        """{name, knobs, space, values}: the entry of meta.json's "axes" list."""
        return {
            "name": self.name,
            "knobs": list(self.knobs),
            "space": self.space,
            "values": list(self.values),
        }


@dataclasses.dataclass(frozen=True)
class SweepSettings:
    """The [sweep] table. micro_batch None: derived from the block's size by the lab
    (simlab.core.lab.Lab.default_micro_batch) and recorded in the resolved config."""

    seeds: int = 1
    base_seed: int = 0
    micro_batch: int | None = None
    chunk_size: int | None = None
    memory_budget_mb: float = 1024.0
    metrics: tuple[str, ...] | None = None
    matmul_precision: str = "highest"


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    """A validated sweep: block, inputs, fixed knobs (every knob not on an axis), axes, settings,
    and the plugin modules the config names (imported before it was validated)."""

    block: spec.BlockSpec
    inputs: spec.InputSpec
    knobs: dict[str, float]
    axes: tuple[Axis, ...]
    sweep: SweepSettings
    plugins: tuple[str, ...] = ()

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a.values) for a in self.axes)

    @property
    def n_points(self) -> int:
        return math.prod(self.shape)

    def to_dict(self) -> dict[str, Any]:
        """The canonical resolved config (JSON-able, loadable again by `load_config`)."""
        out = {
            "block": dataclasses.asdict(self.block),
            "inputs": dataclasses.asdict(self.inputs),
            "knobs": dict(sorted(self.knobs.items())),
            "axes": [a.to_dict() for a in self.axes],
            "sweep": {
                **dataclasses.asdict(self.sweep),
                "metrics": None if self.sweep.metrics is None else list(self.sweep.metrics),
            },
        }
        if self.plugins:  # (absent when none: the fingerprints of earlier results stay)
            out[PLUGINS_KEY] = list(self.plugins)
        return out


def canonical(config: Mapping[str, Any]) -> dict[str, Any]:
    """What the fingerprint hashes: the config as JSON without the memory-only fields, without
    fields added later while at their defaults (ADDED_DEFAULTS), and without knobs outside
    LEGACY_KNOBS while at their registered defaults."""
    d = json.loads(json.dumps(config))
    for k in NOT_FINGERPRINTED:
        d.get("sweep", {}).pop(k, None)
    for table, fields in ADDED_DEFAULTS.items():
        for k, default in fields.items():
            if k in d.get(table, {}) and d[table][k] == default:
                del d[table][k]
    knobs = d.get("knobs", {})
    for k in [k for k in knobs if k not in LEGACY_KNOBS and k in knob_registry.KNOBS]:
        if knobs[k] == knob_registry.KNOBS[k].default:
            del knobs[k]
    return d


def fingerprint(config: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of a `to_dict()` config (`canonical`)."""
    d = canonical(config)
    return hashlib.sha256(json.dumps(d, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def config_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Dotted names of the fields that differ between two config dicts (fingerprinted only)."""
    return _diff(canonical(a), canonical(b), "")


def _diff(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str) -> list[str]:
    out = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        if isinstance(va, Mapping) and isinstance(vb, Mapping):
            out += _diff(va, vb, f"{prefix}{k}.")
        elif va != vb:
            out.append(f"{prefix}{k}")
    return out


def default_config_path() -> Path:
    """Path of the embedded default config (simlab/configs/default.toml)."""
    return Path(__file__).resolve().parent.parent / "configs" / "default.toml"


def experiments_dir() -> Path:
    """The experiments/ folder: $SIMLAB_EXPERIMENTS if set, else the checkout's (simlab
    installed with `pip install -e .`), else ./experiments. The one place that looks for it."""
    env = os.environ.get("SIMLAB_EXPERIMENTS")
    if env:
        return Path(env)
    checkout = Path(__file__).resolve().parents[2] / "experiments"
    return checkout if checkout.is_dir() else Path.cwd() / "experiments"


QUICK_FIELDS = ("block", "inputs", "sweep", "knobs", "num")


def apply_quick(cfg: Mapping[str, Any], quick: Mapping[str, Any] | None, where: str) -> dict:
    """A config's tables with its [quick] overrides: quick.block / inputs / sweep / knobs update
    those tables, quick.num sets num on every lin/log axis."""
    quick = quick or {}
    unknown = set(quick) - set(QUICK_FIELDS)
    if unknown:
        raise ConfigError(
            f"{where}.{sorted(unknown)[0]}: unknown field; allowed: {', '.join(QUICK_FIELDS)}"
        )
    out = copy.deepcopy(dict(cfg))
    for table in ("block", "inputs", "sweep", "knobs"):
        if table in quick:
            out[table] = {**out.get(table, {}), **quick[table]}
    if "num" in quick:
        for a in out.get("axes", []):
            if "num" in a:
                a["num"] = quick["num"]
    return out


def read_toml(path: str | os.PathLike) -> dict[str, Any]:
    """Parse a TOML file; a missing or unreadable file, text that is not UTF-8 and a syntax
    error each become a ConfigError naming the file."""
    p = Path(path)
    if str(path) == "":
        raise ConfigError("config: empty file name")
    if not p.exists():
        raise ConfigError(f"{p}: no such config file")
    if not p.is_file():
        raise ConfigError(f"{p}: is not a file (a TOML config file is needed)")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{p}: is not UTF-8 text (byte {e.start}); a config is a TOML text file"
        ) from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot be read ({e.strerror})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: invalid TOML: {e}") from None


def load_config(source: str | os.PathLike | Mapping[str, Any] | SweepConfig) -> SweepConfig:
    """Validate a config given as a TOML path, a dict of tables, or a SweepConfig."""
    if isinstance(source, SweepConfig):
        return source
    if not isinstance(source, (str, os.PathLike, Mapping)):
        raise ConfigError(
            f"config: must be a TOML path, a dict of tables or a SweepConfig, got "
            f"{type(source).__name__} {source!r}"
        )
    raw = read_toml(source) if isinstance(source, (str, os.PathLike)) else source
    if not isinstance(raw, Mapping):
        raise ConfigError(f"config: must be a table of tables, got {type(raw).__name__}")
    named = load_plugins(raw)  # before anything is validated: plugins add kinds, knobs, metrics
    for k in raw:
        if k not in TABLES and k not in EXPERIMENT_KEYS + (PLUGINS_KEY,) + DERIVED_KEYS:
            raise ConfigError(f"{k}: unknown table; allowed: {', '.join(TABLES)}")
    block = _floats(spec.spec_from_dict(spec.BlockSpec, _table(raw, "block"), "block"))
    inputs = _floats(spec.spec_from_dict(spec.InputSpec, _table(raw, "inputs"), "inputs"))
    fixed = _table(raw, "knobs")
    knobs = knob_registry.resolve_knobs(fixed)
    axes_raw = raw.get("axes", [])
    if not isinstance(axes_raw, (list, tuple)) or not axes_raw:
        raise ConfigError("axes: need at least one [[axes]] table")
    if len(axes_raw) > MAX_AXES:
        raise ConfigError(f"axes: {len(axes_raw)} axes; at most {MAX_AXES}")
    axes = tuple(parse_axis(a, f"axes[{i}]") for i, a in enumerate(axes_raw))
    _check_axes(axes, fixed)
    swept = {k for a in axes for k in a.knobs}
    fixed_knobs = {k: v for k, v in knobs.items() if k not in swept}
    return SweepConfig(
        block, inputs, fixed_knobs, axes, parse_sweep(_table(raw, "sweep")), tuple(named)
    )


def load_plugins(raw: Mapping[str, Any]) -> tuple[str, ...]:
    """Import the config's `plugins = ["module", ...]` and the installed plugins (entry points);
    the modules named, validated."""
    from simlab import plugins

    plugins.load_entry_points()
    names = raw.get(PLUGINS_KEY, [])
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise ConfigError(f"{PLUGINS_KEY}: must be a list of module names, got {names!r}")
    return tuple(plugins.load(names, PLUGINS_KEY))


def parse_axis(d: Any, where: str) -> Axis:
    """Validate one [[axes]] table; every value is checked against each knob's range."""
    if not isinstance(d, Mapping):
        raise ConfigError(f"{where}: must be a table, got {d!r}")
    for k in d:
        if k not in AXIS_FIELDS:
            raise ConfigError(f"{where}.{k}: unknown field; allowed: {', '.join(AXIS_FIELDS)}")
    name = d.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}.name: must be a non-empty string, got {name!r}")
    if name in RESERVED_DIMS:
        raise ConfigError(
            f"{where}.name: {name!r} is reserved for the results' own dimension; "
            f"reserved: {', '.join(RESERVED_DIMS)}"
        )
    knobs = d.get("knobs", [name] if name in knob_registry.KNOBS else None)
    if knobs is None:
        raise ConfigError(
            f"{where}.knobs: required because {name!r} is not a knob; "
            f"knobs: {', '.join(knob_registry.KNOBS)}"
        )
    if isinstance(knobs, str) or not isinstance(knobs, (list, tuple)) or not knobs:
        raise ConfigError(f"{where}.knobs: must be a non-empty list of knob names, got {knobs!r}")
    for k in knobs:
        if k not in knob_registry.KNOBS:
            raise ConfigError(
                f"{where}.knobs: unknown knob {k!r}; allowed: {', '.join(knob_registry.KNOBS)}"
            )
    if len(set(knobs)) != len(knobs):
        raise ConfigError(f"{where}.knobs: repeated knob in {list(knobs)}")
    start, stop, num = d.get("start"), d.get("stop"), d.get("num")
    if "values" in d:
        extra = [k for k in ("space", "start", "stop", "num") if k in d]
        if extra:
            raise ConfigError(
                f"{where}.{extra[0]}: give either values or space/start/stop/num, not both"
            )
        values = d["values"]
        if not isinstance(values, (list, tuple)) or not values:
            raise ConfigError(
                f"{where}.values: must be a non-empty list of numbers, got {values!r}"
            )
        if len(values) > MAX_AXIS_POINTS:
            raise ConfigError(
                f"{where}.values: {len(values)} values; at most {MAX_AXIS_POINTS} per axis"
            )
        space = "values"
    else:
        space = d.get("space")
        if space not in ("log", "lin"):
            raise ConfigError(
                f"{where}.space: {space!r} is not one of 'log', 'lin' (or give values = [...])"
            )
        num = spec.check_int(f"{where}.num", num, 1, MAX_AXIS_POINTS)
        for field, v in (("start", start), ("stop", stop)):
            if v is None:
                raise ConfigError(f"{where}.{field}: required for space = {space!r}")
            if space == "log":
                spec.check_positive(f"{where}.{field}", v)
            elif isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ConfigError(f"{where}.{field}: must be a finite number, got {v!r}")
        start, stop = float(start), float(stop)
        if num == 1 and start != stop:
            raise ConfigError(
                f"{where}.num: 1 point needs start == stop (got {start:g} and {stop:g}); "
                "give values = [x] for a single value"
            )
        grid = np.geomspace if space == "log" else np.linspace
        values = grid(start, stop, num).tolist()
    for k in knobs:
        for v in values:
            knob_registry.check_knob(k, v, where)
    values = tuple(float(v) for v in values)
    if len(set(values)) != len(values):
        dup = next(v for v in values if values.count(v) > 1)
        raise ConfigError(
            f"{where}: the value {dup:g} appears more than once; an axis needs distinct values "
            "(for lin/log: start != stop when num > 1)"
        )
    return Axis(name, tuple(knobs), space, values, start, stop, num)


def parse_sweep(d: Mapping[str, Any]) -> SweepSettings:
    """Validate the [sweep] table (missing fields take SWEEP_DEFAULTS)."""
    for k in d:
        if k not in SWEEP_DEFAULTS:
            raise ConfigError(f"sweep.{k}: unknown field; allowed: {', '.join(SWEEP_DEFAULTS)}")
    v = {**SWEEP_DEFAULTS, **{k: x for k, x in d.items() if x is not None}}
    metrics = v["metrics"]
    if metrics is not None:
        if (
            isinstance(metrics, str)
            or not isinstance(metrics, (list, tuple))
            or not metrics
            or not all(isinstance(m, str) for m in metrics)
        ):
            raise ConfigError(
                f"sweep.metrics: must be a non-empty list of metric names, got {metrics!r}"
            )
        if len(set(metrics)) != len(metrics):
            raise ConfigError(f"sweep.metrics: repeated metric in {list(metrics)}")
        metrics = tuple(metrics)
    return SweepSettings(
        seeds=spec.check_int("sweep.seeds", v["seeds"], 1, MAX_SEEDS),
        base_seed=spec.check_int("sweep.base_seed", v["base_seed"], 0, 2**32 - 1),
        micro_batch=None
        if v["micro_batch"] is None
        else spec.check_int("sweep.micro_batch", v["micro_batch"], 1, 1 << 16),
        chunk_size=None
        if v["chunk_size"] is None
        else spec.check_int("sweep.chunk_size", v["chunk_size"], 1),
        memory_budget_mb=spec.check_positive("sweep.memory_budget_mb", v["memory_budget_mb"]),
        metrics=metrics,
        matmul_precision=spec.check_choice(
            "sweep.matmul_precision", v["matmul_precision"], MATMUL_PRECISIONS
        ),
    )


def _check_axes(axes: tuple[Axis, ...], fixed: Mapping[str, Any]) -> None:
    """Axis names unique; each knob driven by at most one axis and not also fixed in [knobs]."""
    seen_names: dict[str, int] = {}
    driver: dict[str, str] = {}
    for i, a in enumerate(axes):
        if a.name in seen_names:
            raise ConfigError(
                f"axes[{i}].name: {a.name!r} is already the name of axes[{seen_names[a.name]}]"
            )
        seen_names[a.name] = i
        for k in a.knobs:
            if k in driver:
                raise ConfigError(
                    f"axes[{i}].knobs: knob {k!r} is already driven by axis {driver[k]!r}"
                )
            driver[k] = a.name
    for k in fixed:
        if k in driver:
            raise ConfigError(f"knobs.{k}: is driven by axis {driver[k]!r}; remove it from [knobs]")


def _table(raw: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    t = raw.get(name, {})
    if t is None:
        t = {}
    if not isinstance(t, Mapping):
        raise ConfigError(f"{name}: must be a table, got {t!r}")
    return t


def _floats(s):
    """Store float fields as floats (so `1` and `1.0` give the same fingerprint)."""
    return dataclasses.replace(
        s,
        **{
            f.name: float(getattr(s, f.name))
            for f in dataclasses.fields(s)
            if f.type == "float" and isinstance(getattr(s, f.name), int)
        },
    )


def parse_override(text: str) -> tuple[list[str], Any]:
    """ "block.d_model=128" -> (["block", "d_model"], 128): the value is read as a TOML value
    (numbers, true/false, "strings", [lists], {tables}); a bare word is a string."""
    key, sep, value = text.partition("=")
    path = [p for p in key.strip().split(".")]
    if not sep or not all(path):
        raise ConfigError(
            f"--set: {text!r} is not KEY=VALUE with a dotted key, e.g. block.d_model=128"
        )
    try:
        v = tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        v = value.strip()
    return path, v


def apply_overrides(raw: Mapping[str, Any], sets: list[str] | tuple[str, ...]) -> dict:
    """The config tables with each --set KEY=VALUE applied (dotted keys; a number indexes a
    list, e.g. axes.0.num=9). Unknown tables and fields are left for load_config to refuse,
    so an override is validated exactly like the file."""
    out = copy.deepcopy(dict(raw))
    for text in sets or ():
        path, value = parse_override(text)
        node: Any = out
        for i, part in enumerate(path[:-1]):
            nxt = path[i + 1]
            if isinstance(node, list):
                node = _index(node, part, text)
                continue
            if part not in node or node[part] is None:
                node[part] = [] if nxt.isdigit() else {}
            node = node[part]
            if not isinstance(node, (dict, list)):
                raise ConfigError(f"--set {text}: {'.'.join(path[: i + 1])} is not a table")
        last = path[-1]
        if isinstance(node, list):
            idx = int(last) if last.isdigit() else None
            if idx is None or not 0 <= idx < len(node):
                raise ConfigError(f"--set {text}: index {last} is outside 0..{len(node) - 1}")
            node[idx] = value
        else:
            node[last] = value
    return out


def _index(node: list, part: str, text: str):
    if not part.isdigit() or not 0 <= int(part) < len(node):
        raise ConfigError(f"--set {text}: {part!r} is not an index in 0..{len(node) - 1}")
    return node[int(part)]
