"""Weights of a block (or a depth-L stack) from a PRNG key.

Layout of one layer (head-split einsum weights; D = d_model, H = heads, K = d_head, F = MLP):
  wq, wk, wv: (D, H, K)   bq, bk, bv: (H, K)    wo: (H, K, D)   bo: (D,)
  ln1_g, ln1_b, ln2_g, ln2_b: (D,)              w1: (D, F) b1: (F,)   w2: (F, D) b2: (D,)
  w3: (D, F), only for a kind with a gated MLP (simlab.core.block.gated_mlp: HF's up_proj)
  ln1_<place>_g, ln1_<place>_b, ...: (D,), a branch's second norm (simlab.core.structure: e.g.
            Peri-LN's ln1_out), only where the structure declares one
A stack stores every leaf with a leading layer axis L; layers are independent draws.
The structure data of the spec (simlab.core.spec.BlockSpec): `w_o` false: no W_O is drawn, wo is
the identity (H, K, D) reshaped from I_D and bo 0, so every attention path computes the heads'
outputs concatenated, exactly (products by 1 and sums of 0); `head_dim`: K itself;
`init_var`: the variance of the named matrices (replacing sigma^2 of the scheme); `bias_var`:
the named biases drawn N(0, v), after every weight matrix in the same single draw, so that no
other spec's draws move.
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
    d, f, g, hk = (
        spec.d_model,
        spec.mlp_width,
        spec.kv_heads * spec.d_head,
        spec.n_heads * spec.d_head,
    )
    return {
        "wq": (d, hk),
        "wo": (hk, d),
        "w1": (d, f),
        "w2": (f, d),
        "w3": (d, f),
        "wk": (d, g),
        "wv": (d, g),
    }[name]


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
        "bq": (h, k),
        "bk": (g, k),
        "bv": (g, k),
        "bo": (d,),
        "b1": (f,),
        "b2": (d,),
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
    """The random weights of a depth-L stack: name -> (L, ...) shape (wk and wv for the
    key/value heads; w3 only for a gated MLP, after the others, and the biases with a variance
    (bias_var) after every matrix, so that no other spec's draws move; no wo without W_O)."""
    names = (_MATRICES + (("w3",) if spec.gated_mlp else ())) if spec.mlp else _MATRICES[:4]
    names = tuple(n for n in names if spec.w_o or n != "wo")
    mlp_biases = ("b1", "b2") if spec.mlp else ()
    names += tuple(n for n in ("bq", "bk", "bv", "bo") + mlp_biases if spec.bias_variance(n) > 0)
    return {n: (spec.depth,) + _shape(spec, n) for n in names}


def _scale(spec: BlockSpec, name: str) -> float:
    """The standard deviation of matrix `name`'s N(0, 1) draw under the spec's scheme, with
    init_var's variance where it names the matrix."""
    v = spec.init_variance(name)
    if v is None:
        return {
            "bert": 0.02,
            "normal": spec.init_sigma,
            "fan_in": spec.init_sigma / math.sqrt(_fans(spec, name)[0]),
        }[spec.init]
    return math.sqrt(v / _fans(spec, name)[0]) if spec.init == "fan_in" else math.sqrt(v)


def init_params(spec: BlockSpec, key=None, dtype=None, noise=None) -> dict[str, jax.Array]:
    """A depth-L stack of independently drawn layers: every leaf has a leading layer axis.
    Randomness: `noise` (name -> array of param_shapes, N(0, 1) or for glorot U[0, 1)) if
    given, else drawn from `key`. dtype None: jax's default float dtype."""
    dtype = jnp.result_type(float) if dtype is None else dtype
    d, h, k, L = spec.d_model, spec.n_heads, spec.d_head, spec.depth
    shapes = param_shapes(spec)
    if noise is None:
        noise = draws(key, shapes, dtype, "uniform" if spec.init == "glorot" else "normal")
    matrices = [n for n in shapes if n[0] == "w"]
    if spec.init == "glorot":
        p = {
            n: ((2.0 * noise[n] - 1.0) * math.sqrt(6.0 / sum(_fans(spec, n)))).astype(dtype)
            for n in matrices
        }
    else:
        p = {n: (noise[n] * _scale(spec, n)).astype(dtype) for n in matrices}
    biases = {n: noise[n] * math.sqrt(spec.bias_variance(n)) for n in shapes if n[0] == "b"}
    if not spec.w_o:  # no output projection: the heads' outputs concatenated (W_O = I)
        p["wo"] = jnp.broadcast_to(jnp.eye(d, dtype=dtype).reshape(h, k, d), (L, h, k, d))
    if spec.kv_heads != h:  # grouped-query attention: each key/value head serves its group
        for n in ("wk", "wv", "bk", "bv"):
            if n in p or n in biases:
                src = p if n in p else biases
                src[n] = jnp.repeat(src[n], h // spec.kv_heads, axis=-2 if n[0] == "b" else 2)
    for n in ("bq", "bk", "bv"):
        p[n] = biases[n].astype(dtype) if n in biases else jnp.zeros((L, h, k), dtype)
    zeros, ones = jnp.zeros((L, d), dtype), jnp.ones((L, d), dtype)
    p.update(bo=zeros, ln1_g=ones, ln1_b=zeros, ln2_g=ones, ln2_b=zeros)
    structure = spec.structure
    for leaf in () if structure is None else structure.extra_leaves():
        p.update({f"{leaf}_g": ones, f"{leaf}_b": zeros})
    if spec.mlp:
        p["b1"] = jnp.zeros((L, spec.mlp_width), dtype)
        p["b2"] = zeros
    p.update({n: b.astype(dtype) for n, b in biases.items() if n in ("bo", "b1", "b2")})
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
