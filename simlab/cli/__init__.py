"""The `simlab` command: one module of simlab.cli per subcommand, imported only when chosen.

A command module exposes `add_arguments(parser)` and `cli_main(args) -> int`; it parses and
prints, and calls library functions that take plain arguments (never argv). Every command takes
`--plugin MODULE` (repeatable): the plugins, and those installed through the "simlab.plugins"
entry points, are imported before the command runs (simlab.plugins). User errors
(simlab.errors.ConfigError, a missing file, bad TOML) print "simlab: error: <message>" and exit
with code 2 before any output is written.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tomllib

from simlab.errors import ConfigError, Interrupted, StorageError

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "sweep": ("simlab.cli.sweep", "run a sweep (grid of knobs x seeds) from a TOML config"),
    "merge": ("simlab.cli.merge", "finish a sweep directory that --worker runs filled"),
    "info": ("simlab.cli.info", "what a sweep directory holds (axes, metrics, sizes, chunks)"),
    "export": ("simlab.cli.export", "write a finished sweep as a netCDF file (xarray)"),
    "plot": ("simlab.cli.plot", "plot phase diagrams and curves from a finished sweep"),
    "reproduce": ("simlab.cli.reproduce", "reproduce the reference figures"),
    "check-theory": (
        "simlab.cli.check_theory",
        "compare simulations with closed-form predictions",
    ),
    "train-dynamics": (
        "simlab.cli.train_dynamics",
        "follow sharpness and anisotropy during training",
    ),
    "bench": ("simlab.cli.bench", "time the sweep engine against its peers"),
    "series": (
        "simlab.cli.series",
        "the trained-model quantities of a folder of checkpoints (one per training step)",
    ),
    "models": ("simlab.cli.models", "the trained models simlab knows: installed or not, install"),
}


def version() -> str:
    """The installed simlab version (pyproject's), or "unknown" outside an installation."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("simlab")
    except PackageNotFoundError:
        return "unknown"


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    """Parser with every subcommand; only the one named in argv is imported."""
    parser = argparse.ArgumentParser(
        prog="simlab",
        description="simlab: attention sharpness vs anisotropy of untrained Transformer blocks",
    )
    parser.add_argument("--version", action="version", version=f"simlab {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, (module, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        p.add_argument(
            "--plugin",
            action="append",
            default=[],
            metavar="MODULE",
            help="import this plugin module first (repeatable; it registers its own block kinds, "
            "input kinds, metrics, knobs or theory claims; docs/extending.md)",
        )
        if name == chosen:
            mod = importlib.import_module(module)
            mod.add_arguments(p)
            p.set_defaults(cli_main=mod.cli_main)
    return parser


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """Python warnings as one line: "simlab: warning: <message>"."""
    print(f"simlab: warning: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `simlab` and `python -m simlab`; returns the exit code."""
    import warnings

    warnings.showwarning = _show_warning
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv).parse_args(argv)
    try:
        # deferred: jax (heavy), loaded only when a command runs: `simlab --help` answers at once
        from simlab import plugins

        plugins.load(args.plugin, "--plugin")  # and the installed ones: before anything else
        return int(args.cli_main(args) or 0)
    except (ConfigError, FileNotFoundError, tomllib.TOMLDecodeError) as e:  # ResultsError too
        print(f"simlab: error: {e}", file=sys.stderr)
        return 2
    except StorageError as e:
        print(f"simlab: error: {e.strerror}", file=sys.stderr)
        return 1
    except Interrupted as e:
        print(f"\nsimlab: interrupted: {e.message}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("\nsimlab: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `simlab info DIR | head -1`: the reader has gone
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's flush at exit must not fail again
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
