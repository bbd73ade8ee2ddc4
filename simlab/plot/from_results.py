"""A finished sweep -> a figure (`plot_results`, what `simlab plot` draws): a phase diagram
over two axes or a curve with a seed band along one, every other axis fixed at a selected
coordinate (simlab.engine.select: the nearest on the axis's own scale), and every further
dimension of the metric (a stack's layers, heads, ...: Results.metric_dims) at a selected index,
by default its last.

Whether an axis is logarithmic is taken from the sweep's axis space where known, else detected
from the spacing (simlab.engine.select.axis_is_log); the same rule picks the selected
coordinates. The command `simlab plot` is simlab.cli.plot.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

import numpy as np

from simlab.core.metrics import METRICS, STACK_DIM
from simlab.engine import levelset
from simlab.engine.results import take_dims
from simlab.engine.select import axis_is_log, nearest
from simlab.errors import ConfigError
from simlab.plot.axes import save_figure
from simlab.plot.lines import curves, seed_band
from simlab.plot.phase import phase_diagram
from simlab.plot.refined import plot_refined


def _axis_label(results, name: str) -> str:
    """The axis name, with the knobs it drives when they are not just itself."""
    for a in results.meta.get("axes", []) or []:
        if isinstance(a, Mapping) and a.get("name") == name:
            knobs = [k for k in (a.get("knobs") or []) if isinstance(k, str)]
            if knobs and knobs != [name]:
                return f"{name} ({' = '.join(knobs)})"
    return name


def sizes_label(meta: Mapping[str, Any]) -> str:
    """The sizes of a sweep for a title: block kind, d_model, heads, depth, batch x length."""
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


def _check_select(
    results, x: str, y: str | None, select: Mapping[str, Any] | None, dims=()
) -> dict:
    """The plotted axes exist and differ; `select` names other axes, each with a finite
    number (dims: the metrics' further dimensions, named in the message). Returns select as
    {axis: float}."""
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
            extra = f"; dimensions: {', '.join(dims)}" if dims else ""
            raise ConfigError(
                f"select: axis {a!r} not in this sweep; have: {', '.join(names)}{extra}"
            )
        if a in (x, y):
            raise ConfigError(f"select: axis {a!r} is plotted (x or y); it cannot also be fixed")
        try:
            v = float(v)
        except (TypeError, ValueError):
            raise ConfigError(f"select: {a}={v!r} is not a number") from None
        if not np.isfinite(v):
            raise ConfigError(f"select: {a}={v!r} is not finite")
        select[a] = v
    return select


def _select_index(results, x: str, y: str | None, select: Mapping[str, Any] | None, dims=()):
    """Index tuple over the axes (slices for x, y; for the others the coordinate nearest the
    selected value, simlab.engine.select.nearest) and a description of the fixed values."""
    select = _check_select(results, x, y, select, dims)
    idx, fixed = [], []
    for a in results.axes:
        coords = np.asarray(results.axes[a], dtype=float).ravel()
        if a in (x, y):
            idx.append(slice(None))
        elif a in select:
            lo, hi = float(coords.min()), float(coords.max())
            v = select[a]
            if v < lo - 1e-9 * abs(lo) or v > hi + 1e-9 * abs(hi):
                raise ConfigError(
                    f"select: {a}={_fmt(v)} is outside the axis's range [{_fmt(lo)}, {_fmt(hi)}]"
                )
            i = nearest(results, a, v)
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


def _reduce(results, name: str, idx, x: str, y: str | None, dims, what: str):
    """Seed mean of metric `name` at idx, as (len(y), len(x)) or (len(x),), the seed values
    there (the same shape plus a trailing seed axis), and the index chosen along each further
    dimension ([(dim, index), ...]: dims[dim], else the last)."""
    n_axes = len(results.axes)
    arr = np.asarray(results.metrics[name])
    if arr.ndim < n_axes + 1:
        raise ConfigError(
            f"{what} has shape {arr.shape}, expected (*axes, seeds, *dims) with {n_axes} axes"
        )
    arr, chosen = take_dims(arr, results.metric_dims(name), dims, what)
    sub = arr[idx + (slice(None),)]  # remaining dims: x/y in axes order, seeds
    mean = sub.mean(axis=-1)
    if y is not None and list(results.axes).index(y) > list(results.axes).index(x):
        mean, sub = mean.T, np.swapaxes(sub, 0, 1)  # -> (len(y), len(x))
    return mean, sub, chosen


def split_select(results, metrics, select, layer=None):
    """(axis selections, dimension selections) of `select`: a name that is no axis but a further
    dimension of one of `metrics` (Results.metric_dims) selects an index along it. `layer`:
    sugar for a selection of the stack's dimension (STACK_DIM), as `--layer`. A dimension
    selected that none of the metrics has is a ConfigError."""
    have = [d for m in metrics if m is not None for d in results.metric_dims(m)]
    dims = {k: v for k, v in (select or {}).items() if k not in results.axes and k in have}
    axes = {k: v for k, v in (select or {}).items() if k not in dims}
    if layer is not None:
        dims[STACK_DIM] = layer
        if STACK_DIM not in have:
            raise ConfigError(
                f"metric {metrics[0]!r} has no {STACK_DIM} axis; drop the {STACK_DIM}"
            )
    return axes, dims, list(dict.fromkeys(have))


def _tiny_range_note(metric: str, z: np.ndarray, vmin, vmax) -> str:
    """A line for the title when the colour range of z is tiny (< 1e-4) against the metric's
    scale (the width of its registered bounds, else the largest |z|); "" otherwise."""
    if vmin is not None or vmax is not None:
        return ""
    finite = z[np.isfinite(z)]
    if finite.size < 2:
        return ""

    lo, hi = METRICS[metric].bounds if metric in METRICS else (-np.inf, np.inf)
    scale = hi - lo if np.isfinite(hi - lo) else float(np.max(np.abs(finite)))
    width = float(np.ptp(finite))
    if scale > 0 and width < 1e-4 * scale:
        return f"colour range only {width:.2g} wide ({_fmt(finite.min())}..{_fmt(finite.max())})"
    return ""


def _check_levels(cz: np.ndarray, contour: str, levels, warn) -> None:
    """Warn when no contour level lies inside the contour metric's range (nothing is drawn)."""
    if levels is None:
        return
    finite = cz[np.isfinite(cz)]
    if not finite.size:
        return
    lo, hi = float(finite.min()), float(finite.max())
    if not any(lo <= v <= hi for v in levels):
        message = (
            f"contour levels {', '.join(_fmt(v) for v in levels)} are outside the range of "
            f"{contour} ({_fmt(lo)}..{_fmt(hi)}): no contour line is drawn"
        )
        if warn is None:
            import warnings

            warnings.warn(message, stacklevel=3)
        else:
            warn(message)


def checkpoint_label(meta: Mapping[str, Any]) -> str:
    """For a sweep of trained layers (a [checkpoint] table): the model (its folder, or the
    repository of a HuggingFace cache snapshot), its architecture, the layers and the input
    kind (and a text kind's corpus); "" for drawn weights."""
    cfg = meta.get("config") if isinstance(meta, Mapping) else None
    ck = cfg.get("checkpoint") if isinstance(cfg, Mapping) else None
    if not isinstance(ck, Mapping):
        return ""
    parts = PurePath(str(ck.get("path") or "?")).parts
    repo = [p for p in parts if p.startswith("models--")]
    model = repo[-1][len("models--") :].replace("--", "/") if repo else (parts or ("?",))[-1]
    arch = f" ({ck['architecture']})" if ck.get("architecture") else ""
    block = cfg.get("block") if isinstance(cfg.get("block"), Mapping) else {}
    first, depth = int(ck.get("layer", 0)), int(block.get("depth") or 1)
    layers = f"layer {first}" if depth == 1 else f"layers {first}-{first + depth - 1}"
    inputs = cfg.get("inputs") if isinstance(cfg.get("inputs"), Mapping) else {}
    kind = str(inputs.get("kind", "?"))
    if kind == "text":
        kind += f" ({PurePath(str(inputs.get('corpus', 'stdlib'))).name})"
    return f"trained {model}{arch}, {layers}, on {kind} inputs"


def _default_title(results, z_label: str, n_seeds: int, fixed: list[str]) -> str:
    """The metric and seed count, then the checkpoint (trained layers), the sizes and the fixed
    axes."""
    head = f"{z_label}, mean of {n_seeds} seed{'s' if n_seeds != 1 else ''}"
    trained = checkpoint_label(results.meta)
    sub = ", ".join(p for p in (sizes_label(results.meta), ", ".join(fixed)) if p)
    return "\n".join(p for p in (head, trained, sub) if p)


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
    vmin=None,
    vmax=None,
    warn=None,
    band="ci",
    level=0.95,
    x_log=None,
    y_log=None,
):
    """Plot one metric of a finished sweep.

    2-D (y given): phase diagram of the seed mean of `metric` over axes x and y; 1-D (y None):
    the seed mean against x with a band (simlab.plot.lines.seed_band): band "ci" (default) the
    Student-t confidence interval of the mean at `level`, "std" -+1 std (ddof=1), "sem" -+1
    standard error, "none"; no band for a single seed.  Every other axis is fixed by
    select={axis: value} (the nearest coordinate on the axis's own scale,
    simlab.engine.select.nearest); an unselected extra axis with more than one value is an
    error. A metric's further dimensions (Results.metric_dims: a stack's layers, heads, ...)
    are fixed by select={dim: index} too (default: the last index; `layer` is sugar for
    select={"layer": index}).  `contour`: the name of a second metric drawn as contour lines
    at `contour_levels` (2-D only).  The default title names the metric (and the index of each
    further dimension), the sizes from meta['config'] (block kind, d_model, heads, batch x
    length), the fixed axes and the number of seeds, and says so when a phase diagram's colour
    range is tiny against the metric's own scale (its registered bounds; rounding noise would
    fill the colour bar): `vmin`/`vmax` fix the colour range. A select value outside an axis's
    range is an error; contour levels outside the contour metric's range are reported through
    `warn` (default warnings.warn).
    x_log / y_log: a logarithmic axis (None: the axis's recorded space, or its spacing).
    Saves to `out` when given.  User errors raise ConfigError.  Returns (fig, ax).
    A refined sweep is drawn by simlab.plot.refined.plot_refined (its cells at their own size,
    its boundary and band; no `select`).
    """
    _check_metric(results, metric)
    if contour is not None:
        _check_metric(results, contour, "contour metric")
    select, dims, have = split_select(results, [metric, contour], select, layer)
    if levelset.is_refined(results):
        if select:
            raise ConfigError("select: a refined sweep has no other axes to fix")
        return plot_refined(
            results,
            x=x,
            y=y,
            metric=metric,
            select=dims,
            contour=contour,
            contour_levels=contour_levels,
            theory=theory,
            title=title,
            out=out,
        )
    arr = _check_metric(results, metric)
    carr = _check_metric(results, contour, "contour metric") if contour is not None else None
    if contour is not None and y is None:
        raise ConfigError("contour lines need a 2-D plot (give y)")
    if contour is None and contour_levels is not None:
        raise ConfigError("contour levels given without a contour metric")
    idx, fixed = _select_index(results, x, y, select, have)
    mean, sub, chosen = _reduce(results, metric, idx, x, y, dims, f"metric {metric!r}")
    n_seeds = arr.shape[len(results.axes)]

    z_label = metric + (f" ({', '.join(f'{d} {i}' for d, i in chosen)})" if chosen else "")
    if title is None:
        title = _default_title(results, z_label, n_seeds, fixed)
    xc = np.asarray(results.axes[x], dtype=float)
    if y is None:
        try:
            mean, lohi, what = seed_band(sub, band, level)
        except ValueError as e:
            raise ConfigError(f"--band: {e}") from None
        label = f"{z_label} ({what})"
        fig, ax = curves(
            xc,
            {label: (mean, lohi)},
            x_label=_axis_label(results, x),
            y_label=metric,
            x_log=axis_is_log(results, x) if x_log is None else x_log,
            title=title,
            theory=theory,
        )
    else:
        cz = None
        if carr is not None:
            cz, _, _ = _reduce(results, contour, idx, x, y, dims, f"contour metric {contour!r}")
            _check_levels(cz, contour, contour_levels, warn)
        note = _tiny_range_note(metric, mean, vmin, vmax)
        if note:
            title = f"{title}\n{note}"
        fig, ax = phase_diagram(
            xc,
            np.asarray(results.axes[y], dtype=float),
            mean,
            x_label=_axis_label(results, x),
            y_label=_axis_label(results, y),
            z_label=z_label + " (seed mean)",
            x_log=axis_is_log(results, x) if x_log is None else x_log,
            y_log=axis_is_log(results, y) if y_log is None else y_log,
            contour=cz,
            contour_levels=contour_levels,
            contour_label=contour,
            theory=theory,
            title=title,
            vmin=vmin,
            vmax=vmax,
        )
    if out is not None:
        save_figure(fig, out)
    return fig, ax
