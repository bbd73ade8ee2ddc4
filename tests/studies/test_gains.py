"""simlab.theory.gains (claims 8-10) against direct numpy computations with the same weights,
and its limits: the N -> 0 end of the mean-field curve is the width closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simlab import theory
from simlab.theory import gains


def cos_mean(y):
    u = y / np.linalg.norm(y, axis=1, keepdims=True)
    n, s = len(u), u.sum(0)
    return (s @ s - n) / (n * (n - 1))


def gelu(z):
    return 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3)))


def test_mean_field_at_zero_drift_is_the_width_closed_form():
    for d in (64, 256, 768, 1024):
        want = float(theory.mlp_mean_gain(d))
        got = float(gains.mean_field_gain(0.0, gains.expected_drift_gain_factor(d), d))
        assert abs(got - want) < 1e-12 * max(1.0, abs(want)), d


def test_uniform_attention_gain_against_numpy():
    """h_i = x_i + mean_j(x_j) M for x_i = e_i + N u (e ~ N(0, s^2 I)), with one seed's M:
    the cosine gain against rho0 (1 - rho0)(g - 1)/(1 + rho0 (g - 1)), g = |u + u M|^2,
    within 5% of the peak (the private mean e_bar M and finite-n fluctuations)."""
    r = np.random.default_rng(0)
    d, n, s = 256, 4000, 0.05
    m = r.normal(0, 1.2 / d, (d, d))  # |u M|^2 ~ 1.44 / d * d: k of order 1
    u = r.normal(size=d)
    u /= np.linalg.norm(u)
    g = float(np.sum((u + u @ m) ** 2))
    e = r.normal(0, s, (n, d))
    for big_n in (0.2, 0.8, 2.0):
        x = e + big_n * u
        h = x + x.mean(0) @ m
        rho0 = cos_mean(x)
        got = cos_mean(h) - rho0
        want = float(gains.drift_gain_uniform(rho0, g))
        assert abs(got - want) < 0.05 * abs(want) + 2e-3, (big_n, got, want)


def test_shared_pattern_within_gain_against_numpy():
    """A shared pattern of weight p on token 0 at N = 0: within-sequence cosine of
    h_i = e_i + (p e_0 + (1 - p) mean_{j != 0} e_j) M against p^2 k / (1 + p^2 k) with
    k = |e_0 M|^2 / |e_0|^2 of that sequence, within 6% (the leading order in 1/d: the
    fluctuations of |h_i| bias the mean cosine up by a few percent at d 256)."""
    r = np.random.default_rng(1)
    d, t = 256, 2000
    m = r.normal(0, 1.0 / math.sqrt(d), (d, d))
    for beta in (2.0, 6.0, 12.0):
        p = float(gains.shared_weight(beta, t))
        e = r.normal(size=(t, d))
        a = (p * e[0] + (1 - p) * e[1:].mean(0)) @ m
        got = cos_mean((e + a)[1:])
        k = float(np.sum((e[0] @ m) ** 2) / np.sum(e[0] ** 2))
        want = float(gains.shared_within_gain(k, p))
        assert abs(got - want) < 0.06 * want + 2e-3, (beta, got, want)
    assert gains.shared_weight(0.0, t) == pytest.approx(1 / t)
    assert gains.shared_weight(1e4, t) == 1.0  # no overflow


@pytest.mark.slow
def test_mean_field_per_seed_terms_explain_the_mlp_spread():
    """h_i = sqrt(rho d) u + sqrt(1 - rho) g_i through y = h + GELU(h W_1) W_2 (BERT-init
    W_1, W_2), 8 seeds: the per-seed prediction (gamma = u^T A u, tau = tr A / d, A = W_1 W_2 /
    2, |1^T W_2|^2) correlates with the simulated gain (> 0.6) and its seed mean is within
    the simulation's 3 standard errors."""
    r = np.random.default_rng(0)
    d, f, s, rho = 256, 1024, 0.02, 0.47
    sim, pred = [], []
    for _ in range(8):
        w1, w2 = r.normal(0, s, (d, f)), r.normal(0, s, (f, d))
        u = r.normal(size=d)
        u /= np.linalg.norm(u)
        h = math.sqrt(rho * d) * u + math.sqrt(1 - rho) * r.normal(size=(2000, d))
        sim.append(cos_mean(h + gelu(h @ w1) @ w2) - cos_mean(h))
        a = 0.5 * w1 @ w2
        ones = float(np.sum(w2.sum(0) ** 2))
        pred.append(
            float(gains.mean_field_gain(rho, 1.0, d, 4, s, ones, u @ a @ u, np.trace(a) / d))
        )
    sim, pred = np.array(sim), np.array(pred)
    assert np.corrcoef(sim, pred)[0, 1] > 0.6
    assert abs(sim.mean() - pred.mean()) < 3 * sim.std(ddof=1) / math.sqrt(len(sim))
