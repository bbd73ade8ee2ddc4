"""simlab.core.inputs: the statistics each input kind promises (large samples, tolerances from the
sampling error), the drift, and common random numbers (docs/design.md)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from simlab import testing
from simlab.core import inputs, metrics
from simlab.core.knobs import knob_arrays
from simlab.core.lab import Lab
from simlab.core.spec import BlockSpec, InputSpec

EPS32 = float(np.finfo(np.float32).eps)
BIG = (64, 128, 32)  # (batch, length, d) shared by the sampling tests: one PRNG compile per kind
anisotropy = jax.jit(metrics.anisotropy)


# ----------------------------------------------------------------------------- token ids
@pytest.mark.parametrize("s", [0.8, 1.1, 1.6])
def test_zipf_exponent(s):
    """P(id = k) ~ (k + 1)^-s. Fit log(count) against log(k + 1) over the 60 most frequent
    ids (each expected >= ~300 hits out of 2^18, so each log count has sd <= 0.06 and the
    fitted slope an sd of ~0.01): within 0.1 of s. Then a chi-square against the exact
    truncated pmf (ids 0..V-1), tail pooled."""
    vocab, n = 1000, 1 << 18
    ids = np.asarray(inputs.zipf_ids(jax.random.PRNGKey(11), (n,), vocab, s))
    assert ids.min() >= 0 and ids.max() < vocab
    counts = np.bincount(ids, minlength=vocab)
    ranks = np.arange(1, 61)
    slope = np.polyfit(np.log(ranks), np.log(counts[:60]), 1)[0]
    assert abs(slope + s) < 0.1, slope
    p = np.arange(1, vocab + 1, dtype=np.float64) ** -s
    p /= p.sum()
    expected = n * p
    keep = expected >= 20
    obs, exp = counts[keep], expected[keep]
    if not keep.all():
        obs, exp = np.append(obs, counts[~keep].sum()), np.append(exp, expected[~keep].sum())
    chi2 = np.sum((obs - exp) ** 2 / exp)
    dof = len(obs) - 1
    assert chi2 < dof + 6 * math.sqrt(2 * dof), (chi2, dof)  # 6 sigma of chi2(dof)


def test_token_ids_uniform_and_zipf_via_spec():
    """Uniform ids: chi-square over V = 50 cells with 2^13 draws (expected 164 per cell) below
    dof + 6 sqrt(2 dof); and the spec's token_dist switches to the Zipf sampler."""
    spec = InputSpec(kind="embedding", batch=BIG[0], length=BIG[1], vocab=50)
    ids = np.asarray(inputs.token_ids(spec, jax.random.PRNGKey(12)))
    assert ids.shape == BIG[:2] and ids.min() >= 0 and ids.max() < 50
    counts = np.bincount(ids.ravel(), minlength=50)
    exp = ids.size / 50
    chi2 = np.sum((counts - exp) ** 2 / exp)
    assert chi2 < 49 + 6 * math.sqrt(98), chi2
    zspec = InputSpec(
        kind="embedding", batch=BIG[0], length=BIG[1], vocab=50, token_dist="zipf", zipf_s=1.1
    )
    zc = np.bincount(
        np.asarray(inputs.token_ids(zspec, jax.random.PRNGKey(12))).ravel(), minlength=50
    )
    assert zc[0] > 5 * zc[10] > 0  # (11)^1.1 = 14: id 0 is far more frequent than id 10


def test_embedding_rows_are_table_lookups():
    spec = InputSpec(kind="embedding", batch=BIG[0], length=BIG[1], vocab=30, embed_std=0.5)
    comps = inputs.components(spec, BIG[2], jax.random.PRNGKey(13))
    x = np.asarray(comps["x"]).reshape(-1, BIG[2])
    # 8192 tokens from 30 ids: rows are exactly repeated, with 30 distinct rows
    assert len(np.unique(x, axis=0)) == 30
    assert abs(x.std() / 0.5 - 1) < 0.2  # a 30 x 32 table ~ N(0, 0.5^2): sd of std ~ 2.3%


# ----------------------------------------------------------------------------- gaussian
@pytest.mark.parametrize("p", [0.0, 0.3, 0.7, 1.0])
def test_gaussian_input_corr(p):
    """x_i = sqrt(p) z0 + sqrt(1 - p) z_i: cos(x_i, x_j) -> p. The dominant fluctuation of the
    within-sequence mean is the shared |z0|^2 / |z_i|^2 ratio, relative sd sqrt(2/d) per
    sequence, entering with weight p (1 - p) <= 1/4, and averaged over B sequences:
    sd <= sqrt(2 / (d B)) / 4 ~ 2.8e-3 at d = 1024, B = 16; the z0 . z_i and z_i . z_j cross
    terms add ~ 1 / sqrt(d B T) ~ 2e-3. Tolerance 0.02 is > 5 sd. Across sequences z0
    differs, so the global cosine is p (T - 1) / (B T - 1) (within-sequence pairs only)."""
    b, t, d = 16, 16, 1024
    spec = InputSpec(kind="gaussian", batch=b, length=t, sigma=2.0)
    x = inputs.sample(spec, d, jax.random.PRNGKey(14), {"input_corr": p, "drift_norm": 0.0})
    g, w = (float(v) for v in anisotropy(x))
    assert abs(w - p) < 0.02, (w, p)
    assert abs(g - p * (t - 1) / (b * t - 1)) < 0.02, (g, p)
    if p == 1.0:  # every token of a sequence is the same vector z0
        assert abs(w - 1.0) < 1e-5
    # per-coordinate variance sigma^2 for every p (sqrt(p)^2 + sqrt(1-p)^2 = 1)
    assert abs(float(jnp.var(x)) / 4.0 - 1) < 0.05


@pytest.mark.parametrize("alpha", [0.5, 1.0, 2.0])
def test_anisotropic_spectrum(alpha):
    """Covariance R diag(lambda) R^T with lambda_k ~ k^-alpha, sum = sigma^2 d. From N = 8192
    samples in d = 32 the sample eigenvalues have relative sd ~ sqrt(2/N) = 1.6% (bias from
    d/N = 0.4% is smaller), so the log-log slope is within 0.05 of -alpha, each eigenvalue
    within 12% of lambda_k, and the trace within 5 sd of sigma^2 d."""
    d, sigma = BIG[2], 1.5
    spec = InputSpec(kind="anisotropic", batch=BIG[0], length=BIG[1], alpha=alpha, sigma=sigma)
    x = np.asarray(inputs.components(spec, d, jax.random.PRNGKey(15))["x"], np.float64).reshape(
        -1, d
    )
    cov = x.T @ x / x.shape[0]  # the distribution has mean 0
    ev = np.sort(np.linalg.eigvalsh(cov))[::-1]
    k = np.arange(1, d + 1)
    slope = np.polyfit(np.log(k), np.log(ev), 1)[0]
    assert abs(slope + alpha) < 0.05, slope
    lam = k**-alpha
    lam = lam * sigma**2 * d / lam.sum()
    np.testing.assert_allclose(ev, lam, rtol=0.12)
    # the trace estimate has relative sd sqrt(2 sum lambda^2 / N) / sum lambda (1% at alpha = 2)
    sd = math.sqrt(2 * np.sum(lam**2) / x.shape[0]) / lam.sum()
    assert abs(np.trace(cov) / (sigma**2 * d) - 1) < 5 * sd
    # the rotation is not the identity: the covariance is not diagonal
    off = cov - np.diag(np.diag(cov))
    assert np.max(np.abs(off)) > 0.1 * ev[0]


def test_student_t_scale():
    """nu = 6: variance sigma^2 (the sample variance has sd sqrt(5/N) sigma^2 = 0.6% at
    N = 2^18: kurtosis of t_6 is 6). nu = 3 has infinite fourth moment, so check the
    quartiles against scipy's t quantiles times sigma sqrt((nu - 2)/nu) instead (sd of an
    empirical quartile ~ 0.3%)."""
    d = BIG[2]
    for nu, sigma in ((6.0, 2.0), (3.0, 0.7)):
        spec = InputSpec(kind="student_t", batch=BIG[0], length=BIG[1], nu=nu, sigma=sigma)
        x = np.asarray(inputs.components(spec, d, jax.random.PRNGKey(16))["x"], np.float64).ravel()
        scale = sigma * math.sqrt((nu - 2) / nu)
        q25, q75 = np.quantile(x, [0.25, 0.75])
        want = stats.t.ppf(0.75, nu) * scale
        assert abs(q75 / want - 1) < 0.03 and abs(-q25 / want - 1) < 0.03, (nu, q25, q75, want)
        if nu == 6.0:
            assert abs(x.var() / sigma**2 - 1) < 0.05
            assert abs(stats.kurtosis(x) - 6 / (nu - 4)) < 1.0  # heavy-tailed, not Gaussian


def test_rademacher_signs():
    """Every coordinate is exactly +-sigma; P(+) = 1/2 (N = 2^18 draws: sd 0.001, tolerance
    5 sd); coordinates independent (off-diagonal sample covariance sd sigma^2 / sqrt(B T) =
    0.011 sigma^2, tolerance 0.06 sigma^2 over 496 pairs: ~5.5 sd)."""
    sigma = 1.5
    spec = InputSpec(kind="rademacher", batch=BIG[0], length=BIG[1], sigma=sigma)
    x = np.asarray(inputs.components(spec, BIG[2], jax.random.PRNGKey(18))["x"], np.float64)
    assert x.shape == BIG
    assert set(np.unique(x)) == {-sigma, sigma}
    assert abs((x > 0).mean() - 0.5) < 0.005
    cov = np.cov(x.reshape(-1, BIG[2]), rowvar=False)
    np.testing.assert_allclose(np.diag(cov), sigma**2, rtol=0.01)
    assert np.max(np.abs(cov - np.diag(np.diag(cov)))) < 0.06 * sigma**2


@pytest.mark.parametrize("kind", list(inputs.INPUTS))
def test_drift_is_exact_common_shift(kind):
    """x(N) - x(0) = N u_b at every token (the draw does not depend on N), |u_b| = 1. The only
    error is the float32 rounding of x + N u_b: <= eps (|x| + N) per coordinate."""
    spec = InputSpec(kind=kind, batch=BIG[0], length=BIG[1], vocab=30, embed_std=1.0)
    d = BIG[2]
    key = jax.random.PRNGKey(17)
    weights = testing.weights_for(kind, d_model=d, vocab=30)  # a trained kind's layers
    u_b = np.asarray(inputs.components(spec, d, key, weights=weights)["u_b"], np.float64)
    assert u_b.shape == (1, 1, d)
    assert abs(np.linalg.norm(u_b) - 1) < 4 * EPS32
    x0 = inputs.sample(spec, d, key, {"drift_norm": 0.0, "input_corr": 0.4}, weights)
    x0 = np.asarray(x0, np.float64)
    for n in (0.5, 1e3):
        xn = np.asarray(
            inputs.sample(spec, d, key, {"drift_norm": n, "input_corr": 0.4}, weights), np.float64
        )
        tol = EPS32 * (np.abs(x0).max() + n)
        np.testing.assert_allclose(xn - x0, np.broadcast_to(n * u_b, xn.shape), rtol=0, atol=tol)
        # the mean over tokens shifts by exactly N u_b
        np.testing.assert_allclose((xn - x0).mean((0, 1)), n * u_b[0, 0], rtol=0, atol=tol)


# ----------------------------------------------------------------------------- CRN
SPEC = BlockSpec(kind="post_ln", d_model=32, n_heads=4, mlp_ratio=2, init="fan_in")
ISPEC = InputSpec(kind="gaussian", batch=2, length=8)


@pytest.mark.slow
def test_common_random_numbers():
    lab = Lab(SPEC, ISPEC)
    base = jax.random.PRNGKey(42)
    s0 = lab.seed_state(jax.random.fold_in(base, 0))
    s0b = lab.seed_state(jax.random.fold_in(base, 0))
    s1 = lab.seed_state(jax.random.fold_in(base, 1))
    leaves0, tree0 = jax.tree.flatten(s0)
    leaves0b, tree0b = jax.tree.flatten(s0b)
    assert tree0 == tree0b
    for a, b in zip(leaves0, leaves0b):  # same key: bit-identical state
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # different seeds: every random leaf differs (zero biases and unit LN gains are constant)
    flat1 = dict(jax.tree_util.tree_flatten_with_path(s1)[0])
    n_random = 0
    for path, a in jax.tree_util.tree_flatten_with_path(s0)[0]:
        a, b = np.asarray(a), np.asarray(flat1[path])
        if np.all(a == a.ravel()[0]):  # a constant leaf (bias 0, gain 1) is the same
            np.testing.assert_array_equal(a, b)
        else:
            n_random += 1
            assert np.mean(a != b) > 0.9, jax.tree_util.keystr(path)
    assert n_random >= 10  # weights, input components, directions, hoisted products

    # knobs do not reach the state: the inputs of two points with different q_scale, k_shift,
    # temperature are identical, so input_cos matches exactly; the attention does change.
    point = jax.jit(lab.point)
    a = point(s0, knob_arrays({"q_scale": 1.0}))
    b = point(s0, knob_arrays({"q_scale": 5.0, "k_shift": 2.0, "temperature": 0.3}))
    for m in ("input_cos", "input_cos_within"):
        assert float(a[m]) == float(b[m]), m
    assert abs(float(a["attn_entropy"]) - float(b["attn_entropy"])) > 1e-2
    # and a different seed gives different inputs
    c = point(s1, knob_arrays({"q_scale": 1.0}))
    assert float(c["input_cos"]) != float(a["input_cos"])
