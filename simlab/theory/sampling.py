"""The Monte Carlo samplers behind the predictions that have no closed form at finite size.

Each is plain numpy in float64 with a fixed seed (deterministic): the finite-n entropy of a
Gaussian softmax (claim 6), the pair geometry and REM pair moments of claim 2's finite-(T, d)
prediction, Poisson-Dirichlet sums of squares (claim 2's anisotropy limit) and the softmax
overlaps of claim 7's recursion at finite T.  Shapes: R rows (samples), N keys, D model width,
K d_head; a leading 2 indexes the two queries of a pair.
"""

from __future__ import annotations

import math

import numpy as np


def _softmax_rows(l_RN):
    """Row-wise softmax of a (rows, keys) array (float64, max-subtracted)."""
    e = np.exp(l_RN - l_RN.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def gaussian_softmax_entropy(s, n: int, *, rows: int = 4096, seed: int = 0) -> np.ndarray:
    """E[H] / ln n of softmax(s g), g n i.i.d. N(0, 1) logits, at finite n (Monte Carlo in
    float64 over `rows` draws, the same draws for every s): the finite-size version of
    rem_normalized_entropy, whose 1 - x^2 law is only the n -> infinity limit (at n = 64 the
    level 0.5 is reached at s^2 = 1.65 ln n, not ln n; at n = 512 at 1.34 ln n)."""
    g = np.random.default_rng(seed).standard_normal((rows, int(n)))
    out = []
    for si in np.atleast_1d(np.asarray(s, float)):
        lg = si * g
        lg -= lg.max(axis=1, keepdims=True)
        w = np.exp(lg)
        z = w.sum(axis=1)
        h = np.log(z) - (w * lg).sum(axis=1) / z
        out.append(h.mean() / math.log(n))
    return np.asarray(out).reshape(np.shape(s))


def softmax_level_std(n: int, level: float = 0.5, *, rows: int = 2048) -> float:
    """The logit std s at which the finite-n softmax entropy gaussian_softmax_entropy(s, n)
    equals `level` (bisection; the entropy decreases in s): at n = 512 and level 0.5,
    s = 0.82 sqrt(2 ln n), below the REM freezing threshold sqrt(2 ln n)."""
    lo, hi = 1e-6, 4.0 * math.sqrt(2.0 * math.log(n))
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        above = float(gaussian_softmax_entropy(mid, n, rows=rows)) > level
        lo, hi = (mid, hi) if above else (lo, mid)
    return 0.5 * (lo + hi)


def gg_pair_geometry(p: float, d_model: int, d_head: int, rows: int, *, seed: int = 0, block=64):
    """The geometry of pairs of queries of one head with W_Q, W_K ~ N(0, 1/d_model) (D x K,
    K = d_head) on tokens x = sqrt(p) z_0 + sqrt(1 - p) z: for each of `rows` pairs,
    (n_1, n_2, rho) with n = |g| and rho = cos(g_1, g_2), g = W_K W_Q^T x / sqrt(K) (the
    direction in token space a query's logits read, at lambda = 1).  Sampled exactly: one
    (W_Q, W_K, z_0) per `block` pairs, as the queries of one simulated head share them, fresh
    z per query.  So rho fluctuates around p from pair to pair and with the non-orthogonal
    Gram matrices of W_Q, W_K (spread ~ sqrt(K / D)), and n^2 around 1 (chi2-like over K)."""
    rng = np.random.default_rng(seed)
    out = []
    for start in range(0, rows, block):
        n = min(block, rows - start)
        wq_DK, wk_DK = (
            rng.standard_normal((d_model, d_head)) / math.sqrt(d_model) for _ in range(2)
        )
        z0 = rng.standard_normal(d_model)
        x_2RD = math.sqrt(p) * z0 + math.sqrt(1.0 - p) * rng.standard_normal((2, n, d_model))
        g_2RD = (x_2RD @ wq_DK) @ wk_DK.T / math.sqrt(d_head)
        nrm_2R = np.linalg.norm(g_2RD, axis=-1)
        rho_R = np.einsum("rd,rd->r", g_2RD[0], g_2RD[1]) / (nrm_2R[0] * nrm_2R[1])
        out.append(np.stack([nrm_2R[0], nrm_2R[1], rho_R], 1))
    return np.concatenate(out)


def rem_pair_moments(T: int, s1, s2, rho, *, seed: int = 0) -> np.ndarray:
    """Finite-T moments of pairs of softmax rows over the same T keys, one pair per entry of
    the arrays s1, s2, rho (R,): landscapes xi, xi' ~ N(0, 1)^T with corr(xi_j, xi'_j) = rho,
    rows a = softmax(s1 xi), a' = softmax(s2 xi').  Returns (R, 4): per pair

        sum_j a_j^2,  sum_j a_j a'_j,  u^T G^-1 u,  u^T G^-1 u',   G = [[1, rho], [rho, 1]],

    u = sum_j a_j (xi_j, xi'_j), u' = sum_j a'_j (xi_j, xi'_j).  u^T G^-1 u is the squared
    length of sum_j a_j mu_j, mu_j the conditional mean of a Gaussian key z_j in the plane of the
    two query directions given its two logits (gg_finite_cosine); u^T G^-1 u' the inner
    product of the two rows' versions."""
    rng = np.random.default_rng(seed)
    s1, s2, rho = (np.asarray(v, dtype=float) for v in (s1, s2, rho))
    out = np.empty((rho.size, 4))
    chunk = max(1, 2**20 // T)
    for i in range(0, rho.size, chunk):
        sl = slice(i, i + chunk)
        r = rho[sl, None]
        xi = rng.standard_normal((r.shape[0], T))
        xk = r * xi + np.sqrt(np.maximum(0.0, 1.0 - r * r)) * rng.standard_normal(xi.shape)
        a, b = _softmax_rows(s1[sl, None] * xi), _softmax_rows(s2[sl, None] * xk)
        u1, u2 = (a * xi).sum(1), (a * xk).sum(1)
        w1, w2 = (b * xi).sum(1), (b * xk).sum(1)
        r = r[:, 0]
        out[sl] = np.stack(
            [
                (a * a).sum(1),
                (a * b).sum(1),
                (u1 * u1 - 2 * r * u1 * u2 + u2 * u2) / (1 - r * r),
                (u1 * w1 - r * (u1 * w2 + u2 * w1) + u2 * w2) / (1 - r * r),
            ],
            1,
        )
    return out


def pd_sum_sq_samples(
    m: float, n_samples: int = 20000, *, n_atoms: int = 4000, seed: int = 0
) -> np.ndarray:
    """Samples of Y = sum_k w_k^2 for Poisson-Dirichlet PD(m, 0) weights, 0 < m < 1.

    w_k proportional to G_k^(-1/m) with G_k the arrival times of a unit Poisson process
    (ranked representation); the first n_atoms atoms exactly, the rest by their law-of-large-
    numbers value sum_{k > K} k^(-a) ~ (K + 1/2)^(1 - a) / (a - 1).  E[Y] = 1 - m."""
    rng = np.random.default_rng(seed)
    a = 1.0 / m
    ys = np.empty(n_samples)
    K = n_atoms
    tail1 = (K + 0.5) ** (1.0 - a) / (a - 1.0)
    tail2 = (K + 0.5) ** (1.0 - 2.0 * a) / (2.0 * a - 1.0)
    for lo in range(0, n_samples, 1000):
        n = min(1000, n_samples - lo)
        g = np.cumsum(rng.exponential(size=(n, K)), axis=1)
        v = g ** (-a)
        s1 = v.sum(1) + tail1
        s2 = (v**2).sum(1) + tail2
        ys[lo : lo + n] = s2 / s1**2
    return ys


def softmax_pair_overlaps(s, c, n: int, *, rows: int = 512, seed: int = 0) -> tuple[float, float]:
    """(Y, Z) at finite n, sampled: `rows` pairs of softmax rows over n keys whose logits are
    i.i.d. N(0, s^2) over the keys, the two rows' logits with correlation c (float64, a fixed
    seed); Y = mean sum_j A_j^2, Z = mean sum_j A_j A'_j (simlab.theory.signal.softmax_overlaps)."""
    rng = np.random.default_rng(seed)
    l1 = s * rng.standard_normal((rows, n))
    l2 = c * l1 + math.sqrt(max(0.0, 1.0 - c * c)) * s * rng.standard_normal((rows, n))
    a1, a2 = _softmax_rows(l1), _softmax_rows(l2)
    return float(np.mean(np.sum(a1 * a1, 1))), float(np.mean(np.sum(a1 * a2, 1)))
