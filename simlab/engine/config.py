"""Sweep configuration: TOML tables -> a validated `SweepConfig` (docs/design.md, "Flow of
one sweep").

A config file has the tables
  [block]    fields of spec.BlockSpec          [inputs]  fields of spec.InputSpec
  [knobs]    fixed knob values (the rest take their defaults, simlab.core.knobs.KNOBS)
  [[axes]]   name, knobs (default [name]), and either space = "log" | "lin" with start, stop,
             num, or values = [...]: distinct values, ascending or descending (kept in the
             order given); num = 1 needs start == stop. `knobs` may instead be a table giving
             each knob its own function of the coordinate x: {coef, power} (c x^p) or a list of
             values (one per coordinate; without values or space the coordinate is the index)
  [points]   an explicit list of knob points: knob = [values...] of equal length (and an
             optional name, default "point"): an axis of per-knob lists, put before the others
  [sweep]    seeds, first_seed, base_seed, micro_batch, chunk_size, memory_budget_mb, metrics,
             matmul_precision
  [refine]   metric, level, levels, axes, rule, layer: adaptive refinement of the level set
             metric = level (simlab.engine.refine)
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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from simlab.core import knobs as knob_registry
from simlab.core import spec
from simlab.errors import ConfigError

TABLES = ("block", "inputs", "knobs", "axes", "sweep", "points", "refine")
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
    "first_seed": 0,
    "base_seed": 0,
    "micro_batch": None,
    "chunk_size": None,
    "memory_budget_mb": 1024.0,
    "metrics": None,
    "matmul_precision": "highest",
    "dtype": None,
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
    "sweep": {"first_seed": 0, "dtype": "float32"},
}
DTYPES = ("float32", "float64")
# Fields of a knob's law on an axis (c x^p); a list of values is the other form.
LAW_FIELDS = ("coef", "power")
REFINE_FIELDS = ("metric", "level", "levels", "axes", "rule", "layer")
# "mean": refine a cell whose corners straddle the level in the seed mean; "any": in the seed
# mean or in any single seed (simlab.engine.refine).
REFINE_RULES = ("mean", "any")
MAX_REFINE_LEVELS = 16
# Points of a refinement's finest lattice (its bookkeeping arrays are this long).
MAX_LATTICE_POINTS = 1 << 26


@dataclasses.dataclass(frozen=True)
class Law:
    """How an axis sets one knob from its coordinate x: the value list `values` (one per
    coordinate) when given, else coef * x ** power (float64, np.power)."""

    coef: float = 1.0
    power: float = 1.0
    values: tuple[float, ...] | None = None

    def apply(self, x: tuple[float, ...]) -> tuple[float, ...]:
        if self.values is not None:
            return self.values
        if (self.coef, self.power) == (1.0, 1.0):
            return tuple(x)
        with np.errstate(all="ignore"):  # x <= 0 with some powers: inf or nan, refused later
            return tuple((self.coef * np.power(np.asarray(x, np.float64), self.power)).tolist())

    def to_config(self) -> Any:
        if self.values is not None:
            return list(self.values)
        return {"coef": self.coef, "power": self.power}


@dataclasses.dataclass(frozen=True)
class Axis:
    """One named grid axis driving one or more knobs.

    space: "log" | "lin" (values from start, stop, num), "values" (an explicit list) or
    "index" (coordinates 0..n-1, for per-knob value lists without coordinates). laws: None
    when every knob takes the coordinate itself, else one Law per knob (aligned with knobs).
    """

    name: str
    knobs: tuple[str, ...]
    space: str
    values: tuple[float, ...]
    start: float | None = None
    stop: float | None = None
    num: int | None = None
    laws: tuple[Law, ...] | None = None

    def knob_values(self) -> dict[str, tuple[float, ...]]:
        """Knob -> its value at each coordinate (float64)."""
        if self.laws is None:
            return {k: self.values for k in self.knobs}
        return {k: law.apply(self.values) for k, law in zip(self.knobs, self.laws)}

    def to_dict(self) -> dict[str, Any]:
        """The axis as a config table (loadable again by `parse_axis`)."""
        knobs: Any = list(self.knobs)
        if self.laws is not None:
            knobs = {k: law.to_config() for k, law in zip(self.knobs, self.laws)}
        d: dict[str, Any] = {"name": self.name, "knobs": knobs}
        if self.space == "values":
            d["values"] = list(self.values)
        elif self.space != "index":
            d.update(space=self.space, start=self.start, stop=self.stop, num=self.num)
        return d

    def describe(self) -> dict[str, Any]:
        """{name, knobs, space, values} (and knob_values when a knob is not the coordinate
        itself): the entry of meta.json's "axes" list."""
        d = {
            "name": self.name,
            "knobs": list(self.knobs),
            "space": self.space,
            "values": list(self.values),
        }
        if self.laws is not None:
            d["knob_values"] = {k: list(v) for k, v in self.knob_values().items()}
        return d


@dataclasses.dataclass(frozen=True)
class SweepSettings:
    """The [sweep] table. micro_batch None: derived from the block's size by the lab
    (simlab.core.lab.Lab.default_micro_batch) and recorded in the resolved config."""

    seeds: int = 1
    first_seed: int = 0
    base_seed: int = 0
    micro_batch: int | None = None
    chunk_size: int | None = None
    memory_budget_mb: float = 1024.0
    metrics: tuple[str, ...] | None = None
    matmul_precision: str = "highest"
    dtype: str | None = None  # the float dtype computed in; run_sweep records the process's


@dataclasses.dataclass(frozen=True)
class Refine:
    """The [refine] table: refine the cells of the grid of `axes` whose corners straddle
    metric = level (rule "mean": in the seed mean; "any": in the mean or in any seed), `levels`
    times, halving the cells each time (simlab.engine.refine). layer: of a stack's metric
    (None: the last)."""

    metric: str
    level: float
    levels: int
    axes: tuple[str, ...]
    rule: str = "mean"
    layer: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {
            "metric": self.metric,
            "level": self.level,
            "levels": self.levels,
            "axes": list(self.axes),
            "rule": self.rule,
        }
        if self.layer is not None:
            d["layer"] = self.layer
        return d


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    """A validated sweep: block, inputs, fixed knobs (every knob not on an axis), axes, settings,
    the plugin modules the config names (imported before it was validated), and the adaptive
    refinement (None: the grid itself)."""

    block: spec.BlockSpec
    inputs: spec.InputSpec
    knobs: dict[str, float]
    axes: tuple[Axis, ...]
    sweep: SweepSettings
    plugins: tuple[str, ...] = ()
    refine: Refine | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a.values) for a in self.axes)

    @property
    def n_points(self) -> int:
        return math.prod(self.shape)

    def point_values(self) -> dict[str, np.ndarray]:
        """Swept knob -> its float64 value at every flat point index (C order over the axes)."""
        idx = np.unravel_index(np.arange(self.n_points), self.shape)
        return {
            k: np.asarray(v, np.float64)[i]
            for a, i in zip(self.axes, idx)
            for k, v in a.knob_values().items()
        }

    def to_dict(self) -> dict[str, Any]:
        """The canonical resolved config (JSON-able, loadable again by `load_config`)."""
        sweep = {
            **dataclasses.asdict(self.sweep),
            "metrics": None if self.sweep.metrics is None else list(self.sweep.metrics),
        }
        if not sweep["first_seed"]:  # (absent at its default, like every added field)
            del sweep["first_seed"]
        out = {
            "block": dataclasses.asdict(self.block),
            "inputs": dataclasses.asdict(self.inputs),
            "knobs": dict(sorted(self.knobs.items())),
            "axes": [a.to_dict() for a in self.axes],
            "sweep": sweep,
        }
        if self.plugins:  # (absent when none: the fingerprints of earlier results stay)
            out[PLUGINS_KEY] = list(self.plugins)
        if self.refine is not None:
            out["refine"] = self.refine.to_dict()
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
            if k in d.get(table, {}) and d[table][k] in (default, None):
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


QUICK_FIELDS = ("block", "inputs", "sweep", "knobs", "refine", "num")


def apply_quick(cfg: Mapping[str, Any], quick: Mapping[str, Any] | None, where: str) -> dict:
    """A config's tables with its [quick] overrides: quick.block / inputs / sweep / knobs /
    refine update those tables, quick.num sets num on every lin/log axis."""
    quick = quick or {}
    unknown = set(quick) - set(QUICK_FIELDS)
    if unknown:
        raise ConfigError(
            f"{where}.{sorted(unknown)[0]}: unknown field; allowed: {', '.join(QUICK_FIELDS)}"
        )
    out = copy.deepcopy(dict(cfg))
    for table in ("block", "inputs", "sweep", "knobs", "refine"):
        if table in quick:
            out[table] = {**out.get(table, {}), **quick[table]}
    if "num" in quick:
        for a in out.get("axes", []):
            if "num" in a:
                a["num"] = quick["num"]
    return out


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v) if math.isfinite(v) else ("nan" if v != v else ("inf" if v > 0 else "-inf"))
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        items = [f"{k} = {_toml_value(x)}" for k, x in v.items() if x is not None]
        return "{" + ", ".join(items) + "}"
    raise ConfigError(f"to_toml: cannot write {type(v).__name__} {v!r}")


def to_toml(config: Mapping[str, Any]) -> str:
    """A config dict (e.g. a resolved config) as TOML text that `load_config` reads back:
    `plugins` first, the tables, `[[axes]]`; None fields are left out (their defaults), and the
    derived keys (`sources`, `lab`) become comments."""
    lines = []
    if config.get(PLUGINS_KEY):
        lines.append(f"{PLUGINS_KEY} = {_toml_value(list(config[PLUGINS_KEY]))}")
    for key in DERIVED_KEYS:
        if config.get(key):
            lines.append(f"# {key} (derived, recorded by the sweep): {json.dumps(config[key])}")
    for table in ("block", "inputs", "knobs", "sweep"):
        t = config.get(table)
        if isinstance(t, Mapping) and t:
            lines += ["", f"[{table}]"]
            lines += [f"{k} = {_toml_value(v)}" for k, v in t.items() if v is not None]
    for a in config.get("axes") or []:
        lines += ["", "[[axes]]"]
        lines += [f"{k} = {_toml_value(v)}" for k, v in a.items() if v is not None]
    return "\n".join(lines).lstrip("\n") + "\n"


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
    points = None if raw.get("points") is None else parse_points(_table(raw, "points"))
    if not isinstance(axes_raw, (list, tuple)) or (not axes_raw and points is None):
        raise ConfigError("axes: need at least one [[axes]] table (or a [points] table)")
    if len(axes_raw) + (points is not None) > MAX_AXES:
        raise ConfigError(f"axes: {len(axes_raw)} axes; at most {MAX_AXES}")
    axes = tuple(parse_axis(a, f"axes[{i}]") for i, a in enumerate(axes_raw))
    axes = axes if points is None else (points, *axes)
    _check_axes(axes, fixed)
    swept = {k for a in axes for k in a.knobs}
    fixed_knobs = {k: v for k, v in knobs.items() if k not in swept}
    refine = None if raw.get("refine") is None else parse_refine(_table(raw, "refine"), axes)
    return SweepConfig(
        block,
        inputs,
        fixed_knobs,
        axes,
        parse_sweep(_table(raw, "sweep")),
        tuple(named),
        refine,
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
    """Validate one [[axes]] table; every knob value is checked against the knob's range."""
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
    laws = None
    if isinstance(knobs, Mapping):
        if not knobs:
            raise ConfigError(f"{where}.knobs: must name at least one knob")
        knobs, laws = tuple(knobs), _laws(knobs, lambda k: f"{where}.knobs.{k}")
    if isinstance(knobs, str) or not isinstance(knobs, (list, tuple)) or not knobs:
        raise ConfigError(
            f"{where}.knobs: must be a non-empty list of knob names or a table knob -> "
            f"{{coef, power}} or [values], got {knobs!r}"
        )
    for k in knobs:
        if k not in knob_registry.KNOBS:
            raise ConfigError(
                f"{where}.knobs: unknown knob {k!r}; allowed: {', '.join(knob_registry.KNOBS)}"
            )
    if len(set(knobs)) != len(knobs):
        raise ConfigError(f"{where}.knobs: repeated knob in {list(knobs)}")
    listed = [len(law.values) for law in laws or () if law.values is not None]
    start, stop, num = d.get("start"), d.get("stop"), d.get("num")
    if "values" in d:
        extra = [k for k in ("space", "start", "stop", "num") if k in d]
        if extra:
            raise ConfigError(
                f"{where}.{extra[0]}: give either values or space/start/stop/num, not both"
            )
        values = as_number_list(d["values"])
        if not isinstance(values, (list, tuple)) or not values:
            raise ConfigError(
                f"{where}.values: must be a non-empty list of numbers, got {values!r}"
            )
        if len(values) > MAX_AXIS_POINTS:
            raise ConfigError(
                f"{where}.values: {len(values)} values; at most {MAX_AXIS_POINTS} per axis"
            )
        space = "values"
    elif "space" not in d and listed:
        space, values = "index", list(range(listed[0]))
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
        values = axis_coordinates(space, start, stop, num)
    if laws is None:
        for k in knobs:
            for v in values:
                knob_registry.check_knob(k, v, where)
    else:
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ConfigError(f"{where}.values: {v!r} is not a finite number")
    values = tuple(float(v) for v in values)
    for k, n in zip(knobs, [len(law.values) if law.values else None for law in laws or ()]):
        if n is not None and n != len(values):
            raise ConfigError(
                f"{where}.knobs.{k}: {n} values; the axis has {len(values)} coordinates "
                "(every knob's list as long as the axis)"
            )
    axis = Axis(name, tuple(knobs), space, values, start, stop, num, laws)
    if laws is not None:
        check_axis_knobs(axis, where)
    if len(set(values)) != len(values):
        dup = next(v for v in values if values.count(v) > 1)
        raise ConfigError(
            f"{where}: the value {dup:g} appears more than once; an axis needs distinct values "
            "(for lin/log: start != stop when num > 1)"
        )
    return axis


def axis_coordinates(space: str, start: float, stop: float, num: int) -> list[float]:
    """The coordinates of a lin or log axis: np.linspace or np.geomspace(start, stop, num)."""
    grid = np.geomspace if space == "log" else np.linspace
    return grid(start, stop, num).tolist()


def check_axis_knobs(axis: Axis, where: str) -> None:
    """Every knob value of the axis finite and inside its knob's range (ConfigError naming the
    field)."""
    for k, vals in axis.knob_values().items():
        at = where if axis.laws is None else f"{where}.knobs.{k}"
        for x, v in zip(axis.values, vals):
            if not math.isfinite(v):
                raise ConfigError(f"{at}: not finite at the coordinate {x:g} (got {v!r})")
            knob_registry.check_knob(k, v, at)


def _laws(table: Mapping[str, Any], where: Callable[[str], str]) -> tuple[Law, ...] | None:
    """One Law per knob of a knobs table ({coef, power} or a list of values); None when every
    knob is the coordinate itself (the same sweep, and fingerprint, as a list of knob names)."""
    laws = []
    for k, spec_ in table.items():
        at = where(k)
        if isinstance(spec_, (list, tuple)):
            if not spec_:
                raise ConfigError(f"{at}: an empty list of values")
            if len(spec_) > MAX_AXIS_POINTS:
                raise ConfigError(f"{at}: {len(spec_)} values; at most {MAX_AXIS_POINTS}")
            for v in spec_:
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise ConfigError(f"{at}: {v!r} is not a finite number")
            laws.append(Law(values=tuple(float(v) for v in spec_)))
        elif isinstance(spec_, Mapping):
            for f in spec_:
                if f not in LAW_FIELDS:
                    raise ConfigError(
                        f"{at}.{f}: unknown field; allowed: {', '.join(LAW_FIELDS)} "
                        "(the knob is coef * x^power)"
                    )
            c, p = spec_.get("coef", 1.0), spec_.get("power", 1.0)
            for f, v in (("coef", c), ("power", p)):
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise ConfigError(f"{at}.{f}: must be a finite number, got {v!r}")
            laws.append(Law(float(c), float(p)))
        else:
            raise ConfigError(
                f"{at}: must be a list of values or a table {{coef, power}} "
                f"(knob = coef * x^power), got {spec_!r}"
            )
    if all(law == Law() for law in laws):
        return None
    return tuple(laws)


def parse_points(d: Mapping[str, Any]) -> Axis:
    """The [points] table: knob = [values...] (equal lengths) and an optional name (default
    "point"): an axis of per-knob value lists whose coordinate is the point's index."""
    name = d.get("name", "point")
    if not isinstance(name, str) or not name or name in RESERVED_DIMS:
        raise ConfigError(
            f"points.name: must be a non-empty string other than seed and layer, got {name!r}"
        )
    lists = {k: v for k, v in d.items() if k != "name"}
    if not lists:
        raise ConfigError("points: name at least one knob with its list of values")
    for k, v in lists.items():
        if k not in knob_registry.KNOBS:
            raise ConfigError(
                f"points.{k}: unknown knob; allowed: name, {', '.join(knob_registry.KNOBS)}"
            )
        if not isinstance(v, (list, tuple)):
            raise ConfigError(f"points.{k}: must be a list of values (one per point), got {v!r}")
    laws = _laws(lists, lambda k: f"points.{k}")
    n = {k: len(v) for k, v in lists.items()}
    if len(set(n.values())) != 1:
        raise ConfigError(
            "points: the knobs' lists differ in length ("
            + ", ".join(f"{k} {m}" for k, m in n.items())
            + "); one value per point for every knob"
        )
    count = next(iter(n.values()))
    axis = Axis(name, tuple(lists), "index", tuple(float(i) for i in range(count)), laws=laws)
    check_axis_knobs(axis, "points")
    return axis


def parse_refine(d: Mapping[str, Any], axes: tuple[Axis, ...]) -> Refine:
    """Validate the [refine] table against the axes: the refined axes lin or log with at least
    two coordinates (their knobs given by the coordinate or a power law), every other axis a
    single value, and a finest lattice of at most MAX_LATTICE_POINTS points."""
    for k in d:
        if k not in REFINE_FIELDS:
            raise ConfigError(f"refine.{k}: unknown field; allowed: {', '.join(REFINE_FIELDS)}")
    metric = d.get("metric")
    if not isinstance(metric, str) or not metric:
        raise ConfigError(f"refine.metric: must be a metric name, got {metric!r}")
    level = d.get("level")
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not math.isfinite(level):
        raise ConfigError(f"refine.level: must be a finite number, got {level!r}")
    levels = spec.check_int("refine.levels", d.get("levels"), 1, MAX_REFINE_LEVELS)
    rule = spec.check_choice("refine.rule", d.get("rule", "mean"), REFINE_RULES)
    layer = d.get("layer")
    if layer is not None:
        layer = spec.check_int("refine.layer", layer, -(1 << 16), 1 << 16)
    names = [a.name for a in axes]
    default = [a.name for a in axes if len(a.values) > 1]
    chosen = d.get("axes", default)
    if isinstance(chosen, str) or not isinstance(chosen, (list, tuple)) or not chosen:
        raise ConfigError(f"refine.axes: must be a non-empty list of axis names, got {chosen!r}")
    for n in chosen:
        if n not in names:
            raise ConfigError(f"refine.axes: {n!r} is not an axis; axes: {', '.join(names)}")
    if len(set(chosen)) != len(chosen):
        raise ConfigError(f"refine.axes: repeated axis in {list(chosen)}")
    lattice = 1
    for a in axes:
        if a.name not in chosen:
            if len(a.values) != 1:
                raise ConfigError(
                    f"refine.axes: axis {a.name!r} has {len(a.values)} values; an axis that is "
                    "not refined must have one value"
                )
            continue
        if a.space not in ("lin", "log") or len(a.values) < 2:
            raise ConfigError(
                f"refine.axes: axis {a.name!r} must be space = 'lin' or 'log' with num >= 2 "
                "(its coordinates are subdivided)"
            )
        if any(law.values is not None for law in a.laws or ()):
            raise ConfigError(
                f"refine.axes: axis {a.name!r} sets a knob from a list of values; a refined "
                "axis needs each knob as the coordinate or a power law of it"
            )
        lattice *= (len(a.values) - 1) * 2**levels + 1
    if lattice > MAX_LATTICE_POINTS:
        raise ConfigError(
            f"refine.levels: {levels} levels make a finest lattice of {lattice} points; "
            f"at most {MAX_LATTICE_POINTS}"
        )
    ordered = tuple(n for n in names if n in chosen)
    return Refine(metric, float(level), levels, ordered, rule, layer)


def as_number_list(values: Any) -> Any:
    """A numpy array or any non-string sequence of numbers as a list of Python numbers (the
    Python API takes np.linspace(...) where a TOML file has a list); anything else unchanged,
    for the caller's own error."""
    if isinstance(values, np.ndarray) and values.ndim == 1:
        return values.tolist()
    if isinstance(values, Sequence) and not isinstance(values, (str, bytes, list, tuple)):
        return list(values)
    if isinstance(values, (list, tuple)):
        return [v.item() if isinstance(v, np.generic) else v for v in values]
    return values


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
        first_seed=spec.check_int("sweep.first_seed", v["first_seed"], 0, 2**31 - 1),
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
        dtype=None if v["dtype"] is None else spec.check_choice("sweep.dtype", v["dtype"], DTYPES),
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
