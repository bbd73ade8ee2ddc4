"""Curves: lines with shaded bands (a seed confidence interval, std or sem, or any (lo, hi)
range) and theory overlays."""

from __future__ import annotations

import numpy as np

from simlab.engine.results import seed_ci
from simlab.engine.select import is_log_spaced
from simlab.plot.axes import new_ax, overlay_theory

# What a band around a seed mean shows (`seed_band`; `simlab plot --band`)
BANDS = ("ci", "std", "sem", "none")
SYMLOG_LINTHRESH = 1e-3  # y_log "symlog": linear for |y| below it, logarithmic beyond


def mark_linear_band(ax, linthresh: float = SYMLOG_LINTHRESH):
    """Shade and label the band |y| < linthresh where a symlog axis is linear (between its
    logarithmic decades), so that a reader does not take its spacing for a decade's; returns
    the shaded patch."""
    from matplotlib.transforms import blended_transform_factory

    band = ax.axhspan(-linthresh, linthresh, color="0.55", alpha=0.12, lw=0, zorder=0)
    ax.text(
        0.995,
        -linthresh,
        f"linear for |y| < {linthresh:g}",
        transform=blended_transform_factory(ax.transAxes, ax.transData),
        ha="right",
        va="bottom",
        fontsize=6.5,
        color="0.3",
        zorder=0,
    )
    return band


def seed_band(values, band: str = "ci", level: float = 0.95):
    """(mean, (lo, hi) or None, label) of seed replicas `values` (seeds on the last axis):
    "ci" the Student-t confidence interval of the mean at `level` (simlab.engine.results.seed_ci),
    "std" mean -+ 1 standard deviation (ddof 1), "sem" -+ 1 standard error, "none" no band. No
    band for a single seed. The label says what the band is, for a legend or an axis."""

    if band not in BANDS:
        raise ValueError(f"band {band!r} is not one of {', '.join(BANDS)}")
    v = np.asarray(values, dtype=float)
    n = v.shape[-1]
    mean = v.mean(axis=-1)
    if band == "none" or n < 2:
        return mean, None, "seed mean"
    if band == "ci":
        return mean, seed_ci(v, -1, level), f"seed mean \u00b1 {100 * level:g}% CI, t, {n} seeds"
    s = v.std(axis=-1, ddof=1) / (np.sqrt(n) if band == "sem" else 1.0)
    return mean, (mean - s, mean + s), f"seed mean \u00b1 1 {band}, {n} seeds"


def _band(mean: np.ndarray, band) -> tuple[np.ndarray, np.ndarray] | None:
    """(lo, hi) of a band: None (no band), a pair (lo, hi), a (2, *mean.shape) array, or a
    half-width s broadcast to mean -+ s."""
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
    e.g. one std) or a pair (lo, hi).  x_log None = auto; y_log True (log) or "symlog" (log beyond
    +-1e-3, linear through 0, for signed values; that band shaded and labelled).  theory: list
    of (x_arr, y_arr, label) dashed curves that do not change the autoscaled limits.  styles:
    label -> matplotlib line keywords (color, ls) for that series.  Returns (fig, ax).
    """
    xs = np.asarray(x, dtype=float).ravel()
    order = np.argsort(xs, kind="stable")
    xs = xs[order]
    x_log = is_log_spaced(xs) if x_log is None else bool(x_log)
    fig, ax = new_ax(ax)
    if x_log:
        ax.set_xscale("log")
    if y_log == "symlog":  # log beyond +-linthresh, linear through 0 (signed values)
        ax.set_yscale("symlog", linthresh=SYMLOG_LINTHRESH, linscale=0.5)
        mark_linear_band(ax)
    elif y_log:
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
    overlay_theory(ax, theory, dict(lw=1.6, ls="--"))
    ax.grid(True, which="major", alpha=0.3)
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    if len(ax.get_legend_handles_labels()[0]):
        ax.legend(fontsize=8, framealpha=0.85)
    if title:
        ax.set_title(title, fontsize=10)
    return fig, ax


def factored_legend(ax, lines: dict, styles: dict, color: str, style: str, **kw):
    """A legend with one entry per colour and one per line style instead of one per line:
    `lines` maps each line's label to its labels by dimension (e.g. {"width": "d 64", "mlp":
    "BERT MLP"}), `styles` each line's label to its keywords ("color", "ls"); `color` and
    `style` name the dimensions the colour and the line style show (the style entries drawn
    grey). The lines' own entries are left out, every other (theory overlays) kept after.
    Returns the legend."""
    from matplotlib.lines import Line2D

    colors = {dims[color]: styles[k]["color"] for k, dims in lines.items()}
    dashes = {dims[style]: styles[k]["ls"] for k, dims in lines.items()}
    handles = [Line2D([], [], color=c, marker="o", ms=3.5, lw=1.6) for c in colors.values()]
    handles += [Line2D([], [], color="0.35", ls=ls, lw=1.6) for ls in dashes.values()]
    labels = [*map(str, colors), *map(str, dashes)]
    for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
        if label not in lines:
            handles.append(h)
            labels.append(label)
    return ax.legend(handles, labels, **kw)
