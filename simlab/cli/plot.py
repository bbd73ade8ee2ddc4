"""`simlab plot DIR --x AXIS [--y AXIS] --metric NAME [--metric NAME ...] [--out FILE]
[--layer I] [--select NAME=VALUE ...] [--contour METRIC --levels v1,v2,...] [--vmin V --vmax V]
[--band ci|std|sem|none] [--level P]`: a phase diagram or a curve with a seed band (by default
the 95% Student-t confidence interval of the seed mean) from a finished sweep
(simlab.plot.plot_results), one file per metric; --select fixes an axis at a coordinate or a
further dimension of the metric (head, layer, ...) at an index; the file's suffix picks the
format (.png, .pdf, .svg)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from simlab.engine import results
from simlab.engine.select import nearest
from simlab.engine.store import check_writable
from simlab.errors import ConfigError
from simlab.plot import plot_results
from simlab.plot.axes import figure_format
from simlab.plot.lines import BANDS


def add_arguments(parser) -> None:
    parser.add_argument("dir", metavar="DIR", help="output directory of a finished sweep")
    parser.add_argument("--x", required=True, metavar="AXIS", help="axis on the horizontal")
    parser.add_argument(
        "--y",
        metavar="AXIS",
        help="axis on the vertical (phase diagram); omit for a 1-D curve with a seed band",
    )
    parser.add_argument(
        "--metric",
        required=True,
        action="append",
        metavar="NAME",
        help="metric to plot (repeatable: one file per metric)",
    )
    parser.add_argument(
        "--out",
        metavar="FILE",
        help="the figure file, .png, .pdf or .svg (the suffix picks the format; default "
        "DIR/<metric>_<x>[_<y>][_<axis><value>...].png); with several metrics, each file "
        "gets its metric's name before the suffix",
    )
    parser.add_argument(
        "--layer",
        type=int,
        metavar="I",
        help="layer of a per-layer metric (default: the last); the same as --select layer=I",
    )
    parser.add_argument(
        "--select",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="fix another axis at its coordinate nearest VALUE, on the axis's scale, or a "
        "further dimension of the metric (layer, head, ...; default its last) at the index VALUE "
        "(repeatable)",
    )
    parser.add_argument("--contour", metavar="METRIC", help="second metric drawn as contour lines")
    parser.add_argument("--levels", metavar="v1,v2,...", help="contour levels (default: automatic)")
    parser.add_argument("--vmin", type=float, default=None, help="lower end of the colour scale")
    parser.add_argument("--vmax", type=float, default=None, help="upper end of the colour scale")
    parser.add_argument(
        "--band",
        choices=BANDS,
        default="ci",
        help="band around a 1-D curve's seed mean: ci (the Student-t confidence interval of the "
        "mean, default), std (-+1 standard deviation), sem (-+1 standard error) or none",
    )
    parser.add_argument(
        "--level",
        type=float,
        default=0.95,
        metavar="P",
        help="confidence level of --band ci, in (0, 1) (default 0.95)",
    )


def _parse_select(items: Sequence[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for s in items or ():
        name, eq, val = s.partition("=")
        name, val = name.strip(), val.strip()
        if not eq or not name or not val:
            raise ConfigError(f"--select {s!r}: expected AXIS=VALUE")
        try:
            out[name] = float(val)
        except ValueError:
            raise ConfigError(f"--select {s!r}: {val!r} is not a number") from None
    return out


def _parse_levels(s: str | None):
    if s is None:
        return None
    try:
        levels = [float(v) for v in s.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"--levels {s!r}: expected numbers separated by commas") from None
    if not levels:
        raise ConfigError(f"--levels {s!r}: no levels given")
    return levels


def _safe(name: str) -> str:
    """A name fit for a file name: path separators and spaces become "_"."""
    return "".join("_" if c in "/\\ " or ord(c) < 32 else c for c in name)


def out_paths(args, metrics: list[str], select: dict[str, float]) -> dict[str, Path]:
    """metric -> the file to write: --out (with the metric's name added when there are
    several), else DIR/<metric>_<x>[_<y>][_<axis><value>...].png."""
    if args.out is not None:
        out = Path(args.out)
        if str(args.out).strip() == "" or out.is_dir():
            raise ConfigError(f"--out: {args.out!r} must name a figure file (e.g. plot.png)")
        figure_format(out)
        check_writable(out.parent, "--out")
        if len(metrics) == 1:
            return {metrics[0]: out}
        return {m: out.with_name(f"{out.stem}_{_safe(m)}{out.suffix}") for m in metrics}
    check_writable(Path(args.dir), "--out (default: the results directory)")
    cuts = [f"{a}{v:g}" for a, v in select.items()]
    paths = {}
    for m in metrics:
        stem = "_".join(_safe(p) for p in (m, args.x, args.y, *cuts) if p)
        paths[m] = Path(args.dir) / f"{stem}.png"
    return paths


def cli_main(args) -> int:
    if not 0.0 < args.level < 1.0:
        raise ConfigError(f"--level {args.level!r}: must be in (0, 1), e.g. 0.95")
    select = _parse_select(args.select)
    levels = _parse_levels(args.levels)
    res = results.load(args.dir)
    metrics = list(dict.fromkeys(args.metric))  # in order, each once
    paths = out_paths(args, metrics, select)
    for a, v in select.items():  # say which coordinate a value snapped to
        if a in res.axes:
            coords = np.asarray(res.axes[a], float)
            c = coords[nearest(res, a, v)] if coords.min() <= v <= coords.max() else v
            if not np.isclose(c, v, rtol=1e-9, atol=0):
                print(
                    f"--select {a}={v:g}: the nearest coordinate {c:.6g} is used", file=sys.stderr
                )
    for m in metrics:
        plot_results(
            res,
            x=args.x,
            y=args.y,
            metric=m,
            layer=args.layer,
            select=select,
            contour=args.contour,
            contour_levels=levels,
            out=paths[m],
            vmin=args.vmin,
            vmax=args.vmax,
            warn=lambda msg: print(f"simlab: warning: {msg}", file=sys.stderr),
            band=args.band,
            level=args.level,
        )
        print(f"wrote {paths[m]}")
    return 0
