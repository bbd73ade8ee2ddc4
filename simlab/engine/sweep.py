"""The sweep engine's entry: `run_sweep` reads a config (a TOML path, tables or a SweepConfig
with tables replaced), `run_config` resolves it once (simlab.engine.plain.prepare) and chooses
how it runs: as one plain sweep (simlab.engine.plain) or as parts, when it refines or grows the
sweep its directory holds (simlab.engine.grow). docs/design.md, "Flow of one sweep".
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from simlab.engine import grow, plain, results
from simlab.engine.config import SweepConfig, load_config
from simlab.engine.tomlio import read_config_toml
from simlab.errors import ConfigError


def run_sweep(
    config=None,
    *,
    block=None,
    inputs=None,
    knobs=None,
    axes=None,
    sweep=None,
    out: str | os.PathLike | None = None,
    chunk_size: int | None = None,
    quiet: bool = False,
    lab=None,
    on_chunk: Callable[[plain.ChunkInfo], None] | None = None,
    worker: tuple[int, int] | None = None,
    devices: int | None = None,
) -> results.Results | None:
    """Run (or resume, or load) a sweep and return its Results.

    config: a TOML path, a dict of tables, or a SweepConfig; block/inputs/knobs/axes/sweep
    replace the matching tables (dicts like the TOML tables, or spec dataclasses).
    out: output directory (None: compute in memory, write nothing).  chunk_size overrides
    sweep.chunk_size.  lab: a model with the simlab.core.lab.Lab protocol (default:
    Lab(block, inputs)).
    on_chunk: called with a ChunkInfo after each computed chunk is stored.
    worker: (I, N) computes only worker I's share of the work units (a contiguous block of the
    seed-major list of (seed, micro-batch) units), writes its chunks and returns None without
    merging; a later plain run (or `simlab merge`) computes what is missing and merges. Needs
    `out`. Under jax.distributed with `out`, process i takes share (i, process_count), process 0
    then finishes and merges, and every process returns the merged Results.
    devices: how many local devices to run on (None: $SIMLAB_DEVICES, else all); the numbers
    never depend on it.
    """
    t0 = time.perf_counter()
    tables = _tables(config)
    for name, t in (
        ("block", block),
        ("inputs", inputs),
        ("knobs", knobs),
        ("axes", axes),
        ("sweep", sweep),
    ):
        if name == "axes" and isinstance(t, Mapping):
            raise ConfigError(
                f"axes: must be a list of axis tables, one per axis, got one table (keys "
                f"{', '.join(map(str, t))}); write axes=[{{...}}]"
            )
        if t is not None:
            tables[name] = [_table(a) for a in t] if name == "axes" else _table(t)
    if chunk_size is not None:
        tables["sweep"] = {**tables.get("sweep", {}), "chunk_size": chunk_size}
    return run_config(
        load_config(tables, report=None if quiet else plain.setup_line),
        out=out,
        quiet=quiet,
        lab=lab,
        on_chunk=on_chunk,
        worker=worker,
        devices=devices,
        t0=t0,
    )


def run_config(
    cfg: SweepConfig,
    *,
    out: str | os.PathLike | None = None,
    quiet: bool = False,
    lab=None,
    on_chunk: Callable[[plain.ChunkInfo], None] | None = None,
    worker: tuple[int, int] | None = None,
    devices: int | None = None,
    t0: float | None = None,
) -> results.Results | None:
    """`run_sweep` of a validated config (the same arguments): a plain sweep, or, when the
    config refines or grows the sweep in `out` (simlab.engine.grow.composite_state), one made
    of parts."""
    job = plain.prepare(
        cfg, out=out, quiet=quiet, lab=lab, on_chunk=on_chunk, worker=worker, devices=devices,
        t0=t0,
    )  # fmt: skip
    seen = grow.composite_state(job)
    if seen is not None:
        return grow.run(job, seen)
    return plain.run(job)


def _tables(config) -> dict[str, Any]:
    if config is None:
        return {}
    if isinstance(config, SweepConfig):
        return config.to_dict()
    if isinstance(config, (str, os.PathLike)):
        return read_config_toml(config)  # its relative paths: from the file's folder
    if not isinstance(config, Mapping):
        raise ConfigError(
            f"config: must be a TOML path, a dict of tables or a SweepConfig, got "
            f"{type(config).__name__} {config!r}"
        )
    return dict(config)


def _table(t) -> Any:
    """A spec/axis/settings dataclass as a config table; dicts pass through."""
    if hasattr(t, "to_dict"):
        return t.to_dict()
    if dataclasses.is_dataclass(t):
        return dataclasses.asdict(t)
    return t
