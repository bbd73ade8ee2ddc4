"""The parts of a composite sweep (simlab.engine.grow): a part is an ordinary sweep of a point
set (one axis "point" of per-knob value lists) x a seed range, in OUT/parts/<k>/; a `Pool` plans
the parts a set of (point, seed) pairs needs, runs them and gathers their numbers (docs/design.md,
"Growing and refining").

A point is identified by every knob's value in the knob dtype (`point_keys`); a (point, seed)
pair's numbers depend on nothing else, so a pair computed once is reused wherever it is needed.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import numpy as np

from simlab.engine import claims, plain, records, results
from simlab.engine.compile import knob_dtype
from simlab.engine.config import SweepConfig, fingerprint, load_config
from simlab.engine.grid import Axis, Law
from simlab.engine.records import PARTS
from simlab.engine.store import claim_directory

log = logging.getLogger(__name__)


def point_keys(values: dict[str, np.ndarray], fixed: dict[str, float], n: int) -> list[bytes]:
    """The identity of each of n points: every knob's value (swept `values`, else `fixed`), in
    name order, in the knob dtype, as bytes."""
    dt = knob_dtype()
    names = sorted(set(values) | set(fixed))
    cols = [
        np.asarray(values[k], np.float64).astype(dt) if k in values else np.full(n, fixed[k], dt)
        for k in names
    ]
    arr = np.ascontiguousarray(np.stack(cols, axis=1).reshape(n, len(names)))
    return arr.view(np.dtype((np.void, arr.itemsize * len(names)))).ravel().tolist()


def seed_range(cfg: SweepConfig) -> range:
    return range(cfg.sweep.first_seed, cfg.sweep.first_seed + cfg.sweep.seeds)


@dataclasses.dataclass
class Part:
    """One part: its name, validated config, where it lives (None: in memory), the index of
    each point key, its global seeds, and its results once finished."""

    name: str
    cfg: SweepConfig
    path: Path | None
    index: dict[bytes, int]
    seeds: range
    res: results.Results | None = None

    @property
    def pairs(self) -> int:
        return len(self.index) * len(self.seeds)

    def finished(self) -> bool:
        if self.res is None and self.path is not None:
            if records.is_finished(self.path):
                self.res = results.load(self.path)
        return self.res is not None


def part_config(target: SweepConfig, values: dict[str, np.ndarray], seeds: range) -> SweepConfig:
    """The config of a part: the target's block, inputs, fixed knobs and settings, its points as
    one axis "point" of per-knob value lists, and the seed range."""
    knobs = tuple(sorted(values))
    n = len(values[knobs[0]])
    axis = Axis(
        "point",
        knobs,
        "index",
        tuple(float(i) for i in range(n)),
        laws=tuple(Law(values=tuple(np.asarray(values[k], np.float64).tolist())) for k in knobs),
    )
    sweep = dataclasses.replace(target.sweep, seeds=len(seeds), first_seed=seeds.start)
    return dataclasses.replace(target, axes=(axis,), sweep=sweep, refine=None)


def _part(name: str, cfg: SweepConfig, path: Path | None) -> Part:
    keys = point_keys(cfg.point_values(), cfg.knobs, cfg.n_points)
    return Part(name, cfg, path, {k: i for i, k in enumerate(keys)}, seed_range(cfg))


class Pool:
    """Every part of a directory (or, with out None, of this run in memory): plans the parts a
    set of (point, seed) pairs needs, runs them, and gathers their numbers."""

    def __init__(self, job: plain.Job, floor: int):
        self.job, self.out, self.floor = job, job.out, floor
        self.parts: list[Part] = []
        self.account = records.Accounting()

    def sync(self, recorded: list[str]) -> None:
        """Add the parts that sweep.json names and this pool has not seen yet."""
        known = {p.name for p in self.parts}
        for name in recorded:
            if name in known:
                continue
            path = self.out / PARTS / name
            sj = records.read_sweep(path / "sweep.json")
            self.parts.append(_part(name, load_config(sj["config"], read_weights=False), path))

    def plan(self, target: SweepConfig, values: dict[str, np.ndarray], seeds: range) -> list[Part]:
        """The parts holding the pairs (points `values` x `seeds`) of the target, new parts
        created (and recorded) for the pairs none holds."""
        n = len(next(iter(values.values())))
        keys = point_keys(values, target.knobs, n)
        if self.out is None:
            return self._plan(target, values, keys, seeds, None)
        coord = claims.Coordinator(self.out)
        with coord.lock():
            sj = self.out / "sweep.json"
            state = records.read_sweep(sj)
            self.sync(state[PARTS])
            return self._plan(target, values, keys, seeds, (sj, state))

    def _plan(self, target, values, keys, seeds, record) -> list[Part]:
        have = np.zeros((len(keys), len(seeds)), bool)
        used = []
        for part in self.parts:
            lo, hi = max(seeds.start, part.seeds.start), min(seeds.stop, part.seeds.stop)
            if lo >= hi:
                continue
            rows = np.array([i for i, k in enumerate(keys) if k in part.index], np.int64)
            if len(rows) and not np.all(have[rows, lo - seeds.start : hi - seeds.start]):
                have[rows, lo - seeds.start : hi - seeds.start] = True
                used.append(part)
        groups: dict[tuple[int, int], list[int]] = {}
        for i in np.nonzero(~have.all(axis=1))[0]:
            for lo, hi in _runs(np.nonzero(~have[i])[0]):
                groups.setdefault((seeds.start + lo, seeds.start + hi), []).append(int(i))
        for (lo, hi), rows in sorted(groups.items()):
            rows = np.asarray(rows)
            cfg = part_config(target, {k: v[rows] for k, v in values.items()}, range(lo, hi))
            used.append(self._new_part(cfg, record))
        return used

    def _new_part(self, cfg: SweepConfig, record) -> Part:
        name = str(len(self.parts)) if record is None else str(len(record[1][PARTS]))
        path = None
        if record is not None:
            sj, state = record
            path = self.out / PARTS / name
            path.mkdir(parents=True, exist_ok=True)
            resolved = plain.provenance(cfg, self.job.lab, self.job.names)
            claim_directory(path, resolved, fingerprint(resolved))
            records.add_part(state, name, cfg.n_points * cfg.sweep.seeds)
            records.write_json(sj, state)
        part = _part(name, cfg, path)
        self.parts.append(part)
        log.info("part %s: %d points x %d seeds", name, cfg.n_points, cfg.sweep.seeds)
        return part

    def run(self, parts: list[Part], worker, barrier: bool) -> bool:
        """Compute the parts, each a plain sweep (module docstring: workers and processes); True
        when all are finished and loaded here."""
        for part in parts:
            if part.finished():
                continue
            res = None
            if worker is not None:
                plain.run(self._job(part, worker), self.floor)
                if barrier:
                    res = plain.run(self._job(part, None), self.floor)
            else:
                res = plain.run(self._job(part, None), self.floor)
            if res is not None:
                self.account.add(res.meta)
                part.res = res
        return all(p.res is not None for p in parts)

    def _job(self, part: Part, worker) -> plain.Job:
        j = self.job
        return plain.prepare(
            part.cfg, out=part.path, quiet=j.quiet, lab=j.lab, on_chunk=j.on_chunk,
            worker=worker, devices=len(j.devices),
        )  # fmt: skip

    def gather(self, target_knobs, values, seeds: range, names) -> dict[str, np.ndarray]:
        """Metric -> (P, Z, ...) at the points `values` x `seeds`, each pair from the first part
        that holds it."""
        n = len(next(iter(values.values())))
        keys = point_keys(values, target_knobs, n)
        out: dict[str, np.ndarray] = {}
        filled = np.zeros((n, len(seeds)), bool)
        for part in self.parts:
            lo, hi = max(seeds.start, part.seeds.start), min(seeds.stop, part.seeds.stop)
            if lo >= hi or part.res is None and not part.finished():
                continue
            idx = np.array([part.index.get(k, -1) for k in keys], np.int64)
            rows = np.nonzero(idx >= 0)[0]
            if not len(rows):
                continue
            ct = np.arange(lo, hi) - seeds.start
            cp = np.arange(lo, hi) - part.seeds.start
            todo = ~filled[np.ix_(rows, ct)]
            if not todo.any():
                continue
            for k in names:
                x = np.asarray(part.res.metrics[k])
                x = x.reshape((-1,) + x.shape[len(part.res.axes) :])
                if k not in out:
                    out[k] = np.full((n, len(seeds)) + x.shape[2:], np.nan, x.dtype)
                dst = out[k][np.ix_(rows, ct)]
                dst[todo] = x[np.ix_(idx[rows], cp)][todo]
                out[k][np.ix_(rows, ct)] = dst
            filled[np.ix_(rows, ct)] = True
        if not filled.all():
            raise RuntimeError(f"grow: {int((~filled).sum())} (point, seed) pairs are missing")
        return out


def _runs(idx: np.ndarray) -> list[tuple[int, int]]:
    """Consecutive runs [lo, hi) of sorted integers."""
    out, start = [], None
    for a, b in zip(idx, list(idx[1:]) + [None]):
        start = a if start is None else start
        if b is None or b != a + 1:
            out.append((int(start), int(a) + 1))
            start = None
    return out
