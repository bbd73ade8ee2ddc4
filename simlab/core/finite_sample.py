"""What the covariance measures read on an isotropic cloud of the same size: the finite-sample
reference that tells a sample-size effect from a geometry effect (issue 50; docs/metrics.md,
"Sample size").

A covariance measure of n tokens in d dimensions depends on n as well as on the geometry: n
tokens drawn from an isotropic Gaussian N(0, s^2 I_d) do not give an isotropic sample covariance
(its eigenvalues spread, Marchenko & Pastur 1967), so their participation ratio is about
n d / (n + d), not d. The reference of a measure is its expected value over such samples, for
the centred covariance simlab computes (simlab.core.geometry): with m = n - 1 (the mean is
removed), n C = sum_i (x_i - xbar)(x_i - xbar)^T is Wishart W_d(m, s^2 I).

Closed forms (exact; for m, d >= 1). With X the d x m Gaussian matrix behind n C = X X^T, tr(n C)
= |X|_F^2 and the direction X / |X|_F are independent (a Gaussian vector's norm and direction
are), and 1 / PR = tr(C^2) / tr(C)^2 depends on the direction alone, so
E[tr(nC)^2] E[1 / PR] = E[tr((nC)^2)]. With E[tr(nC)^2] = m d (m d + 2) (a chi-square of m d
degrees of freedom) and E[tr((nC)^2)] = m d (m + d + 1) (Wishart's second moment):

  E[1 / PR] = (m + d + 1) / (m d + 2),     PR_iso = 1 / E[1 / PR] = (m d + 2) / (m + d + 1)

PR_iso is the harmonic mean of PR over isotropic samples, ~ m d / (m + d) for large m and d.
E[PR] itself exceeds it by Jensen's gap, Var(1/PR) / E[1/PR]^3 to second order: measured by
`isotropic_moments` (Monte Carlo), under 2e-3 relative for n d >= 1000 (docs/metrics.md). From
the same E[1/PR]: IsoScore = (PR - 1) / (d - 1) and IsoScore* towards (tr C / d) I, whose
1 / PR* = a / PR + (1 - a) / d (a = (1 - zeta)^2), get the harmonic references
(PR_iso - 1) / (d - 1) and 1 / (a E[1/PR] + (1 - a) / d) rescaled alike.

Monte Carlo (every other measure): `isotropic_moments(measure, n, d, draws, seed)` draws `draws`
samples with numpy's PCG64 generator seeded by `seed` (the same draws on every machine and every
call; the eigenvalues to LAPACK's rounding), in float64. The spectrum measures (effective rank, the
covariance's effective rank, top-k shares, PR, IsoScore, IsoScore*) draw the spectrum of W_d(m, I)
directly by Dumitriu & Edelman's bidiagonal model (`isotropic_spectra`; for m < d the non-zero
eigenvalues of W_d(m, I) are those of W_m(d, I)), in O(min(m, d)^2) per draw; the measures that need
the points (partition isotropy raw and centred, and IsoScore* with C0 = I, which is not scale-free)
draw the n x d points themselves at per-coordinate standard deviation `scale`. It returns (mean,
standard error of the mean).
`isotropic_reference(measure, n, d)` is the mean: the closed form where one exists (the
harmonic ones above), else the Monte Carlo mean at REFERENCE_DRAWS draws (POINT_DRAWS for the
measures that draw the points) and seed 0.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np

REFERENCE_DRAWS = 64  # Monte Carlo draws of isotropic_reference (seed REFERENCE_SEED)
POINT_DRAWS = 16  # the same for the measures that draw the n x d points (FROM_POINTS)
REFERENCE_SEED = 0
ISOSCORE_STAR_ZETA = 0.2  # as simlab.core.metrics.ISOSCORE_STAR_ZETA (the registered metric)

SPECTRAL = (
    "participation_ratio",
    "isoscore",
    "isoscore_star",
    "effective_rank",
    "cov_effective_rank",
    "pc1_share",
    "pc10_share",
)
FROM_POINTS = ("partition_iso", "partition_iso_centred", "isoscore_star_identity")
MEASURES = SPECTRAL + FROM_POINTS
CLOSED_FORM = ("participation_ratio", "isoscore", "isoscore_star")


class Estimate(NamedTuple):
    """A Monte Carlo mean with its standard error over `draws` independent draws."""

    mean: float
    sem: float
    draws: int


def _check(measure: str, n: int, d: int) -> int:
    if measure not in MEASURES:
        raise ValueError(f"measure {measure!r}: not one of {', '.join(MEASURES)}")
    if int(n) != n or int(d) != d or n < 2 or d < 1:
        raise ValueError(f"n {n!r}, d {d!r}: need whole numbers n >= 2 tokens, d >= 1 dims")
    return int(n) - 1  # m: the Wishart degrees of freedom of the centred scatter


def inverse_pr_mean(n: int, d: int) -> float:
    """E[1 / PR] over isotropic Gaussian samples of n tokens in d dimensions (centred
    covariance): (m + d + 1) / (m d + 2), m = n - 1; exact (module docstring)."""
    m = _check("participation_ratio", n, d)
    return (m + d + 1) / (m * d + 2)


def participation_ratio_iso(n: int, d: int) -> float:
    """1 / E[1 / PR] = (m d + 2) / (m + d + 1), m = n - 1: the harmonic mean of the
    participation ratio of isotropic Gaussian samples of n tokens in d dimensions; exact."""
    return 1.0 / inverse_pr_mean(n, d)


def _closed_form(measure: str, n: int, d: int, zeta: float) -> float:
    h = inverse_pr_mean(n, d)
    if measure == "participation_ratio":
        return 1.0 / h
    if measure == "isoscore":
        return (1.0 / h - 1.0) / max(d - 1, 1)
    a = (1.0 - zeta) ** 2  # isoscore_star towards (tr C / d) I: 1/PR* = a/PR + (1 - a)/d
    return (1.0 / (a * h + (1.0 - a) / d) - 1.0) / max(d - 1, 1)


def isotropic_spectra(n: int, d: int, draws: int, seed: int = REFERENCE_SEED) -> np.ndarray:
    """(draws, d) eigenvalues, descending, of the scatter n C of `draws` isotropic Gaussian
    samples of n tokens in d dimensions (n C ~ W_d(n - 1, I)): W_p(k, I), p = min(n - 1, d),
    k = max(n - 1, d), has the eigenvalues of B B^T, B lower bidiagonal with B_ii ~ chi(k - i)
    and B_(i+1)i ~ chi(p - 1 - i) (Dumitriu & Edelman 2002, the Laguerre ensemble at beta = 1:
    Bartlett's decomposition reduced by Householder steps), a tridiagonal eigenproblem,
    O(p^2) per draw; zeros past rank p. float64, seeded."""
    from scipy.linalg import eigvalsh_tridiagonal

    m = _check("participation_ratio", n, d)
    p, k = min(m, d), max(m, d)
    rng = np.random.default_rng(seed)
    out = np.zeros((draws, d))
    for i in range(draws):
        diag = np.sqrt(rng.chisquare(k - np.arange(p)))
        sub = np.sqrt(rng.chisquare(p - 1 - np.arange(p - 1))) if p > 1 else np.zeros(0)
        t_diag = diag**2 + np.r_[0.0, sub**2]  # (B B^T)_ii = B_ii^2 + B_i(i-1)^2
        t_off = sub * diag[:-1]  # (B B^T)_(i+1)i = B_(i+1)i B_ii
        lam = eigvalsh_tridiagonal(t_diag, t_off, lapack_driver="stemr") if p > 1 else t_diag
        out[i, :p] = np.maximum(lam[::-1], 0.0)
    return out


def spectral_measure(measure: str, lam: np.ndarray, zeta: float = ISOSCORE_STAR_ZETA):
    """A spectrum measure of descending eigenvalues lam (..., d), in numpy float64: the same
    definitions as simlab.core.geometry (docs/metrics.md)."""
    d = lam.shape[-1]
    tot = lam.sum(-1)

    def entropy_rank(w):
        p = w / w.sum(-1, keepdims=True)
        return np.exp(-np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), -1))

    if measure == "participation_ratio":
        return tot**2 / np.sum(lam**2, -1)
    if measure == "isoscore":
        return (tot**2 / np.sum(lam**2, -1) - 1.0) / max(d - 1, 1)
    if measure == "isoscore_star":
        a = (1.0 - zeta) ** 2
        pr = tot**2 / np.sum(lam**2, -1)
        return (1.0 / (a / pr + (1.0 - a) / d) - 1.0) / max(d - 1, 1)
    if measure == "effective_rank":
        return entropy_rank(np.sqrt(lam))
    if measure == "cov_effective_rank":
        return entropy_rank(lam)
    k = {"pc1_share": 1, "pc10_share": 10}[measure]
    return lam[..., :k].sum(-1) / tot


def point_measure(measure: str, x_ND: np.ndarray, zeta: float = ISOSCORE_STAR_ZETA) -> float:
    """A measure that needs the points (FROM_POINTS), numpy float64."""
    if measure == "isoscore_star_identity":
        d = x_ND.shape[1]
        s = (1.0 - zeta) * np.cov(x_ND.T) + zeta * np.eye(d)  # torch.cov: n - 1
        lam = np.linalg.eigvalsh(s)
        return (lam.sum() ** 2 / np.sum(lam**2) - 1.0) / max(d - 1, 1)
    x = x_ND - x_ND.mean(0) if measure == "partition_iso_centred" else x_ND
    _, vecs = np.linalg.eigh(x.T @ x)
    v = x @ vecs
    log_z = np.concatenate([_logsumexp(v), _logsumexp(-v)])
    return float(np.exp(log_z.min() - log_z.max()))


def _logsumexp(v_ND):
    top = v_ND.max(0)
    return top + np.log(np.sum(np.exp(v_ND - top), 0))


@functools.lru_cache(maxsize=256)
def isotropic_moments(
    measure: str,
    n: int,
    d: int,
    draws: int = REFERENCE_DRAWS,
    seed: int = REFERENCE_SEED,
    scale: float = 1.0,
    zeta: float = ISOSCORE_STAR_ZETA,
) -> Estimate:
    """The Monte Carlo mean and standard error of `measure` over `draws` isotropic Gaussian
    samples of n tokens in d dimensions (per-coordinate standard deviation `scale`: only the
    measures that are not scale-free read it), seeded (module docstring). Cached per argument
    tuple."""
    _check(measure, n, d)
    if measure in SPECTRAL:
        vals = spectral_measure(measure, isotropic_spectra(n, d, draws, seed), zeta)
    else:
        rng = np.random.default_rng(seed)
        draw = [scale * rng.standard_normal((n, d)) for _ in range(draws)]
        vals = np.array([point_measure(measure, x, zeta) for x in draw])
    sem = float(np.std(vals, ddof=1) / math.sqrt(draws)) if draws > 1 else math.nan
    return Estimate(float(np.mean(vals)), sem, draws)


@functools.lru_cache(maxsize=256)
def isotropic_reference(
    measure: str, n: int, d: int, scale: float = 1.0, zeta: float = ISOSCORE_STAR_ZETA
) -> float:
    """The expected `measure` of an isotropic Gaussian sample of n tokens in d dimensions:
    the exact harmonic-mean closed form for the participation ratio, IsoScore and IsoScore*
    (CLOSED_FORM; module docstring), else the Monte Carlo mean of REFERENCE_DRAWS draws
    (POINT_DRAWS for the measures that draw the points) at seed REFERENCE_SEED
    (isotropic_moments). Cached per argument tuple."""
    _check(measure, n, d)
    if measure in CLOSED_FORM:
        return _closed_form(measure, n, d, zeta)
    draws = POINT_DRAWS if measure in FROM_POINTS else REFERENCE_DRAWS
    return isotropic_moments(measure, n, d, draws, scale=scale, zeta=zeta).mean


def reference_table(n: int, d: int, draws: int = REFERENCE_DRAWS, seed: int = REFERENCE_SEED):
    """measure -> (isotropic_reference, Monte Carlo Estimate at `draws` draws, POINT_DRAWS for
    the measures that draw the points) at n tokens, d dimensions: the table docs/metrics.md
    prints (`python -m simlab.core.finite_sample N D [DRAWS]`)."""
    out = {}
    for m in MEASURES:
        est = isotropic_moments(m, n, d, POINT_DRAWS if m in FROM_POINTS else draws, seed)
        out[m] = (isotropic_reference(m, n, d), est)
    return out


def main(argv=None) -> None:
    import sys

    args = sys.argv[1:] if argv is None else argv
    n, d = int(args[0]), int(args[1])
    draws = int(args[2]) if len(args) > 2 else REFERENCE_DRAWS
    print(f"isotropic Gaussian N(0, I), n = {n} tokens, d = {d}, seed {REFERENCE_SEED}")
    print("| measure | reference | Monte Carlo mean ± s.e. (draws) |")
    print("|---|---|---|")
    for m, (ref, est) in reference_table(n, d, draws).items():
        how = " (closed form)" if m in CLOSED_FORM else ""
        print(f"| `{m}` | {ref:.6g}{how} | {est.mean:.6g} ± {est.sem:.2g} ({est.draws}) |")


if __name__ == "__main__":
    main()
