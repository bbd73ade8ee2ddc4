"""Factored layer-0 logits: the per-point work of a sweep reduced to a scaled sum of per-seed
matrices, then softmax and A V.

With inputs x = sum_c a_c X_c (simlab.inputs) and no norm between x and the projections
(kinds "attention", "post_ln"; no QK-norm), layer 0's shaped queries and keys are
    q_i' = q_scale (sum_c a_c Q_c,i + b_Q) + q_shift u_q,
    k_j' = k_scale (sum_c a_c K_c,j + b_K) + k_shift u_k,   Q_c = X_c W_Q, K_c = X_c W_K.
Softmax over j ignores every term of l_ij that is constant in j (DESIGN.md): all key atoms
that do not vary with the position j (the drift u_b, the per-sequence z0, b_K, u_k) drop out
exactly. Only the position-varying component K_v (c = "x", or "z" for gaussian inputs, with
coefficient a_v) survives:
    l_ij = k_scale a_v / (sqrt(d_head) temperature)
           * [q_scale (sum_c a_c S_c,ij + r_ij) + q_shift t_ij] + (constant in j),
    S_c = Q_c K_v^T (per seed; a row vector for position-constant Q_c), r = b_Q K_v^T,
    t = u_q K_v^T.
So the logits cost O(B H T S) per point instead of O(B H T S d_head). Only the softmax,
A V and what follows remain per point. (This is the lead of the performance issue; the
plain path in simlab.attention is the oracle it is tested against.)
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

VARYING = ("x", "z")  # the components that change with the position j


def hoist(p0, comps, proj, u_q_HK):
    """Per-seed pieces: S_c for every query component, r (b_Q row), t (u_q row), and the
    token means of Q_c and K_c for the drift statistics."""
    (kv,) = [c for c in comps if c in VARYING]
    k_BSHK = proj[kv][1]
    batch = k_BSHK.shape[0]
    rows = {c: jnp.einsum("bthk,bshk->bhts",
                          jnp.broadcast_to(proj[c][0], (batch,) + proj[c][0].shape[1:]), k_BSHK)
            for c in comps}
    rows["_bias"] = jnp.einsum("hk,bshk->bhs", p0["bq"], k_BSHK)[:, :, None, :]
    rows["_shift"] = jnp.einsum("hk,bshk->bhs", u_q_HK, k_BSHK)[:, :, None, :]
    means = {c: (jnp.mean(jnp.broadcast_to(proj[c][0], proj[kv][0].shape), axis=(0, 1)),
                 jnp.mean(jnp.broadcast_to(proj[c][1], proj[kv][1].shape), axis=(0, 1)))
             for c in comps}
    return {"rows": rows, "means": means}


def weights(hoisted, coefs, knobs, d_head: int, causal: bool, bq_HK, bk_HK, u_q_HK, u_k_HK):
    """Layer-0 attention weights (B, H, T, S) and the mean shaped query / key (1, 1, H, K)."""
    rows = hoisted["rows"]
    (kv,) = [c for c in coefs if c in VARYING]
    qs, ks = knobs["q_scale"], knobs["k_scale"]
    s = sum(coefs[c] * rows[c] for c in coefs) + rows["_bias"]
    logits = (qs * s + knobs["q_shift"] * rows["_shift"]) * \
        (ks * coefs[kv] / (jnp.sqrt(jnp.asarray(d_head, s.dtype)) * knobs["temperature"]))
    if causal:
        t, n = logits.shape[-2:]
        logits = jnp.where(jnp.arange(n)[None, :] <= jnp.arange(t)[:, None], logits, -jnp.inf)
    w = jax.nn.softmax(logits, axis=-1)
    mq = sum(coefs[c] * hoisted["means"][c][0] for c in coefs) + bq_HK
    mk = sum(coefs[c] * hoisted["means"][c][1] for c in coefs) + bk_HK
    q_mean = qs * mq + knobs["q_shift"] * u_q_HK
    k_mean = ks * mk + knobs["k_shift"] * u_k_HK
    return w, q_mean[None, None], k_mean[None, None]
