"""Which work units a writer computes, and in what order (docs/design.md, "Work units").

A unit is one micro-batch of one seed; the seed-major list of all units is cut into N
contiguous blocks, worker I taking block I (`share_of`). A writer (`Writer`) repeatedly picks
the next run of its units that no chunk file covers and no other live writer holds
(`Pending`; under the directory lock when there is a directory, simlab.engine.claims), has it
computed, stores it, and advances the progress bar. A writer that finishes its share and is
the one to merge helps with the rest, then waits for what other live writers still hold.
Which writer computes a unit never changes its numbers (simlab.engine.compile).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from pathlib import Path

from simlab.engine import records, results
from simlab.engine.store import ChunkStore, Layout
from simlab.errors import ConfigError


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


class Writer:
    """One writer's pass over a sweep: `run(compute_chunk)` computes every unit of its share
    that is missing (and, when `finish`, helps with and waits for the rest), storing each chunk
    as it completes.

    compute_chunk(seed, start, stop) -> metric arrays of the micro-batches [start, stop).
    coord: the directory's simlab.engine.claims.Coordinator (None in memory); bar: a tqdm-like
    progress bar (update(n)); on_chunk(seed, start, stop, points) after each stored chunk."""

    def __init__(
        self,
        layout: Layout,
        store: ChunkStore,
        coord,
        seeds: int,
        worker: tuple[int, int] | None,
        finish: bool,
    ):
        self.layout, self.store, self.coord, self.finish = layout, store, coord, finish
        self.everything = share_of(None, seeds, layout.n_mb)
        self.mine = Pending(layout, share_of(worker, seeds, layout.n_mb))
        self.rest = Pending(layout, self.everything)
        self.computed = self.computed_points = 0
        self.missing = self.missing_points()

    def missing_points(self) -> int:
        """Grid points of the whole sweep that no stored chunk covers (exact, O(grid))."""
        covered = self.store.covered
        return sum(
            self.layout.real_points(m, m + 1)
            for seed, ms in self.everything.items()
            for m in ms - covered.get(seed, set())
        )

    def _points(self, units) -> int:
        return sum(self.layout.real_points(m, m + 1) for _, m in units)

    def _newly_stored(self, bar, units) -> None:
        n = self._points(units)
        self.missing -= n
        bar.update(n)

    def _next_job(self, bar):
        """(job, claim): the next chunk to compute, claimed under the lock; job None when the
        share is done."""
        if self.coord is None:
            return self.mine.next_chunk(self.store.covered, {}), None
        with self.coord.lock():
            # claims first, then chunk files: a writer writes its chunk before it drops the
            # claim, so a unit is seen either held or done, never neither
            held = self.coord.held()
            self._newly_stored(bar, self.store.scan())  # chunks other writers finished
            job = self.mine.next_chunk(self.store.covered, held)
            if job is None and self.finish:  # this share done: help with the rest
                job = self.rest.next_chunk(self.store.covered, held)
            return job, (self.coord.claim(*job) if job is not None else None)

    def run(self, compute_chunk: Callable, bar, on_chunk: Callable | None = None) -> None:
        try:
            while True:
                job, claim = self._next_job(bar)
                if job is None:
                    if not self.finish or self.missing == 0:
                        break
                    time.sleep(0.5)  # the rest is held by other live writers: wait for it
                    with self.coord.lock():
                        self._newly_stored(bar, self.store.scan())
                    continue
                s, a, b = job
                new = self.store.put(s, a, b, compute_chunk(s, a, b))
                if claim is not None:
                    self.coord.release(claim)
                self.computed += 1
                self.computed_points += self.layout.real_points(a, b)
                self._newly_stored(bar, new)
                release_host_memory()
                if on_chunk is not None:
                    on_chunk(s, a, b, self.layout.real_points(a, b))
        finally:
            if self.coord is not None:
                self.coord.close()


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


def wait_for_results(out_dir: Path, poll_s: float = 0.5) -> results.Results:
    """Wait for results.npz and meta.json in out_dir (written by the merging process)."""
    while not records.is_finished(out_dir):
        time.sleep(poll_s)
    return results.load(out_dir)


def release_host_memory() -> None:
    """Hand the heap memory freed by a chunk, or by compiling the programs, back to the OS (glibc
    malloc_trim; a no-op elsewhere). Each chunk call allocates and frees its buffers anew, and
    glibc otherwise keeps the freed pages (docs/performance.md, W4)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    try:
        import ctypes  # deferred: only where glibc is there to trim

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
