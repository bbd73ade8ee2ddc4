"""Finish a sweep directory that workers filled (docs/design.md, "Work units"): read its
sweep.json, compute whatever no worker finished (verifying every chunk file), merge, write
results.npz + meta.json."""

from __future__ import annotations

from pathlib import Path

from simlab.engine import records, results
from simlab.engine.sweep import run_sweep
from simlab.errors import ConfigError


def merge_directory(out: str | Path, quiet: bool = False) -> tuple[results.Results, bool]:
    """Run the sweep recorded in out/sweep.json into `out`: computes only what is missing.
    Returns the results and whether the directory was finished already (nothing computed)."""
    out = Path(out)
    if not (out / "sweep.json").is_file():
        raise ConfigError(f"{out}: holds no sweep.json (not a sweep directory)")
    config = records.read_sweep(out / "sweep.json")
    if not isinstance(config.get("config"), dict):
        raise ConfigError(f"{out / 'sweep.json'}: has no config table")
    lab = config["config"].get("lab")
    if lab is not None:
        raise ConfigError(
            f"{out}: was written by a custom lab ({lab.get('class', '?')}); finish it from Python "
            "with the same lab: simlab.run_sweep(config, lab=..., out=...)"
        )
    finished = records.is_finished(out)
    return run_sweep(config["config"], out=out, quiet=quiet), finished
