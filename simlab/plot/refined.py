"""Refined phase diagrams: a refined sweep (simlab.engine.refine) over its two refined axes.

Every leaf cell is drawn at its own size (its corners are points of the sweep), coloured by the
seed mean of the metric averaged over its finite corners, its edges thin and grey so the
refinement shows. The refinement's boundary (its metric = level in the seed mean, extracted on
the leaves by marching squares, linear on each edge in the axes' own scale) is a white outlined
line, its 95% band over seeds (the same level set of mean -+ t sem) dashed; contour lines of
another metric come from the points in the same way; theory curves as on every phase diagram.
A one-axis refinement is drawn as a curve with its seed band and the crossings marked.
"""

from __future__ import annotations

import numpy as np
from matplotlib import patheffects
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.lines import Line2D

from simlab.engine import levelset
from simlab.errors import ConfigError
from simlab.plot.axes import centred_colormap, finish_map, new_ax, save_figure
from simlab.plot.lines import curves

_OUTLINE = [patheffects.withStroke(linewidth=2.6, foreground="black")]


def _lines(ax, segs, style, label):
    """Segments (M, 2, 2) in plot coordinates as one LineCollection; its legend handle."""
    if segs is None or not len(segs):
        return []
    coll = LineCollection(segs, **style)
    coll.set_path_effects(_OUTLINE)
    ax.add_collection(coll, autolim=False)
    if label is None:
        return []
    kw = {k: style[k] for k in ("colors", "linewidths", "linestyles") if k in style}
    return [
        Line2D(
            [],
            [],
            color=kw.get("colors", "white"),
            lw=kw.get("linewidths", 1.4),
            ls=kw.get("linestyles", "solid"),
            path_effects=_OUTLINE,
            label=label,
        )
    ]


def refined_phase_diagram(
    res,
    *,
    x,
    y,
    metric,
    select=None,
    boundary=True,
    contour=None,
    contour_levels=None,
    theory=None,
    title=None,
    ax=None,
    vmin=None,
    vmax=None,
    cmap="viridis",
):
    """The leaves of a refined Results over axes x and y coloured by the seed mean of `metric`
    (module docstring), with the refinement's boundary and band (boundary=True), contour lines
    of the metric `contour` at `contour_levels`, and theory curves (x_arr, y_arr, label).
    Returns (fig, ax)."""
    r, idx, leaves = levelset.structure(res)
    names = list(r["axes"])
    if len(names) != 2 or sorted((x, y)) != sorted(names):
        raise ConfigError(
            f"a refined sweep is drawn over its refined axes {', '.join(names)}; got x={x!r}, "
            f"y={y!r}"
        )
    swap = names.index(x) == 1
    lat = levelset.view_lattice(r)
    mean = levelset.point_values(res, metric, select).astype(np.float64).mean(axis=1)
    corner = levelset.leaf_values(lat, idx, leaves, mean)
    with np.errstate(invalid="ignore"):
        colour = np.nanmean(np.where(np.isfinite(corner), corner, np.nan), axis=1)
    lo, h = leaves[:, :2], leaves[:, 2:3]
    x0, x1 = lat.coords[0][lo[:, 0]], lat.coords[0][(lo + h)[:, 0]]
    y0, y1 = lat.coords[1][lo[:, 1]], lat.coords[1][(lo + h)[:, 1]]
    if swap:
        x0, x1, y0, y1 = y0, y1, x0, x1
    verts = np.stack(
        [np.stack(p, axis=1) for p in ((x0, y0), (x1, y0), (x1, y1), (x0, y1))], axis=1
    )
    fig, ax = new_ax(ax)
    xi, yi = (1, 0) if swap else (0, 1)
    if lat.logs[xi]:
        ax.set_xscale("log")
    if lat.logs[yi]:
        ax.set_yscale("log")
    cells = PolyCollection(
        verts,
        array=np.ma.masked_invalid(colour),
        cmap=cmap,
        edgecolors=(0.5, 0.5, 0.5, 0.6),
        linewidths=0.2,
    )
    if vmin is not None or vmax is not None:
        cells.set_clim(vmin, vmax)
    ax.add_collection(cells)
    ax.set_xlim(lat.coords[xi][0], lat.coords[xi][-1])
    ax.set_ylim(lat.coords[yi][0], lat.coords[yi][-1])
    cbar = fig.colorbar(cells, ax=ax)
    cbar.set_label(f"{metric} (seed mean, cell corners)")

    def plotted(segs):
        s = None if segs is None else np.asarray(segs)
        return s if s is None or not swap else s[..., ::-1]

    handles = []
    if boundary:
        b = levelset.refined_boundary(res)
        handles += _lines(
            ax,
            plotted(b.in_coordinates(b.segments)),
            dict(colors="white", linewidths=1.8),
            f"{b.metric} = {b.level:g} (seed mean)",
        )
        band = dict(colors="white", linewidths=1.0, linestyles="dashed")
        label = f"{b.confidence:.0%} band over {b.seeds} seeds"
        handles += _lines(ax, plotted(b.in_coordinates(b.lo)), band, label)
        _lines(ax, plotted(b.in_coordinates(b.hi)), band, None)
    if contour is not None:
        cm = levelset.point_values(res, contour, select).astype(np.float64).mean(axis=1)
        for i, level in enumerate(sorted(contour_levels or [])):
            segs = levelset.level_set(lat, idx, leaves, cm, float(level))
            out = np.empty_like(segs)
            for a in range(2):
                out[..., a] = lat.to_axis(segs[..., a], a)
            style = dict(colors="tab:orange", linewidths=1.4)
            handles += _lines(ax, plotted(out), style, f"{contour} = {level:g}" if i == 0 else None)
    finish_map(ax, handles, theory, x, y, title)
    return fig, ax


def plot_refined(
    res,
    *,
    x,
    y=None,
    metric,
    select=None,
    contour=None,
    contour_levels=None,
    theory=None,
    title=None,
    out=None,
    x_label=None,
    y_label=None,
    diverging=False,
):
    """`simlab plot` of a refined sweep: the refined phase diagram over x and y, or for a
    one-axis refinement (y None) the seed mean along x with a -+1 std band and the boundary's
    crossings marked. diverging: a colour map centred on 0 (a signed metric). Saves to `out`
    when given; returns (fig, ax)."""
    r, idx, _ = levelset.structure(res)
    if metric not in res.metrics:
        raise ConfigError(
            f"metric {metric!r} not in this sweep; have: {', '.join(sorted(res.metrics))}"
        )
    n = res.n_seeds
    if title is None:
        head = f"{metric}, mean of {n} seed{'s' * (n != 1)}"
        title = f"{head}\nrefined: {len(idx)} points, finest lattice " + " x ".join(
            map(str, r["lattice"])
        )
    if y is not None:
        values = levelset.point_values(res, metric, select).mean(axis=1)
        fig, ax = refined_phase_diagram(
            res,
            x=x,
            y=y,
            metric=metric,
            select=select,
            contour=contour,
            contour_levels=contour_levels,
            theory=theory,
            title=title,
            **(centred_colormap(values) if diverging else {}),
        )
    else:
        if list(r["axes"]) != [x]:
            raise ConfigError(
                f"a refined sweep is drawn over its refined axes {', '.join(r['axes'])} "
                "(give --x and --y)"
            )
        v = levelset.point_values(res, metric, select).astype(np.float64)
        xs = np.asarray(r["coords"][x], float)
        std = v.std(axis=1, ddof=1) if n > 1 else None
        fig, ax = curves(
            xs,
            {f"{metric} (seed mean)": (v.mean(axis=1), std)},
            x_label=x,
            y_label=metric,
            x_log=r["space"][0] == "log",
            title=title,
            theory=theory,
        )
        b = levelset.refined_boundary(res)
        for c in b.in_coordinates(b.segments):
            ax.axvline(c, color="k", ls=":", lw=1.0)
    if x_label:
        ax.set_xlabel(x_label)
    if y_label:
        ax.set_ylabel(y_label)
    if out is not None:
        save_figure(fig, out)
    return fig, ax
