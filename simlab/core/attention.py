"""Multi-head self-attention as pure functions with the knobs of simlab.

For head h with d_head = K (Vaswani et al. 2017; knobs as in docs/design.md):
  q_i = x_i W_Q + b_Q,  k_j = x_j W_K + b_K,  v_j = x_j W_V + b_V
  QK-norm (optional, per head): q_i <- gain * N(q_i), k_j <- gain * N(k_j), N = LayerNorm
  (mean-centred, no bias, as flax's normalize_qk) or RMSNorm (Dehghani et al. 2023)
  rotary embeddings (optional): q_i <- R_i q_i, k_j <- R_j k_j (simlab.core.rotary)
  q_i' = q_scale * q_i + q_shift * u_q,   k_j' = k_scale * k_j + k_shift * u_k
  l_ij = q_i' . k_j' / (sqrt(K) * temperature),  w_ij = softmax_j(l_ij)  (float32)
  out_i = sum_h sum_j w_ij v_j W_O + b_O
A causal mask keeps j <= i.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp

from simlab.core import rotary

QK_NORM_EPS = 1e-6  # flax.linen.LayerNorm's default epsilon


def layer_norm(x, g, b, eps):
    """(x - mean) / sqrt(var + eps) * g + b over the last axis (statistics in float32)."""
    x32 = x.astype(jnp.promote_types(x.dtype, jnp.float32))
    mu = jnp.mean(x32, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x32 - mu), axis=-1, keepdims=True)
    y = (x32 - mu) * jax.lax.rsqrt(var + eps)
    return (y * g + b).astype(x.dtype) if g is not None else y.astype(x.dtype)


def rms_norm(x, eps):
    """x / sqrt(mean(x^2) + eps) over the last axis."""
    x32 = x.astype(jnp.promote_types(x.dtype, jnp.float32))
    return (x32 * jax.lax.rsqrt(jnp.mean(jnp.square(x32), -1, keepdims=True) + eps)).astype(x.dtype)


def project(w_DHK, b_HK, x_BTD):
    """Head-split projection x W + b: (B, T, D) -> (B, T, H, K)."""
    return jnp.einsum("btd,dhk->bthk", x_BTD, w_DHK) + b_HK


def normalize_qk(q_BTHK, k_BSHK, knobs: Mapping[str, jax.Array], qk_norm: str):
    """QK-norm (times qk_norm_gain) of the projected queries and keys; identity for "none"."""
    if qk_norm == "none":
        return q_BTHK, k_BSHK
    norm = (
        (lambda t: layer_norm(t, None, None, QK_NORM_EPS))
        if qk_norm == "layernorm"
        else (lambda t: rms_norm(t, QK_NORM_EPS))
    )
    return knobs["qk_norm_gain"] * norm(q_BTHK), knobs["qk_norm_gain"] * norm(k_BSHK)


def shift_q(q, u_q, knobs: Mapping[str, jax.Array]):
    """q' = q_scale q + q_shift u_q: the query shaping, written once. It is linear in (q, u_q),
    so it applies unchanged to any linear image of both: a mean over tokens, or the factored
    path's logit rows (q . k_j beside u_q . k_j, simlab.core.factored)."""
    return knobs["q_scale"] * q + knobs["q_shift"] * u_q


def shift_k(k, u_k, knobs: Mapping[str, jax.Array]):
    """k' = k_scale k + k_shift u_k: the key shaping, written once (linear, as shift_q)."""
    return knobs["k_scale"] * k + knobs["k_shift"] * u_k


def shape_q(
    q_BTHK,
    k_BSHK,
    knobs: Mapping[str, jax.Array],
    u_q_HK,
    qk_norm: str,
    rotary_dims: int = 0,
    rotary_base: float = 10000.0,
):
    """(q', k): QK-norm of both (times qk_norm_gain), rotary embeddings of both on their first
    rotary_dims dims (simlab.core.rotary; none for 0), then the shaped queries `shift_q`, and
    the keys normalised (and rotated) only. Every path that projects tokens starts here (the
    factored path, which never forms q, applies shift_q and shift_k to its hoisted pieces);
    k_scale and the key shift are the caller's: the plain path multiplies the keys, the tiled
    and factored paths keep k_scale in the scalar factor of the logits (`scale_logits`), and the
    shift's term q'_i . u_k is constant over j (softmax ignores it); the key means are
    `shift_k` of the mean key on every path."""
    q_BTHK, k_BSHK = normalize_qk(q_BTHK, k_BSHK, knobs, qk_norm)
    if rotary_dims:
        q_BTHK = rotary.rotate(q_BTHK, rotary_dims, rotary_base)
        k_BSHK = rotary.rotate(k_BSHK, rotary_dims, rotary_base)
    return shift_q(q_BTHK, u_q_HK, knobs), k_BSHK


def shape_qk(
    q_BTHK,
    k_BSHK,
    knobs: Mapping[str, jax.Array],
    u_q_HK,
    u_k_HK,
    qk_norm: str,
    rotary_dims: int = 0,
    rotary_base: float = 10000.0,
):
    """(q', k'): `shape_q`, then k' = `shift_k`(k)."""
    q_BTHK, k_BSHK = shape_q(q_BTHK, k_BSHK, knobs, u_q_HK, qk_norm, rotary_dims, rotary_base)
    return q_BTHK, shift_k(k_BSHK, u_k_HK, knobs)


def scale_logits(x, d_head: int, temperature, dtype=None):
    """x / (sqrt(d_head) temperature), sqrt(d_head) formed in `dtype` (None: x's, at least
    float32): the logits l_ij from the scores q'_i . k'_j (the plain path), or the scalar factor
    that the tiled and factored paths keep apart from their scores (k_scale, times the input
    coefficient a_v when factored)."""
    dtype = jnp.promote_types(jnp.result_type(x), jnp.float32) if dtype is None else dtype
    return x / (jnp.sqrt(jnp.asarray(d_head, dtype)) * temperature)


def causal_mask(t: int, s: int) -> jax.Array:
    """(T, S) boolean, True where key j <= query i."""
    return jnp.arange(s)[None, :] <= jnp.arange(t)[:, None]


def attention_weights(q_BTHK, k_BSHK, temperature, causal: bool, kept=None):
    """softmax_j(q_i . k_j / (sqrt(K) * temperature)) in float32: (B, H, T, S); kept: a boolean
    mask of the attended keys ((T, S) or (H, T, S); simlab.core.sinks.attended), None: all."""
    d_head = q_BTHK.shape[-1]
    f32 = jnp.promote_types(q_BTHK.dtype, jnp.float32)
    logits_BHTS = jnp.einsum("bthk,bshk->bhts", q_BTHK.astype(f32), k_BSHK.astype(f32))
    logits_BHTS = scale_logits(logits_BHTS, d_head, temperature, f32)
    if causal:
        mask = causal_mask(q_BTHK.shape[1], k_BSHK.shape[1])
        logits_BHTS = jnp.where(mask, logits_BHTS, -jnp.inf)
    if kept is not None:
        logits_BHTS = jnp.where(kept, logits_BHTS, -jnp.inf)
    return jax.nn.softmax(logits_BHTS, axis=-1)


def row_entropy(w_BHTS):
    """H(w_i) = -sum_j w_ij log w_ij in nats per row (B, H, T); 0 log 0 = 0. (The plain path's
    formula, on the full weights; the tiled path computes it from the log-sum-exp.)
    log(max(w, tiny)) rather than a select: the same for every normal w, and on XLA:CPU the
    select feeding the row reduction split the fusion (docs/performance.md, "Findings cited in
    the code")."""
    return -jnp.einsum(
        "bhts,bhts->bht", w_BHTS, jnp.log(jnp.maximum(w_BHTS, jnp.finfo(w_BHTS.dtype).tiny))
    )


def attend(w_BHTS, v_BSHK, wo_HKD, bo_D):
    """sum_h sum_j w_ij v_j W_O + b_O: (B, T, D)."""
    o_BTHK = jnp.einsum("bhts,bshk->bthk", w_BHTS.astype(v_BSHK.dtype), v_BSHK)
    return jnp.einsum("bthk,hkd->btd", o_BTHK, wo_HKD) + bo_D
