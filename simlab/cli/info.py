"""`simlab info DIR`: what a sweep directory holds (simlab.engine.info)."""

from __future__ import annotations

from pathlib import Path

from simlab.errors import ConfigError


def add_arguments(parser) -> None:
    parser.add_argument("dir", help="a sweep directory")
    parser.add_argument("--config", action="store_true", help="also print the resolved config")
    parser.add_argument(
        "--level",
        type=float,
        default=0.95,
        metavar="P",
        help="confidence level of the seed means' intervals, in (0, 1) (default 0.95)",
    )


def cli_main(args) -> int:
    # deferred: jax (heavy), loaded only when a command runs: `simlab --help` answers at once
    from simlab.engine.info import describe

    if not 0.0 < args.level < 1.0:
        raise ConfigError(f"--level {args.level!r}: must be in (0, 1), e.g. 0.95")
    print(describe(Path(args.dir), args.config, args.level))
    return 0
