"""The geometry of a cloud of hidden states beyond the cosine: its centred covariance's spectrum,
the split of its squared norm into a common and a private part, and the partition isotropy.

A cloud is n tokens x_i in R^d (x_ND, or x_BTD read as n = B T tokens; E is the second index of
a D x D map). Its mean xbar = (1/n) sum_i x_i and its centred covariance
C = (1/n) sum_i (x_i - xbar)(x_i - xbar)^T, eigenvalues lam_1 >= ... >= lam_d >= 0 (docs/
metrics.md: each definition, its source, its cost and when to use which):

  participation ratio  PR = (sum lam)^2 / sum lam^2 = tr(C)^2 / ||C||_F^2, in [1, rank C]
                       (Gao et al. 2017's dimensionality of a covariance); O(n d^2), no
                       eigensolver;
  effective rank       exp(H(p)), p_k = sigma_k / sum sigma, H the Shannon entropy, sigma the
                       singular values of the centred data X - 1 xbar^T (Roy & Vetterli 2007's
                       definition, as RankMe uses it): sigma_k = sqrt(n lam_k), so p_k =
                       sqrt(lam_k) / sum sqrt(lam); O(n d^2 + d^3);
  covariance effective rank
                       exp(H(q)), q_k = lam_k / sum lam: Roy & Vetterli's effective rank of the
                       matrix C (its singular values are the lam = sigma^2 / n), not of the data;
                       simlab's `effective_rank` metric before issue 50 (docs/metrics.md,
                       "Renamed"); lower than the data's effective rank when the spectrum is
                       uneven (squaring sharpens it);
  top-k share          (lam_1 + ... + lam_k) / sum lam: the variance in the top k principal
                       directions; O(n d^2 + d^3);
  IsoScore             Rudman et al. 2022, Algorithm 1 on the PCA variance vector (= lam):
                       lam^ = sqrt(d) lam / |lam|, delta = |lam^ - 1| / sqrt(2 (d - sqrt d)),
                       k = (d - delta^2 (d - sqrt d))^2 / d (the dimensions used, in [1, d]),
                       phi = k / d (their fraction), iota = (d phi - 1) / (d - 1).
                       Expanding, |lam^ - 1|^2 = 2 d - 2 sqrt(d) sum lam / |lam| gives
                       k = PR exactly, so iota = (PR - 1) / (d - 1): computed so (O(n d^2));
                       tests/core/test_geometry.py runs the algorithm step by step as the oracle;
  IsoScore*            Rudman & Eickhoff 2023: the same steps on the singular values of the
                       shrunk covariance (1 - zeta) S + zeta C0 (C0 from a larger sample, or
                       the identity): (PR((1 - zeta) S + zeta C0) - 1) / (d - 1); at zeta = 0 it
                       is IsoScore. S is the sample covariance with n - 1 (the authors' code
                       takes torch.cov: `sample_covariance`); with C0 = I the scale of S enters,
                       so n - 1 against n matters (`isoscore_star_identity`). A sweep point
                       has no larger sample: the registered metric shrinks towards the
                       isotropic covariance of the same total variance, C0 = (tr C / d) I
                       (scale-free, as IsoScore is), and then, with
                       a = (1 - zeta)^2, 1 / PR* = a / PR + (1 - a) / d exactly (tr C0 = tr C,
                       tr(C C0) = (tr C)^2 / d): a monotone function of PR; O(n d^2);
  partition isotropy   I = min_c Z(c) / max_c Z(c), Z(c) = sum_i exp(c . x_i), c over the unit
                       eigenvectors of X^T X (Mu & Viswanath 2018, after Arora et al. 2016);
                       "centred": the same on x_i - xbar and the eigenvectors of C. An
                       eigenvector's sign is arbitrary, so c runs over both signs (2 d
                       directions): well defined, and never above the paper's number for any
                       choice of signs. In log space (log-sum-exp), so nothing overflows;
                       O(n d^2 + d^3). It is not scale-free: I(s X) -> 0 as s grows;
  mean / variance      mean_i |x_i|^2 = |xbar|^2 + tr(C): the squared norm of the mean (the
                       common part) and the variance (the private parts), Yamagiwa &
                       Shimodaira 2024; the common share |xbar|^2 / mean_i |x_i|^2; the
                       variance also split within and between token types (variance_by_type:
                       within = (1/n) sum_i |x_i - xbar_t(i)|^2, between = (1/n) sum_t n_t
                       |xbar_t - xbar|^2, their sum the variance); O(n d), two passes (no
                       cancellation of |x|^2 against |xbar|^2), the types by a sort, O(n log n);
  rank-one residual    per sequence |X - 1 xbar^T|_F / |X|_F (Dong et al. 2021, res(X) with the
                       minimising x = xbar under the Frobenius norm; the same quantity as
                       simlab.studies.check_theory.reference.relative_residual), averaged; O(n d).

For unit vectors u_i the mean pairwise cosine is (n |ubar|^2 - 1) / (n - 1) (sum_{i != j} u_i .
u_j = n^2 |ubar|^2 - n): the cosine is the common share of unit vectors, and it cannot see how
the private parts are spread, which the spectrum can.

Streaming: the moments (n, xbar, n C) of a cloud are accumulated sequence by sequence in one
fixed order (`moments`, Chan, Golub & LeVeque 1979's pairwise update: exact in exact arithmetic,
no cancellation), so a cloud fed in micro-batches of whole sequences gives the same bits as one
batch. The partition isotropy needs the eigenvectors before its sums: a second pass.

A zero covariance (every token equal) has PR, effective rank, shares and IsoScore 0 (no
direction is used), as a zero Y has stable rank 0 (simlab.core.metrics.stable_rank); NaN or Inf
in the tokens stays NaN.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class Moments(NamedTuple):
    """The first two moments of n tokens: count n (scalar), mean xbar (D,), scatter
    m2 = sum_i (x_i - xbar)(x_i - xbar)^T (D, D) = n C."""

    n: jax.Array
    mean: jax.Array
    m2: jax.Array


def no_moments(d: int, dtype=None) -> Moments:
    """The moments of no tokens (the start of a stream)."""
    dtype = dtype or jnp.zeros(()).dtype
    return Moments(jnp.zeros((), dtype), jnp.zeros((d,), dtype), jnp.zeros((d, d), dtype))


def combine(a: Moments, b: Moments) -> Moments:
    """The moments of two disjoint sets (Chan, Golub & LeVeque 1979): with delta = mean_b -
    mean_a, n = n_a + n_b, mean = mean_a + delta n_b / n, m2 = m2_a + m2_b + delta delta^T
    n_a n_b / n. With n_a = 0 it returns b's moments exactly."""
    n = a.n + b.n
    w = b.n / jnp.where(n > 0, n, 1.0)
    delta = b.mean - a.mean
    mean = a.mean + delta * w
    m2 = a.m2 + b.m2 + jnp.outer(delta, delta) * (a.n * w)
    return Moments(n, mean, m2)


def sequence_moments(x_TD) -> Moments:
    """The moments of one sequence, two-pass (its mean first, then the centred scatter)."""
    mean = jnp.mean(x_TD, axis=0)
    c_TD = x_TD - mean
    return Moments(jnp.asarray(x_TD.shape[0], x_TD.dtype), mean, c_TD.T @ c_TD)


def moments(x_BTD, start: Moments | None = None) -> Moments:
    """The moments of all B T tokens, folded sequence by sequence in order onto `start` (default
    no tokens): moments(x[b:], moments(x[:b])) == moments(x) bit for bit."""
    start = no_moments(x_BTD.shape[-1], x_BTD.dtype) if start is None else start
    out, _ = jax.lax.scan(
        lambda acc, x_TD: (combine(acc, sequence_moments(x_TD)), None), start, x_BTD
    )
    return out


def covariance(m: Moments):
    """C = m2 / n (the population covariance; the scale-free measures do not depend on it)."""
    return m.m2 / jnp.where(m.n > 0, m.n, 1.0)


def sample_covariance(m: Moments):
    """S = m2 / (n - 1) (torch.cov's and np.cov's default, the unbiased estimate; 0 for n <= 1):
    what Rudman & Eickhoff's IsoScore* shrinks towards C0."""
    return m.m2 / jnp.where(m.n > 1, m.n - 1.0, 1.0)


def participation_ratio(c_DE):
    """tr(C)^2 / ||C||_F^2 of a PSD matrix (C rescaled by max|C| first, so the squares cannot
    overflow); clamped to its exact lower bound 1 (rounding can undercut it by an ulp); 0 for
    C = 0."""
    m = jnp.max(jnp.abs(c_DE))
    c = c_DE / jnp.where(m > 0, m, 1.0)
    tr, fro = jnp.trace(c), jnp.sum(c * c)
    return jnp.where(fro == 0, 0.0, jnp.maximum(tr * tr / jnp.where(fro == 0, 1.0, fro), 1.0))


def isoscore_of(c_DE):
    """IsoScore (Rudman et al. 2022) of a covariance: (PR - 1) / (d - 1) (module docstring;
    0 for C = 0, and for d = 1)."""
    d = c_DE.shape[-1]
    pr = participation_ratio(c_DE)
    return jnp.where(pr == 0, 0.0, (pr - 1.0) / max(d - 1, 1))


def isoscore_star(c_DE, zeta: float, c0_DE=None):
    """IsoScore* (Rudman & Eickhoff 2023) of a covariance shrunk towards c0 (default the
    identity, the authors' choice without a larger sample): IsoScore of (1 - zeta) C +
    zeta C0 (the singular values of a PSD matrix are its eigenvalues)."""
    c0 = jnp.eye(c_DE.shape[-1], dtype=c_DE.dtype) if c0_DE is None else c0_DE
    return isoscore_of((1.0 - zeta) * c_DE + zeta * c0)


def isoscore_star_identity(m: Moments, zeta: float):
    """IsoScore* as the authors' code computes it without a larger sample (I-STAR,
    regularizers.py, `isoscore_star(points, C0 = I, zeta)`): the sample covariance S =
    torch.cov(points) (n - 1) shrunk towards the identity, (1 - zeta) S + zeta I. Not
    scale-free: the points' units enter against I's."""
    return isoscore_star(sample_covariance(m), zeta)


def isotropic_target(c_DE):
    """(tr C / d) I: the isotropic covariance with C's total variance."""
    d = c_DE.shape[-1]
    return jnp.eye(d, dtype=c_DE.dtype) * (jnp.trace(c_DE) / d)


@jax.custom_batching.custom_vmap
def eigh(a_DE):
    """jnp.linalg.eigh of one symmetric matrix, (eigenvalues ascending, eigenvectors). Under
    vmap the matrices are decomposed one after another (lax.map): XLA:CPU's batched LAPACK
    eigh waits on the intra-op thread pool from inside it, and two of them at once have
    deadlocked a sweep on a 2-core machine (jaxlib 0.10.2; docs/metrics.md, "Cost")."""
    w, v = jnp.linalg.eigh(a_DE)
    return w, v


@eigh.def_vmap
def _eigh_vmap(axis_size, in_batched, a_PDE):
    if not in_batched[0]:
        return eigh(a_PDE), (False, False)
    return jax.lax.map(eigh, a_PDE), (True, True)


def spectrum(c_DE):
    """Eigenvalues of a PSD matrix, descending, rounding negatives set to 0."""
    return jnp.maximum(eigh(c_DE)[0][::-1], 0.0)


def cov_effective_rank(lam_D):
    """exp(-sum_k q_k log q_k), q = lam / sum lam (0 log 0 = 0; 0 for lam = 0): Roy & Vetterli
    2007's effective rank of the covariance matrix C, whose singular values are its eigenvalues
    lam = sigma^2 / n (sigma those of the centred data). simlab's `effective_rank` before issue
    50: data recorded under that name before then hold this (docs/metrics.md, "Renamed")."""
    tot = jnp.sum(lam_D)
    p = lam_D / jnp.where(tot == 0, 1.0, tot)
    h = -jnp.sum(p * jnp.log(jnp.where(p == 0, 1.0, p)))  # 0 log 0 = 0; NaN stays NaN
    return jnp.where(tot == 0, 0.0, jnp.exp(h))


def effective_rank(lam_D):
    """Roy & Vetterli 2007's effective rank of the centred data X - 1 xbar^T (as RankMe,
    Garrido et al. 2023, takes it): exp(-sum_k p_k log p_k), p = sigma / sum sigma, sigma its
    singular values, from the covariance's eigenvalues lam = sigma^2 / n (the sqrt(n) cancels
    in p): cov_effective_rank(sqrt(lam)). In [1, rank]; 0 for lam = 0.

    Eigenvalues at or below numpy.linalg.matrix_rank's tolerance, lam_max d eps (eps of the
    dtype), count as 0: the eigensolver does not resolve them (a zero eigenvalue comes out as
    +-eps lam_max), and their square roots, sqrt(eps) sigma_max, would add noise to p. So in
    float32 directions with sigma below sqrt(d eps) sigma_max (1% at d = 768) are not counted;
    under x64, below 4e-7 at d = 768 (docs/metrics.md, "Renamed")."""
    tol = jnp.max(lam_D) * lam_D.shape[-1] * jnp.finfo(lam_D.dtype).eps
    return cov_effective_rank(jnp.sqrt(jnp.where(lam_D <= tol, 0.0, lam_D)))  # NaN stays NaN


def top_share(lam_D, k: int):
    """(lam_1 + ... + lam_k) / sum lam for descending lam (1 where k >= d; 0 for lam = 0)."""
    tot = jnp.sum(lam_D)
    return jnp.where(tot == 0, 0.0, jnp.sum(lam_D[:k]) / jnp.where(tot == 0, 1.0, tot))


def partition_isotropy(x_ND, centred: bool = False):
    """Mu & Viswanath 2018's I = min_c Z(c) / max_c Z(c), Z(c) = sum_i exp(c . x_i), c over +-
    the unit eigenvectors of X^T X (centred: of the centred X, on the centred tokens). From
    log Z(c) = logsumexp_i(c . x_i): I = exp(min log Z - max log Z), in [0, 1]."""
    if centred:
        x_ND = x_ND - jnp.mean(x_ND, axis=0)
    m = jnp.max(jnp.abs(x_ND))
    xs = x_ND / jnp.where(m > 0, m, 1.0)  # the eigenvectors of a rescaled X^T X are the same
    _, c_DE = eigh(xs.T @ xs)
    v_ND = x_ND @ c_DE
    log_z = jnp.concatenate([jax.nn.logsumexp(v_ND, axis=0), jax.nn.logsumexp(-v_ND, axis=0)])
    return jnp.exp(jnp.min(log_z) - jnp.max(log_z))


def mean_variance(x_ND):
    """(|xbar|^2, mean_i |x_i - xbar|^2): the squared norm of the mean and the variance, whose
    sum is mean_i |x_i|^2 (Yamagiwa & Shimodaira 2024); two passes."""
    mean = jnp.mean(x_ND, axis=0)
    c = x_ND - mean
    return jnp.sum(mean * mean), jnp.mean(jnp.sum(c * c, axis=-1))


def common_share(x_ND):
    """|xbar|^2 / mean_i |x_i|^2 (rescaled by max|x| first; 0 for x = 0): the share of the mean
    squared norm that the tokens' common mean holds; for unit vectors it is
    ((n - 1) cos + 1) / n, cos the mean pairwise cosine."""
    m = jnp.max(jnp.abs(x_ND))
    mean_sq, var = mean_variance(x_ND / jnp.where(m > 0, m, 1.0))
    tot = mean_sq + var
    return jnp.where(tot == 0, 0.0, mean_sq / jnp.where(tot == 0, 1.0, tot))


def types_of(ids_N):
    """The ids renumbered 0 .. (number of distinct ids - 1) in increasing order of id (a sort:
    no vocabulary-sized array), for variance_by_type with n_types = n."""
    _, inverse = jnp.unique(ids_N, size=ids_N.shape[0], return_inverse=True)
    return inverse.reshape(ids_N.shape)


def variance_by_type(x_ND, ids_N, n_types: int | None = None):
    """(within, between): the variance mean_i |x_i - xbar|^2 split over token types t (ids in
    [0, n_types)): within = (1/n) sum_i |x_i - xbar_t(i)|^2, between = (1/n) sum_t n_t
    |xbar_t - xbar|^2; within + between = the variance (the law of total variance). n_types
    None: any ids, renumbered first (types_of)."""
    n = x_ND.shape[0]
    if n_types is None:
        ids_N, n_types = types_of(ids_N), n
    counts_T = jax.ops.segment_sum(jnp.ones((n,), x_ND.dtype), ids_N, n_types)
    sums_TD = jax.ops.segment_sum(x_ND, ids_N, n_types)
    means_TD = sums_TD / jnp.where(counts_T > 0, counts_T, 1.0)[:, None]
    c_ND = x_ND - means_TD[ids_N]
    within = jnp.mean(jnp.sum(c_ND * c_ND, axis=-1))
    d_TD = means_TD - jnp.mean(x_ND, axis=0)
    between = jnp.sum(counts_T * jnp.sum(d_TD * d_TD, axis=-1)) / n
    return within, between


def rank_one_residual(x_BTD):
    """Mean over sequences of |X - 1 xbar^T|_F / |X|_F (0 for X = 0), rescaled per sequence by
    max|X| so that the squares cannot overflow: how far each sequence is from one repeated
    token (Dong et al. 2021)."""
    m = jnp.max(jnp.abs(x_BTD), axis=(-2, -1), keepdims=True)
    xs = x_BTD / jnp.where(m > 0, m, 1.0)
    c = xs - jnp.mean(xs, axis=-2, keepdims=True)
    num, den = jnp.sum(c * c, axis=(-2, -1)), jnp.sum(xs * xs, axis=(-2, -1))
    return jnp.mean(jnp.where(den == 0, 0.0, jnp.sqrt(num / jnp.where(den == 0, 1.0, den))))
