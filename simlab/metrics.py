"""Exact metrics as pure functions of a block's intermediates.

Anisotropy (mean pairwise cosine over distinct pairs, Ethayarajh 2019; Godey et al. 2024)
is computed exactly in O(n d) from unit vectors u_i = x_i / |x_i|:
    cos = (|sum_i u_i|^2 - sum_i |u_i|^2) / (n (n - 1)).
A zero vector has u_i = 0: its cosine with every other vector counts as 0, and it still
counts in the n (n - 1) pairs (so n zero vectors give 0, not NaN).

Speed (docs/performance.md): the stable rank needs only the top eigenvalue of a Gram matrix,
so it never calls a full eigensolver (jnp.linalg.eigvalsh computes the eigenvectors too, on
CPU: 0.23 s per paper-size point on 2 idle cores, over 5 s when the cores are shared, against
0.05 s for `top_eigenvalue`).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from simlab import attention


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
    """(global cosine over all B*T tokens, mean over sequences of the within-sequence cosine),
    from one pass of unit vectors: per sequence s_b = sum_t u_bt and q_b = sum_t |u_bt|^2;
    global (|sum_b s_b|^2 - sum_b q_b) / (n (n - 1)), n = B T; within (|s_b|^2 - q_b) /
    (T (T - 1)). Counts in float (no int32 overflow of n (n - 1) for large n)."""
    b, t, _ = x_BTD.shape
    u = unit_vectors(x_BTD)
    # the barrier keeps XLA from fusing the per-sequence sums (and so the unit vectors) into
    # each of their consumers: without it this took 3.5x longer at paper size on XLA:CPU.
    s_BD, q_B = jax.lax.optimization_barrier((jnp.sum(u, axis=1), jnp.sum(u * u, axis=(1, 2))))
    s_D = jnp.sum(s_BD, axis=0)
    n = float(b * t)
    glob = (jnp.sum(s_D * s_D) - jnp.sum(q_B)) / (n * (n - 1.0))
    within = (jnp.sum(s_BD * s_BD, axis=-1) - q_B) / (float(t) * (t - 1.0))
    return glob, jnp.mean(within)


def _row_weights(t: int, s: int, causal: bool):
    """Number of attended keys per query row and which rows count for the entropy."""
    n_keys = jnp.minimum(jnp.arange(1, t + 1), s) if causal else jnp.full((t,), s)
    return n_keys, n_keys > 1


def entropy_of_rows(h_BHT, keys: int, causal: bool):
    """Mean over rows of H_i / log(n_i) from per-row entropies H_i in nats (B, H, T), n_i the
    number of attended keys: 1 = uniform, 0 = one-hot. Rows with a single attended key (the
    first causal row) are excluded."""
    b, h, t = h_BHT.shape
    n_keys, valid = _row_weights(t, keys, causal)
    norm = jnp.log(jnp.where(valid, n_keys, 2).astype(h_BHT.dtype))
    h_BHT = jnp.where(valid, h_BHT / norm, 0.0)
    return jnp.sum(h_BHT) / (jnp.sum(valid) * b * h)


def attn_entropy(w_BHTS, causal: bool):
    """Mean over rows of H(w_i) / log(n_i) of full weights (B, H, T, S); 0 log 0 = 0."""
    return entropy_of_rows(attention.row_entropy(w_BHTS), w_BHTS.shape[-1], causal)


def attn_max(w_BHTS):
    """Mean over all rows of max_j w_ij."""
    return jnp.mean(jnp.max(w_BHTS, axis=-1))


# Lanczos steps for the top eigenvalue of a Gram matrix larger than LANCZOS_STEPS x LANCZOS_STEPS.
LANCZOS_STEPS = 64


def tridiagonal_top(d, e, rounds: int = 4, shifts: int = 63):
    """Largest eigenvalue of the symmetric tridiagonal matrices with diagonal d (..., m) and
    off-diagonal e (..., m - 1), by multisection on Sturm counts (Wilkinson 1965; LAPACK sstebz):
    the number of negative pivots of the LDL^T factorisation of T - s I is the number of
    eigenvalues below s. The start interval [max_i d_i, max_i (d_i + |e_i-1| + |e_i|)]
    (Rayleigh quotient / Gershgorin) shrinks by 1 + shifts per round: 64^4 = 2^24, to within
    float32 rounding of the top eigenvalue."""
    m = d.shape[-1]
    ae = jnp.abs(e)
    z = jnp.zeros_like(d[..., :1])
    lo = jnp.max(d, axis=-1)
    hi = jnp.max(d + jnp.concatenate([ae, z], -1) + jnp.concatenate([z, ae], -1), axis=-1)
    e2 = jnp.concatenate([z, e * e], -1)                   # e2[i] couples rows i - 1 and i
    pivmin = jnp.finfo(d.dtype).tiny * jnp.maximum(1.0, jnp.max(e2, axis=-1))[..., None]
    frac = jnp.arange(1, shifts + 1, dtype=d.dtype) / (shifts + 1)
    d_M, e2_M = jnp.moveaxis(d, -1, 0)[..., None], jnp.moveaxis(e2, -1, 0)[..., None]

    def one_round(_, lo_hi):
        lo, hi = lo_hi
        s = lo[..., None] + (hi - lo)[..., None] * frac   # (..., shifts)

        def pivot(carry, de):
            q, neg = carry
            di, e2i = de
            q = (di - s) - e2i / jnp.where(jnp.abs(q) < pivmin, -pivmin, q)
            return (q, neg + (q < 0)), None
        (_, neg), _ = jax.lax.scan(pivot, (jnp.ones_like(s), jnp.zeros_like(s, jnp.int32)),
                                   (d_M, e2_M), unroll=4)
        above = neg < m                                      # some eigenvalue >= s
        return (jnp.max(jnp.where(above, s, lo[..., None]), axis=-1),
                jnp.min(jnp.where(above, hi[..., None], s), axis=-1))
    lo, hi = jax.lax.fori_loop(0, rounds, one_round, (lo, hi))
    return 0.5 * (lo + hi)


def lanczos_tridiagonal(g, steps: int):
    """(d, e) of the tridiagonal Lanczos matrix V^T g V of symmetric g (..., n, n) after
    `steps` steps with full reorthogonalisation (two Gram-Schmidt passes) from a fixed
    pseudo-random start vector (Golub & Van Loan, Matrix Computations, 4th ed., sec. 10.1).
    Its top eigenvalue is a lower bound on g's that converges like a Chebyshev polynomial of
    degree `steps` in the relative gap. A breakdown (the residual below 10 sqrt(n) eps |g v|:
    an invariant subspace) stops the recursion: the remaining rows of (d, e) are zero."""
    n = g.shape[-1]
    v0 = np.random.default_rng(0).standard_normal(n)
    v0 = jnp.asarray(v0 / np.linalg.norm(v0), g.dtype)
    breakdown = 10.0 * np.sqrt(n) * float(jnp.finfo(g.dtype).eps)
    # *_like(g): the loop carries must vary like g inside shard_map (simlab.sweep)
    V = jnp.zeros_like(g[..., :steps, :]).at[..., 0, :].set(v0)

    def step(j, carry):
        V, alpha, beta = carry
        v = jax.lax.dynamic_index_in_dim(V, j, axis=-2, keepdims=False)
        w = jnp.einsum("...ij,...j->...i", g, v)
        a = jnp.sum(v * w, axis=-1)
        scale = jnp.sqrt(jnp.sum(w * w, axis=-1))
        for _ in range(2):
            w = w - jnp.einsum("...k,...kn->...n", jnp.einsum("...kn,...n->...k", V, w), V)
        b = jnp.sqrt(jnp.sum(w * w, axis=-1))
        # Breakdown: what is left of g v is rounding noise, which no reorthogonalisation makes
        # orthogonal; the Krylov space is invariant and already holds the top eigenvalue.
        b = jnp.where(b > breakdown * scale, b, 0.0)
        v_next = jnp.where(b[..., None] > 0, w / jnp.where(b > 0, b, 1.0)[..., None], 0.0)
        V = V.at[..., j + 1, :].set(v_next, mode="drop")
        return V, alpha.at[..., j].set(a), beta.at[..., j].set(b)
    zeros = jnp.zeros_like(g[..., 0, :steps])
    _, alpha, beta = jax.lax.fori_loop(0, steps, step, (V, zeros, zeros))
    return alpha, beta[..., :-1]


def top_eigenvalue(g, steps: int = LANCZOS_STEPS):
    """Largest eigenvalue of symmetric positive semi-definite g (..., n, n).

    n <= steps: exact (LAPACK tridiagonalisation, jax.lax.linalg.tridiagonal, then
    `tridiagonal_top`). n > steps: `steps` Lanczos steps, then `tridiagonal_top`; on Gram
    matrices of block outputs (n = 512, every kind of block and input, knobs from 0.1 to 100)
    32 steps already reach float32 rounding (<= 3e-7 relative to float64 eigvalsh), an isotropic
    Gaussian 512 x 768 matrix (the smallest relative gap we found) needs ~50: 64 keeps a margin.
    Synthetic spectra crowded at the top converge slower (eigenvalues sqrt(1 - k/512): 1e-4
    relative after 64 steps; the Ritz value is a lower bound, so the stable rank errs high).
    Either way 2x (64 x 64) to 4x (512 x 512) faster than jnp.linalg.eigvalsh on 2 idle CPU
    cores, and far less sensitive to shared cores (no OpenBLAS threads for n > 64)."""
    n = g.shape[-1]
    if n <= steps:
        _, d, e, _ = jax.lax.linalg.tridiagonal(g)
    else:
        d, e = lanczos_tridiagonal(g, steps)
    return tridiagonal_top(d, e)


def stable_rank(y_BTD):
    """Mean over sequences of ||Y||_F^2 / ||Y||_2^2 (Y: T x D); ||Y||_2^2 is the top eigenvalue
    of the smaller Gram matrix (`top_eigenvalue`: exact up to 64 x 64, Lanczos beyond, converged
    to float32 rounding). A zero Y counts as stable rank 0."""
    _, t, d = y_BTD.shape
    m = jnp.max(jnp.abs(y_BTD), axis=(-2, -1), keepdims=True)
    y = y_BTD / jnp.where(m > 0, m, 1.0)
    gram = jnp.einsum("btd,bsd->bts", y, y) if t <= d else jnp.einsum("btd,bte->bde", y, y)
    top = top_eigenvalue(gram)
    fro = jnp.sum(y * y, axis=(-2, -1))
    return jnp.mean(jnp.where(top > 0, fro / jnp.where(top > 0, top, 1.0), 0.0))


def qk_drift(q_BTHK, k_BSHK):
    """Per head: the mean query and mean key over all tokens of the batch; returns the
    head averages of |mean q|, |mean k| and cos(mean q, mean k) (0 if either is zero)."""
    return qk_mean_stats(jnp.mean(q_BTHK, axis=(0, 1)), jnp.mean(k_BSHK, axis=(0, 1)))


def qk_mean_stats(mq_HK, mk_HK):
    """Head averages of |mean q|, |mean k| and cos(mean q, mean k) from the means (H, K)."""
    nq, nk = jnp.linalg.norm(mq_HK, axis=-1), jnp.linalg.norm(mk_HK, axis=-1)
    dot = jnp.sum(unit_vectors(mq_HK) * unit_vectors(mk_HK), axis=-1)
    return jnp.mean(nq), jnp.mean(nk), jnp.mean(dot)


METRIC_NAMES = ("input_cos", "input_cos_within", "attn_cos", "attn_cos_within", "out_cos",
                "out_cos_within", "attn_entropy", "attn_max", "stable_rank", "q_mean_norm",
                "k_mean_norm", "qk_mean_cos")


def layer_metrics(names, causal: bool, layer) -> dict[str, jax.Array]:
    """The requested metrics of one layer (simlab.block.Layer): input x, attention sub-layer
    output attn, output y (all (B, T, D)), per-row entropies and maxima (B, H, T), the mean
    shaped query and key (H, K). No metric needs the full attention weights."""
    out = {}
    for tag, arr in (("input", layer.x), ("attn", layer.attn), ("out", layer.y)):
        if f"{tag}_cos" in names or f"{tag}_cos_within" in names:
            out[f"{tag}_cos"], out[f"{tag}_cos_within"] = anisotropy(arr)
    if "attn_entropy" in names:
        out["attn_entropy"] = entropy_of_rows(layer.row_entropy, layer.x.shape[1], causal)
    if "attn_max" in names:
        out["attn_max"] = jnp.mean(layer.row_max)
    if "stable_rank" in names:
        out["stable_rank"] = stable_rank(layer.y)
    if {"q_mean_norm", "k_mean_norm", "qk_mean_cos"} & set(names):
        out["q_mean_norm"], out["k_mean_norm"], out["qk_mean_cos"] = \
            qk_mean_stats(layer.q_mean, layer.k_mean)
    return {n: out[n] for n in names}
