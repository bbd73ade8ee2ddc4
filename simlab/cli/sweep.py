"""`simlab sweep CONFIG.toml | --default`: run, resume or load a sweep (simlab.engine.sweep)."""

from __future__ import annotations

from pathlib import Path

from simlab.cli.args import (
    add_cache_argument,
    add_set_argument,
    add_worker_arguments,
    apply_cache_argument,
    init_distributed,
    parse_worker,
)
from simlab.errors import ConfigError


def add_arguments(parser) -> None:
    """`simlab sweep` arguments."""
    parser.add_argument(
        "config", nargs="?", help="sweep config (TOML); see experiments/quickstart.toml"
    )
    parser.add_argument(
        "--default",
        action="store_true",
        help="use the embedded default config (simlab/configs/default.toml)",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="output directory (resumes if it holds this sweep; default runs/<config name>, "
        "runs/default for --default)",
    )
    parser.add_argument(
        "--chunk-size",
        type=int,
        default=None,
        help="points per compiled call: the resume and progress grain (never the numbers); "
        "default 64 micro-batches per device, or 1 when a micro-batch's working set exceeds "
        "sweep.memory_budget_mb (docs/config.md)",
    )
    parser.add_argument(
        "--devices",
        type=int,
        default=None,
        metavar="N",
        help="shard over the first N local devices (default: $SIMLAB_DEVICES, else all); "
        "the numbers do not depend on it",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_set_argument(parser)
    add_cache_argument(parser)
    add_worker_arguments(parser)


def cli_main(args) -> int:
    """Run `simlab sweep`; print where the results are."""
    # deferred: jax (heavy), loaded only when a command runs: `simlab --help` answers at once
    from simlab.engine.config import default_config_path
    from simlab.engine.schedule import worker_from_env
    from simlab.engine.sweep import run_sweep
    from simlab.engine.tomlio import apply_overrides, read_config_toml

    apply_cache_argument(args)
    if (args.config is None) == (not args.default):
        raise ConfigError("sweep: give either CONFIG.toml or --default (exactly one)")
    config = default_config_path() if args.default else args.config
    if args.out is None:
        args.out = str(Path("runs") / ("default" if args.default else Path(config).stem))
        print(f"output directory: {args.out} (--out to choose another)")
    if args.set:
        config = apply_overrides(read_config_toml(config), args.set)
    worker = parse_worker(args.worker) if args.worker else worker_from_env()
    init_distributed(args)
    res = run_sweep(
        config,
        out=args.out,
        chunk_size=args.chunk_size,
        quiet=args.quiet,
        worker=worker,
        devices=args.devices,
    )
    if res is None:
        print(
            f"worker {worker[0]}/{worker[1]}: its chunks are in {Path(args.out) / 'chunks'}; "
            f"`simlab merge {args.out}` (or the same `simlab sweep` without --worker) merges"
        )
        return 0
    shape = "x".join(map(str, next(iter(res.metrics.values())).shape))
    print(
        f"results in {Path(args.out)}: results.npz + meta.json ({len(res.metrics)} metrics, "
        f"shape {shape})"
    )
    history = res.meta.get("history") or []
    if len(history) > 1 and not isinstance(history[-1].get("change"), str):
        h = history[-1]
        print(
            f"grown ({', '.join(h['change'])}): {h.get('pairs_computed')} (point, seed) pairs "
            f"computed, {h.get('pairs_reused')} reused; `simlab info {args.out}` has the history"
        )
    return 0
