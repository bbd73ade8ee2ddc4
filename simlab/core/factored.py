"""Factored layer-0 attention: the per-point work of a sweep reduced to a scaled sum of per-seed
score matrices, then the tiled softmax and A V W_O (simlab.core.tiled).

With inputs x = sum_c a_c X_c (simlab.core.inputs) and no norm between x and the projections
(kinds "attention", "post_ln"; no QK-norm), layer 0's shaped queries and keys are
    q_i' = q_scale (sum_c a_c Q_c,i + b_Q) + q_shift u_q,
    k_j' = k_scale (sum_c a_c K_c,j + b_K) + k_shift u_k,   Q_c = X_c W_Q, K_c = X_c W_K.
Softmax over j ignores every term of l_ij that is constant in j (docs/design.md): all key atoms
that do not vary with the position j (the drift u_b, the per-sequence z0, b_K, u_k) drop out
exactly. Only the position-varying component K_v (the input kind's `varying`: "x", or "z" for
gaussian inputs; coefficient a_v) survives:
    l_ij = c s_ij + (constant in j),   c = k_scale a_v / (sqrt(d_head) temperature),
    s_ij = q_scale a_v S_v,ij + [q_scale (sum_{c != v} a_c R_c,j + r_j) + q_shift t_j],
    S_v = Q_v K_v^T (per seed, stored in tile order), R_c = Q_c K_v^T (a row: Q_c is
    position-constant), r = b_Q K_v^T, t = u_q K_v^T.
The values split the same way: v_j = a_v V_v,j + (sum_{c != v} a_c V_c + b_V), the second
part constant over j, so (A v)_i = a_v (A V_v)_i + that constant (rows of A sum to 1): only
the per-seed V_v enters the tiled A V. So a point costs the softmax statistics and A V, not
the projections or Q K^T. The plain path (simlab.core.block.plain_attention) is the oracle.
"""

from __future__ import annotations

import jax.numpy as jnp

from simlab.core import tiled
from simlab.core.attention import scale_logits, shift_k, shift_q
from simlab.core.block import Attn


def hoist(p0, comps, proj, u_q_HK, tiling: tiled.Tiling, kv: str):
    """Per-seed pieces: S_v in tile order (B, Q, H, R, S), the rows R_c, r, t (B, H, 1, S), the
    values V_v (B, H, S, K) and the position-constant V_c, and the token means of Q_c and K_c
    for the drift statistics. kv: the position-varying component (the input kind's
    `varying`, simlab.core.inputs.INPUTS)."""
    q_BTHK, k_BSHK = proj[kv][0], proj[kv][1]
    b, t = q_BTHK.shape[:2]
    s_BHTS = jnp.einsum("bthk,bshk->bhts", q_BTHK, k_BSHK)
    h, s = s_BHTS.shape[1], s_BHTS.shape[-1]
    # tile order (B, Q, H, R, S): Q blocks of R query rows (simlab.core.tiled)
    s_BQHRS = s_BHTS.reshape(b, h, tiling.blocks, tiling.rows, s).transpose(0, 2, 1, 3, 4)
    rows = {
        c: jnp.einsum(
            "bthk,bshk->bhts",
            jnp.broadcast_to(proj[c][0], (b,) + proj[c][0].shape[1:]),  # Q_c (B, 1, H, K)
            k_BSHK,
        )
        for c in comps
        if c != kv
    }
    bq_HK = p0["bq"]
    rows["_bias"] = jnp.einsum("hk,bshk->bhs", bq_HK, k_BSHK)[:, :, None, :]
    rows["_shift"] = jnp.einsum("hk,bshk->bhs", u_q_HK, k_BSHK)[:, :, None, :]
    means = {
        c: (
            jnp.mean(jnp.broadcast_to(proj[c][0], q_BTHK.shape), axis=(0, 1)),
            jnp.mean(jnp.broadcast_to(proj[c][1], k_BSHK.shape), axis=(0, 1)),
        )
        for c in comps
    }
    return {
        "scores": s_BQHRS,
        "rows": rows,
        "v": jnp.swapaxes(proj[kv][2], 1, 2),
        "v_const": {c: proj[c][2] for c in comps if c != kv},
        "means": means,
    }


def attention(
    hoisted,
    coefs,
    knobs,
    p0,
    u_q_HK,
    u_k_HK,
    d_head: int,
    causal: bool,
    tiling: tiled.Tiling,
    kv: str,
) -> Attn:
    """Layer-0 attention sub-layer at one point (see the module docstring)."""
    rows, a_v = hoisted["rows"], coefs[kv]
    qs, ks = knobs["q_scale"], knobs["k_scale"]
    # the shaped query's j-dependent logit row, shift_q of (q . k_j, u_q . k_j): (B, H, 1, S)
    row = shift_q(
        sum(coefs[c] * rows[c] for c in coefs if c != kv) + rows["_bias"], rows["_shift"], knobs
    )
    factor = scale_logits(ks * a_v, d_head, knobs["temperature"], row.dtype)
    qa = qs * a_v
    rs = tiled.attend(
        tiling,
        lambda sx, rx: qa * sx + rx,
        factor,
        hoisted["scores"],
        row,
        hoisted["v"],
        p0["wo"],
        causal,
    )
    v_const_BSHK = sum(coefs[c] * hoisted["v_const"][c] for c in coefs if c != kv) + p0["bv"]
    wo_HKD = p0["wo"]
    out = a_v * rs.out + jnp.einsum("bshk,hkd->bsd", v_const_BSHK, wo_HKD) + p0["bo"]
    mq = sum(coefs[c] * hoisted["means"][c][0] for c in coefs) + p0["bq"]
    mk = sum(coefs[c] * hoisted["means"][c][1] for c in coefs) + p0["bk"]
    q_mean, k_mean = shift_q(mq, u_q_HK, knobs), shift_k(mk, u_k_HK, knobs)
    return Attn(out, rs.entropy, rs.max, q_mean, k_mean, None, rs.sink)
