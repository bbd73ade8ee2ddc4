"""Sweep configuration: TOML tables -> a validated `SweepConfig` (docs/design.md, "Flow of
one sweep").

A config file has the tables
  [block]    fields of spec.BlockSpec          [inputs]  fields of spec.InputSpec
  [knobs]    fixed knob values (the rest take their defaults, simlab.core.knobs.KNOBS)
  [[axes]], [points], [refine]: the grid and its refinement (simlab.engine.grid)
  [sweep]    seeds, first_seed, base_seed, micro_batch, chunk_size, memory_budget_mb, metrics,
             matmul_precision
  [checkpoint]  trained layers (simlab.checkpoints.source.CheckpointSpec: path, layer, ids):
             [block] then comes from the checkpoint's config.json (a study sets only pattern and
             depth), and the files' sha256 enter the fingerprint (docs/checkpoints.md)
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
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from simlab import plugins, validate
from simlab.checkpoints import source
from simlab.checkpoints.checkpoint import Weights
from simlab.core import knobs as knob_registry
from simlab.core import spec
from simlab.engine.grid import (
    MAX_AXES,
    Axis,
    Refine,
    check_axes,
    parse_axis,
    parse_points,
    parse_refine,
)
from simlab.engine.tomlio import read_config_toml
from simlab.errors import ConfigError

TABLES = ("block", "inputs", "knobs", "axes", "sweep", "points", "refine", "checkpoint")
# Keys an experiment TOML may add for `simlab reproduce`; a sweep ignores them.
EXPERIMENT_KEYS = ("quick", "figures", "experiment", "variants")
# Top-level keys of a config besides the tables: `plugins` (modules imported before anything is
# validated, simlab.plugins); `sources` and `lab`, which a sweep writes into its resolved config
# (the plugins behind the entries it uses; a custom lab's identity) and which are derived again,
# not read, when a resolved config is run again.
PLUGINS_KEY = "plugins"
DERIVED_KEYS = ("sources", "lab")
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
# Seeds of a sweep (far beyond any sweep that fits a machine, like the grid's own limits).
MAX_SEEDS = 1 << 20
# Fields that change only memory or speed, never the numbers: left out of the fingerprint.
NOT_FINGERPRINTED = ("chunk_size", "memory_budget_mb")
# The fingerprint rules, by version: the history of the fingerprint as data. Every record that
# holds a fingerprint (sweep.json, meta.json) names the rule it was made under
# (simlab.engine.records.RULE_KEY; a record without one was made under rule 1) and is checked
# under that rule. A rule (`canonical`): a field (of [block], [inputs], [sweep]) or a knob whose
# value equals its default is left out of the fingerprint, so that a field or knob a config does
# not set never changes it, except the fields and knobs of "hashed_at_default" (rule 1: the
# ones every record made before the rule existed hashed at their default); "defaults" gives
# the default a field is compared with where it is not the field's own (rule 1: a sweep's
# dtype None, resolved at run time, is float32). A change of the rule is a new entry here, never
# an edit of an old one: every committed fingerprint keeps recomputing under its own rule
# (tests/engine/test_records.py walks them all), and a run into a directory hashes under the
# rule of the sweep it holds (simlab.engine.records.directory_rule), so a directory made under
# an older rule is still reloaded, resumed and grown.
FINGERPRINT_RULES: dict[int, dict[str, dict[str, Any]]] = {
    1: {
        "hashed_at_default": {
            "block": [
                "kind", "d_model", "n_heads", "mlp", "mlp_ratio", "activation", "causal",
                "qk_norm", "depth", "init", "init_sigma", "ln_eps",
            ],
            "inputs": [
                "kind", "batch", "length", "vocab", "embed_std", "token_dist", "zipf_s", "sigma",
                "alpha", "nu",
            ],
            "sweep": ["seeds", "base_seed", "micro_batch", "metrics", "matmul_precision"],
            "knobs": [
                "q_scale", "k_scale", "q_shift", "k_shift", "temperature", "drift_norm",
                "input_corr", "attn_residual", "mlp_residual", "qk_norm_gain",
            ],
        },
        "defaults": {"sweep": {"dtype": "float32"}},
    },
    # rule 2: only the fields and knobs away from their defaults (a field added later, at its
    # default, never changes a rule-2 fingerprint)
    2: {"hashed_at_default": {}, "defaults": {"sweep": {"dtype": "float32"}}},
}  # fmt: skip
# The rule new records are made under (the newest).
FINGERPRINT_RULE = max(FINGERPRINT_RULES)
DTYPES = ("float32", "float64")


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
    checkpoint: source.CheckpointSpec | None = None
    # the trained layers the [checkpoint] table names, read once by load_config (not part of
    # the config's value: its file hashes are, in `checkpoint`); None without a [checkpoint]
    # table, or for a stored config loaded with read_weights=False
    weights: Weights | None = dataclasses.field(default=None, compare=False, repr=False)

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
        if self.checkpoint is not None:  # (absent without one: other fingerprints stay)
            out["checkpoint"] = self.checkpoint.to_dict()
        return out


def field_defaults(rule: int | None = None) -> dict[str, dict[str, Any]]:
    """table -> field -> the default `canonical` compares with under fingerprint rule `rule`
    (None: FINGERPRINT_RULE): the spec dataclasses' defaults, SWEEP_DEFAULTS, every registered
    knob's default, with the rule's own "defaults" over them."""

    def of(cls):
        return {f.name: f.default for f in dataclasses.fields(cls)}

    out = {
        "block": of(spec.BlockSpec),
        "inputs": of(spec.InputSpec),
        "sweep": dict(SWEEP_DEFAULTS),
        "knobs": {k: knob_registry.KNOBS[k].default for k in knob_registry.KNOBS},
    }
    for table, d in fingerprint_rule(rule)["defaults"].items():
        out[table].update(d)
    return json.loads(json.dumps(out))


def fingerprint_rule(rule: int | None = None) -> dict[str, dict[str, Any]]:
    """The fingerprint rule of version `rule` (FINGERPRINT_RULES; None: FINGERPRINT_RULE, read
    when called); ValueError for one this simlab does not know (simlab.engine.records refuses
    such a record, naming its file)."""
    rule = FINGERPRINT_RULE if rule is None else rule
    try:
        return FINGERPRINT_RULES[rule]
    except (KeyError, TypeError):
        raise ValueError(
            f"fingerprint rule {rule!r} is not one this simlab knows "
            f"({', '.join(map(str, FINGERPRINT_RULES))})"
        ) from None


def canonical(config: Mapping[str, Any], rule: int | None = None) -> dict[str, Any]:
    """What the fingerprint hashes under fingerprint rule `rule` (FINGERPRINT_RULES; None: the
    current one, FINGERPRINT_RULE): the config
    as JSON without the memory-only fields (NOT_FINGERPRINTED) and without every field or knob
    at its default (None counts as the default) except those the rule hashes at their
    default."""
    d = json.loads(json.dumps(config))
    for k in NOT_FINGERPRINTED:
        d.get("sweep", {}).pop(k, None)
    if isinstance(d.get("checkpoint"), dict):  # its files name it, not where it lies
        d["checkpoint"].pop("path", None)
    if isinstance(d.get("inputs"), dict) and d["inputs"].get("text_sha256"):
        d["inputs"].pop("corpus", None)  # likewise the text: its content, not where it lies
    hashed = fingerprint_rule(rule)["hashed_at_default"]
    for table, defaults in field_defaults(rule).items():
        t = d.get(table)
        if not isinstance(t, dict):
            continue
        keep = hashed.get(table, ())
        for k in [k for k in t if k in defaults and k not in keep]:
            if t[k] is None or t[k] == defaults[k]:
                del t[k]
    return d


def fingerprint(config: Mapping[str, Any], rule: int | None = None) -> str:
    """sha256 of the canonical JSON of a `to_dict()` config under fingerprint rule `rule`
    (`canonical`; new records are made under FINGERPRINT_RULE)."""
    d = canonical(config, rule)
    return hashlib.sha256(json.dumps(d, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def config_diff(a: Mapping[str, Any], b: Mapping[str, Any], rule: int | None = None) -> list[str]:
    """Dotted names of the fields that differ between two config dicts (fingerprinted only,
    under fingerprint rule `rule`)."""
    return _diff(canonical(a, rule), canonical(b, rule), "")


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
    for table in ("block", "inputs", "knobs", "sweep", "checkpoint"):
        t = config.get(table)
        if isinstance(t, Mapping) and t:
            lines += ["", f"[{table}]"]
            lines += [f"{k} = {_toml_value(v)}" for k, v in t.items() if v is not None]
    for a in config.get("axes") or []:
        lines += ["", "[[axes]]"]
        lines += [f"{k} = {_toml_value(v)}" for k, v in a.items() if v is not None]
    return "\n".join(lines).lstrip("\n") + "\n"


def load_config(
    config: str | os.PathLike | Mapping[str, Any] | SweepConfig,
    read_weights: bool = True,
    report: Callable[[str, float, str], None] | None = None,
) -> SweepConfig:
    """Validate a config given as a TOML path, a dict of tables, or a SweepConfig. A
    [checkpoint] table is resolved here, the checkpoint's files read once
    (simlab.checkpoints.source.resolve); read_weights=False, for a stored (resolved) config
    whose block is recorded in full, reads nothing (SweepConfig.weights stays None and
    plain.build_lab reads them if that config is ever run). report(phase, seconds, detail):
    told how long reading the weights ("weights") and the text inputs' corpus, hashed and
    tokenised ("corpus"), took (simlab.engine.plain.setup_line)."""
    if isinstance(config, SweepConfig):
        return config
    if not isinstance(config, (str, os.PathLike, Mapping)):
        raise ConfigError(
            f"config: must be a TOML path, a dict of tables or a SweepConfig, got "
            f"{type(config).__name__} {config!r}"
        )
    raw = read_config_toml(config) if isinstance(config, (str, os.PathLike)) else config
    if not isinstance(raw, Mapping):
        raise ConfigError(f"config: must be a table of tables, got {type(raw).__name__}")
    named = load_plugins(raw)  # before anything is validated: plugins add kinds, knobs, metrics
    for k in raw:
        if k not in TABLES and k not in EXPERIMENT_KEYS + (PLUGINS_KEY,) + DERIVED_KEYS:
            raise ConfigError(f"{k}: unknown table; allowed: {', '.join(TABLES)}")
    checkpoint = weights = None
    if raw.get("checkpoint") is not None:
        checkpoint = source.checkpoint_from_dict(_table(raw, "checkpoint"), "checkpoint")
    if checkpoint is not None and read_weights:
        t = time.perf_counter()
        checkpoint, block, weights = source.resolve(checkpoint, _table(raw, "block"))
        block = _floats(block)
        if report is not None:
            report(
                "weights", time.perf_counter() - t, f"{checkpoint.path}, layer {checkpoint.layer}"
            )
    else:
        block = _floats(spec.spec_from_dict(spec.BlockSpec, _table(raw, "block"), "block"))
    inputs = _floats(spec.spec_from_dict(spec.InputSpec, _table(raw, "inputs"), "inputs"))
    if read_weights:  # text windows: the corpus's and the tokenizer's content, hashed
        t = time.perf_counter()
        inputs = source.resolve_text(inputs, weights)
        if inputs.text_sha256 is not None and weights is not None:
            weights.check(block, inputs)  # and tokenised now (once per process), not unseen later
            if report is not None:
                report("corpus", time.perf_counter() - t, str(inputs.corpus))
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
    check_axes(axes, fixed)
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
        checkpoint,
        weights,
    )


def load_plugins(raw: Mapping[str, Any]) -> tuple[str, ...]:
    """Import the config's `plugins = ["module", ...]` and the installed plugins (entry points);
    the modules named, validated."""
    plugins.load_entry_points()
    names = raw.get(PLUGINS_KEY, [])
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise ConfigError(f"{PLUGINS_KEY}: must be a list of module names, got {names!r}")
    return tuple(plugins.load(names, PLUGINS_KEY))


def parse_sweep(d: Mapping[str, Any]) -> SweepSettings:
    """Validate the [sweep] table (missing fields take SWEEP_DEFAULTS)."""
    validate.check_fields("sweep", d, SWEEP_DEFAULTS)
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
        seeds=validate.check_int("sweep.seeds", v["seeds"], 1, MAX_SEEDS),
        first_seed=validate.check_int("sweep.first_seed", v["first_seed"], 0, 2**31 - 1),
        base_seed=validate.check_int("sweep.base_seed", v["base_seed"], 0, 2**32 - 1),
        micro_batch=None
        if v["micro_batch"] is None
        else validate.check_int("sweep.micro_batch", v["micro_batch"], 1, 1 << 16),
        chunk_size=None
        if v["chunk_size"] is None
        else validate.check_int("sweep.chunk_size", v["chunk_size"], 1),
        memory_budget_mb=validate.check_positive("sweep.memory_budget_mb", v["memory_budget_mb"]),
        metrics=metrics,
        matmul_precision=validate.check_choice(
            "sweep.matmul_precision", v["matmul_precision"], MATMUL_PRECISIONS
        ),
        dtype=None
        if v["dtype"] is None
        else validate.check_choice("sweep.dtype", v["dtype"], DTYPES),
    )


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
