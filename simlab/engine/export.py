"""`simlab export DIR --to FILE.nc`: a finished sweep as a netCDF file (through xarray, the
optional `xarray` extra; scipy's netCDF-3 writer), readable by any netCDF tool and by
`simlab.from_xarray(xarray.open_dataset(FILE))`."""

from __future__ import annotations

from pathlib import Path

from simlab.engine import results
from simlab.engine.store import check_writable
from simlab.errors import ConfigError


def add_arguments(parser) -> None:
    parser.add_argument("dir", help="a finished sweep directory")
    parser.add_argument("--to", required=True, metavar="FILE.nc", help="the netCDF file to write")


def export(out_dir, path) -> Path:
    """Write the sweep in out_dir to the netCDF file `path` (atomically)."""
    path = Path(path)
    if path.suffix != ".nc":
        raise ConfigError(f"--to: {path} must end in .nc (a netCDF file)")
    check_writable(path.parent, "--to")
    ds = results.load(out_dir).to_xarray()
    data = ds.to_netcdf(engine="scipy")  # bytes: then an atomic write
    results.atomic_write_bytes(path, bytes(data))
    return path


def cli_main(args) -> int:
    try:
        p = export(args.dir, args.to)
    except ImportError as e:
        raise ConfigError(f"export: {e}") from None
    print(f"wrote {p}")
    return 0
