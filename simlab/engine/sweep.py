"""The sweep engine: a grid of named axes x seeds -> metric arrays (docs/design.md, "Flow of one
sweep").

Arithmetic (what makes results bit-identical across chunk sizes and devices):
  * Common random numbers: per seed s, key_s = fold_in(PRNGKey(base_seed), s) and
    state_s = lab.seed_state(key_s), computed once and passed un-batched to every point.
  * Points are numbered in C order over the axes and grouped into micro-batches of
    `micro_batch` points (the grid is padded at its end with copies of the last point).
    One micro-batch is always `vmap(lab.point)` over exactly `micro_batch` points.
  * A chunk is `chunk_mb` whole micro-batches (a multiple of the device count): one compiled
    call runs `lax.map` over its micro-batches, sharded over the local devices with shard_map.
    The last chunk is padded to the same size (no recompile); padded points are dropped.
Chunk size therefore sets memory and resume granularity only, never the numbers.

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
import functools
import logging
import math
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from tqdm.auto import tqdm

from simlab.engine import claims, compile_cache, memory, results
from simlab.engine.config import (
    SweepConfig,
    apply_overrides,
    default_config_path,
    fingerprint,
    load_config,
    read_toml,
)
from simlab.engine.store import (
    ChunkStore,
    Layout,
    check_out_dir,
    check_writable,
    claim_directory,
    make_layout,
    merge,
)
from simlab.errors import ConfigError

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


def knob_dtype() -> np.dtype:
    """jax's default float dtype: the dtype of every knob value."""
    return np.dtype(jax.numpy.result_type(float))


def grid_knobs(cfg: SweepConfig) -> dict[str, np.ndarray]:
    """Swept knob -> values at every flat point index (C order over the axes), in jax's default
    float dtype (float32; float64 under JAX_ENABLE_X64)."""
    idx = np.unravel_index(np.arange(cfg.n_points), cfg.shape)
    return {
        k: np.asarray(a.values, knob_dtype())[i] for a, i in zip(cfg.axes, idx) for k in a.knobs
    }


def micro_batch_fn(lab, names: tuple[str, ...]) -> Callable:
    """(state, fixed knobs, swept knobs with a leading point axis) -> metrics per point.

    A micro-batch of one point calls lab.point without vmap (the same math; on XLA:CPU a batch
    axis of size 1 costs a copy of the attention weights and a slower entropy reduction,
    docs/performance.md, "Findings cited in the code")."""

    def point(state, fixed, swept):
        out = lab.point(state, {**fixed, **swept})
        return {k: out[k] for k in names}

    batched = jax.vmap(point, in_axes=(None, None, 0))

    def micro_batch(state, fixed, swept):
        if swept and all(np.shape(v)[0] == 1 for v in swept.values()):
            one = point(state, fixed, {k: v[0] for k, v in swept.items()})
            return {k: v[None] for k, v in one.items()}
        return batched(state, fixed, swept)

    return micro_batch


def chunk_fn(lab, names: tuple[str, ...], mesh) -> Callable:
    """jit(shard_map(lax.map over micro-batches of the vmapped point)).

    Arguments: state and fixed knobs (replicated), swept knobs of shape (chunk_mb, micro_batch)
    sharded over the "points" mesh axis; returns metrics of shape (chunk_mb, micro_batch, ...).
    """
    per_mb = micro_batch_fn(lab, names)

    def local(state, fixed, swept):
        return jax.lax.map(lambda sw: per_mb(state, fixed, sw), swept)

    return jax.jit(
        jax.shard_map(local, mesh=mesh, in_specs=(P(), P(), P("points")), out_specs=P("points"))
    )


def local_mesh() -> Mesh:
    """A 1-D mesh over all local devices, axis "points"."""
    return Mesh(np.array(jax.local_devices()), ("points",))


@functools.lru_cache(maxsize=16)
def jitted(lab, names: tuple[str, ...], mesh) -> tuple[Callable, Callable]:
    """(jit(lab.seed_state), chunk_fn), cached per lab so that repeated sweeps of one lab object
    (same metrics, same devices) reuse the compiled code."""
    return jax.jit(lab.seed_state), chunk_fn(lab, names, mesh)


def compile_sweep(
    lab, names, mesh, fixed, layout: Layout, grid, precision: str, replicated, sharded
) -> tuple[Callable, Callable]:
    """Both programs of a sweep compiled ahead of the first chunk, under the matmul precision
    (jax.default_matmul_precision; "highest": full float32 on every backend): the per-seed
    state and the chunk function (from abstract shapes; no data is computed)."""
    seed_state, fn = jitted(lab, names, mesh)
    key = jax.random.PRNGKey(0)
    with jax.default_matmul_precision(precision):
        lowered = seed_state.lower(key)
        c_state = lowered.compile()
        state = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=replicated), lowered.out_info
        )
        swept = {
            k: jax.ShapeDtypeStruct(
                (layout.chunk_mb, layout.micro_batch), v.dtype, sharding=sharded
            )
            for k, v in grid.items()
        }
        c_chunk = fn.lower(state, fixed, swept).compile()
    return c_state, c_chunk


def bytes_per_micro_batch(
    lab, names, fixed: Mapping[str, float], swept_names, micro_batch: int
) -> int:
    """Working set of one micro-batch: micro_batch x lab.point_bytes() when the lab estimates
    it from its sizes, else an upper bound from the jaxpr (tracing only, no compile)."""
    if hasattr(lab, "point_bytes"):
        return max(1, micro_batch * int(lab.point_bytes()))
    state = jax.eval_shape(lab.seed_state, jax.random.PRNGKey(0))
    args = (
        state,
        {k: jax.ShapeDtypeStruct((), knob_dtype()) for k in fixed},
        {k: jax.ShapeDtypeStruct((micro_batch,), knob_dtype()) for k in swept_names},
    )
    return jaxpr_bytes(micro_batch_fn(lab, names), *args)


def jaxpr_bytes(f: Callable, *args) -> int:
    """Sum of the sizes of every top-level intermediate of f's jaxpr: an upper bound on live
    memory."""
    jaxpr = jax.make_jaxpr(f)(*args).jaxpr
    return max(
        1,
        sum(
            math.prod(v.aval.shape) * v.aval.dtype.itemsize
            for eqn in jaxpr.eqns
            for v in eqn.outvars
        ),
    )


def choose_layout(cfg: SweepConfig, lab, names, n_devices: int) -> tuple[Layout, dict[str, Any]]:
    """The chunk layout (from sweep.chunk_size, else the memory budget) and its meta.json entry.
    cfg.sweep.micro_batch must be resolved (resolve_micro_batch)."""
    st = cfg.sweep
    if st.chunk_size is not None:
        per_dev, bpm, rule = -(-st.chunk_size // (st.micro_batch * n_devices)), None, "chunk_size"
    else:
        swept = [k for a in cfg.axes for k in a.knobs]
        bpm = bytes_per_micro_batch(lab, names, cfg.knobs, swept, st.micro_batch)
        per_dev = CHUNK_MICRO_BATCHES if bpm <= st.memory_budget_mb * 2**20 else 1
        rule = "memory_budget"
    layout = make_layout(cfg.n_points, st.micro_batch, n_devices, per_dev)
    return layout, {
        "micro_batch": st.micro_batch,
        "chunk_points": layout.chunk_mb * st.micro_batch,
        "chunks_per_seed": layout.chunks_per_seed,
        "rule": rule,
        "bytes_per_micro_batch": bpm,
    }


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
        from simlab.core.lab import Lab

        lab = Lab(cfg.block, cfg.inputs, cfg.sweep.metrics)
    allowed = tuple(lab.metric_names)
    names = cfg.sweep.metrics or allowed
    for m in names:
        if m not in allowed:
            raise ConfigError(f"sweep.metrics: unknown metric {m!r}; allowed: {', '.join(allowed)}")
    if hasattr(lab, "check_knobs"):
        lab.check_knobs([k for a in cfg.axes for k in a.knobs], cfg.knobs)
    return lab, tuple(names)


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
    cfg = load_config(tables)
    lab, names = build_lab(cfg, lab)
    cfg = resolve_micro_batch(cfg, lab)
    resolved = cfg.to_dict()
    resolved["sweep"]["metrics"] = list(names)
    fp = fingerprint(resolved)
    out_dir = None if out is None else check_writable(out)
    if worker is not None:
        worker = check_worker(worker, out_dir)
    elif out_dir is not None and jax.process_count() > 1:
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
    res = _compute(cfg, lab, names, resolved, fp, out_dir, quiet, on_chunk, t0, worker)
    if distributed:  # process 0 merged (it waits for every unit); the others wait for it
        return res if res is not None else wait_for_results(out_dir)
    return res


def check_worker(worker, out_dir) -> tuple[int, int]:
    """(I, N) with 0 <= I < N, and an output directory to share the work through."""
    try:
        i, n = (int(w) for w in worker)
    except (TypeError, ValueError):
        raise ConfigError(f"worker: must be (I, N), got {worker!r}") from None
    if not 0 <= i < n:
        raise ConfigError(f"--worker: {i}/{n}: I must be in 0..N-1 and N >= 1")
    if out_dir is None:
        raise ConfigError("--worker: needs --out (the workers share their chunks there)")
    return i, n


def wait_for_results(out_dir: Path, poll_s: float = 0.5) -> results.Results:
    """Wait for results.npz and meta.json in out_dir (written by the merging process)."""
    while not ((out_dir / "results.npz").exists() and (out_dir / "meta.json").exists()):
        time.sleep(poll_s)
    return results.load(out_dir)


def worker_from_env() -> tuple[int, int] | None:
    """(SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN, SLURM_ARRAY_TASK_COUNT) inside a Slurm job
    array, else None."""
    task, count = os.environ.get("SLURM_ARRAY_TASK_ID"), os.environ.get("SLURM_ARRAY_TASK_COUNT")
    if task is None or count is None:
        return None
    try:
        first = int(os.environ.get("SLURM_ARRAY_TASK_MIN", "0"))
        return int(task) - first, int(count)
    except ValueError:
        raise ConfigError(
            f"SLURM_ARRAY_TASK_ID={task!r}, SLURM_ARRAY_TASK_COUNT={count!r}: not integers"
        ) from None


def parse_worker(text: str) -> tuple[int, int]:
    """ "I/N" -> (I, N)."""
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ConfigError(f"--worker: {text!r} is not I/N (e.g. 0/4)") from None
    return i, n


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
    seed_state = jitted(lab, names, local_mesh())[0]  # eval_shape's trace is reused by lower
    return memory.check_fits(cfg, lab, names, seed_state, micro, per_point, knob_dtype().itemsize)


def share_of(worker: tuple[int, int] | None, seeds: int, n_mb: int) -> dict[int, set[int]]:
    """seed -> micro-batches of worker I of N: a contiguous block of the seed-major list of all
    seeds x n_mb work units (everything when worker is None). Depends on the config alone."""
    total = seeds * n_mb
    lo, hi = (
        (0, total)
        if worker is None
        else (worker[0] * total // worker[1], (worker[0] + 1) * total // worker[1])
    )
    out: dict[int, set[int]] = {}
    for u in range(lo, hi):
        out.setdefault(u // n_mb, set()).add(u % n_mb)
    return out


class Pending:
    """The units of one writer's share not yet covered, found in amortised O(1) per chunk: per
    seed the share's micro-batches in order and a cursor past the covered ones (coverage only
    grows), so choosing the next chunk does not rescan the whole grid each time."""

    def __init__(self, layout: Layout, wanted: dict[int, set[int]]):
        self.layout, self.wanted = layout, wanted
        self.order = {s: sorted(ms) for s, ms in wanted.items()}
        self.pos = dict.fromkeys(wanted, 0)

    def next_chunk(self, covered, held: dict[int, set[int]]) -> tuple[int, int, int] | None:
        """The first run of wanted micro-batches that no chunk covers and no one holds, at most
        layout.chunk_mb long, aligned to the layout's chunks (so a lone writer computes exactly
        the chunks of the layout)."""
        for seed in sorted(self.order):
            order, done, busy = self.order[seed], covered.get(seed, set()), held.get(seed, set())
            i = self.pos[seed]
            while i < len(order) and order[i] in done:
                i += 1
            self.pos[seed] = i
            while i < len(order) and (order[i] in done or order[i] in busy):
                i += 1  # held by another writer (a few chunks at most): look past it
            if i == len(order):
                continue
            a = order[i]
            stop = min((a // self.layout.chunk_mb + 1) * self.layout.chunk_mb, self.layout.n_mb)
            b = a + 1
            while b < stop and b in self.wanted[seed] and b not in done and b not in busy:
                b += 1
            return seed, a, b
        return None


def _compute(
    cfg, lab, names, resolved, fp, out_dir, quiet, on_chunk, t0, worker=None
) -> results.Results | None:
    """Compute the missing chunks (this writer's share), then, unless a worker, wait for the
    rest, merge and save (after all validation has passed)."""
    mesh = local_mesh()
    devices = list(mesh.devices.flat)
    replicated, sharded = NamedSharding(mesh, P()), NamedSharding(mesh, P("points"))
    st = cfg.sweep
    grid = grid_knobs(cfg)
    layout, layout_meta = choose_layout(cfg, lab, names, len(devices))
    coord = None
    if out_dir is not None:
        coord = claims.Coordinator(out_dir)
        with coord.lock():
            claim_directory(out_dir, resolved, fp)
            for name in coord.clean():
                log.info("%s: removed %s (left by a writer that is gone)", out_dir, name)
            (out_dir / "chunks").mkdir(exist_ok=True)
    store = ChunkStore(
        None if out_dir is None else out_dir / "chunks", fp, names, st.micro_batch, log.warning
    )
    everything = share_of(None, st.seeds, layout.n_mb)
    mine = share_of(worker, st.seeds, layout.n_mb)
    finish = worker is None or (jax.process_count() > 1 and worker[0] == 0 and worker[1] > 1)
    total = cfg.n_points * st.seeds

    def missing_points() -> int:  # exact, O(grid): at the start and before a final break
        return sum(
            layout.real_points(m, m + 1)
            for seed, ms in everything.items()
            for m in ms - store.covered.get(seed, set())
        )

    def points(units) -> int:
        return sum(layout.real_points(m, m + 1) for _, m in units)

    mine_left, all_left = Pending(layout, mine), Pending(layout, everything)

    fixed = jax.device_put({k: knob_dtype().type(v) for k, v in cfg.knobs.items()}, replicated)
    compiled_state = compiled = None
    compile_s = compute_s = 0.0
    state, state_seed, computed, computed_points, reused0 = None, None, 0, 0, None
    with tqdm(total=total, unit="pt", disable=quiet, desc="sweep", dynamic_ncols=True) as bar:
        missing = missing_points()
        bar.update(total - missing)
        reused0 = len(store.chunks)
        try:
            while True:
                if coord is None:
                    job, held = mine_left.next_chunk(store.covered, {}), {}
                else:
                    with coord.lock():
                        # claims first, then chunk files: a writer writes its chunk before it
                        # drops the claim, so a unit is seen either held or done, never neither
                        held = coord.held()
                        new = points(store.scan())  # chunks other writers finished meanwhile
                        missing -= new
                        bar.update(new)
                        job = mine_left.next_chunk(store.covered, held)
                        if job is None and finish:  # this share done: help with the rest
                            job = all_left.next_chunk(store.covered, held)
                        claim = coord.claim(*job) if job is not None else None
                if job is None:
                    if not finish or missing == 0:
                        break
                    time.sleep(0.5)  # the rest is held by other live writers: wait for it
                    with coord.lock():
                        new = points(store.scan())
                    missing -= new
                    bar.update(new)
                    continue
                if compiled is None:
                    tc = time.perf_counter()
                    cache = compile_cache.enable()
                    compiled_state, compiled = compile_sweep(
                        lab,
                        names,
                        mesh,
                        fixed,
                        layout,
                        grid,
                        st.matmul_precision,
                        replicated,
                        sharded,
                    )
                    compile_s = time.perf_counter() - tc
                    log.info("sweep: compiled in %.2f s (cache: %s)", compile_s, cache or "off")
                s, a, b = job
                tc = time.perf_counter()
                if state_seed != s:
                    key = jax.random.fold_in(jax.random.PRNGKey(st.base_seed), s)
                    state, state_seed = jax.device_put(compiled_state(key), replicated), s
                idx = layout.point_index(a)
                swept = jax.device_put(
                    {k: v[idx].reshape(layout.chunk_mb, st.micro_batch) for k, v in grid.items()},
                    sharded,
                )
                res = compiled(state, fixed, swept)
                keep = (b - a) * st.micro_batch
                new = store.put(
                    s,
                    a,
                    b,
                    {k: np.asarray(x).reshape((-1,) + x.shape[2:])[:keep] for k, x in res.items()},
                )
                if coord is not None:
                    coord.release(claim)
                compute_s += time.perf_counter() - tc
                computed += 1
                computed_points += layout.real_points(a, b)
                missing -= points(new)
                bar.update(points(new))
                release_host_memory()
                if on_chunk is not None:
                    on_chunk(ChunkInfo(s, a, b, layout.real_points(a, b)))
        finally:
            if coord is not None:
                coord.close()
    if not finish:
        log.info("sweep: worker %d/%d computed %d chunks", worker[0], worker[1], computed)
        return None
    if missing_points():  # the running count said 0: check it exactly once before merging
        raise RuntimeError(f"sweep: {missing_points()} points still missing before the merge")

    metrics = merge(store, cfg, layout, names)
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
        "chunks_computed": computed,
        "chunks_reused": reused0,
        "chunks_rejected": store.rejected,
        "compile_time_s": compile_s,
        "matmul_precision": st.matmul_precision,
        "compute_time_s": compute_s,
        "points_per_second": computed_points / compute_s if computed and compute_s > 0 else None,
        "wall_time_s": time.perf_counter() - t0,
    }
    if out_dir is None:
        return results.Results(axes, metrics, meta)
    saved = results.save(out_dir, axes, metrics, meta)
    coord.tidy()
    return saved


def release_host_memory() -> None:
    """Hand the heap memory freed by a chunk back to the OS (glibc malloc_trim; a no-op
    elsewhere). Each chunk call allocates and frees its buffers anew, and glibc otherwise keeps
    the freed pages: a 1e5-point sweep's resident memory crept up by ~2 MB per chunk
    (docs/performance.md, W4)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


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


def add_arguments(parser) -> None:
    """`simlab sweep` arguments."""
    parser.add_argument(
        "config", nargs="?", help="sweep config (TOML); see experiments/quickstart.toml"
    )
    parser.add_argument(
        "--default",
        action="store_true",
        help="use the embedded default config (simlab/configs/default.toml)",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="output directory (resumes if it holds this sweep; default runs/<config name>, "
        "runs/default for --default)",
    )
    parser.add_argument(
        "--chunk-size",
        type=int,
        default=None,
        help="points per compiled call (memory only; default: from sweep.memory_budget_mb)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_set_argument(parser)
    add_cache_argument(parser)
    add_worker_arguments(parser)


def add_set_argument(parser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override one config field, validated like the file and recorded in the resolved "
        "config (repeatable; dotted keys: block.d_model=128, knobs.temperature=0.5, "
        "axes.0.num=9, sweep.seeds=4)",
    )


def add_worker_arguments(parser) -> None:
    """--worker I/N and the jax.distributed flags (docs/design.md, "Work units")."""
    parser.add_argument(
        "--worker",
        metavar="I/N",
        default=None,
        help="compute only worker I's share of N (0-based) and do not merge; default inside a "
        "Slurm job array: SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT",
    )
    parser.add_argument(
        "--distributed",
        action="store_true",
        help="call jax.distributed.initialize() (from the cluster's environment, or the flags "
        "below): each process takes its share, process 0 merges",
    )
    parser.add_argument("--coordinator", default=None, help="jax.distributed: HOST:PORT")
    parser.add_argument("--num-processes", type=int, default=None, help="jax.distributed")
    parser.add_argument("--process-id", type=int, default=None, help="jax.distributed")


def init_distributed(args) -> None:
    """jax.distributed.initialize with the given flags (the rest from the environment)."""
    if not (args.distributed or args.coordinator):
        return
    kw = {
        k: v
        for k, v in (
            ("coordinator_address", args.coordinator),
            ("num_processes", args.num_processes),
            ("process_id", args.process_id),
        )
        if v is not None
    }
    try:
        jax.distributed.initialize(**kw)
    except (ValueError, RuntimeError) as e:
        raise ConfigError(f"--distributed: jax.distributed.initialize failed: {e}") from None


def add_cache_argument(parser) -> None:
    """--no-compile-cache (also SIMLAB_COMPILE_CACHE=off; simlab.engine.compile_cache)."""
    parser.add_argument(
        "--no-compile-cache",
        action="store_true",
        help="do not use the persistent compilation cache (~/.cache/simlab/jax, "
        "or SIMLAB_COMPILE_CACHE=DIR)",
    )


def apply_cache_argument(args) -> None:
    if getattr(args, "no_compile_cache", False):
        os.environ[compile_cache.ENV] = "off"


def cli_main(args) -> int:
    """Run `simlab sweep`; print where the results are."""
    apply_cache_argument(args)
    if (args.config is None) == (not args.default):
        raise ConfigError("sweep: give either CONFIG.toml or --default (exactly one)")
    config = default_config_path() if args.default else args.config
    if args.out is None:
        args.out = str(Path("runs") / ("default" if args.default else Path(config).stem))
        print(f"output directory: {args.out} (--out to choose another)")
    if args.set:
        config = apply_overrides(read_toml(config), args.set)
    worker = parse_worker(args.worker) if args.worker else worker_from_env()
    init_distributed(args)
    res = run_sweep(
        config, out=args.out, chunk_size=args.chunk_size, quiet=args.quiet, worker=worker
    )
    if res is None:
        print(
            f"worker {worker[0]}/{worker[1]}: its chunks are in {Path(args.out) / 'chunks'}; "
            f"`simlab merge {args.out}` (or the same `simlab sweep` without --worker) merges"
        )
        return 0
    shape = "x".join(map(str, next(iter(res.metrics.values())).shape))
    print(
        f"results in {Path(args.out)}: results.npz + meta.json ({len(res.metrics)} metrics, "
        f"shape {shape})"
    )
    return 0
