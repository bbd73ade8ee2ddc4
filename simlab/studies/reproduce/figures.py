"""The figure types of `simlab reproduce`, one function per [[figures]] `kind`, registered in
FIGURE_TYPES (docs/extending.md has a worked example):

  heatmap  one phase diagram per metric of `metrics` over axes `x` and `y` (x_transform
           "inverse" plots 1/x); optional `contour` metric and `contour_levels` drawn over every
           map but its own, `theory` overlays (overlays.THEORY), `diverging` (metrics drawn
           with a colour map centred on 0, for signed quantities such as a gain); file
           "<config>_<metric>.png".
  curves   lines with seed bands: either `metrics` against axis `x` (the other axes fixed by
           `select`: the coordinate nearest a value, simlab.engine.select.nearest, or "first" /
           "last"), all in one figure `file`, or with `group` one line per value of that axis;
           `per_metric = true` makes one figure per metric ("<config>_<metric>.png");
           x = "layer" plots a stack's per-layer metrics; [[figures.series]] tables give each
           line its own `config`, `x` (or `x_metric`: the seed mean of another metric as x),
           `metric`, `select` and `label`; `theory`: names of overlays.CURVE_THEORY drawn dashed
           over the lines (claim 7 over the depth stacks).
  variants one figure per metric of `metrics` against axis `x`, one line per variant sweep
           (simlab.studies.reproduce.experiments): colour from the variant dimension `color`,
           line style from `style` (default: the first and second dimensions); `theory` =
           {metric: name of overlays.VARIANT_THEORY} overlays a closed form per line;
           `variants` (variant names) draws only those sweeps; `x_log` (default: when x is
           log-spaced), `y_log` (true, or "symlog" for signed values); file `file` (a template with
           {config} and {metric}), default "{config}_{metric}.png".
  refined  one refined phase diagram per metric of `metrics` over the refined axes `x` and `y`
           of a sweep with [refine] (simlab.plot.refined: cells at their own size, the
           refinement's boundary and its band over seeds), `diverging` as heatmap's, optional
           `contour` and
           `contour_levels`, `theory` overlays (overlays.THEORY on the finest lattice); file
           "<config>_<metric>.png".
  boundary a refined sweep's boundary as a curve: for each finest coordinate of `x`, the `y`
           where the refinement's metric crosses its level (seed mean, with the band's
           crossings as a shaded range), `theory` overlays, and in the title the largest
           |y / y_theory - 1| of the first overlay; file `file`.
  script   a figure an experiment script draws from committed data (no sweep; registered by
           simlab.studies.reproduce.scripted).

The band of `curves` and `variants`: `band = true` (default) -+ 1 seed std, `"ci"` the 95%
Student-t interval of the seed mean (simlab.engine.results.seed_ci), `false` none.
Titles may use {<axis>} (the selected coordinate) and {spread} (`spread_along`: the largest
change of `metric` along that axis, over all seeds).

Experiments (Godey, de la Clergerie & Sagot 2024, "Anisotropy Is Inherent to Self-Attention
in Transformers", section on untrained blocks, and the mechanism of docs/design.md): paper,
mechanism, temp_corr, qknorm, depth, width (experiments/*.toml).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from simlab import plot
from simlab.engine import levelset
from simlab.engine.results import Results
from simlab.engine.select import nearest
from simlab.errors import ConfigError
from simlab.studies.reproduce.experiments import figure_specs
from simlab.studies.reproduce.overlays import CURVE_THEORY, THEORY, VARIANT_THEORY

if TYPE_CHECKING:
    from simlab.studies.reproduce.run import Run


def select_indices(res: Results, select: dict | None) -> dict[str, int]:
    """Axis -> index for select = {axis: value | "first" | "last"}: the first or last
    coordinate, or the one nearest the value on the axis's own scale (simlab.engine.select)."""
    out = {}
    for axis, value in (select or {}).items():
        if axis not in res.axes:
            raise ConfigError(
                f"figures.select: {axis!r} is not an axis; axes: {', '.join(res.axes)}"
            )
        if value == "first":
            out[axis] = 0
        elif value == "last":
            out[axis] = len(res.axes[axis]) - 1
        elif isinstance(value, numbers.Real) and not isinstance(value, bool):
            out[axis] = nearest(res, axis, value)
        else:
            raise ConfigError(
                f"figures.select.{axis}: {value!r} is not a number, 'first' or 'last'"
            )
    return out


def _cut(res: Results, metric: str, x: str, select: dict | None, stat: str):
    """The seed mean (stat "mean") or std of `metric` along axis x (or "layer"), the other
    axes at `select`."""
    arr = getattr(res, stat)(metric)  # (*axes[, layer])
    idx = select_indices(res, select)
    names = list(res.axes)
    sl = tuple(slice(None) if (a == x or a not in idx) else idx[a] for a in names)
    return arr[sl]


def _band(res: Results, metric: str, x: str, select: dict | None, band):
    """The band of a line: -+ 1 std (band true), the 95% t interval (lo, hi) ("ci"), or None."""
    if band == "ci":
        lo, hi = res.ci(metric)
        idx = select_indices(res, select)
        sl = tuple(slice(None) if (a == x or a not in idx) else idx[a] for a in res.axes)
        return lo[sl], hi[sl]
    return _cut(res, metric, x, select, "std") if band else None


def _band_label(band) -> str:
    return "seed mean +- 95% CI" if band == "ci" else "seed mean +- 1 std"


def _format(text: str, res: Results, fig: dict, **values) -> str:
    chosen = select_indices(res, fig.get("select"))
    values.update({a: f"{res.axes[a][i]:.3g}" for a, i in chosen.items()})
    if "spread_along" in fig:
        a = list(res.axes).index(fig["spread_along"])
        m = res[fig["metric"]]
        values["spread"] = float(np.max(np.abs(m - np.take(m, [0], axis=a))))
    return text.format(**values)


def heatmap(r: Run, name: str, fig: dict) -> list[Path]:
    res, files = r.sweep(name), []
    x, y = fig["x"], fig["y"]
    inverse = fig.get("x_transform") == "inverse"
    overlays = [THEORY[t](res) for t in fig.get("theory", [])]
    transpose = list(res.axes).index(x) < list(res.axes).index(y)  # z is (len(y), len(x))
    for m in fig["metrics"]:
        c = fig.get("contour") if fig.get("contour") != m else None
        path = r.out / f"{name}_{m}.png"
        title = r.title(res, f"{m}: {_format(fig.get('title', ''), res, fig)}")
        diverging = m in fig.get("diverging", ())
        if fig.get("select") or not (
            inverse or overlays or diverging or "x_label" in fig or "y_label" in fig
        ):
            plot.plot_results(
                res,
                x=x,
                y=y,
                metric=m,
                select=fig.get("select"),
                x_log=fig.get("x_log"),
                y_log=fig.get("y_log"),
                contour=c,
                contour_levels=fig.get("contour_levels") if c else None,
                title=title,
                out=path,
            )
        else:
            z, cz = res.mean(m), None if c is None else res.mean(c)
            if transpose:
                z, cz = z.T, None if cz is None else cz.T
            f, _ = plot.phase_diagram(
                1.0 / res.axes[x] if inverse else res.axes[x],
                res.axes[y],
                z,
                x_label=fig.get("x_label", x),
                y_label=fig.get("y_label", y),
                z_label=f"{m} (seed mean)",
                x_log=fig.get("x_log"),
                y_log=fig.get("y_log"),
                contour=cz,
                contour_levels=fig.get("contour_levels") if c else None,
                contour_label=c,
                theory=overlays or None,
                title=title,
                **(plot.centred_colormap(z) if diverging else {}),
            )
            plot.save_figure(f, path)
        files.append(path)
    return files


def curves(r: Run, name: str, fig: dict) -> list[Path]:
    if "series" in fig:
        return [_series_figure(r, name, fig)]
    res = r.sweep(name)
    x, band, metrics = fig["x"], fig.get("band", True), fig["metrics"]
    x_values = np.arange(1, res[metrics[0]].shape[-1] + 1) if x == "layer" else res.axes[x]
    groups = [None] if "group" not in fig else list(res.axes[fig["group"]])
    files = []
    for ms in [[m] for m in metrics] if fig.get("per_metric") else [metrics]:
        series, lines = {}, []  # lines: (label, metric, select) of each series
        for m in ms:
            for value in groups:
                select, label = dict(fig.get("select", {})), m
                if value is not None:
                    select[fig["group"]] = value
                    label = f"{fig['group']} = {value:g}"
                lines.append((label, m, select))
                series[label] = (
                    _cut(res, m, x, select, "mean"),
                    _band(res, m, x, select, band),
                )
        y_label = fig.get("y_label", f"{ms[0] if len(ms) == 1 else 'value'} ({_band_label(band)})")
        what = _format(fig.get("title", ""), res, fig, metric=ms[0])
        f, ax = plot.curves(
            x_values,
            series,
            x_label=fig.get("x_label", x),
            y_label=y_label,
            x_log=fig.get("x_log"),
            title=r.title(res, what),
        )
        _curve_theory(ax, res, fig, lines, name)
        files.append(plot.save_figure(f, r.out / fig.get("file", f"{name}_{ms[0]}.png")))
    return files


def _curve_theory(ax, res: Results, fig: dict, lines: list, name: str) -> None:
    """fig["theory"]: CURVE_THEORY names, drawn dashed in the colour of each (label, metric,
    select) line they have a curve for."""
    colors = {ln.get_label(): ln.get_color() for ln in ax.get_lines()}
    drawn = None
    for t in fig.get("theory", []):
        if t not in CURVE_THEORY:
            raise ConfigError(
                f"{name}.toml: figures.theory: {t!r} is not one of "
                f"{', '.join(map(repr, CURVE_THEORY))}"
            )
        for label, m, select in lines:
            curve = CURVE_THEORY[t](res, m, select)
            if curve is not None:
                ax.plot(
                    curve[0],
                    curve[1],
                    ls="--",
                    lw=1.3,
                    color=colors.get(label, "k"),
                    label=None if drawn else curve[2],
                )
                drawn = curve[2]
    if drawn:
        ax.legend(fontsize=8, framealpha=0.85)


def _series_figure(r: Run, name: str, fig: dict) -> Path:
    """One figure, one line per [[figures.series]] table (each from its own config)."""
    own, f, ax = r.sweep(name), None, None
    others = tuple(r.sweep(s.get("config", name)) for s in fig["series"])
    for s in fig["series"]:
        res = r.sweep(s.get("config", name))
        metric, x, select = s.get("metric", fig.get("metric")), s.get("x"), s.get("select")
        mean = _cut(res, metric, x, select, "mean")
        std = _cut(res, metric, x, select, "std") if fig.get("band", True) else None
        xs = _cut(res, s["x_metric"], x, select, "mean") if "x_metric" in s else res.axes[x]
        title = (
            r.title(own, _format(fig.get("title", ""), res, {**fig, **s}), others=others)
            if ax is None
            else None
        )
        f, ax = plot.curves(
            np.ravel(xs),
            {s["label"]: (np.ravel(mean), None if std is None else np.ravel(std))},
            x_label=fig["x_label"],
            y_label=fig["y_label"],
            title=title,
            ax=ax,
        )
    return plot.save_figure(f, r.out / fig["file"])


LINE_STYLES = ("-", ":", "-.", (0, (6, 1, 1, 1)))  # "--" is kept for theory overlays
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LEGEND_INSIDE = 8  # legends with more entries go beside the axes


def variants(r: Run, name: str, fig: dict) -> list[Path]:
    """One figure per metric: the metric against axis x, one line per variant sweep."""
    vs = r.variants(name)
    if vs is None:
        raise ConfigError(f"{name}.toml: kind 'variants' needs a [variants] table")
    dims = list(vs[0].labels)
    color = fig.get("color", dims[0])
    style = fig.get("style", dims[1] if len(dims) > 1 else None)
    for key in ("color", "style"):
        if key in fig and fig[key] not in dims:
            raise ConfigError(f"{name}.toml: figures.{key}: {fig[key]!r} is not one of {dims}")
    if "variants" in fig:
        known = [v.name for v in vs]
        missing = [n for n in fig["variants"] if n not in known]
        if missing:
            raise ConfigError(
                f"{name}.toml: figures.variants: {missing[0]!r} is not one of {known}"
            )
        vs = [v for v in vs if v.name in fig["variants"]]
    runs = [(v, r.sweep(name, v)) for v in vs]
    x, select = fig["x"], fig.get("select")
    xs = runs[0][1].axes[x]
    if any(not np.array_equal(res.axes[x], xs) for _, res in runs):
        raise ConfigError(f"{name}.toml: the variants do not share the coordinates of {x!r}")
    order = {d: list(dict.fromkeys(v.labels[d] for v in vs)) for d in dims}
    n = max(1, len(vs) - 1)
    styles = {
        ", ".join(v.labels.values()): {
            "color": f"C{order[color].index(v.labels[color]) % 10}",
            "ls": LINE_STYLES[order[style].index(v.labels[style]) % 4] if style else "-",
        }
        # with colour alone, lines that coincide stay visible: each a marker of its own, and
        # the earlier ones drawn wider and larger underneath the later ones
        | (
            {}
            if style
            else {
                "marker": MARKERS[i % len(MARKERS)],
                "lw": 1.2 + 2.4 * (len(vs) - 1 - i) / n,
                "ms": 3.0 + 4.0 * (len(vs) - 1 - i) / n,
            }
        )
        for i, v in enumerate(vs)
    }
    meta = _common_meta([res.meta for _, res in runs])
    files = []
    for metric in fig["metrics"]:
        band = fig.get("band", True)
        series = {
            ", ".join(v.labels.values()): (
                _cut(res, metric, x, select, "mean"),
                _band(res, metric, x, select, band),
            )
            for v, res in runs
        }
        what = _format(fig.get("title", ""), runs[0][1], fig, metric=metric)
        f, ax = plot.curves(
            xs,
            series,
            x_label=fig.get("x_label", x),
            y_label=f"{metric} ({_band_label(band)})",
            title=r.title(runs[0][1], what, meta),
            styles=styles,
            x_log=fig.get("x_log"),
            y_log=fig.get("y_log", False),
        )
        names = fig.get("theory", {}).get(metric, [])
        for i, t in enumerate([names] if isinstance(names, str) else names):
            _variant_theory(ax, runs, styles, t, f"{name}.toml", metric, i)
        if len(ax.get_legend_handles_labels()[0]) > LEGEND_INSIDE:  # beside the axes
            f.set_size_inches(plot.FIGSIZE[0] * 1.45, plot.FIGSIZE[1])
            where = dict(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
            if style:  # one entry per colour and one per line style, not per combination
                lines = {", ".join(v.labels.values()): v.labels for v in vs}
                plot.factored_legend(ax, lines, styles, color, style, **where)
            else:
                ax.legend(**where)
        file = fig.get("file", "{config}_{metric}.png").format(config=name, metric=metric)
        files.append(plot.save_figure(f, r.out / file))
    return files


def _variant_theory(
    ax, runs: list, styles: dict, theory: str, where: str, metric: str, which: int = 0
) -> None:
    """VARIANT_THEORY[theory] drawn for each variant sweep it has a curve for, in that line's
    colour: dashed (the first overlay) or dash-dotted thin (the second)."""
    if theory not in VARIANT_THEORY:
        raise ConfigError(
            f"{where}: figures.theory.{metric}: {theory!r} is not one of "
            f"{', '.join(map(repr, VARIANT_THEORY))}"
        )
    label = None
    for v, res in runs:
        curve = VARIANT_THEORY[theory](res)
        if curve is not None and len(curve[0]):
            ax.plot(
                curve[0],
                curve[1],
                color=styles[", ".join(v.labels.values())]["color"],
                ls="--" if which == 0 else (0, (3, 1, 1, 1, 1, 1)),
                lw=2.2 if which == 0 else 1.4,
                alpha=0.75,
                label=None if label else curve[2],
            )
            label = curve[2]
    if label:
        ax.legend(fontsize=7, framealpha=0.85)


def _common_meta(metas: list[dict]) -> dict:
    """The first sweep's meta with the block/inputs fields that differ between sweeps shown
    as "per line" (for the title's sizes)."""
    cfg = {k: dict(v) for k, v in metas[0]["config"].items() if isinstance(v, dict)}
    for table in ("block", "inputs"):
        for k in cfg.get(table, {}):
            if any(m["config"][table].get(k) != cfg[table][k] for m in metas):
                cfg[table][k] = "per line"
    return {"config": cfg}


def _overlays(res: Results, fig: dict, name: str) -> list:
    """The heatmap overlays a figure names (overlays.THEORY), evaluated on the finest lattice of
    a refined sweep."""
    for t in fig.get("theory", []):
        if t not in THEORY:
            raise ConfigError(
                f"{name}.toml: figures.theory: {t!r} is not one of {', '.join(map(repr, THEORY))}"
            )
    view = levelset.lattice_view(res)
    return [THEORY[t](view) for t in fig.get("theory", [])]


def refined(r: Run, name: str, fig: dict) -> list[Path]:
    """One refined phase diagram per metric (the module docstring)."""
    res, files = r.sweep(name), []
    overlays = _overlays(res, fig, name)
    for m in fig["metrics"]:
        c = fig.get("contour") if fig.get("contour") != m else None
        path = r.out / f"{name}_{m}.png"
        plot.plot_refined(
            res,
            x=fig["x"],
            y=fig["y"],
            metric=m,
            contour=c,
            contour_levels=fig.get("contour_levels") if c else None,
            theory=overlays or None,
            title=r.title(res, f"{m}: {fig.get('title', '')}".rstrip(": ")),
            out=path,
            diverging=m in fig.get("diverging", ()),
        )
        files.append(path)
    return files


def boundary_curve(res: Results, x: str) -> dict[str, np.ndarray]:
    """The refinement's boundary along axis x of a refined sweep: x's finest coordinates, the
    other axis's coordinate where the seed mean crosses the level, and the band (lo, hi) where
    mean -+ t sem do (NaN where there is no crossing)."""
    b = levelset.refined_boundary(res)
    if x not in b.axes or len(b.axes) != 2:
        raise ConfigError(f"figures.x: {x!r} is not one of the refined axes {list(b.axes)}")
    along = b.axes.index(x)
    c = levelset.crossings(b, along)

    def y(u):
        return None if u is None else b.to_axis(u, 1 - along)

    lo, hi = y(c["lo"]), y(c["hi"])
    band = None if lo is None else (np.fmin(lo, hi), np.fmax(lo, hi))
    return {"x": b.to_axis(c["u"], along), "y": y(c["mean"]), "band": band, "boundary": b}


def boundary(r: Run, name: str, fig: dict) -> list[Path]:
    """The boundary of a refined sweep against theory (the module docstring)."""
    res = r.sweep(name)
    x = fig["x"]
    curve = boundary_curve(res, x)
    b = curve["boundary"]
    y_name = [a for a in b.axes if a != x][0]
    overlays = _overlays(res, fig, name)
    what = fig.get("title", f"{b.metric} = {b.level:g}")
    if overlays:
        tx, ty, tlabel = overlays[0]
        order = np.argsort(tx)
        pred = np.exp(np.interp(np.log(curve["x"]), np.log(tx[order]), np.log(ty[order])))
        ok = np.isfinite(curve["y"]) & np.isfinite(pred)
        if ok.any():
            err = float(np.max(np.abs(curve["y"][ok] / pred[ok] - 1)))
            what += f"; max |{y_name}/theory - 1| = {err:.3f}"
    label = f"{y_name} at {b.metric} = {b.level:g} (seed mean"
    label += f", {b.confidence:.0%} band)" if curve["band"] is not None else ")"
    space = dict(zip(b.axes, levelset.structure(res)[0]["space"]))
    f, ax = plot.curves(
        curve["x"],
        {label: (curve["y"], curve["band"])},
        x_label=fig.get("x_label", x),
        y_label=fig.get("y_label", y_name),
        x_log=space[x] == "log",
        y_log=space[y_name] == "log",
        title=r.title(res, what),
        theory=overlays or None,
    )
    return [plot.save_figure(f, r.out / fig.get("file", f"{name}_boundary.png"))]


FIGURE_TYPES: dict[str, Callable[[Run, str, dict], list[Path]]] = {
    "heatmap": heatmap,
    "curves": curves,
    "variants": variants,
    "refined": refined,
    "boundary": boundary,
}


def draw(r: Run, name: str) -> list[Path]:
    """Every figure declared by experiments/<name>.toml (running or reloading its sweeps)."""
    files = []
    for i, fig in enumerate(figure_specs(name, r.directory)):
        kind = fig.get("kind")
        if kind not in FIGURE_TYPES:
            raise ConfigError(
                f"{name}.toml: figures[{i}].kind: {kind!r} is not one of "
                f"{', '.join(map(repr, FIGURE_TYPES))}"
            )
        files += FIGURE_TYPES[kind](r, name, fig)
    return files
