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


def _matrix(spec: BlockSpec, name: str, key, dtype) -> jax.Array:
    shape = _shape(spec, name)
    fan_in, fan_out = _fans(spec, name)
    if spec.init == "bert":
        return 0.02 * jax.random.normal(key, shape, dtype)
    if spec.init == "glorot":
        r = math.sqrt(6.0 / (fan_in + fan_out))
        return jax.random.uniform(key, shape, dtype, -r, r)
    return (spec.init_sigma / math.sqrt(fan_in)) * jax.random.normal(key, shape, dtype)


def init_layer(spec: BlockSpec, key, dtype=jnp.float32) -> dict[str, jax.Array]:
    """Parameters of one layer (dict of arrays, see the module docstring)."""
    d, h, k = spec.d_model, spec.n_heads, spec.d_head
    names = _MATRICES if spec.mlp else _MATRICES[:4]
    keys = jax.random.split(key, len(_MATRICES))
    p = {n: _matrix(spec, n, kk, dtype) for n, kk in zip(names, keys)}
    for n in ("bq", "bk", "bv"):
        p[n] = jnp.zeros((h, k), dtype)
    p["bo"] = jnp.zeros((d,), dtype)
    p["ln1_g"], p["ln1_b"] = jnp.ones((d,), dtype), jnp.zeros((d,), dtype)
    p["ln2_g"], p["ln2_b"] = jnp.ones((d,), dtype), jnp.zeros((d,), dtype)
    if spec.mlp:
        p["b1"] = jnp.zeros((d * spec.mlp_ratio,), dtype)
        p["b2"] = jnp.zeros((d,), dtype)
    return p


def init_params(spec: BlockSpec, key, dtype=jnp.float32) -> dict[str, jax.Array]:
    """A depth-L stack: every leaf gets a leading layer axis of size spec.depth."""
    keys = jax.random.split(key, spec.depth)
    return jax.vmap(lambda kk: init_layer(spec, kk, dtype))(keys)


def layer(params: dict[str, jax.Array], i: int) -> dict[str, jax.Array]:
    """Layer i of a stacked parameter dict."""
    return jax.tree.map(lambda a: a[i], params)
