"""One look for every figure: phase diagrams (heatmaps) and curves, with theory overlays.

Figures are built on `matplotlib.figure.Figure` directly (Agg canvas, no pyplot state), size
6.4 x 4.8 in, constrained layout, saved as PNG at 150 dpi through a temporary file and
`os.replace` so that a reader never sees half a file.

Phase diagrams draw z with `pcolormesh` on cell edges from `cell_edges`: arithmetic midpoints
between neighbouring coordinates on linear axes, geometric midpoints (arithmetic in log c) on
log axes, the outer edges extrapolated half a cell.  Whether an axis is logarithmic is taken
from the sweep's axis space where known, else detected from the spacing (`is_log_spaced`).

The command `simlab plot` is simlab.cli.plot.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import patheffects
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from simlab.engine.results import atomic_write_bytes
from simlab.errors import ConfigError

FIGSIZE = (6.4, 4.8)
DPI = 150
# Overlay colours chosen to stand out on viridis and on white.
THEORY_COLORS = ("tab:red", "tab:orange", "magenta", "tab:cyan", "tab:brown")
_OUTLINE = [patheffects.withStroke(linewidth=2.6, foreground="black")]


# --------------------------------------------------------------------------------- axes
def is_log_spaced(c: Sequence[float]) -> bool:
    """True when the coordinates look geometric rather than arithmetic.

    Rule: all coordinates positive and finite, and
      n >= 3: the steps in log c are more uniform than the steps in c (coefficient of variation
              of |diff(log c)| below that of |diff(c)|) and nearly constant (CV < 0.25), so a
              hand-written list like 0.1, 0.3, 1, 3, 10 counts as log;
      n == 2: the two values differ by a factor of 10 or more;
      n <= 1: never.
    """
    c = np.asarray(c, dtype=float).ravel()
    if c.size < 2 or not np.all(np.isfinite(c)) or np.any(c <= 0):
        return False
    c = np.sort(c)
    if c.size == 2:
        return bool(c[1] / c[0] >= 10.0)

    def cv(d):
        d = np.abs(d)
        m = d.mean()
        return np.inf if m == 0 else float(d.std() / m)

    cv_log, cv_lin = cv(np.diff(np.log(c))), cv(np.diff(c))
    return cv_log < 0.25 and cv_log < cv_lin


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


def _sorted_axis(c, name: str):
    """(sorted coordinates, permutation) for a strictly increasing axis; error on duplicates."""
    c = np.asarray(c, dtype=float).ravel()
    order = np.argsort(c, kind="stable")
    cs = c[order]
    if cs.size > 1 and np.any(np.diff(cs) == 0):
        raise ValueError(f"{name}: coordinates must be distinct, got {c}")
    return cs, order


def _new_ax(ax):
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=FIGSIZE, layout="constrained")
    return fig, fig.add_subplot()


def _overlay_theory(ax, theory, default_style: dict) -> None:
    """Theory curves (x, y, label), drawn without touching the autoscaled limits (so they are
    clipped to the data's range); non-finite points are left out."""
    for i, item in enumerate(theory or ()):
        tx, ty, label = item
        tx, ty = np.asarray(tx, dtype=float), np.asarray(ty, dtype=float)
        ty = np.where(np.isfinite(ty), ty, np.nan)
        style = dict(default_style)
        style.setdefault("color", THEORY_COLORS[i % len(THEORY_COLORS)])
        ax.plot(tx, ty, label=label, scalex=False, scaley=False, **style)


# --------------------------------------------------------------------------------- figures
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
    axes range.  Unsorted coordinates are sorted together with z.  Returns (fig, ax).
    """
    xs, xo = _sorted_axis(x, "x")
    ys, yo = _sorted_axis(y, "y")
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

    fig, ax = _new_ax(ax)
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
        c = c[np.ix_(yo, xo)]
        if min(c.shape) < 2:
            warnings.warn(
                "phase_diagram: contour lines need at least 2 x 2 points; skipped", stacklevel=2
            )
        elif not np.any(np.isfinite(c)):
            warnings.warn(
                "phase_diagram: contour array has no finite values; skipped", stacklevel=2
            )
        else:
            levels = None if contour_levels is None else np.sort(np.asarray(contour_levels, float))
            style = dict(colors="white", linewidths=1.4, linestyles="solid")
            cs = ax.contour(xs, ys, np.ma.masked_invalid(c), levels=levels, **style)
            cs.set(path_effects=_OUTLINE)
            if len(cs.levels):
                texts = ax.clabel(cs, fmt="%g", fontsize=8, inline=True)
                for t in texts:
                    t.set_path_effects(_OUTLINE)
            if contour_label:
                handles.append(
                    Line2D(
                        [], [], color="white", lw=1.4, path_effects=_OUTLINE, label=contour_label
                    )
                )
    _overlay_theory(ax, theory, dict(lw=1.8, ls="--"))
    handles += [h for h in ax.get_lines() if not h.get_label().startswith("_")]
    if handles:
        ax.legend(handles=handles, loc="best", fontsize=8, framealpha=0.85)
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    if title:
        ax.set_title(title, fontsize=10)
    return fig, ax


def _band(mean: np.ndarray, band) -> tuple[np.ndarray, np.ndarray] | None:
    if band is None:
        return None
    if isinstance(band, (tuple, list)):
        if len(band) != 2:
            raise ValueError("curves: a band given as a tuple must be (lo, hi)")
        lo, hi = (np.broadcast_to(np.asarray(b, dtype=float), mean.shape) for b in band)
        return lo, hi
    b = np.asarray(band, dtype=float)
    if b.shape == (2,) + mean.shape and mean.shape != (2,):
        return b[0], b[1]
    b = np.broadcast_to(b, mean.shape)
    return mean - b, mean + b


def curves(
    x,
    series,
    *,
    x_label,
    y_label,
    x_log=None,
    y_log=False,
    title=None,
    theory=None,
    ax=None,
    styles=None,
):
    """Lines with shaded bands.

    series: dict label -> (mean, band) where band is None (no band), an array s (band mean -+ s,
    e.g. one std) or a pair (lo, hi).  x_log None = auto.  theory: list of (x_arr, y_arr, label)
    dashed curves that do not change the autoscaled limits.  styles: label -> matplotlib line
    keywords (color, ls) for that series.  Returns (fig, ax).
    """
    xs = np.asarray(x, dtype=float).ravel()
    order = np.argsort(xs, kind="stable")
    xs = xs[order]
    x_log = is_log_spaced(xs) if x_log is None else bool(x_log)
    fig, ax = _new_ax(ax)
    if x_log:
        ax.set_xscale("log")
    if y_log:
        ax.set_yscale("log")
    for label, item in series.items():
        mean, band = item
        mean = np.asarray(mean, dtype=float).ravel()
        if mean.shape != xs.shape:
            raise ValueError(f"curves: series {label!r} has {mean.size} points, x has {xs.size}")
        b = _band(mean, band)
        mean = mean[order]
        style = {"marker": "o", "ms": 3.5, "lw": 1.6, **((styles or {}).get(label, {}))}
        (line,) = ax.plot(xs, mean, label=str(label), **style)
        if b is not None:
            lo, hi = (np.ravel(v)[order] for v in b)
            ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.22, lw=0)
    _overlay_theory(ax, theory, dict(lw=1.6, ls="--"))
    ax.grid(True, which="major", alpha=0.3)
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    if len(ax.get_legend_handles_labels()[0]):
        ax.legend(fontsize=8, framealpha=0.85)
    if title:
        ax.set_title(title, fontsize=10)
    return fig, ax


def save_figure(fig, path) -> Path:
    """Write `fig` as a PNG at 150 dpi to `path` atomically (temporary file in the same folder,
    then os.replace); the figure is closed (released from pyplot if it came from there)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=DPI)
        atomic_write_bytes(path, buf.getvalue())
    finally:
        if getattr(fig.canvas, "manager", None) is not None:
            import matplotlib.pyplot as plt

            plt.close(fig)
    return path


# --------------------------------------------------------------------------------- Results
def _axis_label(results, name: str) -> str:
    for a in results.meta.get("axes", []) or []:
        if isinstance(a, Mapping) and a.get("name") == name:
            knobs = [k for k in (a.get("knobs") or []) if isinstance(k, str)]
            if knobs and knobs != [name]:
                return f"{name} ({' = '.join(knobs)})"
    return name


def _axis_log(results, name: str):
    try:
        space = results.axis_space(name)
    except (KeyError, TypeError, AttributeError):
        return None
    return {"log": True, "lin": False}.get(space)


def sizes_label(meta: Mapping[str, Any]) -> str:
    cfg = meta.get("config") if isinstance(meta, Mapping) else None
    if not isinstance(cfg, Mapping):
        return ""
    block = cfg.get("block") if isinstance(cfg.get("block"), Mapping) else {}
    inputs = cfg.get("inputs") if isinstance(cfg.get("inputs"), Mapping) else {}
    parts = []
    if block.get("kind") is not None:
        parts.append(str(block["kind"]))
    if block.get("d_model") is not None:
        parts.append(f"d={block['d_model']}")
    if block.get("n_heads") is not None:
        parts.append(f"H={block['n_heads']}")
    if block.get("depth") not in (None, 1):
        parts.append(f"depth={block['depth']}")
    b, t = inputs.get("batch"), inputs.get("length")
    if b is not None and t is not None:
        parts.append(f"B\u00d7T={b}\u00d7{t}")
    elif t is not None:
        parts.append(f"T={t}")
    return ", ".join(parts)


def _fmt(v) -> str:
    return f"{float(v):.4g}"


def _check_metric(results, name: str, what: str = "metric") -> np.ndarray:
    if name not in results.metrics:
        raise ConfigError(
            f"{what} {name!r} not in this sweep; have: "
            f"{', '.join(sorted(results.metrics)) or '(none)'}"
        )
    return np.asarray(results.metrics[name])


def _select_index(results, x: str, y: str | None, select: Mapping[str, Any] | None):
    """Index tuple over the axes (slices for x, y; nearest coordinate for the others) and a
    description of the fixed values."""
    names = list(results.axes)
    for role, a in (("x", x), ("y", y)):
        if a is not None and a not in results.axes:
            raise ConfigError(
                f"{role} axis {a!r} not in this sweep; have: {', '.join(names) or '(none)'}"
            )
    if y is not None and y == x:
        raise ConfigError(f"x and y are the same axis {x!r}")
    select = dict(select or {})
    for a, v in select.items():
        if a not in results.axes:
            raise ConfigError(f"select: axis {a!r} not in this sweep; have: {', '.join(names)}")
        if a in (x, y):
            raise ConfigError(f"select: axis {a!r} is plotted (x or y); it cannot also be fixed")
        try:
            v = float(v)
        except (TypeError, ValueError):
            raise ConfigError(f"select: {a}={v!r} is not a number") from None
        if not np.isfinite(v):
            raise ConfigError(f"select: {a}={v!r} is not finite")
        select[a] = v
    idx, fixed = [], []
    for a in names:
        coords = np.asarray(results.axes[a], dtype=float).ravel()
        if a in (x, y):
            idx.append(slice(None))
        elif a in select:
            i = int(np.argmin(np.abs(coords - select[a])))
            idx.append(i)
            fixed.append(f"{a}={_fmt(coords[i])}")
        elif coords.size == 1:
            idx.append(0)
        else:
            raise ConfigError(
                f"axis {a!r} has {coords.size} values "
                f"({', '.join(_fmt(c) for c in coords)}); fix one with "
                f"select={{{a!r}: value}} (CLI: --select {a}=VALUE)"
            )
    return tuple(idx), fixed


def _reduce(results, arr: np.ndarray, idx, x: str, y: str | None, layer, what: str):
    """Seed mean and std (ddof=1) of arr at idx, as (len(y), len(x)) or (len(x),), plus the
    layer used (None when arr has no layer axis)."""
    n_axes = len(results.axes)
    if arr.ndim == n_axes + 2:
        n_layers = arr.shape[-1]
        l = n_layers - 1 if layer is None else int(layer)
        if not -n_layers <= l < n_layers:
            raise ConfigError(f"layer {layer} out of range for {what} with {n_layers} layers")
        l %= n_layers
        arr = arr[..., l]
    elif arr.ndim == n_axes + 1:
        l = None
    else:
        raise ConfigError(
            f"{what} has shape {arr.shape}, expected (*axes, seeds[, layer]) with {n_axes} axes"
        )
    sub = arr[idx + (slice(None),)]  # remaining dims: x/y in axes order, seeds
    mean = sub.mean(axis=-1)
    std = sub.std(axis=-1, ddof=1) if sub.shape[-1] > 1 else np.zeros_like(mean)
    if y is not None and list(results.axes).index(y) > list(results.axes).index(x):
        mean, std = mean.T, std.T  # -> (len(y), len(x))
    return mean, std, l


def plot_results(
    results,
    *,
    x,
    y=None,
    metric,
    layer=None,
    select=None,
    contour=None,
    contour_levels=None,
    theory=None,
    title=None,
    out=None,
):
    """Plot one metric of a finished sweep.

    2-D (y given): phase diagram of the seed mean of `metric` over axes x and y; 1-D (y None):
    the seed mean against x with a -+1 std band (ddof=1; no band for a single seed).  Every
    other axis is fixed by select={axis: value} (nearest coordinate); an unselected extra axis
    with more than one value is an error.  For metrics with a layer axis `layer` picks one
    (default: the last).  `contour`: the name of a second metric drawn as contour lines at
    `contour_levels` (2-D only).  The default title names the metric, the sizes from
    meta['config'] (block kind, d_model, heads, batch x length), the fixed axes and the number of
    seeds.  Saves to `out` when given.  User errors raise ConfigError.  Returns (fig, ax).
    """
    arr = _check_metric(results, metric)
    carr = _check_metric(results, contour, "contour metric") if contour is not None else None
    if contour is not None and y is None:
        raise ConfigError("contour lines need a 2-D plot (give y)")
    if contour is None and contour_levels is not None:
        raise ConfigError("contour levels given without a contour metric")
    if layer is not None and arr.ndim != len(results.axes) + 2:
        raise ConfigError(f"metric {metric!r} has no layer axis; drop the layer")
    idx, fixed = _select_index(results, x, y, select)
    mean, std, l = _reduce(results, arr, idx, x, y, layer, f"metric {metric!r}")
    n_seeds = arr.shape[len(results.axes)]

    z_label = metric + ("" if l is None else f" (layer {l})")
    if title is None:
        head = f"{z_label}, mean of {n_seeds} seed{'s' if n_seeds != 1 else ''}"
        sub = ", ".join(p for p in (sizes_label(results.meta), ", ".join(fixed)) if p)
        title = head + (f"\n{sub}" if sub else "")
    xc = np.asarray(results.axes[x], dtype=float)
    if y is None:
        band = std if n_seeds > 1 else None
        label = z_label + (" (seed mean \u00b1 1 std)" if band is not None else " (seed mean)")
        fig, ax = curves(
            xc,
            {label: (mean, band)},
            x_label=_axis_label(results, x),
            y_label=metric,
            x_log=_axis_log(results, x),
            title=title,
            theory=theory,
        )
    else:
        cz = None
        if carr is not None:
            c_layer = layer if (layer is not None and carr.ndim == len(results.axes) + 2) else None
            cz, _, _ = _reduce(results, carr, idx, x, y, c_layer, f"contour metric {contour!r}")
        fig, ax = phase_diagram(
            xc,
            np.asarray(results.axes[y], dtype=float),
            mean,
            x_label=_axis_label(results, x),
            y_label=_axis_label(results, y),
            z_label=z_label + " (seed mean)",
            x_log=_axis_log(results, x),
            y_log=_axis_log(results, y),
            contour=cz,
            contour_levels=contour_levels,
            contour_label=contour,
            theory=theory,
            title=title,
        )
    if out is not None:
        save_figure(fig, out)
    return fig, ax
