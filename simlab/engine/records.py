"""The on-disk schema of a sweep directory: every record simlab writes there is built by one
function here or in the modules it keeps apart, and read back by one; every file is written
atomically (simlab.engine.atomic; docs/design.md, "Flow of one sweep"; docs/config.md, "Numerics
and errors").

  OUT/sweep.json       `sweep_record`: {"schema", "fingerprint_rule", "fingerprint", "config"};
                       a composite sweep (simlab.engine.grow) adds "parts" (names, in creation
                       order) and "history" (`history_entry`, one per target); read by
                       `read_sweep`
  OUT/chunks/*.npz     a chunk's metric arrays plus its record (simlab.engine.chunkfile:
                       fingerprint, range, metric names, sha256, machine facts)
  OUT/results.npz      one array per metric, one coordinate array per axis ("axis:<name>"),
                       one per covariate ("cov:<name>"): `write_results` / `read_results`
  OUT/meta.json        `meta_record`: the resolved config, fingerprint, axes, dims, versions,
                       devices, layout, chunk and time accounting, the machine facts of its
                       units (simlab.engine.machine), the values' health
                       (simlab.engine.bounds); the same keys for a plain and a composite sweep;
                       read by `read_results`. A study's run (a training run) writes its own
                       meta.json through `study_meta_record`
A sweep directory holds a finished sweep when it holds results.npz and meta.json
(`is_finished`, the one place that says so).

SCHEMA is the version of these records. A record without a "schema" key is version 1, which
holds the same fields (a composite meta.json of version 1 lacks points_per_second and has an
empty chunks_rejected): it is read as it is. A record of a newer version than SCHEMA is
refused with a ResultsError naming the file. A record holding a fingerprint names the
fingerprint rule it was made under (RULE_KEY; absent: rule 1), one of
simlab.engine.config.FINGERPRINT_RULES, and its fingerprint is checked under that rule
(`check_fingerprint`); a rule this simlab does not know is refused like a newer schema, and a
run into a directory hashes under the directory's rule (`directory_rule`).
simlab.engine.provenance warns when a result comes from another simlab version or its config
has fields this version does not know.
"""

from __future__ import annotations

import dataclasses
import json
import os
import zipfile
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from simlab.engine import config as cfgmod
from simlab.engine import machine
from simlab.engine.atomic import atomic_save_npz, atomic_write_bytes, json_default, write_json
from simlab.engine.bounds import BOUND_TOL, numerics, numerics_lines
from simlab.engine.chunkfile import (
    RECORD,
    arrays_sha256,
    chunk_record,
    read_chunk,
    unit_machines,
    verify_chunk,
    write_chunk,
)
from simlab.engine.provenance import (
    CONFIG_KINDS,
    check_written_by,
    now,
    register_config_kind,
    simlab_version,
    sweep_unknown_fields,
    unknown_fields,
    versions,
)
from simlab.errors import ResultsError

# The pieces of the records kept in their own modules, importable from here as before.
__all__ = [
    "BOUND_TOL", "CONFIG_KINDS", "RECORD", "arrays_sha256", "atomic_save_npz",
    "atomic_write_bytes", "check_written_by", "chunk_record", "json_default", "now", "numerics",
    "numerics_lines", "read_chunk", "register_config_kind", "simlab_version",
    "sweep_unknown_fields", "unit_machines", "unknown_fields", "verify_chunk", "versions",
    "write_chunk", "write_json",
]  # fmt: skip

SCHEMA = 2
# The key of the fingerprint rule a record was made under (simlab.engine.config.FINGERPRINT_RULES;
# a record without it: rule 1).
RULE_KEY = "fingerprint_rule"
# The files of a finished sweep (`is_finished`).
RESULT_FILES = ("results.npz", "meta.json")
AXIS_PREFIX = "axis:"
COV_PREFIX = "cov:"
PARTS = "parts"


def read_json(path: Path, what: str) -> dict[str, Any]:
    """A JSON object from `path`; ResultsError naming the file if it is unreadable, not an
    object, or of a newer schema than this simlab reads."""
    try:
        obj = json.loads(Path(path).read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ResultsError(
            f"{path}: cannot be read as the {what} ({type(e).__name__}: {e})"
        ) from None
    if not isinstance(obj, dict):
        raise ResultsError(f"{path}: is not the {what} (a JSON object is expected)")
    schema = obj.get("schema", 1)
    if not isinstance(schema, int) or isinstance(schema, bool) or schema < 1:
        raise ResultsError(
            f"{path}: schema {schema!r} is not a schema version (a positive integer); the file "
            "is not simlab's, or was edited"
        )
    if schema > SCHEMA:
        raise ResultsError(
            f"{path}: schema {schema!r} is newer than this simlab reads ({SCHEMA}); "
            "upgrade simlab to read it"
        )
    record_rule(path, obj)
    return obj


def record_rule(path: Path, rec: Mapping[str, Any]) -> int:
    """The fingerprint rule a record was made under (RULE_KEY; absent: 1); ResultsError naming
    the file for a value that is no rule version, or a rule this simlab does not know."""
    rule = rec.get(RULE_KEY, 1)
    if not isinstance(rule, int) or isinstance(rule, bool) or rule < 1:
        raise ResultsError(
            f"{path}: {RULE_KEY} {rule!r} is not a fingerprint rule version (a positive "
            "integer); the file is not simlab's, or was edited"
        )
    if rule not in cfgmod.FINGERPRINT_RULES:
        raise ResultsError(
            f"{path}: made under fingerprint rule {rule}, which this simlab does not know "
            f"(it knows {', '.join(map(str, cfgmod.FINGERPRINT_RULES))}); upgrade simlab to "
            "read it"
        )
    return rule


def directory_rule(out: Path | None) -> int:
    """The fingerprint rule a run into `out` hashes its config under: the rule of the sweep its
    sweep.json holds (a directory made under an older rule is resumed, grown and reloaded under
    that rule, its chunk records and parts unchanged), else, for a new directory (or in
    memory), simlab.engine.config.FINGERPRINT_RULE."""
    sj = None if out is None else Path(out) / "sweep.json"
    if sj is None or not sj.is_file():
        return cfgmod.FINGERPRINT_RULE
    rec = read_json(sj, "sweep.json of a sweep directory")
    return record_rule(sj, rec) if is_sweep_record(rec) else cfgmod.FINGERPRINT_RULE


def is_finished(d: Path) -> bool:
    """Whether the sweep directory (or part) `d` holds a finished sweep: results.npz and
    meta.json are both there (they are written last, results.npz first: `write_results`).
    The one place that decides it; whose sweep it is, the caller checks (its sweep.json)."""
    return all((Path(d) / name).exists() for name in RESULT_FILES)


# ------------------------------------------------------------------------- sweep.json
def sweep_record(
    fp: str, config: Mapping[str, Any], rule: int | None = None, **composite
) -> dict[str, Any]:
    """sweep.json's content: the fingerprint, made under fingerprint rule `rule` (None:
    simlab.engine.config.FINGERPRINT_RULE; named by RULE_KEY), the resolved config, and for a
    composite sweep `parts` (names) and `history` (entries of `history_entry`)."""
    return {
        "schema": SCHEMA,
        RULE_KEY: cfgmod.FINGERPRINT_RULE if rule is None else rule,
        "fingerprint": fp,
        "config": dict(config),
        **composite,
    }


def read_sweep(path: Path) -> dict[str, Any]:
    """sweep.json of a sweep directory (or of a part); the schema and the fingerprint checked
    (check_fingerprint)."""
    rec = read_json(path, "sweep.json of a sweep directory")
    check_fingerprint(path, rec)
    return rec


def check_fingerprint(path: Path, rec: Mapping[str, Any]) -> None:
    """A record holding a config and a fingerprint (sweep.json, meta.json) is refused when the
    config does not hash to the fingerprint under the record's own rule (`record_rule`,
    simlab.engine.config.fingerprint): the file was edited. Not judged: another kind's record
    (a training run) and one with fields this version does not know (written by a newer
    simlab: check_written_by warns). The error names the file and, where the directory's other
    record still holds the original config (under the same rule), the first field that
    differs."""
    fp, config = rec.get("fingerprint"), rec.get("config")
    if not isinstance(fp, str) or not isinstance(config, dict):
        return
    if rec.get("kind", "sweep") != "sweep" or unknown_fields(rec):
        return  # another study's rule, or a newer version's fields: check_written_by judges
    rule = record_rule(path, rec)
    try:
        ok = cfgmod.fingerprint(config, rule) == fp
    except (TypeError, ValueError):
        ok = False
    if ok:
        return
    field = ""
    for name in ("sweep.json", "meta.json"):
        other = path.parent / name
        if other == path or not other.is_file():
            continue
        try:
            orig = json.loads(other.read_text())
        except (OSError, ValueError):
            continue
        same = isinstance(orig, dict) and orig.get("fingerprint") == fp
        if same and orig.get(RULE_KEY, 1) == rule and isinstance(orig.get("config"), dict):
            diff = cfgmod.config_diff(orig["config"], config, rule)
            if diff and cfgmod.fingerprint(orig["config"], rule) == fp:
                field = f"; field {diff[0]} differs from {name}'s"
                break
    raise ResultsError(
        f"{path}: its config does not hash to its fingerprint {fp[:16]} (the file was edited"
        f"{field}); restore it, or rerun the sweep into a new directory"
    )


def is_sweep_record(obj: Mapping[str, Any]) -> bool:
    """Whether a JSON object is simlab's sweep.json (a fingerprint string and a config)."""
    return isinstance(obj.get("fingerprint"), str) and isinstance(obj.get("config"), dict)


def claim_sweep(
    out: Path, config: Mapping[str, Any], fp: str, rule: int | None = None
) -> dict[str, Any] | None:
    """Create OUT/sweep.json exclusively for this sweep, its fingerprint `fp` made under
    fingerprint rule `rule` (os.link of a complete temporary file: of two writers starting
    together exactly one creates it); the record found there (None when it names this sweep).
    Call under the directory lock (simlab.engine.claims)."""
    sj = out / "sweep.json"
    if not sj.exists():
        tmp = out / f".sweep.json.{os.getpid()}.new"
        tmp.write_text(json.dumps(sweep_record(fp, config, rule), indent=2))
        try:
            os.link(tmp, sj)
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
    old = read_sweep(sj)
    return None if old.get("fingerprint") == fp else old


def history_entry(
    fp: str, change, target: str, *, time: str | None = None, parts=(), pairs_computed: int = 0
) -> dict[str, Any]:
    """One entry of a composite sweep.json's history: when, the target's fingerprint, what
    changed ("created" or the differing fields), the target described, the parts it added and
    the (point, seed) pairs they compute; `finish_history` adds points, seeds, pairs_reused."""
    return {
        "time": time or now(),
        "fingerprint": fp,
        "change": change,
        "target": target,
        "parts": list(parts),
        "pairs_computed": pairs_computed,
    }


def add_part(state: dict[str, Any], name: str, pairs: int) -> None:
    """Record a new part (and its pairs) in a composite sweep.json's state (in place)."""
    state[PARTS].append(name)
    entry = state["history"][-1]
    entry["parts"].append(name)
    entry["pairs_computed"] += pairs


def finish_history(state: dict[str, Any], points: int, seeds: int) -> None:
    """Complete the current target's history entry (in place): its points, seeds and the pairs
    it reused from earlier parts."""
    entry = state["history"][-1]
    entry["points"] = points
    entry["seeds"] = seeds
    entry["pairs_reused"] = max(0, points * seeds - entry["pairs_computed"])


# ------------------------------------------------------------------------- meta.json
@dataclasses.dataclass
class Accounting:
    """What a run computed and reused, and where its time went (meta.json's accounting)."""

    chunks_computed: int = 0
    chunks_reused: int = 0
    chunks_rejected: list[str] = dataclasses.field(default_factory=list)
    points_computed: int = 0
    compile_time_s: float = 0.0
    compute_time_s: float = 0.0

    def add(self, meta: Mapping[str, Any]) -> None:
        """Add a finished part's accounting (its meta.json) to this one's, when it computed."""
        if not meta.get("chunks_computed"):
            return
        self.chunks_computed += meta.get("chunks_computed") or 0
        self.chunks_reused += meta.get("chunks_reused") or 0
        self.chunks_rejected += list(meta.get("chunks_rejected") or [])
        self.points_computed += meta.get("points_computed") or 0
        self.compile_time_s += meta.get("compile_time_s") or 0.0
        self.compute_time_s += meta.get("compute_time_s") or 0.0


def meta_record(
    *,
    config: Mapping[str, Any],
    fp: str,
    axes: list[dict[str, Any]],
    dims: dict[str, list[str]],
    devices: list[str],
    n_points: int,
    seeds: range,
    account: Accounting,
    wall_time_s: float,
    n_processes: int = 1,
    covariate_dims: dict[str, list[str]] | None = None,
    numerics_report: Mapping[str, Any] | None = None,
    rule: int | None = None,
    machines: list[dict[str, Any] | None] | None = None,
    **extra,
) -> dict[str, Any]:
    """meta.json of a finished sweep, plain or composite. config: the resolved config (its
    sweep.dtype and matmul_precision are recorded from it); fp: its fingerprint under
    fingerprint rule `rule` (None: the current one); axes: each axis described; dims:
    each metric's dimension names; n_processes: jax.process_count() of the run; extra: the
    layout (plain), or the parts, history and refinement (composite), after the common keys;
    machines: the distinct machine facts its units were computed under (simlab.engine.machine;
    `unit_machines` for chunks, `part_machines` for parts; None: this process's)."""
    sweep = config["sweep"]
    meta = {
        "schema": SCHEMA,
        "config": dict(config),
        RULE_KEY: cfgmod.FINGERPRINT_RULE if rule is None else rule,
        "fingerprint": fp,
        "axes": axes,
        "metrics": list(dims),
        "dims": dims,
        "versions": versions(),
        "devices": list(devices),
        "n_devices": len(devices),
        "n_processes": n_processes,
        "n_points": n_points,
        "seeds": len(seeds),
        "first_seed": seeds.start,
        **extra,
        "chunks_computed": account.chunks_computed,
        "chunks_reused": account.chunks_reused,
        "chunks_rejected": list(account.chunks_rejected),
        "points_computed": account.points_computed,
        "compile_time_s": account.compile_time_s,
        "matmul_precision": sweep.get("matmul_precision"),
        "dtype": sweep.get("dtype"),
        "compute_time_s": account.compute_time_s,
        "points_per_second": account.points_computed / account.compute_time_s
        if account.points_computed and account.compute_time_s > 0
        else None,
        "wall_time_s": wall_time_s,
        "machines": [machine.facts()] if machines is None else list(machines),
    }
    if covariate_dims:
        meta["covariates"] = covariate_dims
    if numerics_report:  # absent when every value is finite and inside its bounds
        meta["numerics"] = dict(numerics_report)
    if config.get("checkpoint"):  # trained layers: one set of weights for every seed
        meta["seeds_vary"] = "inputs only: the checkpoint's weights are the same for every seed"
    return meta


def study_meta_record(
    kind: str,
    *,
    config: Mapping[str, Any],
    axes: list[dict[str, Any]],
    dims: dict[str, list[str]],
    extra_versions: tuple[str, ...] = (),
    **extra,
) -> dict[str, Any]:
    """meta.json of a study's run that is not a sweep (kind e.g. "train-dynamics", whose study
    registers its config kind: `register_config_kind`): the schema, the kind, its config, axes
    described, each metric's dimension names, the study's own entries (`extra`, in order), then
    the versions (with `extra_versions`, e.g. "flax", "optax"). No fingerprint: such a run is
    not resumed."""
    return {
        "schema": SCHEMA,
        "kind": kind,
        "config": dict(config),
        "axes": list(axes),
        "metrics": list(dims),
        "dims": dict(dims),
        **extra,
        "versions": versions(*extra_versions),
    }


def metric_dims(axes, metrics: Mapping[str, np.ndarray], lab=None) -> dict[str, list[str]]:
    """Each metric's dimension names: the axes, "seed", then the names the lab declares for its
    further dims (`lab.metric_dims()`, simlab.core.lab.LabProtocol; dim0, dim1, ... where it
    declares none, or names that do not match the array)."""
    declared = lab.metric_dims() if hasattr(lab, "metric_dims") else {}
    out = {}
    for k, x in metrics.items():
        extra = x.ndim - len(axes) - 1
        named = list(declared.get(k, ()))
        out[k] = (
            list(axes)
            + ["seed"]
            + (named if len(named) == extra else [f"dim{i}" for i in range(extra)])
        )
    return out


def part_machines(metas: list[Mapping[str, Any]], where: object) -> list[dict[str, Any] | None]:
    """The distinct machine facts of a composite sweep's parts (each part's meta.json
    "machines"; absent: not recorded), warning on stderr when they differ
    (simlab.engine.machine.report)."""
    return machine.report((m for meta in metas for m in meta.get("machines", [None])), where)


# ------------------------------------------------------------------------- results.npz
def write_results(
    out_dir: Path,
    axes: Mapping[str, np.ndarray],
    metrics: Mapping[str, np.ndarray],
    meta: Mapping[str, Any],
    covariates: Mapping[str, np.ndarray] | None = None,
) -> None:
    """results.npz then meta.json (the directory created): a finished sweep."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    arrays = {AXIS_PREFIX + k: np.asarray(v) for k, v in axes.items()}
    arrays.update({k: np.asarray(v) for k, v in metrics.items()})
    arrays.update({COV_PREFIX + k: np.asarray(v) for k, v in (covariates or {}).items()})
    atomic_save_npz(out / "results.npz", arrays)
    write_json(out / "meta.json", meta)


def read_results(path: str | os.PathLike):
    """(directory, axes, metrics, meta, covariates) of a finished sweep (a directory or its
    results.npz); ResultsError naming the file when it is missing, unreadable or not simlab's."""
    p = Path(path)
    d = p.parent if p.suffix == ".npz" else p
    npz, mj = (d / name for name in RESULT_FILES)
    if not is_finished(d):
        raise ResultsError(f"{d}: no finished sweep here (need results.npz and meta.json)")
    meta = read_json(mj, "meta.json of a finished sweep")
    check_fingerprint(mj, meta)
    if not isinstance(meta.get("axes", []), list):
        raise ResultsError(f"{mj}: 'axes' is not a list; the file is not simlab's meta.json")
    try:
        with np.load(npz, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as e:
        raise ResultsError(
            f"{npz}: cannot be read ({type(e).__name__}: {e}); rerun the sweep into a new "
            "directory, or delete results.npz to rebuild it from chunks/"
        ) from None
    order = [a["name"] for a in meta.get("axes", [])]
    found = [k[len(AXIS_PREFIX) :] for k in arrays if k.startswith(AXIS_PREFIX)]
    order = [n for n in order if n in found] + [n for n in found if n not in order]
    axes = OrderedDict((n, arrays.pop(AXIS_PREFIX + n)) for n in order)
    covariates = {
        k[len(COV_PREFIX) :]: arrays.pop(k) for k in list(arrays) if k.startswith(COV_PREFIX)
    }
    shape = tuple(len(v) for v in axes.values())
    for k, v in arrays.items():  # (*axes, ...), an axis of size 1 broadcasting
        if v.ndim < len(shape) or any(n not in (m, 1) for n, m in zip(v.shape, shape)):
            raise ResultsError(
                f"{npz}: metric {k!r} has shape {v.shape}, not (*axes {shape}, seeds, ...); "
                "the file is not a simlab result"
            )
    if not arrays or not axes:
        raise ResultsError(f"{npz}: holds no axes or no metrics; the file is not a simlab result")
    check_written_by(d, meta)
    return d, axes, arrays, meta, covariates
