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
           seed mean of another metric as x), `metric`, `select` and `label`.
Titles may use {<axis>} (the selected coordinate) and {spread} (`spread_along`: the largest
change of `metric` along that axis, over all seeds).

Experiments (Godey, de la Clergerie & Sagot 2024, "Anisotropy Is Inherent to Self-Attention
in Transformers", section on untrained blocks, and the mechanism of docs/design.md): paper,
mechanism, temp_corr, qknorm, depth (experiments/*.toml).
"""

from __future__ import annotations

import argparse
import dataclasses
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
) -> dict:
    """The sweep tables of experiments/<name>.toml; with quick, its [quick] overrides applied,
    then `extra` (same form; used by the tests to shrink every experiment further)."""
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
        cfg = apply_quick(cfg, raw.get("quick"), f"{path}: quick")
    cfg = apply_quick(cfg, extra, "extra") if extra else cfg
    return apply_overrides(cfg, sets) if sets else cfg


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

    def sweep(self, name: str) -> Results:
        """Run (or reload) the sweep of experiments/<name>.toml into out/data/<name>."""
        from simlab.engine.sweep import run_sweep

        data = self.out / "data" / name
        cfg = experiment_config(name, self.quick, self.directory, self.extra, self.sets)
        res = run_sweep(cfg, out=data, quiet=self.quiet)
        shutil.rmtree(data / "chunks", ignore_errors=True)  # results.npz holds everything
        return res

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
        series = {}
        for m in ms:
            for value in groups:
                select, label = dict(fig.get("select", {})), m
                if value is not None:
                    select[fig["group"]] = value
                    label = f"{fig['group']} = {value:g}"
                series[label] = (
                    _cut(res, m, x, select, "mean"),
                    _cut(res, m, x, select, "std") if band else None,
                )
        y_label = fig.get("y_label", f"{ms[0] if len(ms) == 1 else 'value'} (seed mean +- 1 std)")
        what = _format(fig.get("title", ""), res, fig, metric=ms[0])
        f, _ = plot.curves(
            x_values,
            series,
            x_label=fig.get("x_label", x),
            y_label=y_label,
            x_log=fig.get("x_log"),
            title=r.title(res, what),
        )
        files.append(plot.save_figure(f, r.out / fig.get("file", f"{name}_{ms[0]}.png")))
    return files


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


FIGURE_TYPES: dict[str, Callable[[Run, str, dict], list[Path]]] = {
    "heatmap": heatmap,
    "curves": curves,
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
        load_config(experiment_config(n, quick, directory, extra, tuple(sets)))
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small sizes (the whole set in about 20 s on 2 CPU cores)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        help="experiments (groups) or single configs of experiments/ to run",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="figure directory (default figures/, or figures/quick with --quick)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    from simlab.engine.sweep import add_cache_argument, add_set_argument

    add_set_argument(parser)

    add_cache_argument(parser)


def cli_main(args) -> int:
    from simlab.engine.sweep import apply_cache_argument

    apply_cache_argument(args)
    done = reproduce(args.only, args.out, args.quick, args.quiet, sets=tuple(args.set or ()))
    total = sum(s for _, s in done.values())
    print(f"reproduce: {sum(len(f) for f, _ in done.values())} figures in {total:.1f} s")
    return 0
