"""`simlab merge DIR`: finish a sweep directory that workers filled (simlab.engine.merge)."""

from __future__ import annotations

from simlab.cli.args import add_cache_argument, apply_cache_argument


def add_arguments(parser) -> None:
    parser.add_argument("dir", help="a sweep directory (holds sweep.json)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_cache_argument(parser)


def cli_main(args) -> int:
    # deferred: jax (heavy), loaded only when a command runs: `simlab --help` answers at once
    from simlab.engine.merge import merge_directory

    apply_cache_argument(args)
    res, finished = merge_directory(args.dir, args.quiet)
    if finished:
        print(
            f"{args.dir}: already finished; nothing computed (results.npz + meta.json as they were)"
        )
        return 0
    print(
        f"merged {args.dir}: results.npz + meta.json ({res.meta.get('chunks_computed', 0)} "
        f"chunks computed now, {res.meta.get('chunks_reused', 0)} reused)"
    )
    return 0
