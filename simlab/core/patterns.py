"""Attention-pattern clamps: weights that replace the softmax's, everything else of the block
(weights, inputs, V, W_O, residuals, norms, MLP) left as it is, so that the sharpness of the
attention and its sharing across queries can be set independently of the input
(`BlockSpec.pattern`; docs/instruments.md, "Attention-pattern clamps").

Row i of a sequence attends to n_i keys (n_i = S, or i + 1 under the causal mask). A clamped row
puts the weight p_i on one target key t_i and o_i on each of the n_i - 1 others:

    p_i = e^beta / (e^beta + n_i - 1),      o_i = (1 - p_i) / (n_i - 1) = 1 / (e^beta + n_i - 1)

with beta = pattern_beta >= 0 (a traced knob) and the target
    "token":   t_i = i   (each query its own key: a token-specific pattern)
    "shared":  t_i = 0   (the first key of the sequence for every query: one shared pattern)
    "uniform": beta = 0  (p_i = o_i = 1 / n_i: 1/S per key, 1/(i+1) under the causal mask)
Both targets are attended under the causal mask. At equal beta the shared and token patterns have
exactly the same row entropy and maximum; they differ only in sharing. With r_i = (n_i - 1) e^-beta
(computed so that nothing overflows for any finite beta):

    p_i = 1 / (1 + r_i),   o_i = e^-beta / (1 + r_i),
    H_i = -p_i log p_i - (n_i - 1) o_i log o_i = log(1 + r_i) + (n_i - 1) o_i beta   (nats),
    max_j w_ij = p_i   (p_i >= o_i for beta >= 0).

A V from the closed form, in O(T D) per sequence, never a (B, H, T, S) array: the pattern is the
same in every head, so with vo_j = sum_h v_jh W_O,h (D) and C_i = sum_{j attended} vo_j (a sum
over the sequence, or a cumulative sum under the causal mask),

    out_i = o_i C_i + (p_i - o_i) vo_{t_i}       (then + b_O).

`weights` builds the full (B, H, T, S) weights explicitly: the plain path, the oracle.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp

from simlab.core import attention

CLAMPS = ("uniform", "shared", "token")  # the clamped patterns of simlab.core.spec.PATTERNS


def beta(pattern: str, knobs: Mapping[str, jax.Array]) -> jax.Array:
    """The sharpness beta of a clamped pattern: 0 for "uniform", the knob pattern_beta else."""
    b = knobs["pattern_beta"]
    return jnp.zeros_like(b) if pattern == "uniform" else b


def n_keys(t: int, s: int, causal: bool, dtype) -> jax.Array:
    """Attended keys per query row (T,): S, or min(i + 1, S) under the causal mask."""
    n = jnp.minimum(jnp.arange(1, t + 1), s) if causal else jnp.full((t,), s)
    return n.astype(dtype)


def row_stats(beta_, n_T):
    """(p, o, H): the target's weight, each other key's weight and the row entropy (nats) of
    rows with n_T attended keys at sharpness beta (the module docstring's closed forms)."""
    e = jnp.exp(-beta_)
    r = (n_T - 1.0) * e
    p = 1.0 / (1.0 + r)
    o = e / (1.0 + r)
    return p, o, jnp.log1p(r) + (n_T - 1.0) * o * beta_


def targets(pattern: str, t: int, s: int) -> jax.Array:
    """(T, S) boolean: True at the target key t_i of row i (i for "token", 0 for "shared" and
    "uniform", where the target's weight equals the others')."""
    j = jnp.arange(s)[None, :]
    return j == (jnp.arange(t)[:, None] if pattern == "token" else 0)


def weights(pattern: str, beta_, batch: int, heads: int, t: int, s: int, causal: bool, dtype):
    """The full weights (B, H, T, S) of a clamped pattern (the plain path's oracle): p_i at the
    target, o_i at every other attended key, 0 where masked ("uniform": beta taken as 0)."""
    beta_ = jnp.zeros_like(beta_) if pattern == "uniform" else beta_
    p, o, _ = row_stats(beta_, n_keys(t, s, causal, dtype))
    w_TS = jnp.where(targets(pattern, t, s), p[:, None], o[:, None])
    if causal:
        w_TS = jnp.where(attention.causal_mask(t, s), w_TS, 0.0)
    return jnp.broadcast_to(w_TS, (batch, heads, t, s))


def attend(pattern: str, beta_, v_BSHK, wo_HKD, causal: bool):
    """(out (B, T, D) without b_O, row entropy (T,), row max (T,)) of a clamped pattern from
    the closed form: out_i = o_i C_i + (p_i - o_i) vo_{t_i} (the module docstring;
    "uniform": beta taken as 0)."""
    beta_ = jnp.zeros_like(beta_) if pattern == "uniform" else beta_
    vo_BSD = jnp.einsum("bshk,hkd->bsd", v_BSHK, wo_HKD)
    t = s = vo_BSD.shape[1]
    p, o, h = row_stats(beta_, n_keys(t, s, causal, vo_BSD.dtype))
    c_BTD = jnp.cumsum(vo_BSD, axis=1) if causal else jnp.sum(vo_BSD, axis=1, keepdims=True)
    out = o[:, None] * c_BTD
    if pattern != "uniform":
        target_BTD = vo_BSD if pattern == "token" else vo_BSD[:, :1]
        out = out + (p - o)[:, None] * target_BTD
    return out, h, p
