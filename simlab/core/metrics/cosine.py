"""Mean pairwise cosines (anisotropy), exact in O(n d).

Anisotropy (mean pairwise cosine over distinct pairs, Ethayarajh 2019; Godey et al. 2024)
is computed exactly in O(n d) from unit vectors u_i = x_i / |x_i|:
    cos = (|sum_i u_i|^2 - sum_i |u_i|^2) / (n (n - 1)).
A zero vector has u_i = 0: its cosine with every other vector counts as 0, and it still
counts in the n (n - 1) pairs (so n zero vectors give 0, not NaN). The centred cosines apply
the same formula to x_i - xbar, the mean of the set removed first (`centred`,
`anisotropy_centred`): a vector common to every token, which moves the raw cosine toward 1,
leaves them unchanged by construction.
Their split into pairs within and between sequences: simlab.core.metrics.pairs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from simlab.core.linalg import unit_vectors


def mean_pairwise_cos(x_ND):
    """Mean cosine over the n (n - 1) ordered distinct pairs of rows of x (..., n, d); the
    count in float (n (n - 1) overflows int32 from n = 46342)."""
    u = unit_vectors(x_ND)
    n = float(x_ND.shape[-2])
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
    # each of their consumers (docs/performance.md, "Engine changes", item 4).
    s_BD, q_B = jax.lax.optimization_barrier((jnp.sum(u, axis=1), jnp.sum(u * u, axis=(1, 2))))
    s_D = jnp.sum(s_BD, axis=0)
    n = float(b * t)
    glob = (jnp.sum(s_D * s_D) - jnp.sum(q_B)) / (n * (n - 1.0))
    within = (jnp.sum(s_BD * s_BD, axis=-1) - q_B) / (float(t) * (t - 1.0))
    return glob, jnp.mean(within)


def pair_split(x_BTD):
    """(pooled within-sequence cosine, between-sequence cosine) of x (B, T, D): the mean cosine
    over the B T (T - 1) ordered pairs i != j of one sequence, and over the B (B - 1) T^2
    ordered pairs of two different sequences (each distinct pair in exactly one; the identity
    that mixes them into the global cosine: simlab.core.metrics.pairs). With one sequence
    (B = 1) there is no pair between sequences: NaN."""
    b, t, _ = x_BTD.shape
    u = unit_vectors(x_BTD)
    s_BD, q_B = jax.lax.optimization_barrier((jnp.sum(u, axis=1), jnp.sum(u * u, axis=(1, 2))))
    s_D = jnp.sum(s_BD, axis=0)
    own = jnp.sum(s_BD * s_BD)  # sum_b |s_b|^2: every ordered pair within a sequence, and i = i
    within = (own - jnp.sum(q_B)) / (float(b) * t * (t - 1.0))
    pairs = float(b) * (b - 1.0) * float(t) * t
    between = (jnp.sum(s_D * s_D) - own) / (pairs if b > 1 else jnp.nan)
    return within, between


def centred(x_ND):
    """Rows of x (..., n, d) minus their mean over the n rows, c_i = x_i - xbar with
    xbar = (1/n) sum_i x_i, computed so that a common vector much larger than the spread
    cancels: x is divided by the power of two 2^e >= max|x| (exact: no rounding, no overflow
    of the sums), then the corrected two-pass algorithm (Chan, Golub & LeVeque 1983,
    "Algorithms for computing the sample variance"): c = x - mean(x), then c - mean(c). The
    first mean is off by ~eps |xbar|; where x_i and the mean agree to a factor 2, x_i - mean is
    exact (Sterbenz), so that error is the same vector in every row and the second pass removes
    it. The centred rows are then accurate to a few float32 ulp of the spread itself, however
    large the common vector (the float32 input holds the spread to eps |x_i|: a spread below
    that is not in the input)."""
    m = jnp.max(jnp.abs(x_ND), axis=(-2, -1), keepdims=True)
    f, _ = jnp.frexp(m)
    p = jnp.where(m > 0, m / jnp.where(m > 0, f, 1.0), 1.0)  # m = f 2^e, f in [1/2, 1): 2^e
    x = x_ND / p
    c = x - jnp.mean(x, axis=-2, keepdims=True)
    return c - jnp.mean(c, axis=-2, keepdims=True)


def anisotropy_centred(x_BTD):
    """(global, within-sequence) mean pairwise cosine of the mean-centred tokens: global over
    the n = B T vectors x_bt - xbar, xbar the mean over all B T tokens; within, per sequence
    over the T vectors x_bt - xbar_b, xbar_b that sequence's mean, averaged over sequences.
    Both exact in O(n d) (`centred`, then `mean_pairwise_cos`). Centring removes every vector
    common to the set by construction: cos(x + v) = cos(x) for any v (for the within-sequence
    one, any v_b per sequence). For n vectors of equal centred norm sum_i u_i = 0, so the value
    is exactly -1/(n-1); it lies in [-1/(n-1), 1) in general (the zero-vector convention of
    `mean_pairwise_cos`: a set of equal tokens gives 0). The mean removal is that of Mu &
    Viswanath 2018 ("All-but-the-Top", ICLR); whether the anisotropy of Transformer states is
    more than such a common vector: Machina & Mercer 2024 ("Anisotropy is Not Inherent to
    Transformers", NAACL)."""
    b, t, d = x_BTD.shape
    glob = mean_pairwise_cos(centred(x_BTD.reshape(b * t, d)))
    return glob, jnp.mean(mean_pairwise_cos(centred(x_BTD)))
