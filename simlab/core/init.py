"""Weights of a block (or a depth-L stack) from a PRNG key.

Layout of one layer (head-split einsum weights; D = d_model, H = heads, K = d_head, F = MLP):
  wq, wk, wv: (D, H, K)   bq, bk, bv: (H, K)    wo: (H, K, D)   bo: (D,)
  ln1_g, ln1_b, ln2_g, ln2_b: (D,)              w1: (D, F) b1: (F,)   w2: (F, D) b2: (D,)
  w3: (D, F), only for a kind with a gated MLP (simlab.core.block.gated_mlp: HF's up_proj)
A stack stores every leaf with a leading layer axis L; layers are independent draws.
Grouped-query attention (`BlockSpec.n_kv_heads` = G < H): wk and wv are drawn for the G
key/value heads, (D, G, K), and each is repeated for its H / G consecutive query heads
(jnp.repeat on the head axis: HF's repeat_kv), so every attention path sees (D, H, K); the
layout above is unchanged and the keys and values of a group are equal by construction.

Schemes (`BlockSpec.init`):
  "bert":   every weight N(0, 0.02^2), biases 0, LayerNorm gain 1 and bias 0
            (Devlin et al. 2019, `initializer_range = 0.02`; plain normal, not truncated).
            It is also Llama's init at LlamaConfig's default initializer_range 0.02 (HF's
            LlamaPreTrainedModel._init_weights: every nn.Linear weight, i.e. wq, wk, wv, wo and
            the gate, up and down matrices w1, w3, w2, N(0, initializer_range^2); RMSNorm gains
            1), the scheme for kind "llama".
  "glorot": Glorot/Xavier uniform, U(-r, r), r = sqrt(6 / (fan_in + fan_out)) with the fans of
            the full matrices (D -> D for q, k, v, o; D -> F and F -> D in the MLP).
  "fan_in": N(0, sigma^2 / fan_in), sigma = `BlockSpec.init_sigma`.
  "normal": every weight N(0, sigma^2), sigma = `BlockSpec.init_sigma` (HF's initializer_range
            for BERT- and Llama-family models that set another value; "bert" is sigma 0.02).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

if TYPE_CHECKING:  # annotations only: spec validates names against the registries
    from simlab.core.spec import BlockSpec

_MATRICES = ("wq", "wk", "wv", "wo", "w1", "w2")


def _fans(spec: BlockSpec, name: str) -> tuple[int, int]:
    d, f, g = spec.d_model, spec.mlp_width, spec.kv_heads * spec.d_head
    return {"w1": (d, f), "w2": (f, d), "w3": (d, f), "wk": (d, g), "wv": (d, g)}.get(name, (d, d))


def _shape(spec: BlockSpec, name: str) -> tuple[int, ...]:
    d, h, k, f, g = spec.d_model, spec.n_heads, spec.d_head, spec.mlp_width, spec.kv_heads
    return {
        "wq": (d, h, k),
        "wk": (d, g, k),
        "wv": (d, g, k),
        "wo": (h, k, d),
        "w1": (d, f),
        "w2": (f, d),
        "w3": (d, f),
    }[name]


def draws(key, shapes: Mapping[str, tuple], dtype=None, dist: str = "normal") -> dict:
    """Independent random arrays of the given shapes from ONE threefry call (`jax.random.bits`).

    shapes: name -> shape (of distribution `dist`), or name -> (shape, kind) with kind
    "normal" (N(0, 1)), "uniform" (U[0, 1)) or an int V (ids uniform in 0..V-1, bits mod V:
    bias < V / 2^32). Normals and uniforms are made in float32 from the bits (as
    jax.random.normal does: sqrt(2) erfinv of a uniform in (-1, 1)) and only then cast to
    `dtype` (None: jax's default float dtype), so a float64 run (JAX_ENABLE_X64=1) draws the
    very same sample as a float32 one. One call instead of one per array: XLA compiles each
    threefry call separately (docs/performance.md, "Engine changes")."""
    dtype = jnp.result_type(float) if dtype is None else dtype
    spec = {
        n: (s if isinstance(s, tuple) and len(s) == 2 and isinstance(s[0], tuple) else (s, dist))
        for n, s in shapes.items()
    }
    sizes = [math.prod(shape) for shape, _ in spec.values()]
    bits = jax.random.bits(key, (max(1, sum(sizes)),), jnp.uint32)
    out, start = {}, 0
    for (name, (shape, kind)), size in zip(spec.items(), sizes):
        b = bits[start : start + size].reshape(shape)
        start += size
        if isinstance(kind, int):
            out[name] = (b % jnp.uint32(kind)).astype(jnp.int32)
            continue
        # 23 random mantissa bits -> [1, 2) -> [0, 1) (jax.random.uniform's construction)
        u = jax.lax.bitcast_convert_type((b >> 9) | jnp.uint32(0x3F800000), jnp.float32) - 1.0
        if kind == "normal":
            lo = np.nextafter(np.float32(-1.0), np.float32(0.0))
            u = jnp.maximum(lo, u * (1.0 - lo) + lo)  # (-1, 1)
            u = np.float32(np.sqrt(2.0)) * jax.lax.erf_inv(u)
        elif kind != "uniform":
            raise ValueError(f"draws: unknown distribution {kind!r}")
        out[name] = u.astype(dtype)
    return out


def param_shapes(spec: BlockSpec) -> dict[str, tuple[int, ...]]:
    """The random weight matrices of a depth-L stack: name -> (L, ...) shape (wk and wv for the
    key/value heads; w3 only for a gated MLP, after the others, so that no other spec's draws
    move)."""
    names = (_MATRICES + (("w3",) if spec.gated_mlp else ())) if spec.mlp else _MATRICES[:4]
    return {n: (spec.depth,) + _shape(spec, n) for n in names}


def init_params(spec: BlockSpec, key=None, dtype=None, noise=None) -> dict[str, jax.Array]:
    """A depth-L stack of independently drawn layers: every leaf has a leading layer axis.
    Randomness: `noise` (name -> array of param_shapes, N(0, 1) or for glorot U[0, 1)) if
    given, else drawn from `key`. dtype None: jax's default float dtype."""
    dtype = jnp.result_type(float) if dtype is None else dtype
    d, h, k, L = spec.d_model, spec.n_heads, spec.d_head, spec.depth
    shapes = param_shapes(spec)
    if noise is None:
        noise = draws(key, shapes, dtype, "uniform" if spec.init == "glorot" else "normal")
    if spec.init == "glorot":
        p = {
            n: ((2.0 * noise[n] - 1.0) * math.sqrt(6.0 / sum(_fans(spec, n)))).astype(dtype)
            for n in shapes
        }
    else:
        p = {
            n: (
                noise[n]
                * {
                    "bert": 0.02,
                    "normal": spec.init_sigma,
                    "fan_in": spec.init_sigma / math.sqrt(_fans(spec, n)[0]),
                }[spec.init]
            ).astype(dtype)
            for n in shapes
        }
    if spec.kv_heads != h:  # grouped-query attention: each key/value head serves its group
        for n in ("wk", "wv"):
            p[n] = jnp.repeat(p[n], h // spec.kv_heads, axis=2)
    for n in ("bq", "bk", "bv"):
        p[n] = jnp.zeros((L, h, k), dtype)
    zeros, ones = jnp.zeros((L, d), dtype), jnp.ones((L, d), dtype)
    p.update(bo=zeros, ln1_g=ones, ln1_b=zeros, ln2_g=ones, ln2_b=zeros)
    if spec.mlp:
        p["b1"] = jnp.zeros((L, spec.mlp_width), dtype)
        p["b2"] = zeros
    if spec.qk_weights == "tied":  # W_K = W_Q (the draws of W_K are left unused)
        p["wk"] = p["wq"]
    elif spec.qk_weights == "identity":  # one head, d_head = d_model: q = k = v = x, W_O = I
        eye = jnp.broadcast_to(jnp.eye(d, dtype=dtype), (L, d, d))
        p.update(wq=eye[:, :, None, :], wk=eye[:, :, None, :], wv=eye[:, :, None, :])
        p["wo"] = eye[:, None, :, :]
    return p


def layer(params: dict[str, jax.Array], i: int) -> dict[str, jax.Array]:
    """Layer i of a stacked parameter dict."""
    return jax.tree.map(lambda a: a[i], params)
