"""The arithmetic of a sweep and its compiled programs (docs/design.md, "Bit-identical results
across chunk sizes and devices").

  * Common random numbers: per seed s, key_s = fold_in(PRNGKey(base_seed), s) and
    state_s = lab.seed_state(key_s), computed once and passed un-batched to every point.
  * Points are numbered in C order over the axes and grouped into micro-batches of
    `micro_batch` points (the grid is padded at its end with copies of the last point).
    One micro-batch is always `vmap(lab.point)` over exactly `micro_batch` points.
  * A chunk is `chunk_mb` whole micro-batches (a multiple of the device count): one compiled
    call runs `lax.map` over its micro-batches, sharded over the local devices with shard_map.
    The last chunk is padded to the same size (no recompile); padded points are dropped.
Chunk size therefore sets memory and resume granularity only, never the numbers.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Mapping

import jax
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from simlab.engine.config import SweepConfig
from simlab.engine.store import Layout
from simlab.errors import ConfigError


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


def chunk_fn(lab, names: tuple[str, ...], mesh) -> Callable:
    """jit(shard_map(lax.map over micro-batches of the vmapped point)).

    Arguments: state and fixed knobs (replicated), swept knobs of shape (chunk_mb, micro_batch)
    sharded over the "points" mesh axis; returns metrics of shape (chunk_mb, micro_batch, ...).
    """
    per_mb = micro_batch_fn(lab, names)

    def local(state, fixed, swept):
        return jax.lax.map(lambda sw: per_mb(state, fixed, sw), swept)

    return jax.jit(
        jax.shard_map(local, mesh=mesh, in_specs=(P(), P(), P("points")), out_specs=P("points"))
    )


# Environment variable: how many local devices a sweep shards over by default (unset: all).
DEVICES_ENV = "SIMLAB_DEVICES"


def local_mesh(devices: int | None = None) -> Mesh:
    """A 1-D mesh, axis "points", over the first `devices` local devices (None: $SIMLAB_DEVICES
    if set, else all). The device count never changes the numbers (the module docstring)."""
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
    return Mesh(np.array(have[:n]), ("points",))


@functools.lru_cache(maxsize=16)
def jitted(lab, names: tuple[str, ...], mesh) -> tuple[Callable, Callable]:
    """(jit(lab.seed_state), chunk_fn), cached per lab so that repeated sweeps of one lab object
    (same metrics, same devices) reuse the compiled code."""
    return jax.jit(lab.seed_state), chunk_fn(lab, names, mesh)


def compile_sweep(
    lab, names, mesh, fixed, layout: Layout, grid, precision: str, replicated, sharded
) -> tuple[Callable, Callable]:
    """Both programs of a sweep compiled ahead of the first chunk, under the matmul precision
    (jax.default_matmul_precision; "highest": full float32 on every backend): the per-seed
    state and the chunk function (from abstract shapes; no data is computed)."""
    seed_state, fn = jitted(lab, names, mesh)
    key = jax.random.PRNGKey(0)
    with jax.default_matmul_precision(precision):
        lowered = seed_state.lower(key)
        c_state = lowered.compile()
        state = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=replicated), lowered.out_info
        )
        swept = {
            k: jax.ShapeDtypeStruct(
                (layout.chunk_mb, layout.micro_batch), v.dtype, sharding=sharded
            )
            for k, v in grid.items()
        }
        c_chunk = fn.lower(state, fixed, swept).compile()
    return c_state, c_chunk


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
