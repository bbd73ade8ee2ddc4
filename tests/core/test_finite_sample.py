"""simlab.core.finite_sample against numpy oracles that draw the points themselves (float64,
many draws: the tolerance is 5 standard errors of the two Monte Carlo means together), its
closed forms against those draws, and the definitions of issue 50 (the effective rank of the
data against that of the covariance on a cloud with one outlier dimension; IsoScore* with
C0 = I on the n - 1 covariance, as Rudman & Eickhoff's code) against independent numpy code.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from simlab.core import finite_sample as fs
from simlab.core import geometry as g
from simlab.core import metrics

SIGMAS = 5.0  # Monte Carlo tolerance, in standard errors


def entropy_rank(w):
    p = w / w.sum()
    p = p[p > 0]
    return float(np.exp(-np.sum(p * np.log(p))))


def np_measures(x_ND):
    """The spectral measures of one cloud, from numpy's SVD of the centred points."""
    sv = np.linalg.svd(x_ND - x_ND.mean(0), compute_uv=False)
    lam = np.zeros(x_ND.shape[1])
    lam[: sv.size] = sv**2 / x_ND.shape[0]
    pr = lam.sum() ** 2 / np.sum(lam**2)
    return {
        "inverse_pr": 1.0 / pr,
        "participation_ratio": pr,
        "effective_rank": entropy_rank(sv),
        "cov_effective_rank": entropy_rank(lam),
        "pc1_share": lam[0] / lam.sum(),
    }


def oracle(n, d, draws, seed):
    """measure -> (mean, standard error) over `draws` clouds of n N(0, I_d) points."""
    r = np.random.default_rng(seed)
    rows = [np_measures(r.standard_normal((n, d))) for _ in range(draws)]
    return {
        k: (np.mean([x[k] for x in rows]), np.std([x[k] for x in rows]) / np.sqrt(draws))
        for k in rows[0]
    }


@pytest.mark.parametrize("n,d", [(16, 8), (10, 24), (200, 12)])
def test_exact_inverse_pr_and_the_monte_carlo_spectra_vs_drawn_points(n, d):
    """E[1/PR] = (m + d + 1) / (m d + 2), m = n - 1, against 4000 drawn clouds (also n < d);
    the bidiagonal model's spectra give the drawn clouds' mean of every spectral measure."""
    want = oracle(n, d, 4000, seed=100 + n)
    mean, se = want["inverse_pr"]
    assert abs(fs.inverse_pr_mean(n, d) - mean) < SIGMAS * se
    for m in ("participation_ratio", "effective_rank", "cov_effective_rank", "pc1_share"):
        got = fs.isotropic_moments(m, n, d, draws=4000, seed=7)
        mean, se = want[m]
        assert abs(got.mean - mean) < SIGMAS * np.hypot(se, got.sem), (m, got, mean, se)


def test_harmonic_reference_is_below_the_mean_by_jensens_gap_only():
    """PR_iso = 1/E[1/PR] <= E[PR] (Jensen), and the gap is small: below 2e-3 relative once
    n d >= 1000 (docs/metrics.md quotes it; n = d = 32 is near the worst there)."""
    for n, d in ((16, 8), (32, 32), (64, 32), (512, 64)):
        est = fs.isotropic_moments("participation_ratio", n, d, draws=4000, seed=3)
        ref = fs.participation_ratio_iso(n, d)
        assert ref <= est.mean + SIGMAS * est.sem
        if n * d >= 1000:
            assert abs(est.mean / ref - 1) < 2e-3, (n, d, est, ref)
    assert fs.participation_ratio_iso(8193, 768) == pytest.approx(8192 * 768 / (8192 + 768), 2e-3)


def test_closed_forms_of_isoscore_and_isoscore_star_follow_the_participation_ratio():
    assert fs.ISOSCORE_STAR_ZETA == metrics.ISOSCORE_STAR_ZETA  # the registered metric's
    n, d, zeta = 40, 10, 0.2
    h = fs.inverse_pr_mean(n, d)
    assert fs.isotropic_reference("isoscore", n, d) == pytest.approx((1 / h - 1) / (d - 1))
    a = (1 - zeta) ** 2
    want = (1 / (a * h + (1 - a) / d) - 1) / (d - 1)
    assert fs.isotropic_reference("isoscore_star", n, d) == pytest.approx(want)
    # the harmonic mean of IsoScore*'s participation ratio, by drawing: E[1/PR*] is linear
    lam = fs.isotropic_spectra(n, d, 4000, seed=11)
    pr = lam.sum(1) ** 2 / np.sum(lam**2, 1)
    inv_star = a / pr + (1 - a) / d
    se = np.std(inv_star) / np.sqrt(inv_star.size)
    assert abs(np.mean(inv_star) - (a * h + (1 - a) / d)) < SIGMAS * se


def test_point_measures_match_simlab_and_the_reference_is_seeded():
    """The points-based Monte Carlo computes what simlab.core.geometry computes; the reference
    is the same number on every call (fixed seed); unknown measures and sizes are refused."""
    x = np.random.default_rng(5).standard_normal((30, 6))
    with jax.enable_x64(True):
        xj = jnp.asarray(x)
        m = g.moments(xj[None])
        for name, want in (
            ("partition_iso", g.partition_isotropy(xj)),
            ("partition_iso_centred", g.partition_isotropy(xj, True)),
            ("isoscore_star_identity", g.isoscore_star_identity(m, 0.2)),
        ):
            assert fs.point_measure(name, x) == pytest.approx(float(want), rel=1e-10)
    a = fs.isotropic_moments("partition_iso_centred", 20, 4, draws=8, seed=1)
    assert a == fs.isotropic_moments("partition_iso_centred", 20, 4, draws=8, seed=1)
    assert (
        fs.isotropic_reference("effective_rank", 20, 4)
        == fs.isotropic_moments("effective_rank", 20, 4, fs.REFERENCE_DRAWS, fs.REFERENCE_SEED).mean
    )
    with pytest.raises(ValueError, match="measure 'rank'"):
        fs.isotropic_reference("rank", 20, 4)
    with pytest.raises(ValueError, match="n >= 2"):
        fs.isotropic_moments("effective_rank", 1, 4)


def test_registered_relative_metrics_divide_by_the_reference_at_the_points_n_and_d():
    from simlab.core.block import Layer

    r = np.random.default_rng(2)
    x = jnp.asarray(r.standard_normal((3, 7, 5)), jnp.float32)
    y = jnp.asarray(r.standard_normal((3, 7, 5)) * np.r_[4.0, 1, 1, 1, 0.2], jnp.float32)
    z = jnp.zeros((3, 2, 7), jnp.float32)
    layer = Layer(x, y, y, z, z, jnp.zeros((2, 4)), jnp.zeros((2, 4)), None)
    names = ("out_participation_ratio_rel", "out_effective_rank_rel")
    out = metrics.layer_metrics(names, False, layer)
    flat = np.asarray(y, np.float64).reshape(-1, 5)
    mine = np_measures(flat)
    pr_iso = (20 * 5 + 2) / (20 + 5 + 1)  # n = 21 tokens, m = 20
    np.testing.assert_allclose(float(out[names[0]]), mine["participation_ratio"] / pr_iso, 2e-5)
    er_iso = fs.isotropic_reference("effective_rank", 21, 5)
    np.testing.assert_allclose(float(out[names[1]]), mine["effective_rank"] / er_iso, 2e-5)


# ------------------------------------------------------------------------------ definitions
def test_effective_rank_of_the_data_not_of_the_covariance_with_one_outlier_dimension():
    """Issue 50's case: one outlier dimension. Tokens +-e_j (j < d) with coordinate 0 scaled by
    s: C's eigenvalues are s^2 / d and 1 / d (d - 1 times), the centred data's singular values
    proportional to s and 1. Roy & Vetterli's effective rank (of the data) counts the 62 quiet
    directions (39.49), the covariance's (simlab's before issue 50) 2.58 (the issue: 39.44,
    2.59); both against numpy's SVD and the closed form."""
    d, s = 63, 20.0
    eye = np.eye(d)
    eye[0, 0] = s
    x = np.concatenate([eye, -eye])  # mean 0, C = diag(s^2, 1, ..., 1) / d
    sv = np.linalg.svd(x - x.mean(0), compute_uv=False)
    want_data = entropy_rank(sv)
    want_cov = entropy_rank(sv**2)
    closed = entropy_rank(np.r_[s, np.ones(d - 1)])
    assert want_data == pytest.approx(closed, rel=1e-12)
    assert want_data == pytest.approx(39.49, abs=0.01) and want_cov == pytest.approx(2.58, abs=0.01)
    for dtype, tol in ((jnp.float32, 2e-5), (jnp.float64, 1e-10)):
        with jax.enable_x64(dtype == jnp.float64):
            lam = g.spectrum(g.covariance(g.moments(jnp.asarray(x, dtype)[None])))
            np.testing.assert_allclose(float(g.effective_rank(lam)), want_data, rtol=tol)
            np.testing.assert_allclose(float(g.cov_effective_rank(lam)), want_cov, rtol=tol)


def test_isoscore_star_identity_uses_torch_cov_n_minus_one():
    """Rudman & Eickhoff's isoscore_star(points, C0 = I, zeta): torch.cov(points.T) (n - 1),
    shrunk, svdvals, their normalisation; written again in numpy here. At n = 6 the n / (n - 1)
    factor moves the score; the simlab function matches the n - 1 version."""
    x = np.random.default_rng(9).standard_normal((6, 4)) * np.r_[2.0, 1, 0.5, 0.3]
    zeta, d = 0.2, 4

    def authors(cov):
        pcs = np.linalg.svd((1 - zeta) * cov + zeta * np.eye(d), compute_uv=False)
        pcs_norm = pcs * np.sqrt(d) / np.linalg.norm(pcs)
        defect = np.linalg.norm(pcs_norm - 1) / np.sqrt(2 * (d - np.sqrt(d)))
        return ((d - defect**2 * (d - np.sqrt(d))) ** 2 - d) / (d * (d - 1))

    want, biased = authors(np.cov(x.T)), authors(np.cov(x.T, bias=True))
    assert abs(want - biased) > 1e-3
    with jax.enable_x64(True):
        got = float(g.isoscore_star_identity(g.moments(jnp.asarray(x)[None]), zeta))
    assert got == pytest.approx(want, rel=1e-10)
