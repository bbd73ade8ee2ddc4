"""The plain sweep: one grid (or point set) x a seed range computed into one directory
(docs/design.md, "Flow of one sweep"). A `Job` is the validated config with everything resolved
from it (the lab and its metrics, micro-batch, dtype, the resolved config and its fingerprint,
the directory, the writer's share, the devices); `run` loads a finished directory, else checks
that the sweep fits in memory (`preflight`), claims the directory and has the missing work units
computed (simlab.engine.schedule) with the compiled programs (simlab.engine.compile), merges and
saves. A composite sweep (simlab.engine.grow) runs each of its parts as a plain one.

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

On disk (OUT/; the records: simlab.engine.records):
  sweep.json           fingerprint + canonical config, created exclusively when the sweep starts
  chunks/seed{S}_mb{A}-{B}.npz  metrics of micro-batches [A, B) of seed S (padding included,
                       chunk padding excluded) and a record (fingerprint, range, sha256),
                       written atomically as each chunk finishes; verified before use; kept
                       after the merge (small; lets results.npz be rebuilt)
  .lock, claims/       the writers' lock and claims (simlab.engine.claims)
  rejected/            chunk files that failed verification (recomputed)
  results.npz, meta.json  written after the merge
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

from simlab import plugins
from simlab.checkpoints import source
from simlab.core.knobs import KNOBS
from simlab.core.lab import Lab, LabProtocol, redefined
from simlab.engine import cautions, claims, memory, records, results
from simlab.engine.compile import (
    ChunkRunner,
    bytes_per_micro_batch,
    jitted,
    knob_dtype,
    local_devices,
)
from simlab.engine.config import SweepConfig, fingerprint
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


@dataclasses.dataclass(frozen=True)
class Job:
    """A sweep ready to run: the config (micro-batch and dtype resolved), the lab and the metric
    names it keeps, the resolved config the sweep records and its fingerprint, the output
    directory (None: in memory), the writer's share (None: all), the devices, the output
    options, the start time (for wall_time_s), and the fingerprint rule `fp` was made under
    (the directory's own: simlab.engine.records.directory_rule)."""

    cfg: SweepConfig
    lab: Any
    names: tuple[str, ...]
    resolved: dict[str, Any]
    fp: str
    out: Path | None
    worker: tuple[int, int] | None
    devices: tuple
    quiet: bool = False
    on_chunk: Callable[[ChunkInfo], None] | None = None
    t0: float = dataclasses.field(default_factory=time.perf_counter)
    rule: int | None = None


def prepare(
    cfg: SweepConfig,
    *,
    out: str | os.PathLike | None = None,
    quiet: bool = False,
    lab=None,
    on_chunk: Callable[[ChunkInfo], None] | None = None,
    worker: tuple[int, int] | None = None,
    devices: int | None = None,
    t0: float | None = None,
) -> Job:
    """Validate and resolve everything a run of `cfg` needs, before anything is computed or
    written (simlab.engine.sweep.run_sweep's arguments)."""
    t0 = time.perf_counter() if t0 is None else t0
    device_list = tuple(local_devices(devices))  # validated here, before anything else
    lab, names = build_lab(cfg, lab)
    cautions.warn(cfg, lab, names)
    cfg = resolve_dtype(resolve_micro_batch(cfg, lab))
    resolved = provenance(cfg, lab, names)
    out_dir = None if out is None else check_writable(out)
    if worker is not None:
        worker = check_worker(worker, out_dir)
    rule = records.directory_rule(out_dir)
    return Job(
        cfg, lab, names, resolved, fingerprint(resolved, rule), out_dir, worker, device_list,
        quiet, on_chunk, t0, rule,
    )  # fmt: skip


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
    if lab is None:
        weights = cfg.weights
        if cfg.checkpoint is not None and weights is None:  # a stored config: read them now
            study = {"pattern": cfg.block.pattern, "depth": cfg.block.depth}
            weights = source.resolve(cfg.checkpoint, study)[2]
        lab = Lab(cfg.block, cfg.inputs, cfg.sweep.metrics, weights=weights)
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
    block, inputs and checkpoint (the default; a [checkpoint]'s file hashes are in the config),
    for a Lab given trained weights directly (Lab(weights=...)) their identity (file hashes,
    layers) besides its block and inputs, else {"class": module.qualname, **lab.identity()} when the
    lab names itself, or otherwise the class, a sha256 of its module's source and its instance
    attributes that are plain numbers, strings or booleans (simlab.core.lab.LabProtocol)."""
    if (
        type(lab) is Lab
        and (lab.block, lab.inputs) == (cfg.block, cfg.inputs)
        and (
            cfg.checkpoint is None
            if lab.weights is None
            else cfg.checkpoint is not None and lab.weights.source == cfg.checkpoint
        )
    ):  # the config's own lab (its weights, if any, resolved from its [checkpoint] table)
        return None
    cls = type(lab)
    out: dict[str, Any] = {"class": f"{cls.__module__}.{cls.__qualname__}"}
    if type(lab) is Lab:
        out.update(block=dataclasses.asdict(lab.block), inputs=dataclasses.asdict(lab.inputs))
        if lab.weights is not None:  # trained weights given to the Lab: their file hashes
            out["weights"] = lab.weights.identity()
    elif callable(getattr(lab, "identity", None)):
        ident = lab.identity()
        if not isinstance(ident, Mapping):
            raise ConfigError(f"lab.identity(): must return a dict, got {type(ident).__name__}")
        try:
            out.update(json.loads(json.dumps(dict(ident))))
        except (TypeError, ValueError) as e:
            raise ConfigError(f"lab.identity(): must be JSON-able ({e})") from None
    else:
        out["sha256"] = plugins.describe(cls.__module__, cls)["sha256"]
        plain = (bool, int, float, str)
        attrs = {k: v for k, v in sorted(vars(lab).items()) if isinstance(v, plain)}
        if attrs:
            out["attributes"] = attrs
    return out


def provenance(cfg: SweepConfig, lab, names) -> dict[str, Any]:
    """The resolved config a sweep records and fingerprints: the config's tables with the metric
    names kept, plus, only where there is one, the custom lab's identity ("lab") and the plugins
    behind the entries the sweep uses ("sources", simlab.plugins.used)."""
    resolved = cfg.to_dict()
    resolved["sweep"]["metrics"] = list(names)
    ident = lab_identity(lab, cfg)
    if ident is not None:
        resolved["lab"] = ident
    swept = [k for a in cfg.axes for k in a.knobs]
    set_knobs = [k for k, v in cfg.knobs.items() if k in KNOBS and v != KNOBS[k].default]
    used = {"knobs": [k for k in swept + set_knobs if k in KNOBS]}
    if ident is None:
        used.update(
            block=[cfg.block.kind],
            inputs=[cfg.inputs.kind],
            metrics=list(names),
            pattern=[cfg.block.pattern],
        )
    sources = plugins.used(used)
    if sources:
        resolved["sources"] = sources
    return resolved


def run(job: Job, floor: int = 1) -> results.Results | None:
    """Run (or resume, or load) a plain sweep; its Results (None for a worker that leaves the
    merge to others). floor: micro-batches per device every chunk holds at least (a part's,
    store.make_layout). Under jax.distributed with a directory and no worker, process i takes
    share (i, process_count), process 0 merges and every process returns the merged Results."""
    out, worker, quiet = job.out, job.worker, job.quiet
    if worker is None and out is not None and jax.process_count() > 1:
        worker = (jax.process_index(), jax.process_count())
        quiet = quiet or worker[0] != 0
        job = dataclasses.replace(job, worker=worker, quiet=quiet)
    if out is not None and check_out_dir(out, job.resolved, job.fp):
        log.info("%s: finished sweep found; loading it", out)
        leftovers = [p for p in out.iterdir() if p.name.endswith(".tmp")]
        if os.access(out, os.W_OK) and (leftovers or (out / "claims").exists()):
            coord = claims.Coordinator(out)
            with coord.lock():
                coord.clean()
            coord.tidy()
        return results.load(out)
    preflight(job.cfg, job.lab, job.names)
    distributed = worker is not None and jax.process_count() > 1 and worker[1] > 1
    res = compute(job, floor)
    if distributed:  # process 0 merged (it waits for every unit); the others wait for it
        return res if res is not None else wait_for_results(out)
    return res


def preflight(cfg: SweepConfig, lab, names) -> dict[str, int]:
    """Refuse (ConfigError) a sweep whose seed state, micro-batch and results cannot fit in
    memory (simlab.engine.memory), before anything is computed or written."""
    swept = [k for a in cfg.axes for k in a.knobs]
    if hasattr(lab, "check_metric_shapes"):  # a plugin metric of the wrong shape: refused now
        lab.check_metric_shapes()
    micro = bytes_per_micro_batch(lab, names, cfg.knobs, swept, cfg.sweep.micro_batch)
    block = getattr(lab, "block", None)
    if block is not None and hasattr(lab, "metric_shapes"):  # layers x each metric's dims
        per_point = sum(block.depth * math.prod(lab.metric_shapes()[n]) for n in names)
    else:  # a lab without a block spec: the metric shapes from one abstract point
        state = jax.eval_shape(lab.seed_state, jax.random.PRNGKey(0))
        kn = {k: jax.ShapeDtypeStruct((), knob_dtype()) for k in (*cfg.knobs, *swept)}
        out = jax.eval_shape(lab.point, state, kn)
        per_point = sum(math.prod(out[k].shape) for k in names)
    seed_state = jitted(lab, names)[0]  # eval_shape's trace is reused by lower
    return memory.check_fits(cfg, lab, names, seed_state, micro, per_point, knob_dtype().itemsize)


def report_numerics(lab, axes, metrics, first_seed: int) -> dict:
    """The stored values' NaN/Inf and out-of-bounds counts (records.numerics, with the lab's
    declared bounds when it has metric_bounds), each metric's line printed on stderr."""
    bounds = lab.metric_bounds() if hasattr(lab, "metric_bounds") else None
    report = records.numerics(axes, metrics, bounds, first_seed)
    for line in records.numerics_lines(report):
        print(line, file=sys.stderr)
    return report


def claim(job: Job) -> claims.Coordinator | None:
    """The directory's Coordinator, after claiming it for this sweep (its sweep.json) and
    removing what dead writers left (None in memory)."""
    if job.out is None:
        return None
    coord = claims.Coordinator(job.out)
    with coord.lock():
        claim_directory(job.out, job.resolved, job.fp, job.rule)
        for name in coord.clean():
            log.info("%s: removed %s (left by a writer that is gone)", job.out, name)
        (job.out / "chunks").mkdir(exist_ok=True)
    return coord


def setup_line(phase: str, seconds: float, detail: str = "") -> None:
    """One line on stderr per setup phase of a sweep, before its progress bar: "setup: weights
    0.41 s (path)"; the phases are weights and corpus (simlab.engine.config.load_config) and
    compile (compute)."""
    print(f"setup: {phase} {seconds:.2f} s" + (f" ({detail})" if detail else ""), file=sys.stderr)


def eta_s(done: int, left: int, elapsed_s: float, excluded_s: float = 0.0) -> float | None:
    """Seconds still needed for `left` points at the rate of the `done` points computed so far
    in elapsed_s, less excluded_s of it that computed nothing (a compile): left (elapsed_s -
    excluded_s) / done. None before the first point (no rate yet)."""
    busy = elapsed_s - excluded_s
    return left * busy / done if done > 0 and busy > 0 else None


class SweepBar(tqdm):
    """The sweep's progress bar: its rate, and so its ETA, is eta_s's, from the points computed
    since the bar started (not the reused ones, its `initial`) over the time spent computing
    them (excluded_s(): a compile while the bar ran, none when compute compiled first)."""

    excluded_s: Callable[[], float] = staticmethod(lambda: 0.0)

    @property
    def format_dict(self):
        d = super().format_dict
        done = d["n"] - d["initial"]
        eta = eta_s(done, 1, d["elapsed"], self.excluded_s())
        d["rate"] = None if eta is None else 1.0 / eta  # points per second
        return d


def check_redefined(names, rule: int, out) -> None:
    """A directory made under a fingerprint rule that stored a metric with its old definition
    (simlab.core.metrics.REDEFINED) computes (or grows) no more units of it: ConfigError naming
    the metric, so no array mixes two definitions."""
    moved = redefined(names, rule)
    if moved:
        n, new = next(iter(moved.items()))
        raise ConfigError(
            f"sweep.metrics: {n!r} in {out} was stored with its old definition (now "
            f"{new!r}); its missing units cannot be computed the same way: "
            "run the sweep into a new directory (docs/metrics.md, 'Renamed')"
        )


def compute(job: Job, floor: int = 1) -> results.Results | None:
    """Compute the missing chunks (this writer's share) on the job's devices, then, unless a
    worker, wait for the rest, merge and save (after all validation has passed)."""
    cfg, out, worker = job.cfg, job.out, job.worker
    st = cfg.sweep
    layout, layout_meta = choose_layout(cfg, job.lab, job.names, len(job.devices), floor)
    coord = claim(job)
    store = ChunkStore(
        None if out is None else out / "chunks", job.fp, job.names, st.micro_batch, log.warning
    )
    finish = worker is None or (jax.process_count() > 1 and worker[0] == 0 and worker[1] > 1)
    writer = Writer(layout, store, coord, st.seeds, worker, finish)
    runner = ChunkRunner(cfg, job.lab, job.names, list(job.devices), layout)
    reused = len(store.chunks)
    hook = None if job.on_chunk is None else (lambda *a: job.on_chunk(ChunkInfo(*a)))
    total = cfg.n_points * st.seeds
    if reused and writer.missing and not job.quiet:
        print(
            f"resuming {out}: {reused} chunk files reused ({total - writer.missing} of "
            f"{total} points), computing the other {writer.missing}",
            file=sys.stderr,
        )
    if writer.missing:
        check_redefined(job.names, job.rule, out)
    if writer.missing and not job.quiet:  # the last setup phase, timed before the bar starts
        cache = runner.compile()
        setup_line("compile", runner.compile_s, f"cache: {cache or 'off'}")
    compiled = runner.compile_s
    try:
        with SweepBar(
            total=total, initial=total - writer.missing, unit="pt", disable=job.quiet,
            desc="sweep", dynamic_ncols=True,
        ) as bar:  # fmt: skip
            bar.excluded_s = lambda: runner.compile_s - compiled  # a compile inside the bar
            writer.run(runner, bar, hook)
    except (KeyboardInterrupt, StorageError) as e:
        if coord is not None:
            coord.leave()  # claims and, if no other writer is there, the lock file
        where = "in memory, lost" if out is None else f"saved in {out}"
        done = (
            f"{len(store.chunks)} chunk files ({total - writer.missing} of {total} points) {where}"
        )
        if isinstance(e, StorageError):
            raise StorageError(e.errno, f"{e.strerror}; {done}") from None
        resume = "" if out is None else "; run the same command to resume"
        raise Interrupted(done + resume) from None
    if not finish:
        log.info("sweep: worker %d/%d computed %d chunks", worker[0], worker[1], writer.computed)
        return None
    left = writer.missing_points()  # the running count said 0: check it exactly once
    if left:
        raise RuntimeError(f"sweep: {left} points still missing before the merge")

    metrics = merge(store, cfg, layout, job.names)
    cov = seed_covariates(
        job.lab, st.base_seed, st.seeds, st.matmul_precision, runner.compiled_state, st.first_seed
    )
    axes = OrderedDict((a.name, np.asarray(a.values, np.float64)) for a in cfg.axes)
    account = records.Accounting(
        chunks_computed=writer.computed,
        chunks_reused=reused,
        chunks_rejected=list(store.rejected),
        points_computed=writer.computed_points,
        compile_time_s=runner.compile_s,
        compute_time_s=runner.compute_s,
    )
    report = report_numerics(job.lab, axes, metrics, st.first_seed)
    meta = records.meta_record(
        config=job.resolved,
        fp=job.fp,
        axes=[a.describe() for a in cfg.axes],
        dims=records.metric_dims(axes, metrics, job.lab),
        devices=[str(d) for d in job.devices],
        n_points=cfg.n_points,
        seeds=range(st.first_seed, st.first_seed + st.seeds),
        account=account,
        wall_time_s=time.perf_counter() - job.t0,
        n_processes=jax.process_count(),
        covariate_dims=covariate_dims(cov, job.lab) if cov else None,
        numerics_report=report,
        rule=job.rule,
        machines=records.unit_machines(store.chunks.values(), out or "this sweep"),
        layout=layout_meta,
    )
    if out is None:
        return results.Results(axes, metrics, meta, covariates=cov)
    saved = results.save(out, axes, metrics, meta, cov)
    coord.tidy()
    return saved
