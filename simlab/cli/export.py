"""`simlab export DIR --to FILE.nc`: a finished sweep as a netCDF file (simlab.engine.export)."""

from __future__ import annotations

from simlab.errors import ConfigError


def add_arguments(parser) -> None:
    parser.add_argument("dir", help="a finished sweep directory")
    parser.add_argument("--to", required=True, metavar="FILE.nc", help="the netCDF file to write")


def cli_main(args) -> int:
    # deferred: jax (heavy), loaded only when a command runs: `simlab --help` answers at once
    from simlab.engine.export import export

    try:
        p = export(args.dir, args.to)
    except ImportError as e:
        raise ConfigError(f"export: {e}") from None
    print(f"wrote {p}")
    return 0
