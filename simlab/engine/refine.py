"""Adaptive refinement of a level set metric = level (the [refine] table; docs/config.md,
"Refinement of a phase boundary"); the boundary it finds is simlab.engine.levelset's.

Lattice. The refined axes a = 1..d (lin or log, num n_a) are subdivided `levels` = L times: the
finest lattice has N_a = (n_a - 1) 2^L + 1 coordinates per axis, np.linspace or np.geomspace
(start, stop, N_a) (exactly the coordinates a dense grid of num = N_a has, so the two share
every point bit for bit). A point is a lattice index (i_1, ..., i_d); level 0 is the coarse grid
i_a in 2^L Z. A cell of level l has its lowest corner at an index c and size h = 2^(L - l) in
lattice units, its 2^d corners at c + {0, h}^d.

Refinement. Level 0's cells are the coarse grid's cells. A cell straddles the level when its
corners' values v (finite ones) satisfy min v < level <= max v, as the rule (simlab.engine.rules)
reads them: "mean" on the seed mean (float64) of each corner, "any" on the seed mean or on any
single seed. Each straddling
cell of level l < L is split into its 2^d children of size h / 2, which adds the lattice points
c + {0, h/2, h}^d not yet computed. After L levels the leaves are the cells never split: the
split cells' children at level L (the finest cells, where the boundary lies) and the unsplit
cells of every level. The result is a point set (sorted by flat lattice index) with its cell
structure: every point's lattice index and level, and the leaves (lowest corner and size).

Shape letters (docs/design.md): P points, Z seeds, C cells, M segments, d refined axes.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from simlab.engine.config import SweepConfig
from simlab.engine.grid import axis_coordinates
from simlab.engine.rules import RULES
from simlab.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Lattice:
    """The finest lattice of a refined sweep: the refined axes (names, config order), their
    coarse sizes n_a, the levels L, the finest coordinates of each axis (N_a values), whether
    each is logarithmic, and how the knobs follow (knobs(idx_PD) -> knob -> values)."""

    axes: tuple[str, ...]
    coarse: tuple[int, ...]
    levels: int
    coords: tuple[np.ndarray, ...]
    logs: tuple[bool, ...]
    knob_laws: tuple[tuple[tuple[str, Any], ...], ...]
    constant: dict[str, float]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple((n - 1) * 2**self.levels + 1 for n in self.coarse)

    @property
    def step(self) -> int:
        """Size of a coarse cell in lattice units: 2^L."""
        return 2**self.levels

    @property
    def d(self) -> int:
        return len(self.axes)

    def flat(self, idx_PD: np.ndarray) -> np.ndarray:
        """Flat (C order) lattice index of each point."""
        return np.ravel_multi_index(tuple(np.asarray(idx_PD).T), self.shape)

    def coordinates(self, idx_PD: np.ndarray) -> dict[str, np.ndarray]:
        """Axis -> the coordinate of each point."""
        idx = np.asarray(idx_PD)
        return {a: c[idx[:, i]] for i, (a, c) in enumerate(zip(self.axes, self.coords))}

    def knob_values(self, idx_PD: np.ndarray) -> dict[str, np.ndarray]:
        """Swept knob -> its float64 value at each point (each refined axis's law applied to the
        finest coordinates, as a dense grid of those coordinates would; the other axes'
        single values)."""
        idx = np.asarray(idx_PD)
        out = {}
        for i, laws in enumerate(self.knob_laws):
            for k, law in laws:
                per_coord = np.asarray(
                    self.coords[i] if law is None else law.apply(tuple(self.coords[i])), np.float64
                )
                out[k] = per_coord[idx[:, i]]
        n = len(idx)
        out.update({k: np.full(n, v) for k, v in self.constant.items()})
        return out

    def to_axis(self, u: np.ndarray, axis: int) -> np.ndarray:
        """Lattice coordinate u (float, lattice units) -> the axis's coordinate: linear
        interpolation between neighbouring lattice points, in log coordinates on a log axis."""
        c, grid = self.coords[axis], np.arange(len(self.coords[axis]), dtype=float)
        if self.logs[axis]:
            return np.exp(np.interp(u, grid, np.log(c)))
        return np.interp(u, grid, c)

    @staticmethod
    def from_config(cfg: SweepConfig) -> Lattice:
        """The lattice of a config with [refine]."""
        r = cfg.refine
        if r is None:
            raise ConfigError("refine: the config has no [refine] table")
        names, coarse, coords, logs, laws, constant = [], [], [], [], [], {}
        for a in cfg.axes:
            if a.name not in r.axes:
                constant.update({k: v[0] for k, v in a.knob_values().items()})
                continue
            n = (len(a.values) - 1) * 2**r.levels + 1
            names.append(a.name)
            coarse.append(len(a.values))
            coords.append(np.asarray(axis_coordinates(a.space, a.start, a.stop, n), np.float64))
            logs.append(a.space == "log")
            laws.append(tuple(zip(a.knobs, a.laws or (None,) * len(a.knobs))))
        return Lattice(
            tuple(names), tuple(coarse), r.levels, tuple(coords), tuple(logs), tuple(laws), constant
        )


def corner_offsets(d: int, h: int) -> np.ndarray:
    """The 2^d corner offsets {0, h}^d of a cell, C order (shape (2^d, d))."""
    return np.array(list(itertools.product((0, h), repeat=d)), dtype=np.int64).reshape(-1, d)


@dataclasses.dataclass
class State:
    """A refinement in progress: the points so far (lattice indices, sorted by flat index, and
    the level that added each), the cells of the current level `level` (lowest corners) and the
    leaves found so far (rows: lowest corner..., size)."""

    lattice: Lattice
    points: np.ndarray
    point_level: np.ndarray
    level: int
    cells: np.ndarray
    leaves: np.ndarray
    added: list[int]
    split: list[int]

    @staticmethod
    def start(lattice: Lattice) -> State:
        """Level 0: the coarse grid's points and cells."""
        d, s = lattice.d, lattice.step
        grids = np.meshgrid(*[np.arange(n) * s for n in lattice.coarse], indexing="ij")
        points = np.stack([g.ravel() for g in grids], axis=1).astype(np.int64)
        lows = np.meshgrid(*[np.arange(n - 1) * s for n in lattice.coarse], indexing="ij")
        cells = np.stack([g.ravel() for g in lows], axis=1).astype(np.int64).reshape(-1, d)
        return State(
            lattice,
            points,
            np.zeros(len(points), np.int64),
            0,
            cells,
            np.zeros((0, d + 1), np.int64),
            [len(points)],
            [],
        )

    @property
    def h(self) -> int:
        """Size of the current level's cells in lattice units."""
        return 2 ** (self.lattice.levels - self.level)

    @property
    def done(self) -> bool:
        return self.level == self.lattice.levels

    def index_of(self, idx_PD: np.ndarray) -> np.ndarray:
        """Position of each lattice point among self.points (-1 where not computed)."""
        lat = self.lattice
        have = lat.flat(self.points)
        want = lat.flat(np.asarray(idx_PD).reshape(-1, lat.d))
        pos = np.searchsorted(have, want)
        pos = np.minimum(pos, len(have) - 1)
        return np.where(have[pos] == want, pos, -1)

    def straddles(self, values_PZ: np.ndarray, level: float, rule: str) -> np.ndarray:
        """Which of the current cells straddle the level (module docstring)."""
        corners = self.cells[:, None, :] + corner_offsets(self.lattice.d, self.h)[None]
        pos = self.index_of(corners.reshape(-1, self.lattice.d)).reshape(corners.shape[:2])
        if np.any(pos < 0):
            raise RuntimeError("refine: a cell corner was never computed")
        v = np.asarray(values_PZ, np.float64)
        v = v[:, None] if v.ndim == 1 else v
        return np.asarray(RULES[rule].straddles(v[pos], level), bool)

    def advance(self, values_PZ: np.ndarray, level: float, rule: str) -> State:
        """The next level: split the straddling cells (values_PZ: the metric at self.points,
        per seed), add their children's corners as new points."""
        if self.done:
            raise RuntimeError("refine: already at the finest level")
        d, h = self.lattice.d, self.h
        hit = self.straddles(values_PZ, level, rule)
        kept = self.cells[~hit]
        leaves = np.concatenate([self.leaves, _with_size(kept, h)])
        split = self.cells[hit]
        children = (split[:, None, :] + corner_offsets(d, h // 2)[None]).reshape(-1, d)
        third = np.array(list(itertools.product((0, h // 2, h), repeat=d)), np.int64)
        cand = (split[:, None, :] + third[None]).reshape(-1, d)
        flat = np.unique(self.lattice.flat(cand))
        new_flat = np.setdiff1d(flat, self.lattice.flat(self.points), assume_unique=True)
        new = np.stack(np.unravel_index(new_flat, self.lattice.shape), axis=1).astype(np.int64)
        all_flat = np.concatenate([self.lattice.flat(self.points), new_flat])
        order = np.argsort(all_flat, kind="stable")
        points = np.concatenate([self.points, new.reshape(-1, d)])[order]
        point_level = np.concatenate([self.point_level, np.full(len(new), self.level + 1)])[order]
        nxt = State(
            self.lattice,
            points,
            point_level,
            self.level + 1,
            children,
            leaves,
            [*self.added, len(new)],
            [*self.split, int(hit.sum())],
        )
        if nxt.done:
            nxt.leaves = np.concatenate([leaves, _with_size(children, 1)])
            nxt.cells = np.zeros((0, d), np.int64)
        return nxt

    def describe(self, rcfg) -> dict[str, Any]:
        """meta.json's "refine" entry of a finished refinement (points in self.points' order)."""
        lat = self.lattice
        return {
            "metric": rcfg.metric,
            "level": rcfg.level,
            "levels": rcfg.levels,
            "rule": rcfg.rule,
            "select": dict(rcfg.select),
            "axes": list(lat.axes),
            "lattice": list(lat.shape),
            "space": ["log" if g else "lin" for g in lat.logs],
            "finest": {a: c.tolist() for a, c in zip(lat.axes, lat.coords)},
            "coords": {a: v.tolist() for a, v in lat.coordinates(self.points).items()},
            "index": self.points.tolist(),
            "point_level": self.point_level.tolist(),
            "cells": self.leaves.tolist(),
            "points_per_level": list(self.added),
            "cells_split_per_level": list(self.split),
        }


def _with_size(cells: np.ndarray, h: int) -> np.ndarray:
    return np.concatenate([cells, np.full((len(cells), 1), h, np.int64)], axis=1)


def simulate(
    lattice: Lattice,
    values: Callable[[np.ndarray], np.ndarray],
    level: float,
    rule: str = "mean",
) -> State:
    """The whole refinement against a function of the lattice points (idx_PD -> values_P or
    values_PZ), e.g. a closed form: the points the engine would compute for that field."""
    state = State.start(lattice)
    while not state.done:
        state = state.advance(values(state.points), level, rule)
    return state
