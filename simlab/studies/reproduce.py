"""`simlab reproduce`: every experiment of the untrained-block study, sweeps then figures.

An experiment is one TOML file in experiments/ (simlab.engine.config.experiments_dir): the
sweep (the full, paper-size protocol), a [quick] table of smaller sizes, an optional
`experiment = "<group>"` key (--only takes groups or single files) and the figures it draws,
as [[figures]] tables of the figure types below. So a new experiment is one TOML file; this
module holds only the figure types. The sweep data is saved beside the figures
(OUT/data/<config>/results.npz + meta.json): `simlab plot` redraws any panel without
recomputing, and a re-run only draws (finished sweeps reload).

Figure types (docs/extending.md has a worked example):
  heatmap  one phase diagram per metric of `metrics` over axes `x` and `y` (x_transform
           "inverse" plots 1/x); optional `contour` metric and `contour_levels` drawn over every
           map but its own, `theory` overlays (THEORY); file "<config>_<metric>.png".
  curves   lines with seed bands: either `metrics` against axis `x` (the other axes fixed by
           `select`, nearest coordinate, or "first" / "last"), all in one figure `file`, or with
           `group` one line per value of that axis; `per_metric = true` makes one figure per
           metric ("<config>_<metric>.png"); x = "layer" plots a stack's per-layer metrics;
           [[figures.series]] tables give each line its own `config`, `x` (or `x_metric`: the
           seed mean of another metric as x), `metric`, `select` and `label`; `theory`: names
           of CURVE_THEORY drawn dashed over the lines (claim 7 over the depth stacks).
  variants one figure per metric of `metrics` against axis `x`, one line per variant sweep
           (below): colour from the variant dimension `color`, line style from `style`
           (default: the first and second dimensions); `theory` = {metric: name of
           VARIANT_THEORY} overlays a closed form per line; file "<config>_<metric>.png".
Titles may use {<axis>} (the selected coordinate) and {spread} (`spread_along`: the largest
change of `metric` along that axis, over all seeds).

Variants: static structure (d_model, a block field) cannot be a grid axis, so an experiment
may declare [variants]: dimension -> list of tables {name, label, block/inputs/knobs/sweep
overrides}; one sweep runs per combination (the product over dimensions, in order), into
OUT/data/<config>/<name>-<name>. A [quick] `variants` table replaces the lists it names.

Experiments (Godey, de la Clergerie & Sagot 2024, "Anisotropy Is Inherent to Self-Attention
in Transformers", section on untrained blocks, and the mechanism of docs/design.md): paper,
mechanism, temp_corr, qknorm, depth (experiments/*.toml).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from simlab import plot, theory
from simlab.engine.config import (
    EXPERIMENT_KEYS,
    apply_overrides,
    apply_quick,
    experiments_dir,
    load_config,
    read_toml,
)
from simlab.engine.results import Results
from simlab.engine.store import check_writable
from simlab.errors import ConfigError

# Theory overlays a heatmap may name: name -> curve (x, y, label) from the sweep's results.
THEORY: dict[str, Callable[[Results], tuple]] = {
    "gg_boundary": lambda res: theory.gg_boundary_curve(
        res.meta["config"]["inputs"]["length"], p=np.linspace(0, 0.95, 100)
    ),
    # claim 6 of check-theory: the predicted attn_entropy = 0.5 line, no free parameter
    "freezing_line": lambda res: theory.paper_freezing_curve(
        res.meta["config"], n=res.axes["drift_norm"]
    ),
}


def _mlp_mean_gain(res: Results):
    """Width figure: the closed-form gain of the MLP's shared output (theory.mlp_mean_gain), at
    the drifts well below the tokens' norm sqrt(d) embed_std where it applies."""
    b, i = res.meta["config"]["block"], res.meta["config"]["inputs"]
    if b["kind"] != "post_ln" or b["init"] != "bert" or i["kind"] != "embedding":
        return None
    n = res.axes["drift_norm"]
    n = n[n <= 0.2 * math.sqrt(b["d_model"]) * i["embed_std"]]
    gain = 0.0 if b.get("mlp_center") else float(theory.mlp_mean_gain(b["d_model"], b["mlp_ratio"]))
    return n, np.full(n.shape, gain), "closed form (MLP mean output), small N"


def _signal_propagation(res: Results, metric: str, select: dict):
    """Depth figures: claim 7's per-layer cosine (theory.signal_propagation) for a stack of
    init = "fan_in" on Gaussian tokens at the selected temperature (None for other metrics or
    setups)."""
    b, i, kn = res.meta["config"]["block"], res.meta["config"]["inputs"], res.meta["config"]
    if metric not in ("out_cos", "out_cos_within") or b["init"] != "fan_in":
        return None
    if i["kind"] != "gaussian" or "temperature" not in select:
        return None
    knobs = kn.get("knobs", {})
    if any(knobs.get(k, 0.0) != 0.0 for k in ("drift_norm", "input_corr", "q_shift")):
        return None
    pred = theory.signal_propagation(
        b["kind"],
        b["depth"],
        i["length"],
        i["batch"],
        knobs.get("q_scale", 1.0) * knobs.get("k_scale", 1.0) / float(select["temperature"]),
        mlp=b["mlp"],
        activation=b["activation"],
        attn_residual=knobs.get("attn_residual", 1.0),
        mlp_residual=knobs.get("mlp_residual", 1.0),
    )[metric]
    return np.arange(1, b["depth"] + 1), pred, "predicted (claim 7: layer recursion)"


# Theory overlays of a `curves` figure with x = "layer": name -> fn(results, metric, select).
CURVE_THEORY: dict[str, Callable[[Results, str, dict], tuple | None]] = {
    "signal_propagation": _signal_propagation
}

# Theory overlays of a `variants` figure: name -> curve (x, y, label) or None, per variant sweep.
VARIANT_THEORY: dict[str, Callable[[Results], tuple | None]] = {"mlp_mean_gain": _mlp_mean_gain}


def experiment_files(directory: Path | None = None) -> dict[str, Path]:
    """Config name -> path of every experiments/*.toml that declares [[figures]]."""
    directory = Path(directory) if directory is not None else experiments_dir()
    return {p.stem: p for p in sorted(directory.glob("*.toml")) if "figures" in read_toml(p)}


def experiment_groups(files: dict[str, Path]) -> dict[str, list[str]]:
    """Group name (the `experiment` key, default the config's own name) -> config names."""
    groups: dict[str, list[str]] = {}
    for name, path in files.items():
        groups.setdefault(read_toml(path).get("experiment", name), []).append(name)
    return groups


def experiment_config(
    name: str,
    quick: bool,
    directory: Path | None = None,
    extra: dict | None = None,
    sets: tuple[str, ...] = (),
    variant: Variant | None = None,
) -> dict:
    """The sweep tables of experiments/<name>.toml; with quick, its [quick] overrides applied,
    then `extra` (same form; used by the tests to shrink every experiment further), then the
    variant's overrides (experiment_variants), then --set."""
    path = (Path(directory) if directory is not None else experiments_dir()) / f"{name}.toml"
    if not path.exists():
        raise ConfigError(
            f"{path}: experiment config not found (run from a clone of the "
            "simlab repository, installed with pip install -e ., or set "
            "SIMLAB_EXPERIMENTS)"
        )
    raw = read_toml(path)
    cfg = {k: v for k, v in raw.items() if k not in EXPERIMENT_KEYS}
    if quick:
        cfg = apply_quick(cfg, _no_variants(raw.get("quick")), f"{path}: quick")
    cfg = apply_quick(cfg, _no_variants(extra), "extra") if extra else cfg
    if variant is not None:
        cfg = apply_quick(cfg, variant.tables, f"{path}: variants {variant.name}")
    return apply_overrides(cfg, sets) if sets else cfg


def _no_variants(table: dict | None) -> dict | None:
    return None if table is None else {k: v for k, v in table.items() if k != "variants"}


@dataclasses.dataclass(frozen=True)
class Variant:
    """One sweep of an experiment with [variants]: its directory name, its label in each
    variant dimension (dimension -> label) and the table overrides it applies."""

    name: str
    labels: dict
    tables: dict


VARIANT_TABLES = ("block", "inputs", "knobs", "sweep")


def _check_variants(dims: dict, where: str) -> None:
    """Each dimension a non-empty list of tables with a name and known fields."""
    for dim, entries in dims.items():
        if not isinstance(entries, list) or not entries:
            raise ConfigError(f"{where}.{dim}: must be a non-empty list of tables")
        for i, e in enumerate(entries):
            at = f"{where}.{dim}[{i}]"
            if not isinstance(e, dict) or not re.fullmatch(r"[A-Za-z0-9_.]+", str(e.get("name"))):
                raise ConfigError(f"{at}.name: required, letters, digits, '_' or '.'")
            for k in e:
                if k not in ("name", "label", *VARIANT_TABLES):
                    raise ConfigError(
                        f"{at}.{k}: unknown field; allowed: name, label, "
                        + ", ".join(VARIANT_TABLES)
                    )


def experiment_variants(
    name: str, quick: bool, directory: Path | None = None, extra: dict | None = None
) -> list[Variant] | None:
    """The variant sweeps of experiments/<name>.toml (None when it declares no [variants]):
    the product over its dimensions, [quick] `variants` (with quick) and then `extra`'s
    replacing the lists of the dimensions they name (extra's other dimensions are ignored)."""
    path = (Path(directory) if directory is not None else experiments_dir()) / f"{name}.toml"
    raw = read_toml(path)
    dims = dict(raw.get("variants") or {})
    if not dims:
        return None
    _check_variants(dims, f"{path}: variants")
    quick_dims = dict((raw.get("quick") or {}).get("variants", {})) if quick else {}
    for dim in quick_dims:
        if dim not in dims:
            raise ConfigError(f"{path}: quick.variants.{dim}: not a dimension of [variants]")
    _check_variants(quick_dims, f"{path}: quick.variants")
    extra_dims = {k: v for k, v in ((extra or {}).get("variants") or {}).items() if k in dims}
    _check_variants(extra_dims, "extra.variants")
    dims.update(quick_dims)
    dims.update(extra_dims)
    out = []
    for combo in itertools.product(*dims.values()):
        tables: dict = {}
        for e in combo:
            for t in VARIANT_TABLES:
                tables[t] = {**tables.get(t, {}), **e.get(t, {})}
        labels = {d: str(e.get("label", e["name"])) for d, e in zip(dims, combo)}
        out.append(Variant("-".join(e["name"] for e in combo), labels, tables))
    return out


def figure_specs(name: str, directory: Path | None = None) -> list[dict]:
    """The [[figures]] tables of experiments/<name>.toml."""
    path = (Path(directory) if directory is not None else experiments_dir()) / f"{name}.toml"
    return list(read_toml(path).get("figures", []))


@dataclasses.dataclass(frozen=True)
class Run:
    """Where and at which sizes a reproduction runs."""

    out: Path
    quick: bool = False
    quiet: bool = False
    extra: dict | None = None
    directory: Path | None = None
    sets: tuple[str, ...] = ()

    def sweep(self, name: str, variant: Variant | None = None) -> Results:
        """Run (or reload) the sweep of experiments/<name>.toml into out/data/<name> (a variant:
        out/data/<name>/<variant name>)."""
        from simlab.engine.sweep import run_sweep

        if variant is None and self.variants(name) is not None:
            raise ConfigError(f"{name}.toml declares [variants]: draw it with kind = 'variants'")
        data = self.out / "data" / name / (variant.name if variant else "")
        cfg = experiment_config(name, self.quick, self.directory, self.extra, self.sets, variant)
        res = run_sweep(cfg, out=data, quiet=self.quiet)
        shutil.rmtree(data / "chunks", ignore_errors=True)  # results.npz holds everything
        return res

    def variants(self, name: str) -> list[Variant] | None:
        return experiment_variants(name, self.quick, self.directory, self.extra)

    def title(self, res: Results, what: str) -> str:
        n = res.n_seeds
        tag = " [quick sizes]" if self.quick else ""
        return f"{what}{tag}\n{plot.sizes_label(res.meta)}, {n} seed{'s' * (n != 1)}"


# ------------------------------------------------------------------------------ figure types
def _index(res: Results, select: dict | None) -> dict[str, int]:
    """Axis -> index for select = {axis: value | "first" | "last"} (nearest coordinate)."""
    out = {}
    for axis, value in (select or {}).items():
        if axis not in res.axes:
            raise ConfigError(
                f"figures.select: {axis!r} is not an axis; axes: {', '.join(res.axes)}"
            )
        c = res.axes[axis]
        out[axis] = (
            0
            if value == "first"
            else len(c) - 1
            if value == "last"
            else int(
                np.argmin(
                    np.abs(np.log(c / value)) if np.all(c > 0) and value > 0 else np.abs(c - value)
                )
            )
        )
    return out


def _cut(res: Results, metric: str, x: str, select: dict | None, stat: str):
    """The seed mean (stat "mean") or std of `metric` along axis x (or "layer"), the other
    axes at `select`."""
    arr = getattr(res, stat)(metric)  # (*axes[, layer])
    idx = _index(res, select)
    names = list(res.axes)
    sl = tuple(slice(None) if (a == x or a not in idx) else idx[a] for a in names)
    return arr[sl]


def _format(text: str, res: Results, fig: dict, **values) -> str:
    values.update({a: f"{res.axes[a][i]:.3g}" for a, i in _index(res, fig.get("select")).items()})
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
        if not (inverse or overlays or "x_label" in fig or "y_label" in fig):
            plot.plot_results(
                res,
                x=x,
                y=y,
                metric=m,
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
                    _cut(res, m, x, select, "std") if band else None,
                )
        y_label = fig.get("y_label", f"{ms[0] if len(ms) == 1 else 'value'} (seed mean +- 1 std)")
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
    for s in fig["series"]:
        res = r.sweep(s.get("config", name))
        metric, x, select = s.get("metric", fig.get("metric")), s.get("x"), s.get("select")
        mean = _cut(res, metric, x, select, "mean")
        std = _cut(res, metric, x, select, "std") if fig.get("band", True) else None
        xs = _cut(res, s["x_metric"], x, select, "mean") if "x_metric" in s else res.axes[x]
        title = (
            r.title(own, _format(fig.get("title", ""), res, {**fig, **s})) if ax is None else None
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


LINE_STYLES = ("-", "--", ":", "-.")


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
    runs = [(v, r.sweep(name, v)) for v in vs]
    x, select = fig["x"], fig.get("select")
    xs = runs[0][1].axes[x]
    if any(not np.array_equal(res.axes[x], xs) for _, res in runs):
        raise ConfigError(f"{name}.toml: the variants do not share the coordinates of {x!r}")
    order = {d: list(dict.fromkeys(v.labels[d] for v in vs)) for d in dims}
    styles = {
        ", ".join(v.labels.values()): {
            "color": f"C{order[color].index(v.labels[color]) % 10}",
            "ls": LINE_STYLES[order[style].index(v.labels[style]) % 4] if style else "-",
        }
        for v in vs
    }
    meta = _common_meta([res.meta for _, res in runs])
    files = []
    for metric in fig["metrics"]:
        series = {
            ", ".join(v.labels.values()): (
                _cut(res, metric, x, select, "mean"),
                _cut(res, metric, x, select, "std") if fig.get("band", True) else None,
            )
            for v, res in runs
        }
        what = _format(fig.get("title", ""), runs[0][1], fig, metric=metric)
        n = runs[0][1].n_seeds
        tag = " [quick sizes]" if r.quick else ""
        f, ax = plot.curves(
            xs,
            series,
            x_label=fig.get("x_label", x),
            y_label=f"{metric} (seed mean +- 1 std)",
            title=f"{what}{tag}\n{plot.sizes_label(meta)}, {n} seed{'s' * (n != 1)}",
            styles=styles,
        )
        name_theory = fig.get("theory", {}).get(metric)
        if name_theory is not None:
            if name_theory not in VARIANT_THEORY:
                raise ConfigError(
                    f"{name}.toml: figures.theory.{metric}: {name_theory!r} is not one of "
                    f"{', '.join(map(repr, VARIANT_THEORY))}"
                )
            label = None
            for v, res in runs:
                curve = VARIANT_THEORY[name_theory](res)
                if curve is not None and len(curve[0]):
                    lab = ", ".join(v.labels.values())
                    ax.plot(
                        curve[0],
                        curve[1],
                        color=styles[lab]["color"],
                        ls=(0, (2, 1)),
                        lw=2.4,
                        alpha=0.6,
                        label=None if label else curve[2],
                    )
                    label = curve[2]
            if label:
                ax.legend(fontsize=7, framealpha=0.85)
        files.append(plot.save_figure(f, r.out / f"{name}_{metric}.png"))
    return files


def _common_meta(metas: list[dict]) -> dict:
    """The first sweep's meta with the block/inputs fields that differ between sweeps shown
    as "per line" (for the title's sizes)."""
    cfg = {k: dict(v) for k, v in metas[0]["config"].items() if isinstance(v, dict)}
    for table in ("block", "inputs"):
        for k in cfg.get(table, {}):
            if any(m["config"][table].get(k) != cfg[table][k] for m in metas):
                cfg[table][k] = "per line"
    return {"config": cfg}


FIGURE_TYPES: dict[str, Callable[[Run, str, dict], list[Path]]] = {
    "heatmap": heatmap,
    "curves": curves,
    "variants": variants,
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


def reproduce(
    names=None,
    out: str | Path | None = None,
    quick: bool = False,
    quiet: bool = False,
    extra: dict | None = None,
    directory: str | Path | None = None,
    sets: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Run the named experiment groups or configs (all by default); returns config -> (files,
    seconds). `extra`: overrides applied on top of every config (like [quick]); `sets`:
    --set KEY=VALUE overrides (simlab.engine.config.apply_overrides) applied last."""
    files = experiment_files(directory)
    groups = experiment_groups(files)
    configs = []
    for n in names or groups:
        if n not in groups and n not in files:
            raise ConfigError(
                f"--only: unknown experiment {n!r}; allowed: experiments "
                f"{', '.join(groups)}, or configs {', '.join(files)}"
            )
        configs += [c for c in groups.get(n, [n]) if c not in configs]
    out = check_writable(
        out if out is not None else Path("figures") / ("quick" if quick else ""), "--out"
    )
    for n in configs:  # every sweep validated before the first one runs
        for v in experiment_variants(n, quick, directory, extra) or [None]:
            load_config(experiment_config(n, quick, directory, extra, tuple(sets), v))
    done = {}
    r = Run(out, quick, quiet, extra, None if directory is None else Path(directory), tuple(sets))
    for i, n in enumerate(configs, 1):
        if not quiet:
            print(
                f"[{i}/{len(configs)}] {n} ({'quick' if quick else 'full'} sizes) -> {out}",
                flush=True,
            )
        t0 = time.perf_counter()
        drawn = draw(r, n)
        done[n] = (drawn, time.perf_counter() - t0)
        if not quiet:
            print(f"      {len(drawn)} figures in {done[n][1]:.1f} s", flush=True)
    return done
