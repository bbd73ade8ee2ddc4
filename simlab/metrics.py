"""Exact metrics as pure functions of a block's intermediates.

Anisotropy (mean pairwise cosine over distinct pairs, Ethayarajh 2019; Godey et al. 2024)
is computed exactly in O(n d) from unit vectors u_i = x_i / |x_i|:
    cos = (|sum_i u_i|^2 - sum_i |u_i|^2) / (n (n - 1)).
A zero vector has u_i = 0: its cosine with every other vector counts as 0, and it still
counts in the n (n - 1) pairs (so n zero vectors give 0, not NaN).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def unit_vectors(x):
    """x / |x| along the last axis; zero rows stay zero. Rescaled by max|x| first so that
    |x|^2 cannot overflow for huge drifts."""
    m = jnp.max(jnp.abs(x), axis=-1, keepdims=True)
    xs = x / jnp.where(m > 0, m, 1.0)
    n = jnp.linalg.norm(xs, axis=-1, keepdims=True)
    return jnp.where(n > 0, xs / jnp.where(n > 0, n, 1.0), 0.0)


def mean_pairwise_cos(x_ND):
    """Mean cosine over the n (n - 1) ordered distinct pairs of rows of x (..., n, d)."""
    u = unit_vectors(x_ND)
    n = x_ND.shape[-2]
    s = jnp.sum(u, axis=-2)
    num = jnp.sum(s * s, axis=-1) - jnp.sum(u * u, axis=(-2, -1))
    return num / (n * (n - 1))


def anisotropy(x_BTD):
    """(global cosine over all B*T tokens, mean over sequences of the within-sequence cosine)."""
    b, t, d = x_BTD.shape
    return mean_pairwise_cos(x_BTD.reshape(b * t, d)), jnp.mean(mean_pairwise_cos(x_BTD))


def _row_weights(t: int, s: int, causal: bool):
    """Number of attended keys per query row and which rows count for the entropy."""
    n_keys = jnp.minimum(jnp.arange(1, t + 1), s) if causal else jnp.full((t,), s)
    return n_keys, n_keys > 1


def attn_entropy(w_BHTS, causal: bool):
    """Mean over rows of H(w_i) / log(n_i): 1 = uniform, 0 = one-hot. Rows with a single
    attended key (the first causal row) are excluded. 0 log 0 = 0."""
    _, _, t, s = w_BHTS.shape
    n_keys, valid = _row_weights(t, s, causal)
    logw = jnp.log(jnp.where(w_BHTS > 0, w_BHTS, 1.0))
    h_BHT = -jnp.sum(w_BHTS * logw, axis=-1)
    norm = jnp.log(jnp.where(valid, n_keys, 2).astype(h_BHT.dtype))
    h_BHT = jnp.where(valid, h_BHT / norm, 0.0)
    return jnp.sum(h_BHT) / (jnp.sum(valid) * w_BHTS.shape[0] * w_BHTS.shape[1])


def attn_max(w_BHTS):
    """Mean over all rows of max_j w_ij."""
    return jnp.mean(jnp.max(w_BHTS, axis=-1))


def stable_rank(y_BTD):
    """Mean over sequences of ||Y||_F^2 / ||Y||_2^2 (Y: T x D), exact: ||Y||_2^2 is the top
    eigenvalue of the smaller Gram matrix. A zero Y counts as stable rank 0."""
    _, t, d = y_BTD.shape
    m = jnp.max(jnp.abs(y_BTD), axis=(-2, -1), keepdims=True)
    y = y_BTD / jnp.where(m > 0, m, 1.0)
    gram = jnp.einsum("btd,bsd->bts", y, y) if t <= d else jnp.einsum("btd,bte->bde", y, y)
    top = jnp.linalg.eigvalsh(gram)[..., -1]
    fro = jnp.sum(y * y, axis=(-2, -1))
    return jnp.mean(jnp.where(top > 0, fro / jnp.where(top > 0, top, 1.0), 0.0))


def qk_drift(q_BTHK, k_BSHK):
    """Per head: the mean query and mean key over all tokens of the batch; returns the
    head averages of |mean q|, |mean k| and cos(mean q, mean k) (0 if either is zero)."""
    mq_HK = jnp.mean(q_BTHK, axis=(0, 1))
    mk_HK = jnp.mean(k_BSHK, axis=(0, 1))
    nq, nk = jnp.linalg.norm(mq_HK, axis=-1), jnp.linalg.norm(mk_HK, axis=-1)
    dot = jnp.sum(unit_vectors(mq_HK) * unit_vectors(mk_HK), axis=-1)
    return jnp.mean(nq), jnp.mean(nk), jnp.mean(dot)


METRIC_NAMES = ("input_cos", "input_cos_within", "attn_cos", "attn_cos_within", "out_cos",
                "out_cos_within", "attn_entropy", "attn_max", "stable_rank", "q_mean_norm",
                "k_mean_norm", "qk_mean_cos")


def layer_metrics(names, causal: bool, x, attn, y, w, q, k) -> dict[str, jax.Array]:
    """The requested metrics of one layer from its input x, attention sub-layer output attn,
    output y (all (B, T, D)), weights w (B, H, T, S), shaped queries q and keys k."""
    out = {}
    for tag, arr in (("input", x), ("attn", attn), ("out", y)):
        if f"{tag}_cos" in names or f"{tag}_cos_within" in names:
            out[f"{tag}_cos"], out[f"{tag}_cos_within"] = anisotropy(arr)
    if "attn_entropy" in names:
        out["attn_entropy"] = attn_entropy(w, causal)
    if "attn_max" in names:
        out["attn_max"] = attn_max(w)
    if "stable_rank" in names:
        out["stable_rank"] = stable_rank(y)
    if {"q_mean_norm", "k_mean_norm", "qk_mean_cos"} & set(names):
        out["q_mean_norm"], out["k_mean_norm"], out["qk_mean_cos"] = qk_drift(q, k)
    return {n: out[n] for n in names}
