"""A finished sweep as a netCDF file (through xarray, the
optional `xarray` extra; scipy's netCDF-3 writer), readable by any netCDF tool and by
`simlab.from_xarray(xarray.open_dataset(FILE))`."""

from __future__ import annotations

from pathlib import Path

from simlab.engine import records, results
from simlab.engine.store import check_writable
from simlab.errors import ConfigError


def export(out_dir, path) -> Path:
    """Write the sweep in out_dir to the netCDF file `path` (atomically)."""
    path = Path(path)
    if path.suffix != ".nc":
        raise ConfigError(f"--to: {path} must end in .nc (a netCDF file)")
    if not path.parent.is_dir():
        raise ConfigError(f"--to: the folder {path.parent} does not exist; create it first")
    check_writable(path.parent, "--to")
    res = results.load(out_dir)
    names = [*res.axes, *res.metrics]
    bad = [n for n in names if not n.isascii()]
    if bad:
        raise ConfigError(
            f"export: netCDF-3 (scipy's writer) stores ASCII names only, and {bad} are not; "
            "rename the axis in the config, or use Results.to_xarray() and another engine"
        )
    ds = res.to_xarray()
    data = ds.to_netcdf(engine="scipy")  # bytes: then an atomic write
    records.atomic_write_bytes(path, bytes(data))
    return path
