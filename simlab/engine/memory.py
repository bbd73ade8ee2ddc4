"""Memory preflight: refuse a sweep that cannot fit before any compute or file (docs/design.md,
"Flow of one sweep").

need = the seed state (weights, input draws and what the lab hoists per seed; exact, from the
abstract shapes of lab.seed_state) + one micro-batch's working set (lab.point_bytes, an
estimate from the sizes) + the results (every metric at every point and seed, three copies:
the chunks, the merged arrays and the saved file's buffer) + the swept knob values.
available = the host's MemAvailable (Linux /proc/meminfo, else physical memory) and, on an
accelerator, the device's bytes_limit. A sweep whose need exceeds what is available is a
ConfigError naming the fields that set each part.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

import jax

from simlab.errors import ConfigError


def tree_bytes(tree) -> int:
    """Bytes of every array (or ShapeDtypeStruct) leaf of a pytree."""
    return sum(math.prod(a.shape) * a.dtype.itemsize for a in jax.tree.leaves(tree))


def host_available() -> int | None:
    """Bytes of host memory available to a new allocation (None when unknown)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def device_available() -> int | None:
    """bytes_limit of the first local accelerator (None on CPU or when not reported)."""
    dev = jax.local_devices()[0]
    if dev.platform == "cpu":
        return None
    try:
        return int((dev.memory_stats() or {}).get("bytes_limit")) or None
    except (TypeError, ValueError, AttributeError, RuntimeError):
        return None


def gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB"


def check_fits(
    cfg,
    lab,
    names,
    seed_state: Callable,
    micro_batch_bytes: int,
    values_per_point: int,
    itemsize: int,
) -> dict[str, int]:
    """The need of each part (bytes); ConfigError when it does not fit. `seed_state` is traced
    abstractly (jax.eval_shape: no compute), `values_per_point` is the number of metric values
    one grid point yields (each metric's
    values: layers x its declared dims)."""
    state = tree_bytes(jax.eval_shape(seed_state, jax.random.PRNGKey(0)))
    n_knobs = sum(len(a.knobs) for a in cfg.axes)
    points = cfg.n_points * cfg.sweep.seeds
    results = 3 * points * values_per_point * itemsize + cfg.n_points * n_knobs * itemsize
    need = {"seed state": state, "one micro-batch": micro_batch_bytes, "results": results}
    device = device_available()
    host = host_available()
    on_device = state + micro_batch_bytes
    sizes = (
        f"block.d_model = {cfg.block.d_model}, block.depth = {cfg.block.depth}, "
        f"inputs.batch x inputs.length = {cfg.inputs.batch} x {cfg.inputs.length}"
    )
    if device is not None and on_device > device:
        raise ConfigError(
            f"memory: the seed state ({gib(state)}) and one micro-batch "
            f"({gib(micro_batch_bytes)}, sweep.micro_batch = {cfg.sweep.micro_batch}) need "
            f"{gib(on_device)} on the device, which has {gib(device)}; set by {sizes}"
        )
    total = results + (0 if device is not None else on_device)
    if host is not None and total > host:
        grid = " x ".join(str(len(a.values)) for a in cfg.axes)
        raise ConfigError(
            f"memory: this sweep needs ~{gib(total)} but {gib(host)} is available: seed state "
            f"{gib(state)} ({sizes}, inputs.vocab = {cfg.inputs.vocab}), one micro-batch "
            f"{gib(micro_batch_bytes)} (sweep.micro_batch = {cfg.sweep.micro_batch}), results "
            f"{gib(results)} (axes {grid} points x sweep.seeds = {cfg.sweep.seeds} x "
            f"{values_per_point} values per point); reduce those fields"
        )
    return need
