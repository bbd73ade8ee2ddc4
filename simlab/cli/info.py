"""`simlab info DIR`: what a sweep directory holds (simlab.engine.info)."""

from __future__ import annotations

from pathlib import Path


def add_arguments(parser) -> None:
    parser.add_argument("dir", help="a sweep directory")
    parser.add_argument("--config", action="store_true", help="also print the resolved config")


def cli_main(args) -> int:
    from simlab.engine.info import describe

    print(describe(Path(args.dir), args.config))
    return 0
