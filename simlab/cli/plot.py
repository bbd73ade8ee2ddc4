"""`simlab plot DIR --x AXIS [--y AXIS] --metric NAME [--out FILE.png] [--layer I]
[--select AXIS=VALUE ...] [--contour METRIC --levels v1,v2,...] [--band ci|std|sem|none]
[--level P]`: a phase diagram or a curve with a seed band (by default the 95% Student-t
confidence interval of the seed mean) from a finished sweep (simlab.plot.plot_results)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from simlab.engine import results
from simlab.engine.store import check_writable
from simlab.errors import ConfigError
from simlab.plot import plot_results
from simlab.plot.lines import BANDS


def add_arguments(parser) -> None:
    parser.add_argument("dir", metavar="DIR", help="output directory of a finished sweep")
    parser.add_argument("--x", required=True, metavar="AXIS", help="axis on the horizontal")
    parser.add_argument(
        "--y",
        metavar="AXIS",
        help="axis on the vertical (phase diagram); omit for a 1-D curve with a seed band",
    )
    parser.add_argument("--metric", required=True, metavar="NAME", help="metric to plot")
    parser.add_argument(
        "--out",
        metavar="FILE.png",
        help="output PNG (default DIR/<metric>_<x>_<y>.png or DIR/<metric>_<x>.png)",
    )
    parser.add_argument(
        "--layer", type=int, metavar="I", help="layer of a per-layer metric (default: the last)"
    )
    parser.add_argument(
        "--select",
        action="append",
        default=[],
        metavar="AXIS=VALUE",
        help="fix another axis at its coordinate nearest VALUE, on the axis's scale (repeatable)",
    )
    parser.add_argument("--contour", metavar="METRIC", help="second metric drawn as contour lines")
    parser.add_argument("--levels", metavar="v1,v2,...", help="contour levels (default: automatic)")
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


def cli_main(args) -> int:
    if not 0.0 < args.level < 1.0:
        raise ConfigError(f"--level {args.level!r}: must be in (0, 1), e.g. 0.95")
    select = _parse_select(args.select)
    levels = _parse_levels(args.levels)
    res = results.load(args.dir)
    if args.out is not None:
        if str(args.out).strip() == "" or Path(args.out).is_dir():
            raise ConfigError(f"--out: {args.out!r} must name a figure file (e.g. plot.png)")
        check_writable(Path(args.out).parent, "--out")
        out = Path(args.out)
    else:
        stem = "_".join(p for p in (args.metric, args.x, args.y) if p)
        out = Path(args.dir) / f"{stem}.png"
    plot_results(
        res,
        x=args.x,
        y=args.y,
        metric=args.metric,
        layer=args.layer,
        select=select,
        contour=args.contour,
        contour_levels=levels,
        out=out,
        band=args.band,
        level=args.level,
    )
    print(f"wrote {out}")
    return 0
