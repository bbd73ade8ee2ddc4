"""The look every figure shares: size, resolution, the cells of a heatmap's axes, theory
overlays, and saving.

Figures are built on `matplotlib.figure.Figure` directly (Agg canvas, no pyplot state), size
6.4 x 4.8 in, constrained layout, saved as PNG at 150 dpi through a temporary file and
`os.replace` so that a reader never sees half a file.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from simlab.engine.records import atomic_write_bytes
from simlab.errors import ConfigError

FIGSIZE = (6.4, 4.8)
DPI = 150
# Overlay colours chosen to stand out on viridis and on white.
THEORY_COLORS = ("tab:red", "tab:orange", "magenta", "tab:cyan", "tab:brown")


def cell_edges(c: Sequence[float], log: bool) -> np.ndarray:
    """Edges (n + 1) of the cells centred on the n coordinates `c` (monotonic).

    Linear: midpoints (c_i + c_{i+1}) / 2, ends c_0 - (c_1 - c_0)/2 and
    c_{n-1} + (c_{n-1} - c_{n-2})/2.
    Log: the same in log c, i.e. geometric means sqrt(c_i c_{i+1}) and ends c_0 sqrt(c_0/c_1),
    c_{n-1} sqrt(c_{n-1}/c_{n-2}).
    A single coordinate gets a cell one decade wide on a log axis (c/sqrt(10), c*sqrt(10)) and
    c -+ |c|/2 on a linear one (-+ 0.5 when c == 0).
    """
    c = np.asarray(c, dtype=float).ravel()
    if c.size == 0:
        raise ValueError("cell_edges: need at least one coordinate")
    if not np.all(np.isfinite(c)):
        raise ValueError(f"cell_edges: coordinates must be finite, got {c}")
    if log and np.any(c <= 0):
        raise ValueError(f"cell_edges: a log axis needs positive coordinates, got {c}")
    t = np.log(c) if log else c
    if t.size == 1:
        half = 0.5 * np.log(10.0) if log else (0.5 * abs(t[0]) if t[0] != 0 else 0.5)
        e = np.array([t[0] - half, t[0] + half])
    else:
        mid = 0.5 * (t[:-1] + t[1:])
        e = np.concatenate([[t[0] - 0.5 * (t[1] - t[0])], mid, [t[-1] + 0.5 * (t[-1] - t[-2])]])
    return np.exp(e) if log else e


def sorted_axis(c, name: str):
    """(sorted coordinates, permutation) for a strictly increasing axis; error on duplicates."""
    c = np.asarray(c, dtype=float).ravel()
    order = np.argsort(c, kind="stable")
    cs = c[order]
    if cs.size > 1 and np.any(np.diff(cs) == 0):
        raise ValueError(f"{name}: coordinates must be distinct, got {c}")
    return cs, order


def new_ax(ax):
    """(figure, axes): those of `ax`, or a new figure of the shared size with one axes."""
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=FIGSIZE, layout="constrained")
    return fig, fig.add_subplot()


DASH_DOT = (0, (5, 1.5, 1, 1.5))


def overlay_theory(ax, theory, default_style: dict, alternate: bool = False) -> None:
    """Theory curves (x, y, label), drawn without touching the autoscaled limits (so they are
    clipped to the data's range); non-finite points are left out. alternate: the second and
    later curves dash-dotted (the first keeps default_style's line style)."""
    for i, item in enumerate(theory or ()):
        tx, ty, label = item
        tx, ty = np.asarray(tx, dtype=float), np.asarray(ty, dtype=float)
        ty = np.where(np.isfinite(ty), ty, np.nan)
        style = dict(default_style) | ({"ls": DASH_DOT} if alternate and i else {})
        style.setdefault("color", THEORY_COLORS[i % len(THEORY_COLORS)])
        ax.plot(tx, ty, label=label, scalex=False, scaley=False, **style)


def finish_map(ax, handles: list, theory, x_label, y_label, title) -> None:
    """The common end of a map (phase_diagram, refined_phase_diagram): the theory overlays
    (the first dashed, the others dash-dotted), one legend of the contour handles and every
    labelled line, the axis labels and the title."""
    overlay_theory(ax, theory, dict(lw=1.8, ls="--"), alternate=True)
    handles = handles + [h for h in ax.get_lines() if not h.get_label().startswith("_")]
    if handles:
        ax.legend(handles=handles, loc="best", fontsize=8, framealpha=0.85)
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    if title:
        ax.set_title(title, fontsize=10)


def centred_colormap(z) -> dict:
    """Colour-map keywords of a diverging map centred on 0: blue below, red above, white at 0."""
    top = float(np.nanmax(np.abs(z))) or 1.0
    return {"cmap": "RdBu_r", "vmin": -top, "vmax": top}


# file suffix -> matplotlib format: the suffix picks the format
FORMATS = {".png": "png", ".pdf": "pdf", ".svg": "svg"}


def figure_format(path, where: str = "--out") -> str:
    """The format the file name asks for (.png, .pdf or .svg); a ConfigError otherwise."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ConfigError(
            f"{where}: {path} must end in {', '.join(FORMATS)} (the suffix picks the format)"
        )
    return FORMATS[suffix]


def save_figure(fig, path) -> Path:
    """Write `fig` to `path` atomically (temporary file in the same folder, then os.replace) in
    the format its suffix names (PNG at 150 dpi, PDF or SVG); the figure is closed (released
    from pyplot if it came from there)."""
    path = Path(path)
    fmt = figure_format(path, "figure")
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format=fmt, dpi=DPI)
        atomic_write_bytes(path, buf.getvalue())
    finally:
        if getattr(fig.canvas, "manager", None) is not None:
            import matplotlib.pyplot as plt

            plt.close(fig)
    return path
