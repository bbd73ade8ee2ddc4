"""The level set metric = level of a refined sweep (or of a grid), read from its results
(docs/config.md, "Refinement of a phase boundary"; the lattice and the refinement:
simlab.engine.refine).

Boundary (d = 1 or 2). On every leaf, marching squares (d = 2; d = 1: the crossing of each
interval) on its corner values, linear on each edge in lattice units (so in log coordinates on
a log axis); a saddle cell (all four edges crossed) pairs its crossings by the sign of the
corners' mean. The confidence band over Z seeds is the same boundary of mean -+ t sem, with
t the 97.5% quantile of Student's t with Z - 1 degrees of freedom and sem = std (ddof 1) /
sqrt(Z): where the level lies within the seed mean's 95% interval. `hausdorff` measures two
boundaries against each other in finest cells.

Shape letters (docs/design.md): P points, Z seeds, C cells, M segments, d refined axes.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any

import numpy as np

from simlab.engine.grid import REFINE_DIM_SUGAR
from simlab.engine.refine import Lattice, corner_offsets
from simlab.engine.results import take_dims
from simlab.errors import ConfigError


def is_refined(res) -> bool:
    """Whether a Results holds a refined sweep (meta.json has a "refine" entry)."""
    meta = getattr(res, "meta", None) or {}
    return isinstance(meta.get("refine"), Mapping)


def structure(res) -> tuple[dict, np.ndarray, np.ndarray]:
    """(refine meta, point lattice indices (P, d), leaves (C, d + 1)) of a refined Results."""
    if not is_refined(res):
        raise ConfigError("this sweep was not refined (its meta.json has no 'refine' entry)")
    r = res.meta["refine"]
    d = len(r["axes"])
    idx = np.asarray(r["index"], np.int64).reshape(-1, d)
    leaves = np.asarray(r["cells"], np.int64).reshape(-1, d + 1)
    return r, idx, leaves


def lattice_axes(res) -> OrderedDict:
    """Axis -> its finest coordinates, of a refined Results."""
    r = structure(res)[0]
    return OrderedDict((a, np.asarray(r["finest"][a], np.float64)) for a in r["axes"])


def lattice_view(res):
    """An object with the Results' meta and the finest lattice as its axes, for code that reads
    res.axes[name] and res.meta (the theory overlays of simlab.studies.reproduce)."""
    return SimpleNamespace(meta=res.meta, axes=lattice_axes(res), path=getattr(res, "path", None))


def point_values(res, metric: str, select: Mapping[str, Any] | None = None) -> np.ndarray:
    """A metric of a point-set or refined Results as (P, Z): each further dimension (a stack's
    layers, heads, ...) at its index in `select` (default the last; results.take_dims)."""
    x = np.asarray(res[metric])
    n_axes = len(res.axes)
    x = x.reshape((-1,) + x.shape[n_axes:])
    x, _ = take_dims(x, res.dims(metric)[n_axes + 1 :], select, metric)
    return x


def refine_selection(r: Mapping[str, Any]) -> dict[str, int]:
    """The further dimensions a refinement's metric was read at (meta.json's "refine": its
    "select", and the sugar fields such as refine.layer, null when not given)."""
    out = {k: r[k] for k in REFINE_DIM_SUGAR if r.get(k) is not None}
    return {**out, **(r.get("select") or {})}


@dataclasses.dataclass
class Boundary:
    """The level set metric = level of a sweep over two (or one) lattice axes.

    segments (M, 2, 2) (d = 2) or crossings (M,) (d = 1), in lattice units of `axes`; lo / hi:
    the same for mean -+ t sem (None with a single seed). to_axis maps lattice units to the
    axis's coordinates."""

    metric: str
    level: float
    axes: tuple[str, ...]
    segments: np.ndarray
    lo: np.ndarray | None
    hi: np.ndarray | None
    seeds: int
    confidence: float
    to_axis: Callable[[np.ndarray, int], np.ndarray]
    shape: tuple[int, ...]

    def in_coordinates(self, segs: np.ndarray | None) -> np.ndarray | None:
        """Segments (or crossings) in the axes' own coordinates."""
        if segs is None:
            return None
        s = np.asarray(segs, float)
        if s.ndim == 1:
            return self.to_axis(s, 0)
        out = np.empty_like(s)
        for a in range(s.shape[-1]):
            out[..., a] = self.to_axis(s[..., a], a)
        return out


def refined_boundary(
    res, metric: str | None = None, level: float | None = None, confidence: float = 0.95
) -> Boundary:
    """The boundary of a refined Results (default: its refinement's metric and level) with its
    confidence band over seeds, extracted on its leaves."""
    r, idx, leaves = structure(res)
    metric = r["metric"] if metric is None else metric
    level = r["level"] if level is None else float(level)
    lat = view_lattice(r)
    vals = point_values(res, metric, refine_selection(r) if metric == r["metric"] else None)
    return _boundary(lat, idx, leaves, vals, metric, level, confidence)


def grid_boundary(
    res,
    metric: str,
    level: float,
    select: Mapping[str, Any] | None = None,
    confidence: float = 0.95,
) -> Boundary:
    """The boundary of a dense grid Results over its (one or two) axes, every grid cell a leaf:
    the same extraction as `refined_boundary`, so a refined sweep and the dense grid of its
    finest lattice give the same segments in every cell both resolve."""
    names = [a for a, v in res.axes.items() if len(v) > 1]
    if not 1 <= len(names) <= 2 or len(names) != len(res.axes):
        raise ConfigError("grid_boundary: needs a sweep over one or two axes")
    spaces = {a["name"]: a.get("space") for a in res.meta.get("axes", [])}
    r = {
        "axes": names,
        "lattice": [len(res.axes[a]) for a in names],
        "space": [spaces.get(a, "lin") for a in names],
        "finest": {a: np.asarray(res.axes[a], float) for a in names},
    }
    lat = view_lattice(r)
    shape = tuple(r["lattice"])
    idx = np.stack(np.unravel_index(np.arange(int(np.prod(shape))), shape), axis=1)
    cells = [n - 1 for n in shape]
    lows = np.stack(np.unravel_index(np.arange(int(np.prod(cells))), cells), axis=1)
    leaves = np.concatenate([lows, np.ones((len(lows), 1), np.int64)], axis=1)
    return _boundary(lat, idx, leaves, point_values(res, metric, select), metric, level, confidence)


def view_lattice(r: Mapping[str, Any]) -> Lattice:
    """A Lattice for extraction only (coordinates and spaces; no knob laws)."""
    coords = tuple(np.asarray(r["finest"][a], np.float64) for a in r["axes"])
    return Lattice(
        tuple(r["axes"]),
        tuple(len(c) for c in coords),
        0,
        coords,
        tuple(s == "log" for s in r["space"]),
        (),
        {},
    )


def _boundary(lat, idx, leaves, vals_PZ, metric, level, confidence) -> Boundary:
    v = np.asarray(vals_PZ, np.float64)
    mean = v.mean(axis=1)
    lo = hi = None
    z = v.shape[1]
    if z > 1:
        from scipy.stats import t  # deferred: scipy.stats is heavy; only intervals need it

        half = t.ppf(0.5 + confidence / 2, z - 1) * v.std(axis=1, ddof=1) / np.sqrt(z)
        lo = level_set(lat, idx, leaves, mean - half, level)
        hi = level_set(lat, idx, leaves, mean + half, level)
    return Boundary(
        metric,
        level,
        lat.axes,
        level_set(lat, idx, leaves, mean, level),
        lo,
        hi,
        z,
        confidence,
        lat.to_axis,
        lat.shape,
    )


def leaf_values(lat: Lattice, idx_PD, leaves_CE, values_P) -> np.ndarray:
    """The values at the 2^d corners of every leaf (C, 2^d; NaN where a corner is not a point),
    corners in the order of `corner_offsets`."""
    idx_PD = np.asarray(idx_PD, np.int64)
    d = idx_PD.shape[1]
    flat = np.ravel_multi_index(tuple(idx_PD.T), lat.shape)
    order = np.argsort(flat)
    flat_sorted, vals = flat[order], np.asarray(values_P, np.float64)[order]
    out = np.empty((len(leaves_CE), 2**d))
    for j, off in enumerate(corner_offsets(d, 1)):
        corner = leaves_CE[:, :d] + off[None] * leaves_CE[:, d : d + 1]
        f = np.ravel_multi_index(tuple(corner.T), lat.shape)
        pos = np.minimum(np.searchsorted(flat_sorted, f), len(flat_sorted) - 1)
        out[:, j] = np.where(flat_sorted[pos] == f, vals[pos], np.nan)
    return out


def level_set(lat: Lattice, idx_PD, leaves_CE, values_P, level: float) -> np.ndarray:
    """The level set of values_P on the leaves: (M, 2, 2) segments (d = 2) or (M,) crossings
    (d = 1), in lattice units (module docstring: marching squares, linear on each edge)."""
    d = np.asarray(idx_PD).shape[1]
    v = leaf_values(lat, idx_PD, leaves_CE, values_P)
    low, h = leaves_CE[:, :d], leaves_CE[:, d].astype(float)
    if d == 1:
        v0, v1 = v[:, 0], v[:, 1]
        cross = np.isfinite(v0) & np.isfinite(v1) & ((v0 >= level) != (v1 >= level))
        t = (level - v0[cross]) / (v1[cross] - v0[cross])
        return np.sort(low[cross, 0] + h[cross] * t)
    if d != 2:
        raise ConfigError("a boundary is drawn over one or two refined axes")
    c00, c01, c10, c11 = v.T  # corner_offsets order: (0, 0), (0, h), (h, 0), (h, h)
    ok = np.all(np.isfinite(v), axis=1)
    b = [(c >= level) for c in (c00, c10, c11, c01)]
    x0, y0 = low[:, 0].astype(float), low[:, 1].astype(float)

    def edge(va, vb, pa, pb):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return pa + (pb - pa) * ((level - va) / (vb - va))[:, None]

    p00 = np.stack([x0, y0], 1)
    p10 = np.stack([x0 + h, y0], 1)
    p11 = np.stack([x0 + h, y0 + h], 1)
    p01 = np.stack([x0, y0 + h], 1)
    # edges: 0 bottom (00-10), 1 right (10-11), 2 top (01-11), 3 left (00-01)
    pts = [edge(c00, c10, p00, p10), edge(c10, c11, p10, p11), edge(c01, c11, p01, p11)]
    pts.append(edge(c00, c01, p00, p01))
    crossed = np.stack([b[0] != b[1], b[1] != b[2], b[3] != b[2], b[0] != b[3]], 1) & ok[:, None]
    n = crossed.sum(1)
    segs = []
    two = np.nonzero(n == 2)[0]
    if len(two):
        e = np.argsort(~crossed[two], axis=1, kind="stable")[:, :2]  # the two crossed edges
        pe, rows = np.stack(pts, 1)[two], np.arange(len(two))  # pe: (C2, 4 edges, 2)
        segs.append(np.stack([pe[rows, e[:, 0]], pe[rows, e[:, 1]]], 1))
    four = np.nonzero(n == 4)[0]
    if len(four):
        # a saddle: the corners 00 and 11 joined through the centre (centre on their side)
        # leave one segment around 10 (edges 0, 1) and one around 01 (edges 2, 3); else the
        # segments go around 00 (edges 0, 3) and 11 (edges 1, 2)
        same = (((c00 + c10 + c11 + c01)[four] / 4 >= level) == b[0][four])[:, None]
        pe = np.stack(pts, 1)[four]
        segs.append(np.stack([pe[:, 0], np.where(same, pe[:, 1], pe[:, 3])], 1))
        segs.append(
            np.stack([np.where(same, pe[:, 2], pe[:, 1]), np.where(same, pe[:, 3], pe[:, 2])], 1)
        )
    return np.concatenate(segs) if segs else np.zeros((0, 2, 2))


def hausdorff(a: np.ndarray, b: np.ndarray, samples: int = 9) -> float:
    """The Hausdorff distance between two boundaries in lattice units (the largest distance from
    a point of one to the other): segments (M, 2, 2) sampled at `samples` points each, or
    crossings (M,). 0 when both are empty, inf when only one is."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) == 0 and len(b) == 0:
        return 0.0
    if len(a) == 0 or len(b) == 0:
        return float("inf")
    if a.ndim == 1:
        da = np.abs(a[:, None] - b[None]).min(1).max()
        db = np.abs(b[:, None] - a[None]).min(1).max()
        return float(max(da, db))
    return float(max(_directed(a, b, samples), _directed(b, a, samples)))


def _directed(a: np.ndarray, b: np.ndarray, samples: int) -> float:
    """max over sample points of segments a of the distance to the nearest segment of b."""
    t = np.linspace(0.0, 1.0, samples)
    pts = (a[:, None, 0] + (a[:, None, 1] - a[:, None, 0]) * t[None, :, None]).reshape(-1, 2)
    p0, d = b[:, 0], b[:, 1] - b[:, 0]
    dd = np.maximum(np.sum(d * d, axis=1), 1e-300)
    worst = 0.0
    for chunk in np.array_split(pts, max(1, len(pts) // 4096 + 1)):
        rel = chunk[:, None, :] - p0[None]
        s = np.clip(np.sum(rel * d[None], axis=2) / dd[None], 0.0, 1.0)
        near = rel - s[..., None] * d[None]
        worst = max(worst, float(np.sqrt(np.min(np.sum(near * near, axis=2), axis=1)).max()))
    return worst


def crossings(boundary: Boundary, along: int = 0) -> dict[str, np.ndarray]:
    """For each finest lattice coordinate u of axis `along` (d = 2), the other axis's lattice
    coordinate where the boundary (and the band's lo / hi boundaries) cross u: the median
    of the crossings (NaN where none): {"u", "mean", "lo", "hi"} in lattice units."""
    other = 1 - along
    u = np.arange(boundary.shape[along], dtype=float)

    def at(segs):
        if segs is None:
            return None
        out = np.full(len(u), np.nan)
        if not len(segs):
            return out
        a, b = segs[:, 0], segs[:, 1]
        lo, hi = np.minimum(a[:, along], b[:, along]), np.maximum(a[:, along], b[:, along])
        for i, x in enumerate(u):
            m = (lo <= x) & (x <= hi)
            if not np.any(m):
                continue
            da = b[m, along] - a[m, along]
            with np.errstate(divide="ignore", invalid="ignore"):
                t = np.where(da != 0, (x - a[m, along]) / da, 0.0)
            out[i] = float(np.median(a[m, other] + t * (b[m, other] - a[m, other])))
        return out

    return {"u": u, "mean": at(boundary.segments), "lo": at(boundary.lo), "hi": at(boundary.hi)}
