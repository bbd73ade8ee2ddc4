"""Arguments several commands share: --set, the compilation cache, workers and jax.distributed."""

from __future__ import annotations

import os

from simlab.errors import ConfigError


def add_set_argument(parser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override one config field, validated like the file and recorded in the resolved "
        "config (repeatable; dotted keys: block.d_model=128, knobs.temperature=0.5, "
        "axes.0.num=9, sweep.seeds=4)",
    )


def add_cache_argument(parser) -> None:
    """--no-compile-cache (also SIMLAB_COMPILE_CACHE=off; simlab.engine.compile_cache)."""
    parser.add_argument(
        "--no-compile-cache",
        action="store_true",
        help="do not use the persistent compilation cache (~/.cache/simlab/jax, "
        "or SIMLAB_COMPILE_CACHE=DIR)",
    )


def apply_cache_argument(args) -> None:
    # deferred: jax (heavy), loaded only when a command runs: `simlab --help` answers at once
    from simlab.engine import compile_cache

    if getattr(args, "no_compile_cache", False):
        os.environ[compile_cache.ENV] = "off"


def add_worker_arguments(parser) -> None:
    """--worker I/N and the jax.distributed flags (docs/design.md, "Work units")."""
    parser.add_argument(
        "--worker",
        metavar="I/N",
        default=None,
        help="compute only worker I's share of N (0-based) and do not merge; default inside a "
        "Slurm job array: SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT",
    )
    parser.add_argument(
        "--distributed",
        action="store_true",
        help="call jax.distributed.initialize() (from the cluster's environment, or the flags "
        "below): each process takes its share, process 0 merges",
    )
    parser.add_argument("--coordinator", default=None, help="jax.distributed: HOST:PORT")
    parser.add_argument("--num-processes", type=int, default=None, help="jax.distributed")
    parser.add_argument("--process-id", type=int, default=None, help="jax.distributed")


def parse_worker(text: str) -> tuple[int, int]:
    """ "I/N" -> (I, N)."""
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ConfigError(f"--worker: {text!r} is not I/N (e.g. 0/4)") from None
    return i, n


def init_distributed(args) -> None:
    """jax.distributed.initialize with the given flags (the rest from the environment)."""
    if not (args.distributed or args.coordinator):
        return
    import jax

    kw = {
        k: v
        for k, v in (
            ("coordinator_address", args.coordinator),
            ("num_processes", args.num_processes),
            ("process_id", args.process_id),
        )
        if v is not None
    }
    try:
        jax.distributed.initialize(**kw)
    except (ValueError, RuntimeError) as e:
        raise ConfigError(f"--distributed: jax.distributed.initialize failed: {e}") from None
