"""Claims 6 (the freezing line), the width formula (the MLP's mean gain) and 7 (signal
propagation) of simlab.theory against numpy, scipy and simulations at small sizes (the
conventions of tests/studies/test_check_theory.py)."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from simlab import theory
from simlab.studies import check_theory

KEY = jax.random.PRNGKey(0)


def phi(z: float) -> float:
    """The standard normal density exp(-z^2 / 2) / sqrt(2 pi), scipy.stats.norm.pdf's formula
    written out: the integrands below call it at every quadrature point, and norm.pdf's
    argument handling was most of the integrals' time."""
    return math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


# ----------------------------------------------------------------------------- claim 6
def test_paper_logit_var_matches_sampled_logits():
    """s^2 = lambda^4 sigma_w^4 sigma_e^2 d (d sigma_e^2 + N^2) against the variance over keys
    of logits drawn exactly as the protocol does (float64 numpy, BERT-init W_Q and W_K, embedding
    rows, drift along a unit u_b), averaged over queries, heads and 8 weight draws. The formula
    is the expectation over the weights; one draw scatters by ~sqrt(2/d) = 9% when the drift
    dominates (the query is then the same for all tokens), 8 draws by ~3%: tolerance 8%."""
    d, h, t, sw, se = 256, 4, 512, 0.02, 0.02
    k = d // h
    for n, lam in ((0.0, 300.0), (1.0, 100.0), (100.0, 10.0), (1e4, 1.0)):
        sims = []
        for seed in range(8):
            rng = np.random.default_rng(seed)
            wq, wk = (rng.normal(0, sw, (d, h, k)) for _ in range(2))
            e = rng.normal(0, se, (t, d))
            u = rng.standard_normal(d)
            x = e + n * u / np.linalg.norm(u)
            q = lam * np.einsum("td,dhk->thk", x[:64], wq)
            kk = lam * np.einsum("td,dhk->thk", x, wk)
            logits = np.einsum("thk,shk->hts", q, kk) / math.sqrt(k)
            sims.append(logits.var(axis=-1).mean())
        want = theory.paper_logit_var(lam, n, d_model=d)
        assert abs(np.mean(sims) / want - 1) < 0.08, (n, lam, np.mean(sims), want)


def test_gaussian_softmax_entropy_finite_n():
    """Exactly 1 at s = 0; for small s, 1 - s^2 (1 - 1/n) / (2 ln n) to O(s^4) (the variance of
    the logits over n keys with the n - 1 dof); the level 0.5 is reached at s^2 = 1.65 ln n for
    n = 64 (the docstring's number), larger than the n -> infinity limit ln n."""
    assert abs(float(theory.gaussian_softmax_entropy(0.0, 64)) - 1.0) < 1e-12
    s = 0.05
    want = 1 - s**2 * (1 - 1 / 64) / (2 * math.log(64))
    assert abs(float(theory.gaussian_softmax_entropy(s, 64, rows=20000)) - want) < 2e-5
    lam = theory.paper_iso_entropy_lambda_finite(0.0, 0.5, length=64, d_model=4096, n_heads=1)
    s2 = float(theory.paper_logit_var(lam, 0.0, d_model=4096))
    # one head of K = 4096: no chi^2 spread to speak of, so s^2 is the single-row solution
    assert 1.6 < s2 / math.log(64) < 1.7


def test_claim6_freezing_line_through_simlab_blocks():
    """The claim at tiny sizes through simlab.run_sweep: the finite-size prediction of the
    lambda where attn_entropy = 0.5 within 10% at every drift (the claim's criterion), the
    n -> infinity line farther off (it ignores the finite-n entropy)."""
    cfg = dict(
        sizes=[dict(d_model=32, n_heads=2, length=32, batch=4, vocab=2000)],
        drift_norm=[0.01, 1.0, 100.0],
        lambda_start=1.0,
        lambda_stop=3000.0,
        lambda_points=49,
        level=0.5,
        seeds=2,
        seed=0,
        tol=0.10,
        lead_tol=0.30,
    )
    from simlab.studies.check_theory import freezing_line

    r = check_theory.check("freezing_line", cfg)
    assert r.verdict == "agrees", r.details
    assert r.data["err_finite"][0] <= 0.10 < r.data["err_limit"][0] + 0.10
    assert freezing_line.crossing(
        np.array([1.0, 10.0]), np.array([1.0, 0.0]), 0.5
    ) == pytest.approx(math.sqrt(10.0))


# ------------------------------------------------------------------------ width (MLP mean)
def test_gelu_moments_mean_is_steins_lemma_for_the_tanh_form():
    """E GELU(z) for z ~ N(0, s^2): the exact GELU's s^2 / sqrt(2 pi (1 + s^2)); the tanh form
    differs from it by < 2e-4 at these s (their pointwise gap is < 5e-4 near |z| ~ 2)."""
    for s2 in (0.05, 0.3072, 1.0):
        m, v = theory.gelu_moments(s2)
        assert abs(m - s2 / math.sqrt(2 * math.pi * (1 + s2))) < 2e-4
        assert 0 < v < s2  # GELU is 1-Lipschitz up to ~1.13: Var g < Var z here


def test_mlp_mean_gain_matches_a_numpy_post_ln_mlp():
    """The closed form against float64 numpy: LN(h + MLP(h)) for h = LN(x) of 1024 Gaussian
    tokens, BERT-init W_1, W_2 (N(0, 0.02^2)), tanh GELU; out_cos - input_cos averaged over 6
    weight draws. One draw scatters by ~sqrt(2/d) (|1^T W_2|^2 is chi^2 with d dof): 6% at
    d = 512, 2.5% over 6 draws; 10% tolerance. The centred MLP (mlp_center) gives ~0."""
    d, f, n = 512, 2048, 1024
    rng = np.random.default_rng(0)

    def ln(a):
        a = a - a.mean(-1, keepdims=True)
        return a / np.sqrt((a * a).mean(-1, keepdims=True) + 1e-12)

    def cos(a):
        u = a / np.linalg.norm(a, axis=-1, keepdims=True)
        s = u.sum(0)
        return (s @ s - n) / (n * (n - 1))

    def gelu(z):
        return 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3)))

    gains, centred = [], []
    for _ in range(6):
        h = ln(rng.standard_normal((n, d)))
        w1, w2 = rng.normal(0, 0.02, (d, f)), rng.normal(0, 0.02, (f, d))
        g = gelu(h @ w1)
        gains.append(cos(ln(h + g @ w2)) - cos(h))
        centred.append(cos(ln(h + (g - g.mean(-1, keepdims=True)) @ w2)) - cos(h))
    want = float(theory.mlp_mean_gain(d, 4))
    assert 0.003 < want < 0.006
    assert abs(np.mean(gains) / want - 1) < 0.10, (np.mean(gains), want)
    assert abs(np.mean(centred)) < 0.1 * want


# ----------------------------------------------------------------------------- claim 7
def test_softmax_overlaps_exact_cases():
    """s = 0: uniform rows, Y = Z = 1/n exactly; c = 1: the two rows coincide, Z = Y; the
    n -> infinity limit is Giorlandino & Goldt's frozen weight 1 - sqrt(2 ln n) / s."""
    y, z = theory.softmax_overlaps(0.0, 0.3, 64)
    assert abs(y - 1 / 64) < 1e-15 and abs(z - 1 / 64) < 1e-15
    y, z = theory.softmax_overlaps(2.0, 1.0, 64)
    assert abs(y - z) < 1e-12 and 1 / 64 < y < 1
    y, z = theory.softmax_overlaps(10.0, 0.0, 1024, finite=False)
    assert abs(y - (1 - math.sqrt(2 * math.log(1024)) / 10)) < 1e-12 and z == 0.0
    assert theory.softmax_overlaps(1.0, 0.0, 1024, finite=False) == (0.0, 0.0)


@pytest.mark.slow
def test_activation_kernel_gelu_against_scipy_dblquad():
    """The GELU kernel's Gauss-Hermite quadrature against scipy's adaptive dblquad of
    g(z1) g(c z1 + sqrt(1 - c^2) z2) phi(z1) phi(z2) over [-10, 10]^2."""
    from scipy import integrate

    def gelu(z):
        return 0.5 * z * (1 + math.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3)))

    for c in (0.0, 0.6, -0.4):
        q, p = theory.activation_kernel(c, "gelu")
        s = math.sqrt(1 - c * c)
        want = integrate.dblquad(
            lambda z1, z2, c=c, s=s: gelu(z1) * gelu(c * z1 + s * z2) * phi(z1) * phi(z2),
            -10,
            10,
            -10,
            10,
        )[0]
        q_want = integrate.quad(lambda z: gelu(z) ** 2 * phi(z), -10, 10)[0]
        assert abs(p - want) < 1e-5 and abs(q - q_want) < 1e-6, (c, p, want)


@pytest.mark.slow
def test_signal_propagation_post_ln_is_the_authors_block_update():
    """finite=False, post-LN, ReLU: three layers of the recursion equal a literal port of
    Giorlandino & Goldt's get_block_update_wres (their theory_update_general.py: attention
    update, p_0 = (var_v p_att + var_b + alpha_A^2 p) / (var_v q_att + var_b + alpha_A^2), MLP
    update by scipy dblquad, p_block = (p_MLP + alpha^2 p_0) / (q_MLP + alpha^2); var_v =
    var_w = 1, var_b = 0, beta = lam / sqrt(ln T)), with the MLP integrals computed here by
    scipy instead of simlab's quadrature."""
    from scipy import integrate

    T, lam = 256, 6.0

    def relu_mlp(c):
        f = lambda z1, z2: (  # noqa: E731
            max(z1, 0.0) * max(c * z1 + math.sqrt(1 - c * c) * z2, 0.0) * phi(z1) * phi(z2)
        )
        return 0.5, integrate.dblquad(f, -10, 10, -10, 10)[0]

    def gg_block(p):
        beta, beta_c = lam / math.sqrt(math.log(T)), math.sqrt(2 / (1 - p))
        q_att = p if beta < beta_c else p + (1 - p) * (1 - beta_c / beta)
        p0 = (p + p) / (q_att + 1)
        q_mlp, p_mlp = relu_mlp(p0)
        return (p_mlp + p0) / (q_mlp + 1)

    p, want = 0.0, []
    for _ in range(3):
        p = gg_block(p)
        want.append(p)
    got = theory.signal_propagation("post_ln", 3, T, 1, lam, activation="relu", finite=False)[
        "out_cos_within"
    ]
    np.testing.assert_allclose(got, want, atol=2e-3)
    assert want[-1] > want[0] > 0.1  # not vacuous: the cosine grows layer by layer


def test_rem_entropy_finite_against_exact_limits_and_a_direct_simulation():
    """The Poissonized finite-T entropy: at s = 0, E ln N for N ~ Poisson(T) (ln T - 1/(2T) to
    O(1/T^2)); for small s the annealed expansion ln T - s^2 / 2 - e^{s^2} / (2T); against
    40,000 rows of
    T = 256 i.i.d. Gaussian logits, at x = 0.3 .. 1.8, within 4 standard errors plus the
    Poissonization's O(1/T)."""
    import math

    for T in (64, 4096):
        assert abs(theory.rem_entropy_finite(0.0, T) - (math.log(T) - 0.5 / T)) < 2 / T**2
        s = 0.2  # plus the same Poissonization term, e^{s^2} / (2T) to leading order
        want = math.log(T) - s**2 / 2 - math.exp(s**2) / (2 * T)
        assert abs(theory.rem_entropy_finite(s, T) - want) < 4 / T**2 + 2e-5  # O(1/T^2), grid
    T = 256
    g = np.asarray(jax.random.normal(jax.random.PRNGKey(1), (40000, T)), np.float64)
    for x in (0.3, 0.9, 1.0, 1.1, 1.8):
        s = x * math.sqrt(2 * math.log(T))
        l = s * g
        w = np.exp(l - l.max(1, keepdims=True))
        w /= w.sum(1, keepdims=True)
        h = -(w * np.log(np.maximum(w, 1e-300))).sum(1)
        err = abs(h.mean() - theory.rem_entropy_finite(s, T))
        assert err < 4 * h.std() / math.sqrt(len(h)) + 1 / T, (x, err)
