"""A finished sweep as a netCDF file (through xarray, the
optional `xarray` extra; scipy's netCDF-3 writer), readable by any netCDF tool and by
`simlab.from_xarray(xarray.open_dataset(FILE))`."""

from __future__ import annotations

from pathlib import Path

from simlab.engine import results
from simlab.engine.store import check_writable
from simlab.errors import ConfigError


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
