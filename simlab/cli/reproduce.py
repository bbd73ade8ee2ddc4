"""`simlab reproduce [--quick] [--only NAME ...]`: every experiment of experiments/ swept (or
reloaded) and drawn (simlab.studies.reproduce)."""

from __future__ import annotations

from simlab.cli.args import add_cache_argument, add_set_argument, apply_cache_argument
from simlab.errors import ConfigError


def add_arguments(parser) -> None:
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small sizes (the whole set in about 20 s on 2 CPU cores)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        help=f"experiments (groups) or single configs of experiments/ to run; {_names()}",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="figure directory (default figures/, or figures/quick with --quick)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    add_set_argument(parser)
    add_cache_argument(parser)


def _names() -> str:
    """The names --only takes (the groups, then the configs), as one help sentence."""
    # deferred: jax (simlab.engine.config), loaded only when `reproduce` is the command
    from simlab.engine.config import experiments_dir
    from simlab.studies.reproduce.experiments import experiment_files, experiment_groups

    try:
        files = experiment_files()
        groups = experiment_groups(files)
    except ConfigError as e:  # the run refuses it in one line; the help only mentions it
        return f"(they cannot be listed: {e})"
    if not files:
        return f"none found in {experiments_dir()} (set SIMLAB_EXPERIMENTS)"
    return f"experiments: {', '.join(groups)}; configs: {', '.join(files)}"


def cli_main(args) -> int:
    # deferred: jax (heavy), loaded only when a command runs: `simlab --help` answers at once
    from simlab.studies.reproduce import reproduce

    apply_cache_argument(args)
    done = reproduce(args.only, args.out, args.quick, args.quiet, sets=tuple(args.set or ()))
    total = sum(s for _, s in done.values())
    n = sum(len(f) for f, _ in done.values())
    print(f"reproduce: {n} figure{'s' * (n != 1)} in {total:.1f} s")
    return 0
