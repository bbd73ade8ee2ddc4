"""Weights of a block (or a depth-L stack) from a PRNG key.

Layout of one layer (head-split einsum weights; D = d_model, H = heads, K = d_head, F = MLP):
  wq, wk, wv: (D, H, K)   bq, bk, bv: (H, K)    wo: (H, K, D)   bo: (D,)
  ln1_g, ln1_b, ln2_g, ln2_b: (D,)              w1: (D, F) b1: (F,)   w2: (F, D) b2: (D,)
A stack stores every leaf with a leading layer axis L; layers are independent draws.

Schemes (`BlockSpec.init`):
  "bert":   every weight N(0, 0.02^2), biases 0, LayerNorm gain 1 and bias 0
            (Devlin et al. 2019, `initializer_range = 0.02`; plain normal, not truncated).
  "glorot": Glorot/Xavier uniform, U(-r, r), r = sqrt(6 / (fan_in + fan_out)) with the fans of
            the full matrices (D -> D for q, k, v, o; D -> F and F -> D in the MLP).
  "fan_in": N(0, sigma^2 / fan_in), sigma = `BlockSpec.init_sigma`.
"""
from __future__ import annotations

import math
from typing import Mapping

import jax
import jax.numpy as jnp

from simlab.spec import BlockSpec

_MATRICES = ("wq", "wk", "wv", "wo", "w1", "w2")


def _fans(spec: BlockSpec, name: str) -> tuple[int, int]:
    d, f = spec.d_model, spec.d_model * spec.mlp_ratio
    return {"w1": (d, f), "w2": (f, d)}.get(name, (d, d))


def _shape(spec: BlockSpec, name: str) -> tuple[int, ...]:
    d, h, k, f = spec.d_model, spec.n_heads, spec.d_head, spec.d_model * spec.mlp_ratio
    return {"wq": (d, h, k), "wk": (d, h, k), "wv": (d, h, k), "wo": (h, k, d),
            "w1": (d, f), "w2": (f, d)}[name]


def draws(key, shapes: Mapping[str, tuple[int, ...]], dtype, dist: str = "normal") -> dict:
    """Independent N(0, 1) (or U(0, 1)) arrays of the given shapes from ONE flat draw.

    One threefry call instead of one per array: XLA compiles a per-seed program with a
    dozen random draws an order of magnitude faster this way."""
    sizes = [math.prod(s) for s in shapes.values()]
    sample = jax.random.normal if dist == "normal" else jax.random.uniform
    flat = sample(key, (sum(sizes),), dtype)
    out, start = {}, 0
    for (name, shape), size in zip(shapes.items(), sizes):
        out[name] = flat[start:start + size].reshape(shape)
        start += size
    return out


def init_params(spec: BlockSpec, key, dtype=None) -> dict[str, jax.Array]:
    """A depth-L stack of independently drawn layers: every leaf has a leading layer axis.
    dtype None: jax's default float dtype (float64 under JAX_ENABLE_X64)."""
    dtype = jnp.result_type(float) if dtype is None else dtype
    d, h, k, L = spec.d_model, spec.n_heads, spec.d_head, spec.depth
    names = _MATRICES if spec.mlp else _MATRICES[:4]
    shapes = {n: (L,) + _shape(spec, n) for n in names}
    if spec.init == "glorot":
        u = draws(key, shapes, dtype, "uniform")
        p = {n: (2.0 * u[n] - 1.0) * math.sqrt(6.0 / sum(_fans(spec, n))) for n in names}
    else:
        z = draws(key, shapes, dtype)
        p = {n: z[n] * (0.02 if spec.init == "bert" else spec.init_sigma / math.sqrt(_fans(spec, n)[0]))
             for n in names}
    for n in ("bq", "bk", "bv"):
        p[n] = jnp.zeros((L, h, k), dtype)
    zeros, ones = jnp.zeros((L, d), dtype), jnp.ones((L, d), dtype)
    p.update(bo=zeros, ln1_g=ones, ln1_b=zeros, ln2_g=ones, ln2_b=zeros)
    if spec.mlp:
        p["b1"] = jnp.zeros((L, d * spec.mlp_ratio), dtype)
        p["b2"] = zeros
    return p


def layer(params: dict[str, jax.Array], i: int) -> dict[str, jax.Array]:
    """Layer i of a stacked parameter dict."""
    return jax.tree.map(lambda a: a[i], params)
