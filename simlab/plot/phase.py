"""Phase diagrams: a heatmap of z over two axes, with contour lines and theory overlays.

z is drawn with `pcolormesh` on cell edges from `cell_edges`: arithmetic midpoints between
neighbouring coordinates on linear axes, geometric midpoints (arithmetic in log c) on log axes,
the outer edges extrapolated half a cell.
"""

from __future__ import annotations

import warnings

import numpy as np
from matplotlib import patheffects
from matplotlib.lines import Line2D

from simlab.engine.select import is_log_spaced
from simlab.plot.axes import cell_edges, finish_map, new_ax, sorted_axis

_OUTLINE = [patheffects.withStroke(linewidth=2.6, foreground="black")]


def phase_diagram(
    x,
    y,
    z,
    *,
    x_label,
    y_label,
    z_label,
    x_log=None,
    y_log=None,
    contour=None,
    contour_levels=None,
    contour_label=None,
    theory=None,
    title=None,
    ax=None,
    vmin=None,
    vmax=None,
    cmap="viridis",
):
    """Heatmap of z (shape (len(y), len(x))) with pcolormesh.

    x_log / y_log: None = auto (`is_log_spaced`).  Cells are bounded by `cell_edges` (geometric
    midpoints on log axes, arithmetic on linear ones, half a cell beyond the ends).  NaNs are
    left blank.  A labelled colour bar shows z_label.  `contour` (same shape as z) is drawn as
    lines at `contour_levels` (None: matplotlib's choice), labelled in place and named in the
    legend as `contour_label`.  theory: list of (x_arr, y_arr, label) curves, clipped to the
    axes range: the first dashed, the others dash-dotted.  Unsorted coordinates are sorted
    together with z.  Returns (fig, ax).
    """
    xs, xo = sorted_axis(x, "x")
    ys, yo = sorted_axis(y, "y")
    z = np.asarray(z, dtype=float)
    if z.shape != (ys.size, xs.size):
        raise ValueError(
            f"phase_diagram: z has shape {z.shape}, expected (len(y), len(x)) = "
            f"{(ys.size, xs.size)}"
        )
    z = z[np.ix_(yo, xo)]
    x_log = is_log_spaced(xs) if x_log is None else bool(x_log)
    y_log = is_log_spaced(ys) if y_log is None else bool(y_log)
    xe, ye = cell_edges(xs, x_log), cell_edges(ys, y_log)

    fig, ax = new_ax(ax)
    if x_log:
        ax.set_xscale("log")
    if y_log:
        ax.set_yscale("log")
    mesh = ax.pcolormesh(
        xe, ye, np.ma.masked_invalid(z), cmap=cmap, vmin=vmin, vmax=vmax, shading="flat"
    )
    cbar = fig.colorbar(mesh, ax=ax)
    cbar.set_label(z_label)
    ax.set_xlim(xe[0], xe[-1])
    ax.set_ylim(ye[0], ye[-1])

    handles = []
    if contour is not None:
        c = np.asarray(contour, dtype=float)
        if c.shape != z.shape:
            raise ValueError(f"phase_diagram: contour has shape {c.shape}, expected {z.shape}")
        handles += _contour(ax, xs, ys, c[np.ix_(yo, xo)], contour_levels, contour_label)
    finish_map(ax, handles, theory, x_label, y_label, title)
    return fig, ax


def _contour(ax, xs, ys, c, levels, label) -> list:
    """White outlined contour lines of c (sorted like xs, ys) at `levels`, labelled in place;
    the legend handle naming them (when `label`). Skipped, with a warning, when c has fewer
    than 2 x 2 points or no finite value."""
    if min(c.shape) < 2:
        warnings.warn(
            "phase_diagram: contour lines need at least 2 x 2 points; skipped", stacklevel=3
        )
        return []
    if not np.any(np.isfinite(c)):
        warnings.warn("phase_diagram: contour array has no finite values; skipped", stacklevel=3)
        return []
    levels = None if levels is None else np.sort(np.asarray(levels, float))
    style = dict(colors="white", linewidths=1.4, linestyles="solid")
    cs = ax.contour(xs, ys, np.ma.masked_invalid(c), levels=levels, **style)
    cs.set(path_effects=_OUTLINE)
    if len(cs.levels):
        texts = ax.clabel(cs, fmt="%g", fontsize=8, inline=True)
        for t in texts:
            t.set_path_effects(_OUTLINE)
    if not label:
        return []
    return [Line2D([], [], color="white", lw=1.4, path_effects=_OUTLINE, label=label)]
