"""The sweep engine: a grid of named axes x seeds -> metric arrays (docs/design.md, "Flow of one
sweep"): `run_sweep` validates the config against the lab, resolves the micro-batch and the
chunk layout, checks that it fits in memory, then has the missing work units computed
(simlab.engine.schedule) with the compiled programs (simlab.engine.compile), merges and saves.

Micro-batch: `sweep.micro_batch`, or when not given the lab's `default_micro_batch()` (from the
block's sizes alone; 1 at the paper's size), recorded in the resolved config.

Chunk size rule: `chunk_size` points (user) rounded up to whole micro-batches and to a multiple
of the device count; otherwise CHUNK_MICRO_BATCHES micro-batches per device, or one when a
micro-batch's working set (bytes_per_micro_batch: micro_batch x lab.point_bytes(), estimated
from the sizes; a jaxpr-based upper bound for labs without it) exceeds memory_budget_mb. lax.map
runs the micro-batches of a chunk one after another in the same buffers, so a chunk's memory
is one micro-batch's whatever its length; the length sets the resume and progress grain and
amortises each call's fresh allocations. A chunk never exceeds one seed's (device-rounded)
grid. Nothing is compiled to choose the layout.

On disk (OUT/):
  sweep.json           fingerprint + canonical config, created exclusively when the sweep starts
  chunks/seed{S}_mb{A}-{B}.npz  metrics of micro-batches [A, B) of seed S (padding included,
                       chunk padding excluded) and a record (fingerprint, range, sha256),
                       written atomically as each chunk finishes; verified before use; kept
                       after the merge (small; lets results.npz be rebuilt)
  .lock, claims/       the writers' lock and claims (simlab.engine.claims)
  rejected/            chunk files that failed verification (recomputed)
  results.npz, meta.json  written by simlab.engine.results.save after the merge
Work units and resume: a unit is one micro-batch of one seed. A re-run with the same
fingerprint computes only the units no verified chunk file covers, whatever chunk size wrote
them; `worker=(I, N)` restricts a run to a share of the units (docs/design.md, "Work units").
A finished directory is loaded, not recomputed; a directory holding another sweep is refused.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np
from tqdm.auto import tqdm

from simlab.engine import claims, memory, results
from simlab.engine.compile import (
    ChunkRunner,
    bytes_per_micro_batch,
    jitted,
    knob_dtype,
    local_devices,
)
from simlab.engine.config import SweepConfig, fingerprint, load_config
from simlab.engine.covariates import covariate_dims, seed_covariates
from simlab.engine.schedule import Writer, check_worker, wait_for_results
from simlab.engine.store import (
    ChunkStore,
    Layout,
    check_out_dir,
    check_writable,
    claim_directory,
    make_layout,
    merge,
)
from simlab.engine.tomlio import read_toml
from simlab.errors import ConfigError, Interrupted, StorageError

log = logging.getLogger(__name__)
# Micro-batches per device in one compiled call (chunk) unless sweep.chunk_size says otherwise.
CHUNK_MICRO_BATCHES = 64


@dataclasses.dataclass(frozen=True)
class ChunkInfo:
    """Passed to the `on_chunk` hook after a chunk is computed and stored."""

    seed: int
    start: int
    stop: int
    points: int


def choose_layout(
    cfg: SweepConfig, lab, names, n_devices: int, floor: int = 1, n_points: int | None = None
) -> tuple[Layout, dict[str, Any]]:
    """The chunk layout (from sweep.chunk_size, else the memory budget) and its meta.json entry.
    cfg.sweep.micro_batch must be resolved (resolve_micro_batch). floor: micro-batches per
    device a chunk holds at least (store.make_layout); n_points: of another grid of the same
    knobs (default cfg's)."""
    st = cfg.sweep
    if st.chunk_size is not None:
        per_dev, bpm, rule = -(-st.chunk_size // (st.micro_batch * n_devices)), None, "chunk_size"
    else:
        swept = [k for a in cfg.axes for k in a.knobs]
        bpm = bytes_per_micro_batch(lab, names, cfg.knobs, swept, st.micro_batch)
        per_dev = CHUNK_MICRO_BATCHES if bpm <= st.memory_budget_mb * 2**20 else 1
        rule = "memory_budget"
    n = cfg.n_points if n_points is None else n_points
    layout = make_layout(n, st.micro_batch, n_devices, per_dev, floor)
    return layout, {
        "micro_batch": st.micro_batch,
        "chunk_points": layout.chunk_mb * st.micro_batch,
        "chunks_per_seed": layout.chunks_per_seed,
        "rule": rule,
        "bytes_per_micro_batch": bpm,
    }


def resolve_dtype(cfg: SweepConfig) -> SweepConfig:
    """cfg with sweep.dtype set to the float dtype this process computes in (float64 under
    JAX_ENABLE_X64 or jax.enable_x64): it is recorded and fingerprinted, so chunks of another
    precision are never resumed or merged. A config that asks for the other one is refused."""
    runtime = str(knob_dtype())
    asked = cfg.sweep.dtype
    if asked not in (None, runtime):
        raise ConfigError(
            f"sweep.dtype: {asked!r}, but this process computes in {runtime}; run it with "
            f"JAX_ENABLE_X64={'1' if asked == 'float64' else '0'}"
        )
    return dataclasses.replace(cfg, sweep=dataclasses.replace(cfg.sweep, dtype=runtime))


def resolve_micro_batch(cfg: SweepConfig, lab) -> SweepConfig:
    """cfg with sweep.micro_batch set: as given, else lab.default_micro_batch() (from the sizes),
    else 8 for a lab without one."""
    if cfg.sweep.micro_batch is not None:
        return cfg
    mb = int(lab.default_micro_batch()) if hasattr(lab, "default_micro_batch") else 8
    return dataclasses.replace(cfg, sweep=dataclasses.replace(cfg.sweep, micro_batch=mb))


def build_lab(cfg: SweepConfig, lab=None):
    """The model (default simlab.core.lab.Lab) and the metric names to keep, validated against it.

    A lab with a `check_knobs(swept, fixed)` method may also refuse knobs it ignores.
    """
    from simlab.core.lab import Lab, LabProtocol

    if lab is None:
        lab = Lab(cfg.block, cfg.inputs, cfg.sweep.metrics)
    elif not isinstance(lab, LabProtocol):
        raise ConfigError(
            f"lab: a {type(lab).__name__} is not a lab; it needs metric_names, seed_state(key) "
            "and point(state, knobs) (simlab.core.lab.LabProtocol)"
        )
    allowed = tuple(lab.metric_names)
    names = cfg.sweep.metrics or allowed
    for m in names:
        if m not in allowed:
            raise ConfigError(f"sweep.metrics: unknown metric {m!r}; allowed: {', '.join(allowed)}")
    if hasattr(lab, "check_knobs"):
        lab.check_knobs([k for a in cfg.axes for k in a.knobs], cfg.knobs)
    return lab, tuple(names)


def lab_identity(lab, cfg: SweepConfig) -> dict[str, Any] | None:
    """What a custom lab adds to the fingerprint: None for simlab's Lab of the config's own
    block and inputs (the default), else {"class": module.qualname, **lab.identity()} when the
    lab names itself, or otherwise the class, a sha256 of its module's source and its instance
    attributes that are plain numbers, strings or booleans (simlab.core.lab.LabProtocol)."""
    from simlab.core.lab import Lab

    if type(lab) is Lab and (lab.block, lab.inputs) == (cfg.block, cfg.inputs):
        return None
    cls = type(lab)
    out: dict[str, Any] = {"class": f"{cls.__module__}.{cls.__qualname__}"}
    if type(lab) is Lab:
        out.update(block=dataclasses.asdict(lab.block), inputs=dataclasses.asdict(lab.inputs))
    elif callable(getattr(lab, "identity", None)):
        ident = lab.identity()
        if not isinstance(ident, Mapping):
            raise ConfigError(f"lab.identity(): must return a dict, got {type(ident).__name__}")
        try:
            out.update(json.loads(json.dumps(dict(ident))))
        except (TypeError, ValueError) as e:
            raise ConfigError(f"lab.identity(): must be JSON-able ({e})") from None
    else:
        from simlab.plugins import describe

        out["sha256"] = describe(cls.__module__, cls)["sha256"]
        plain = (bool, int, float, str)
        attrs = {k: v for k, v in sorted(vars(lab).items()) if isinstance(v, plain)}
        if attrs:
            out["attributes"] = attrs
    return out


def provenance(cfg: SweepConfig, lab, names) -> dict[str, Any]:
    """The resolved config a sweep records and fingerprints: the config's tables with the metric
    names kept, plus, only where there is one, the custom lab's identity ("lab") and the plugins
    behind the entries the sweep uses ("sources", simlab.plugins.used)."""
    from simlab import plugins
    from simlab.core.knobs import KNOBS

    resolved = cfg.to_dict()
    resolved["sweep"]["metrics"] = list(names)
    ident = lab_identity(lab, cfg)
    if ident is not None:
        resolved["lab"] = ident
    swept = [k for a in cfg.axes for k in a.knobs]
    set_knobs = [k for k, v in cfg.knobs.items() if k in KNOBS and v != KNOBS[k].default]
    used = {"knobs": [k for k in swept + set_knobs if k in KNOBS]}
    if ident is None:
        used.update(block=[cfg.block.kind], inputs=[cfg.inputs.kind], metrics=list(names))
    sources = plugins.used(used)
    if sources:
        resolved["sources"] = sources
    return resolved


def run_sweep(
    config=None,
    *,
    block=None,
    inputs=None,
    knobs=None,
    axes=None,
    sweep=None,
    out: str | os.PathLike | None = None,
    chunk_size: int | None = None,
    quiet: bool = False,
    lab=None,
    on_chunk: Callable[[ChunkInfo], None] | None = None,
    worker: tuple[int, int] | None = None,
    devices: int | None = None,
) -> results.Results | None:
    """Run (or resume, or load) a sweep and return its Results.

    config: a TOML path, a dict of tables, or a SweepConfig; block/inputs/knobs/axes/sweep
    replace the matching tables (dicts like the TOML tables, or spec dataclasses).
    out: output directory (None: compute in memory, write nothing).  chunk_size overrides
    sweep.chunk_size.  lab: a model with the simlab.core.lab.Lab protocol (default:
    Lab(block, inputs)).
    on_chunk: called with a ChunkInfo after each computed chunk is stored.
    worker: (I, N) computes only worker I's share of the work units (a contiguous block of the
    seed-major list of (seed, micro-batch) units), writes its chunks and returns None without
    merging; a later plain run (or `simlab merge`) computes what is missing and merges. Needs
    `out`. Under jax.distributed with `out`, process i takes share (i, process_count), process 0
    then finishes and merges, and every process returns the merged Results.
    devices: how many local devices to run on (None: $SIMLAB_DEVICES, else all); the numbers
    never depend on it.
    """
    t0 = time.perf_counter()
    tables = _tables(config)
    for name, t in (
        ("block", block),
        ("inputs", inputs),
        ("knobs", knobs),
        ("axes", axes),
        ("sweep", sweep),
    ):
        if t is not None:
            tables[name] = [_table(a) for a in t] if name == "axes" else _table(t)
    if chunk_size is not None:
        tables["sweep"] = {**tables.get("sweep", {}), "chunk_size": chunk_size}
    return run_config(
        load_config(tables),
        out=out,
        quiet=quiet,
        lab=lab,
        on_chunk=on_chunk,
        worker=worker,
        devices=devices,
        t0=t0,
    )


def run_config(
    cfg: SweepConfig,
    *,
    out: str | os.PathLike | None = None,
    quiet: bool = False,
    lab=None,
    on_chunk: Callable[[ChunkInfo], None] | None = None,
    worker: tuple[int, int] | None = None,
    devices: int | None = None,
    t0: float | None = None,
    floor: int = 1,
) -> results.Results | None:
    """`run_sweep` of a validated config (the same arguments). A config with [refine], or one
    that grows the sweep in `out` (simlab.engine.grow.is_composite), runs as parts
    (simlab.engine.grow); floor: micro-batches per device every chunk holds at least (a part's,
    store.make_layout)."""
    t0 = time.perf_counter() if t0 is None else t0
    device_list = local_devices(devices)  # validated here, before anything else
    lab, names = build_lab(cfg, lab)
    cfg = resolve_dtype(resolve_micro_batch(cfg, lab))
    resolved = provenance(cfg, lab, names)
    fp = fingerprint(resolved)
    out_dir = None if out is None else check_writable(out)
    if worker is not None:
        worker = check_worker(worker, out_dir)
    from simlab.engine import grow

    if grow.is_composite(cfg, out_dir, resolved, fp):
        return grow.run_composite(
            cfg, lab, names, resolved, fp, out_dir, quiet, on_chunk, worker, devices, t0
        )
    if worker is None and out_dir is not None and jax.process_count() > 1:
        worker = (jax.process_index(), jax.process_count())
        quiet = quiet or worker[0] != 0
    if out_dir is not None and check_out_dir(out_dir, resolved, fp):
        log.info("%s: finished sweep found; loading it", out_dir)
        leftovers = [p for p in out_dir.iterdir() if p.name.endswith(".tmp")]
        if os.access(out_dir, os.W_OK) and (leftovers or (out_dir / "claims").exists()):
            coord = claims.Coordinator(out_dir)
            with coord.lock():
                coord.clean()
            coord.tidy()
        return results.load(out_dir)
    preflight(cfg, lab, names)
    distributed = worker is not None and jax.process_count() > 1 and worker[1] > 1
    res = compute(
        cfg, lab, names, resolved, fp, out_dir, quiet, on_chunk, t0, worker, device_list, floor
    )
    if distributed:  # process 0 merged (it waits for every unit); the others wait for it
        return res if res is not None else wait_for_results(out_dir)
    return res


def preflight(cfg: SweepConfig, lab, names) -> dict[str, int]:
    """Refuse (ConfigError) a sweep whose seed state, micro-batch and results cannot fit in
    memory (simlab.engine.memory), before anything is computed or written."""
    swept = [k for a in cfg.axes for k in a.knobs]
    micro = bytes_per_micro_batch(lab, names, cfg.knobs, swept, cfg.sweep.micro_batch)
    block = getattr(lab, "block", None)
    if block is not None:
        per_point = len(names) * block.depth
    else:  # a lab without a block spec: the metric shapes from one abstract point
        state = jax.eval_shape(lab.seed_state, jax.random.PRNGKey(0))
        kn = {k: jax.ShapeDtypeStruct((), knob_dtype()) for k in (*cfg.knobs, *swept)}
        out = jax.eval_shape(lab.point, state, kn)
        per_point = sum(math.prod(out[k].shape) for k in names)
    seed_state = jitted(lab, names)[0]  # eval_shape's trace is reused by lower
    return memory.check_fits(cfg, lab, names, seed_state, micro, per_point, knob_dtype().itemsize)


def open_directory(out_dir: Path | None, resolved, fp: str):
    """The directory's Coordinator, after claiming it for this sweep and removing what dead
    writers left (None in memory)."""
    if out_dir is None:
        return None
    coord = claims.Coordinator(out_dir)
    with coord.lock():
        claim_directory(out_dir, resolved, fp)
        for name in coord.clean():
            log.info("%s: removed %s (left by a writer that is gone)", out_dir, name)
        (out_dir / "chunks").mkdir(exist_ok=True)
    return coord


def compute(
    cfg, lab, names, resolved, fp, out_dir, quiet, on_chunk, t0, worker, devices, floor=1
) -> results.Results | None:
    """Compute the missing chunks (this writer's share) on `devices`, then, unless a worker,
    wait for the rest, merge and save (after all validation has passed)."""
    st = cfg.sweep
    layout, layout_meta = choose_layout(cfg, lab, names, len(devices), floor)
    coord = open_directory(out_dir, resolved, fp)
    store = ChunkStore(
        None if out_dir is None else out_dir / "chunks", fp, names, st.micro_batch, log.warning
    )
    finish = worker is None or (jax.process_count() > 1 and worker[0] == 0 and worker[1] > 1)
    writer = Writer(layout, store, coord, st.seeds, worker, finish)
    runner = ChunkRunner(cfg, lab, names, devices, layout)
    reused = len(store.chunks)
    hook = None if on_chunk is None else (lambda *a: on_chunk(ChunkInfo(*a)))
    total = cfg.n_points * st.seeds
    if reused and writer.missing and not quiet:
        print(
            f"resuming {out_dir}: {reused} chunk files reused ({total - writer.missing} of "
            f"{total} points), computing the other {writer.missing}",
            file=sys.stderr,
        )
    try:
        with tqdm(total=total, unit="pt", disable=quiet, desc="sweep", dynamic_ncols=True) as bar:
            bar.update(total - writer.missing)
            writer.run(runner, bar, hook)
    except (KeyboardInterrupt, StorageError) as e:
        if coord is not None:
            coord.leave()  # claims and, if no other writer is there, the lock file
        where = "in memory, lost" if out_dir is None else f"saved in {out_dir}"
        done = (
            f"{len(store.chunks)} chunk files ({total - writer.missing} of {total} points) {where}"
        )
        if isinstance(e, StorageError):
            raise StorageError(e.errno, f"{e.strerror}; {done}") from None
        resume = "" if out_dir is None else "; run the same command to resume"
        raise Interrupted(done + resume) from None
    if not finish:
        log.info("sweep: worker %d/%d computed %d chunks", worker[0], worker[1], writer.computed)
        return None
    left = writer.missing_points()  # the running count said 0: check it exactly once
    if left:
        raise RuntimeError(f"sweep: {left} points still missing before the merge")

    metrics = merge(store, cfg, layout, names)
    cov = seed_covariates(
        lab, st.base_seed, st.seeds, st.matmul_precision, runner.compiled_state, st.first_seed
    )
    axes = OrderedDict((a.name, np.asarray(a.values, np.float64)) for a in cfg.axes)
    meta = {
        "config": resolved,
        "fingerprint": fp,
        "axes": [a.describe() for a in cfg.axes],
        "metrics": list(names),
        "dims": {
            k: list(axes) + ["seed"] + ["layer"] * (metrics[k].ndim - len(axes) - 1) for k in names
        },
        "versions": results.versions(),
        "devices": [str(d) for d in devices],
        "n_devices": len(devices),
        "n_processes": jax.process_count(),
        "n_points": cfg.n_points,
        "seeds": st.seeds,
        "layout": layout_meta,
        "chunks_computed": writer.computed,
        "chunks_reused": reused,
        "chunks_rejected": store.rejected,
        "compile_time_s": runner.compile_s,
        "matmul_precision": st.matmul_precision,
        "dtype": st.dtype,
        "compute_time_s": runner.compute_s,
        "points_per_second": writer.computed_points / runner.compute_s
        if writer.computed and runner.compute_s > 0
        else None,
        "wall_time_s": time.perf_counter() - t0,
    }
    if cov:
        meta["covariates"] = covariate_dims(cov)
    if out_dir is None:
        return results.Results(axes, metrics, meta, covariates=cov)
    saved = results.save(out_dir, axes, metrics, meta, cov)
    coord.tidy()
    return saved


def _tables(config) -> dict[str, Any]:
    if config is None:
        return {}
    if isinstance(config, SweepConfig):
        return config.to_dict()
    if isinstance(config, (str, os.PathLike)):
        return read_toml(config)
    if not isinstance(config, Mapping):
        raise ConfigError(
            f"config: must be a TOML path, a dict of tables or a SweepConfig, got "
            f"{type(config).__name__} {config!r}"
        )
    return dict(config)


def _table(t) -> Any:
    """A spec/axis/settings dataclass as a config table; dicts pass through."""
    if hasattr(t, "to_dict"):
        return t.to_dict()
    if dataclasses.is_dataclass(t):
        return dataclasses.asdict(t)
    return t
