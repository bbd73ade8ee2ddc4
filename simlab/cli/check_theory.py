"""`simlab check-theory [--quick] [--claims LIST] [--json FILE | --from-json FILE]`: the
closed-form claims simulated and scored (simlab.studies.check_theory)."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from simlab.errors import ConfigError
from simlab.studies.check_theory import (
    CLAIMS,
    _json_default,
    format_details,
    format_table,
    results_from_json,
    run_checks,
)


def add_arguments(parser) -> None:
    parser.add_argument(
        "--quick", action="store_true", help="smaller sizes (under 3 minutes on 2 CPU cores)"
    )
    parser.add_argument(
        "--figures-dir",
        default=None,
        metavar="DIR",
        help="where theory_<claim>.png go (default: figures/, or figures/quick/ with --quick, "
        "so a quick run never overwrites the committed full-size figures)",
    )
    parser.add_argument("--no-figures", action="store_true", help="do not write figures")
    parser.add_argument(
        "--json",
        default=None,
        metavar="FILE",
        help="also write the table, details and data as JSON",
    )
    parser.add_argument(
        "--config-dir",
        default=None,
        metavar="DIR",
        help="where theory_<claim>.toml are read (default: the experiments/ folder)",
    )
    parser.add_argument(
        "--claims",
        default=",".join(CLAIMS),
        metavar="LIST",
        help=f"comma-separated subset of {', '.join(CLAIMS)}",
    )
    parser.add_argument(
        "--from-json",
        default=None,
        metavar="FILE",
        help="no simulation: reprint the table and redraw the figures from a "
        "file written by --json",
    )


def cli_main(args) -> int:
    profile = "quick" if args.quick else "full"
    claims = [c.strip() for c in getattr(args, "claims", ",".join(CLAIMS)).split(",") if c.strip()]
    bad = [c for c in claims if c not in CLAIMS]
    if bad:
        raise ConfigError(f"--claims: unknown {bad}; allowed: {', '.join(CLAIMS)}")
    default_dir = "figures/quick" if args.quick else "figures"
    figures_dir = None if args.no_figures else (args.figures_dir or default_dir)
    if getattr(args, "from_json", None):
        results = [r for r in results_from_json(args.from_json) if r.claim.split()[-1] in claims]
        if figures_dir is not None:
            for r in results:
                name = r.claim.split()[-1]
                CLAIMS[name].figure(r, Path(figures_dir) / f"theory_{name}.png")
        print(format_table(results))
        print()
        print(format_details(results))
        return 0
    import jax
    import jax.numpy as jnp

    t0 = time.perf_counter()
    print(
        f"simlab check-theory ({profile}; jax {jax.__version__}, "
        f"{jnp.zeros(()).dtype}, {jax.default_backend()})",
        flush=True,
    )
    results = run_checks(
        profile,
        claims,
        figures_dir=figures_dir,
        config_dir=getattr(args, "config_dir", None),
        log=lambda s: print(s, flush=True),
    )
    wall = time.perf_counter() - t0
    print()
    print(format_table(results))
    print()
    print(format_details(results))
    print(
        f"\nwall time {wall:.1f} s"
        + ("" if figures_dir is None else f"; figures in {figures_dir}/theory_*.png")
    )
    if args.json:
        payload = {
            "profile": profile,
            "wall_seconds": wall,
            "table": format_table(results),
            "claims": [dataclasses.asdict(r) for r in results],
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(payload, f, indent=1, default=_json_default)
    return 0
