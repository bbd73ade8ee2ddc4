"""`simlab check-theory [--quick] [--claims LIST] [--json FILE | --from-json FILE]`: the
closed-form claims simulated and scored (simlab.studies.check_theory)."""

from __future__ import annotations

import time

from simlab.errors import ConfigError
from simlab.studies.check_theory import (
    CLAIMS,
    format_details,
    format_table,
    json_payload,
    rescore_json,
    run_checks,
    write_json,
)
from simlab.studies.check_theory.claim import ordered


def add_arguments(parser) -> None:
    parser.add_argument(
        "--quick", action="store_true", help="smaller sizes (under 3 minutes on 2 CPU cores)"
    )
    parser.add_argument(
        "--figures-dir",
        default=None,
        metavar="DIR",
        help="where theory_<claim>.png go (default: runs/check-theory/, or "
        "runs/check-theory-quick/ with --quick: a run never rewrites the project's committed "
        "figures; --figures-dir figures/quick redraws those)",
    )
    parser.add_argument("--no-figures", action="store_true", help="do not write figures")
    parser.add_argument(
        "--json",
        default=None,
        metavar="FILE",
        help="also write the table, details, and each claim's config and simulation data as "
        "JSON (what --from-json scores again)",
    )
    parser.add_argument(
        "--config-dir",
        default=None,
        metavar="DIR",
        help="where theory_<claim>.toml are read (default: the experiments/ folder)",
    )
    parser.add_argument(
        "--claims",
        default=None,
        metavar="LIST",
        help="comma-separated subset of the registered claims (default all: simlab's "
        f"{', '.join(CLAIMS)} and those of the plugins loaded)",
    )
    parser.add_argument(
        "--from-json",
        default=None,
        metavar="FILE",
        help="no simulation: score the simulations saved by --json again (compare and verdict "
        "with the code as it is now and the config stored in the file) and redraw the figures",
    )


def cli_main(args) -> int:
    profile = "quick" if args.quick else "full"
    every = ordered()  # read now: after the plugins of --plugin and the entry points loaded
    given = getattr(args, "claims", None)
    claims = every if given is None else [c.strip() for c in given.split(",") if c.strip()]
    bad = [c for c in claims if c not in CLAIMS]
    if bad:
        raise ConfigError(f"--claims: unknown {bad}; allowed: {', '.join(every)}")
    default_dir = "runs/check-theory-quick" if args.quick else "runs/check-theory"
    figures_dir = None if args.no_figures else (args.figures_dir or default_dir)
    if getattr(args, "from_json", None):
        results = rescore_json(args.from_json, claims, figures_dir=figures_dir)
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
        write_json(args.json, json_payload(results, profile, wall))
    return 0
