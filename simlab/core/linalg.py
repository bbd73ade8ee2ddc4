"""Unit vectors (the cosines' normalisation), and the top eigenvalue of symmetric positive
semi-definite matrices, for the stable rank: Lanczos with full reorthogonalisation (complete,
so exact up to rounding, up to LANCZOS_STEPS x LANCZOS_STEPS; LANCZOS_STEPS steps beyond), then
Sturm-count multisection on the tridiagonal matrix (docs/performance.md: no full eigensolver,
no eigenvectors). Matrices are (..., n, n), written with ellipsis einsums; the Lanczos basis V
is (..., steps, n).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def unit_vectors(x):
    """x / |x| along the last axis; zero rows stay zero, a row holding NaN or Inf becomes NaN
    (never a plausible 0). Rescaled by max|x| first so that |x|^2 cannot overflow for huge
    drifts."""
    m = jnp.max(jnp.abs(x), axis=-1, keepdims=True)
    xs = x / jnp.where(m > 0, m, 1.0)
    n = jnp.linalg.norm(xs, axis=-1, keepdims=True)
    return jnp.where(n == 0, 0.0, xs / jnp.where(n == 0, 1.0, n))


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
    e2 = jnp.concatenate([z, e * e], -1)  # e2[i] couples rows i - 1 and i
    pivmin = jnp.finfo(d.dtype).tiny * jnp.maximum(1.0, jnp.max(e2, axis=-1))[..., None]
    frac = jnp.arange(1, shifts + 1, dtype=d.dtype) / (shifts + 1)
    d_M, e2_M = jnp.moveaxis(d, -1, 0)[..., None], jnp.moveaxis(e2, -1, 0)[..., None]

    def one_round(_, lo_hi):
        lo, hi = lo_hi
        s = lo[..., None] + (hi - lo)[..., None] * frac  # (..., shifts)

        def pivot(carry, de):
            q, neg = carry
            di, e2i = de
            q = (di - s) - e2i / jnp.where(jnp.abs(q) < pivmin, -pivmin, q)
            return (q, neg + (q < 0)), None

        (_, neg), _ = jax.lax.scan(
            pivot, (jnp.ones_like(s), jnp.zeros_like(s, jnp.int32)), (d_M, e2_M), unroll=4
        )
        above = neg < m  # some eigenvalue >= s
        return (
            jnp.max(jnp.where(above, s, lo[..., None]), axis=-1),
            jnp.min(jnp.where(above, hi[..., None], s), axis=-1),
        )

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
    # *_like(g): the loop carries must vary like g inside shard_map (simlab.engine.sweep)
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

    n <= steps: n Lanczos steps with full reorthogonalisation, a complete tridiagonalisation
    (exact up to rounding), then `tridiagonal_top`. Pure XLA on purpose: LAPACK's (jax.lax.linalg
    .tridiagonal) hung sweeps on several CPU devices under shard_map (docs/performance.md,
    "Findings cited in the code"). n > steps: `steps` Lanczos steps, then `tridiagonal_top`; on Gram
    matrices of block outputs (n = 512, every kind of block and input, knobs from 0.1 to 100)
    32 steps already reach float32 rounding (<= 3e-7 relative to float64 eigvalsh), an isotropic
    Gaussian 512 x 768 matrix (the smallest relative gap we found) needs ~50: 64 keeps a margin.
    Synthetic spectra crowded at the top converge slower (eigenvalues sqrt(1 - k/512): 1e-4
    relative after 64 steps; the Ritz value is a lower bound, so the stable rank errs high).
    Faster than jnp.linalg.eigvalsh on CPU and far less sensitive to shared cores (no OpenBLAS
    threads for n > 64; docs/performance.md, "Findings cited in the code")."""
    d, e = lanczos_tridiagonal(g, min(g.shape[-1], steps))
    return tridiagonal_top(d, e)
