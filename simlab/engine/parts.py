"""The parts of a composite sweep (simlab.engine.grow): a part is an ordinary sweep of a point
set (one axis "point" of per-knob value lists) x a seed range, in OUT/parts/<k>/; a `Pool` plans
the parts a set of (point, seed) pairs needs, runs them and gathers their numbers (docs/design.md,
"Growing and refining").

A point is identified by every knob's value in the knob dtype (`point_keys`); a (point, seed)
pair's numbers depend on nothing else, so a pair computed once is reused wherever it is needed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import numpy as np

from simlab.engine import claims, results
from simlab.engine.compile import knob_dtype
from simlab.engine.config import SweepConfig, fingerprint, load_config
from simlab.engine.grid import Axis, Law

log = logging.getLogger(__name__)

PARTS = "parts"


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


def write_json(path: Path, obj: dict) -> None:
    results.atomic_write_bytes(path, json.dumps(obj, indent=2).encode())


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
            if (self.path / "results.npz").exists() and (self.path / "meta.json").exists():
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

    def __init__(self, out: Path | None, lab, names, quiet, on_chunk, devices, floor):
        self.out, self.lab, self.names = out, lab, tuple(names)
        self.quiet, self.on_chunk, self.devices, self.floor = quiet, on_chunk, devices, floor
        self.parts: list[Part] = []
        self.stats = {"compile_time_s": 0.0, "compute_time_s": 0.0, "chunks": [0, 0]}

    def _sync(self, recorded: list[str]) -> None:
        """Add the parts that sweep.json names and this pool has not seen yet."""
        known = {p.name for p in self.parts}
        for name in recorded:
            if name in known:
                continue
            path = self.out / PARTS / name
            sj = results.read_json(path / "sweep.json", "sweep.json of a part")
            self.parts.append(_part(name, load_config(sj["config"]), path))

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
            state = results.read_json(sj, "sweep.json of a sweep directory")
            self._sync(state[PARTS])
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
        from simlab.engine.store import claim_directory
        from simlab.engine.sweep import provenance

        name = str(len(self.parts)) if record is None else str(len(record[1][PARTS]))
        path = None
        if record is not None:
            sj, state = record
            path = self.out / PARTS / name
            path.mkdir(parents=True, exist_ok=True)
            resolved = provenance(cfg, self.lab, self.names)
            claim_directory(path, resolved, fingerprint(resolved))
            state[PARTS].append(name)
            entry = state["history"][-1]
            entry["parts"].append(name)
            entry["pairs_computed"] += cfg.n_points * cfg.sweep.seeds
            write_json(sj, state)
        part = _part(name, cfg, path)
        self.parts.append(part)
        log.info("part %s: %d points x %d seeds", name, cfg.n_points, cfg.sweep.seeds)
        return part

    def run(self, parts: list[Part], worker, barrier: bool) -> bool:
        """Compute the parts (module docstring: workers and processes); True when all are
        finished and loaded here."""
        from simlab.engine.sweep import run_config

        for part in parts:
            if part.finished():
                continue
            kw = dict(
                out=part.path,
                quiet=self.quiet,
                lab=self.lab,
                on_chunk=self.on_chunk,
                devices=self.devices,
                floor=self.floor,
            )
            res = None
            if worker is not None:
                run_config(part.cfg, worker=worker, **kw)
                if barrier:
                    res = run_config(part.cfg, **kw)
            else:
                res = run_config(part.cfg, **kw)
            if res is not None:
                self._account(part, res)
                part.res = res
        return all(p.res is not None for p in parts)

    def _account(self, part: Part, res: results.Results) -> None:
        m = res.meta
        if m.get("chunks_computed"):
            self.stats["compile_time_s"] += m.get("compile_time_s") or 0.0
            self.stats["compute_time_s"] += m.get("compute_time_s") or 0.0
            self.stats["chunks"][0] += m.get("chunks_computed") or 0
            self.stats["chunks"][1] += m.get("chunks_reused") or 0

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
