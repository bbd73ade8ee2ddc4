"""The arithmetic of a sweep and its compiled programs (docs/design.md, "Bit-identical results
across chunk sizes and devices").

  * Common random numbers: per seed s, key_s = fold_in(PRNGKey(base_seed), s) and
    state_s = lab.seed_state(key_s), computed once and passed un-batched to every point.
  * Points are numbered in C order over the axes and grouped into micro-batches of
    `micro_batch` points (the grid is padded at its end with copies of the last point).
    One micro-batch is always `vmap(lab.point)` over exactly `micro_batch` points.
  * One compiled program runs micro-batches: a while loop over the first n (a traced count) of
    `capacity` micro-batches (capacity >= 2), so every micro-batch runs the very same machine
    code whatever the chunk's length. A chunk is cut into contiguous parts, one per device, and
    each device runs that same program (compiled for it from the same HLO), dispatched
    asynchronously so that the devices work at once.
Chunk size and device count therefore set memory, speed and resume granularity only, never the
numbers. (On XLA:CPU a partitioned shard_map program, and a loop whose arrays have a leading
dimension of 1, each compile to other code and differ by ~1 ulp in some metrics.)
"""

from __future__ import annotations

import functools
import logging
import math
import os
import time
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from simlab.engine import compile_cache
from simlab.engine.config import SweepConfig
from simlab.engine.schedule import release_host_memory
from simlab.errors import ConfigError

log = logging.getLogger(__name__)


def knob_dtype() -> np.dtype:
    """jax's default float dtype: the dtype of every knob value."""
    return np.dtype(jax.numpy.result_type(float))


def grid_knobs(cfg: SweepConfig) -> dict[str, np.ndarray]:
    """Swept knob -> values at every flat point index (C order over the axes; each knob as its
    axis sets it, SweepConfig.point_values), in jax's default float dtype (float32; float64
    under JAX_ENABLE_X64)."""
    return {k: v.astype(knob_dtype()) for k, v in cfg.point_values().items()}


def micro_batch_fn(lab, names: tuple[str, ...]) -> Callable:
    """(state, fixed knobs, swept knobs with a leading point axis) -> metrics per point.

    A micro-batch of one point calls lab.point without vmap (the same math; on XLA:CPU a batch
    axis of size 1 costs a copy of the attention weights and a slower entropy reduction,
    docs/performance.md, "Findings cited in the code")."""

    def point(state, fixed, swept):
        out = lab.point(state, {**fixed, **swept})
        return {k: out[k] for k in names}

    batched = jax.vmap(point, in_axes=(None, None, 0))

    def micro_batch(state, fixed, swept):
        if swept and all(np.shape(v)[0] == 1 for v in swept.values()):
            one = point(state, fixed, {k: v[0] for k, v in swept.items()})
            return {k: v[None] for k, v in one.items()}
        return batched(state, fixed, swept)

    return micro_batch


def chunk_fn(lab, names: tuple[str, ...]) -> Callable:
    """jit of (state, fixed knobs, swept knobs (capacity, micro_batch), n) -> metrics of shape
    (capacity, micro_batch, ...): a while loop over the first n micro-batches (the rest of the
    output stays zero). The same program for every chunk and every device."""
    per_mb = micro_batch_fn(lab, names)

    def local(state, fixed, swept, n):
        first = jax.tree.map(lambda a: a[0], swept)
        out0 = jax.eval_shape(lambda sw: per_mb(state, fixed, sw), first)
        capacity = next(iter(swept.values())).shape[0]
        buf = {k: jnp.zeros((capacity, *v.shape), v.dtype) for k, v in out0.items()}

        def body(carry):
            i, buf = carry
            sw = {k: jax.lax.dynamic_index_in_dim(v, i, keepdims=False) for k, v in swept.items()}
            res = per_mb(state, fixed, sw)
            return i + 1, {
                k: jax.lax.dynamic_update_index_in_dim(b, res[k], i, 0) for k, b in buf.items()
            }

        return jax.lax.while_loop(lambda c: c[0] < n, body, (jnp.int32(0), buf))[1]

    return jax.jit(local)


# Environment variable: how many local devices a sweep runs on by default (unset: all).
DEVICES_ENV = "SIMLAB_DEVICES"


def local_devices(devices: int | None = None) -> list:
    """The first `devices` local devices (None: $SIMLAB_DEVICES if set, else all). The device
    count never changes the numbers (the module docstring)."""
    have = jax.local_devices()
    where = "devices"
    if devices is None and os.environ.get(DEVICES_ENV, "").strip():
        where, devices = DEVICES_ENV, os.environ[DEVICES_ENV].strip()
        try:
            devices = int(devices)
        except ValueError:
            raise ConfigError(f"{where}: {devices!r} is not a number of devices") from None
    n = len(have) if devices is None else devices
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= len(have):
        raise ConfigError(f"{where}: {n!r} is not in 1..{len(have)} (the local devices)")
    return list(have[:n])


@functools.lru_cache(maxsize=16)
def jitted(lab, names: tuple[str, ...]) -> tuple[Callable, Callable]:
    """(jit(lab.seed_state), chunk_fn), cached per lab so that repeated sweeps of one lab object
    (same metrics) reuse the compiled code."""
    return jax.jit(lab.seed_state), chunk_fn(lab, names)


def compile_sweep(
    lab, names, devices, fixed, capacity: int, micro_batch: int, grid, precision: str
) -> tuple[Callable, dict]:
    """Both programs of a sweep compiled ahead of the first chunk, under the matmul precision
    (jax.default_matmul_precision; "highest": full float32 on every backend): the per-seed state
    (on the first device; its result is copied to the others) and, for each device, the chunk
    program (the same HLO; from abstract shapes, no data is computed)."""
    seed_state, fn = jitted(lab, names)
    with jax.default_matmul_precision(precision):
        lowered = seed_state.lower(jax.random.PRNGKey(0))
        c_state = lowered.compile()
        chunks = {}
        for d in devices:
            on = jax.sharding.SingleDeviceSharding(d)
            state = jax.tree.map(
                lambda a, on=on: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=on),
                lowered.out_info,
            )
            fx = {k: jax.ShapeDtypeStruct((), knob_dtype(), sharding=on) for k in fixed}
            swept = {
                k: jax.ShapeDtypeStruct((capacity, micro_batch), v.dtype, sharding=on)
                for k, v in grid.items()
            }
            n = jax.ShapeDtypeStruct((), jnp.int32, sharding=on)
            chunks[d] = fn.lower(state, fx, swept, n).compile()
    return c_state, chunks


def bytes_per_micro_batch(
    lab, names, fixed: Mapping[str, float], swept_names, micro_batch: int
) -> int:
    """Working set of one micro-batch: micro_batch x lab.point_bytes() when the lab estimates
    it from its sizes, else an upper bound from the jaxpr (tracing only, no compile)."""
    if hasattr(lab, "point_bytes"):
        return max(1, micro_batch * int(lab.point_bytes()))
    state = jax.eval_shape(lab.seed_state, jax.random.PRNGKey(0))
    args = (
        state,
        {k: jax.ShapeDtypeStruct((), knob_dtype()) for k in fixed},
        {k: jax.ShapeDtypeStruct((micro_batch,), knob_dtype()) for k in swept_names},
    )
    return jaxpr_bytes(micro_batch_fn(lab, names), *args)


def jaxpr_bytes(f: Callable, *args) -> int:
    """Sum of the sizes of every top-level intermediate of f's jaxpr: an upper bound on live
    memory."""
    jaxpr = jax.make_jaxpr(f)(*args).jaxpr
    return max(
        1,
        sum(
            math.prod(v.aval.shape) * v.aval.dtype.itemsize
            for eqn in jaxpr.eqns
            for v in eqn.outvars
        ),
    )


class ChunkRunner:
    """compute_chunk(seed, start, stop) for a Writer: compiles both programs on the first chunk
    (none when nothing is missing) or earlier when told (compile()), keeps the current seed's
    state on every device, runs each device's contiguous part of the chunk with the same
    program (the module docstring), and times both. layout: the sweep's
    simlab.engine.store.Layout."""

    def __init__(self, cfg: SweepConfig, lab, names, devices: list, layout):
        self.cfg, self.lab, self.names, self.devices, self.layout = cfg, lab, names, devices, layout
        self.per_device = layout.chunk_mb // len(devices)
        self.capacity = max(2, self.per_device)  # never a leading dimension of 1
        self.grid = grid_knobs(cfg)
        fixed = {k: knob_dtype().type(v) for k, v in cfg.knobs.items()}
        self.fixed = {d: jax.device_put(fixed, d) for d in devices}
        self.compiled_state = self.compiled = None
        self.states, self.state_seed = {}, None
        self.compile_s = self.compute_s = 0.0

    def compile(self) -> str | None:
        """Compile both programs now (plain.compute does it before the progress bar, so the
        bar's rate is the computing's alone); the compilation cache's folder, or None."""
        tc = time.perf_counter()
        cache = compile_cache.enable()
        self.compiled_state, self.compiled = compile_sweep(
            self.lab,
            self.names,
            self.devices,
            self.fixed[self.devices[0]],
            self.capacity,
            self.cfg.sweep.micro_batch,
            self.grid,
            self.cfg.sweep.matmul_precision,
        )
        self.compile_s = time.perf_counter() - tc
        # XLA's compile frees ~110 MiB of heap (W4's block, a cache miss) that glibc keeps
        # resident under the first chunk's peak unless handed back now (docs/performance.md, W4)
        release_host_memory()
        log.info("sweep: compiled in %.2f s (cache: %s)", self.compile_s, cache or "off")
        return cache

    def __call__(self, s: int, a: int, b: int) -> dict[str, np.ndarray]:
        if self.compiled is None:
            self.compile()
        tc = time.perf_counter()
        mb, n_points = self.cfg.sweep.micro_batch, self.layout.n_points
        if self.state_seed != s:
            seed = self.cfg.sweep.first_seed + s
            key = jax.random.fold_in(jax.random.PRNGKey(self.cfg.sweep.base_seed), seed)
            state = self.compiled_state(key)
            self.states = {d: jax.device_put(state, d) for d in self.devices}
            self.state_seed = s
        parts = []  # dispatched to every device before any result is read: they run at once
        for i, d in enumerate(self.devices):
            lo = a + i * self.per_device
            hi = min(lo + self.per_device, b)
            if lo >= hi:
                break
            idx = np.minimum(np.arange(lo * mb, (lo + self.capacity) * mb), n_points - 1)
            swept = {k: v[idx].reshape(self.capacity, mb) for k, v in self.grid.items()}
            n = np.int32(hi - lo)
            res = self.compiled[d](self.states[d], self.fixed[d], jax.device_put(swept, d), n)
            parts.append((hi - lo, res))
        out = {
            name: np.concatenate([np.asarray(res[name])[:n] for n, res in parts])
            for name in self.names
        }
        out = {k: x.reshape((-1,) + x.shape[2:]) for k, x in out.items()}
        self.compute_s += time.perf_counter() - tc
        return out
