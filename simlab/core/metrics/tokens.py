"""Token-wise statistics of a layer's fields: the stable rank of a sequence, a branch's size
and direction against its input token and the mean query and key."""

from __future__ import annotations

import jax.numpy as jnp

from simlab.core.linalg import top_eigenvalue, unit_vectors


def stable_rank(y_BTD):
    """Mean over sequences of ||Y||_F^2 / ||Y||_2^2 (Y: T x D); ||Y||_2^2 is the top eigenvalue
    of the smaller Gram matrix (`top_eigenvalue`: exact up to 64 x 64, Lanczos beyond, converged
    to float32 rounding). A zero Y counts as stable rank 0; otherwise the ratio is clamped to
    its exact lower bound 1 (||Y||_2 <= ||Y||_F), which rounding can undercut by an ulp."""
    _, t, d = y_BTD.shape
    m = jnp.max(jnp.abs(y_BTD), axis=(-2, -1), keepdims=True)
    y_BTD = y_BTD / jnp.where(m > 0, m, 1.0)
    # the smaller Gram matrix: (B, T, S) over tokens, or (B, D, E) over features
    gram = (
        jnp.einsum("btd,bsd->bts", y_BTD, y_BTD)
        if t <= d
        else jnp.einsum("btd,bte->bde", y_BTD, y_BTD)
    )
    top = top_eigenvalue(gram)
    fro = jnp.sum(y_BTD * y_BTD, axis=(-2, -1))
    ratio = jnp.maximum(fro / jnp.where(top > 0, top, 1.0), 1.0)
    return jnp.mean(jnp.where(top > 0, ratio, 0.0))


def residual_ratio(a_BTD, x_BTD):
    """mean_i |a_i| / |x_i| over all B * T tokens (0 where x_i = 0). Both norms are taken
    after dividing by max_d |x_i| so that |x|^2 cannot overflow."""
    m = jnp.max(jnp.abs(x_BTD), axis=-1, keepdims=True)
    m = jnp.where(m > 0, m, 1.0)
    na = jnp.linalg.norm(a_BTD / m, axis=-1)
    nx = jnp.linalg.norm(x_BTD / m, axis=-1)
    return jnp.mean(jnp.where(nx > 0, na / jnp.where(nx > 0, nx, 1.0), 0.0))


def token_cos(a_BTD, x_BTD):
    """mean_i cos(a_i, x_i) over all B * T tokens: how much of each token's own direction a
    branch's output a_i carries (a zero vector has cosine 0 with everything)."""
    return jnp.mean(jnp.sum(unit_vectors(a_BTD) * unit_vectors(x_BTD), axis=-1))


def qk_drift(q_BTHK, k_BSHK):
    """Per head: the mean query and mean key over all tokens of the batch; returns the
    head averages of |mean q|, |mean k| and cos(mean q, mean k) (0 if either is zero)."""
    return qk_mean_stats(jnp.mean(q_BTHK, axis=(0, 1)), jnp.mean(k_BSHK, axis=(0, 1)))


def qk_mean_stats(mq_HK, mk_HK):
    """Head averages of |mean q|, |mean k| and cos(mean q, mean k) from the means (H, K)."""
    nq, nk = jnp.linalg.norm(mq_HK, axis=-1), jnp.linalg.norm(mk_HK, axis=-1)
    dot = jnp.sum(unit_vectors(mq_HK) * unit_vectors(mk_HK), axis=-1)
    return jnp.mean(nq), jnp.mean(nk), jnp.mean(dot)
