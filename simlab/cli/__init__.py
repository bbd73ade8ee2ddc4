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
import signal
import sys
import threading
import tomllib

import simlab
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
    """The installed simlab version (simlab.__version__: the package metadata)."""
    return simlab.__version__


DESCRIPTION = (
    "simlab: attention sharpness vs anisotropy of Transformer blocks, untrained (random "
    "weights) or read from trained checkpoints"
)


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    """Parser with every subcommand; only the one named in argv is imported."""
    parser = argparse.ArgumentParser(
        prog="simlab",
        description=DESCRIPTION,
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


# the signals that stop a command like Ctrl-C: SIGINT, and SIGTERM (what Slurm, `timeout` and
# `kill` send); the one received decides the exit code, 128 + its number (130, 143)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: list[int] = []


def _stop(signum, frame):
    """The first stopping signal: ignore any further one (a second Ctrl-C must not break the
    saving of what was finished, nor jax's exit handlers), then stop as Ctrl-C does."""
    for s in STOP_SIGNALS:
        signal.signal(s, _ignore)
    _received.append(signum)
    raise KeyboardInterrupt


def _ignore(signum, frame):
    """A stopping signal after the first, or after the command: nothing. (A Python handler,
    not SIG_IGN: a signal already received but not yet handled would then print CPython's
    "Signal N ignored due to race condition" traceback.)"""


def _catch_stop_signals() -> dict:
    """Install _stop for SIGINT and SIGTERM (not for one the process inherited ignored, as a
    background job's SIGINT); returns the handlers it replaced. Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    _received.clear()
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s, h in before.items():
        if h is not signal.SIG_IGN:
            signal.signal(s, _stop)
    return before


def _stopped_by() -> tuple[str, int]:
    """(" (SIGTERM)" or "", exit code) of the signal that stopped the command (SIGINT when none
    was seen: a KeyboardInterrupt raised otherwise)."""
    signum = _received[0] if _received else signal.SIGINT
    name = "" if signum == signal.SIGINT else f" ({signal.Signals(signum).name})"
    return name, 128 + signum


def main(argv: list[str] | None = None) -> int:
    """Entry point of `simlab` and `python -m simlab`; returns the exit code. As the program
    (argv None) it ignores SIGINT and SIGTERM once the command has ended (what is left is the
    interpreter's shutdown); called with argv (tests, scripts) it restores the handlers."""
    import warnings

    warnings.showwarning = _show_warning
    program = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv).parse_args(argv)
    before = _catch_stop_signals()
    try:
        return _run(args)
    finally:
        for s, h in before.items():
            signal.signal(s, _ignore if program else h)


def _run(args) -> int:
    """The chosen command, its user errors, storage failures and stops as one line each."""
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
        name, code = _stopped_by()
        print(f"\nsimlab: interrupted{name}: {e.message}", file=sys.stderr)
        return code
    except KeyboardInterrupt:
        name, code = _stopped_by()
        print(f"\nsimlab: interrupted{name}", file=sys.stderr)
        return code
    except BrokenPipeError:  # e.g. `simlab info DIR | head -1`: the reader has gone
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's flush at exit must not fail again
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
