"""Gains: the anisotropy a BERT-init block adds to drifted inputs, branch by branch.

Derived here (docs/theory.md, "Claims 8-10"). Tokens x_i = e_i + N u_b: a private part e_i
(E|e_i|^2 = E, e.g. d embed_std^2) and the drift N u_b (unit u_b), so the input's pairwise cosine
is rho0 = N^2 / (N^2 + E) for large d (cross terms average out). The value-output map
M = sum_h W_V,h W_O,h (D x D) enters through per-seed statistics of the weights
(simlab.core.lab.Lab.covariates): k = |u_b M|^2, beta = u_b . (u_b M) and k_iso = |M|_F^2 / D.

Uniform attention: a_i = mean_j x_j M = (e_bar + N u_b) M, the same for every token of a
sequence, so h_i = x_i + a_i = e_i + N (u_b + u_b M) + e_bar M: the drift grows by the factor
g = |u_b + u_b M|^2 = 1 + 2 beta + k while the private parts stay (|e_bar|^2 = E / T is left
out). Hence rho_h = rho0 g / (1 + rho0 (g - 1)) and the gain (`drift_gain_uniform`)

    rho_h - rho0 = rho0 (1 - rho0) (g - 1) / (1 + rho0 (g - 1)),

largest near rho0 = 1/2, i.e. a drift about the tokens' norm; beta has a random sign per seed.
A LayerNorm after the residual (post-LN) keeps cosines up to its mean removal, O(1/d).

A shared pattern: every query of a sequence puts weight p on one key j* and (1 - p)/(T - 1) on
each other (simlab.core.patterns, p = e^beta / (e^beta + T - 1)). At N = 0 the common part of a
sequence's outputs is a = p e_j* M (+ O((1 - p) |e_bar M|)), so the within-sequence cosine is
(`shared_within_gain`) p^2 k_iso / (1 + p^2 k_iso) (its direction is the token j*'s, averaged
over tokens: k_iso), and the global cosine, whose pairs are within a sequence for a fraction
(T - 1) / (B T - 1) of them, that fraction of it (`shared_global_gain`): sharing, not
sharpness, makes the gain (a token-specific pattern of the same p adds none).

The MLP (`mean_field_gain`): after LN1, h_i has |h_i|^2 = d and a common part of fraction
rho_h; each pre-activation z = h W_1 column is N(0, s^2), s^2 = d init_std^2, a common value
c ~ N(0, rho_h s^2) per unit plus a private N(0, (1 - rho_h) s^2). The MLP's output is a shared
vector m = sum_f phi(c_f) W_2[f] (phi(c) = E GELU(c + private)) and a private r_i:
E|m|^2 = gbar^2 |1^T W_2|^2 + (Phi2 - gbar^2) C and E|r_i|^2 = (G2 - Phi2) C, with gbar = E
GELU(z), Phi2 = E phi(c)^2, G2 = E GELU(z)^2 and C = F d init_std^2 = E|1^T W_2|^2. The output
cosine is then (rho_h d + |m|^2) / (d + |m|^2 + |r|^2): the mean-field curve of the block's
gain against N, attention branch and MLP mean output together; at N -> 0 it is
simlab.theory.width.mlp_mean_gain (with |1^T W_2|^2 at its expectation C). Per seed, the
seed's own k, beta and |1^T W_2|^2 (= F mlp_shared) replace the expectations, and so do the
random-sign terms of the MLP's linear part (GELU's mean slope 1/2: A = W_1 W_2 / 2), which
carry most of the seed-to-seed spread once the input has a drift: gamma = w^T A w along the
drift's direction w after the attention branch and tau = tr(A) / d.
"""

from __future__ import annotations

import math

import numpy as np


def drift_fraction_after(rho0, g) -> np.ndarray:
    """rho_h = rho0 g / (1 + rho0 (g - 1)): the drift's share of the pairwise cosine after the
    drift is multiplied by sqrt(g) and the private parts are not."""
    rho0, g = np.asarray(rho0, float), np.asarray(g, float)
    return rho0 * g / (1.0 + rho0 * (g - 1.0))


def drift_gain_uniform(rho0, g) -> np.ndarray:
    """out_cos - input_cos of h = x + Attn(x) under uniform attention: rho0 (1 - rho0) (g - 1)
    / (1 + rho0 (g - 1)), g = |u_b + u_b M|^2 = 1 + 2 beta + k (module docstring)."""
    return drift_fraction_after(rho0, g) - np.asarray(rho0, float)


def shared_weight(beta, n) -> np.ndarray:
    """p = e^beta / (e^beta + n - 1): the weight a clamped pattern of sharpness beta puts on its
    target among n keys (simlab.core.patterns), computed without overflow."""
    beta, n = np.asarray(beta, float), np.asarray(n, float)
    return 1.0 / (1.0 + (n - 1.0) * np.exp(-beta))


def shared_within_gain(k_iso, p) -> np.ndarray:
    """Within-sequence cosine a shared pattern of weight p adds at N = 0: p^2 k / (1 + p^2 k)."""
    q = np.asarray(p, float) ** 2 * np.asarray(k_iso, float)
    return q / (1.0 + q)


def shared_global_gain(k_iso, p, batch: int, length: int) -> np.ndarray:
    """The global cosine it adds: the within-sequence gain times the share (T - 1) / (B T - 1)
    of all pairs that lie within one sequence (pairs across sequences share nothing)."""
    return shared_within_gain(k_iso, p) * (length - 1.0) / (batch * length - 1.0)


def gelu_mean_field(rho, s2, n: int = 64) -> tuple[float, float, float]:
    """(gbar, Phi2, G2) for GELU (tanh form) with z = c + private, c ~ N(0, rho s2), private ~
    N(0, (1 - rho) s2): gbar = E GELU(z), Phi2 = E_c (E_private GELU(z))^2, G2 = E GELU(z)^2; by
    n x n Gauss-Hermite quadrature (exact to rounding for this smooth integrand at n = 64)."""
    x, w = np.polynomial.hermite_e.hermegauss(n)
    w = w / w.sum()
    rho = float(np.clip(rho, 0.0, 1.0))
    z = math.sqrt(rho * s2) * x[:, None] + math.sqrt((1.0 - rho) * s2) * x[None, :]
    g = 0.5 * z * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z**3)))
    phi = g @ w  # E over the private part, per common value
    return float(phi @ w), float((phi * phi) @ w), float(w @ (g * g) @ w)


def mean_field_gain(
    rho0,
    g,
    d_model: int,
    mlp_ratio: int = 4,
    init_std: float = 0.02,
    ones_w2=None,
    gamma=0.0,
    tau=0.0,
) -> np.ndarray:
    """out_cos - input_cos of a BERT-init post-LN block with its GELU MLP under uniform
    attention (module docstring): rho_h from the attention branch, then the MLP's shared and
    private outputs. Per seed: ones_w2 = |1^T W_2|^2 (F mlp_shared; default its expectation
    C = F d init_std^2), and the MLP's linear part A = W_1 W_2 / 2, whose random-sign terms
    h . MLP(h) add 2 rho_h d gamma (gamma = w^T A w along the drift, mlp_drift_dot) to the
    common part and 2 d (rho_h gamma + (1 - rho_h) tau) (tau = tr(A) / d, mlp_trace) to the
    squared norm; both have mean 0 over seeds. Broadcasts over every array argument."""
    d = float(d_model)
    s2 = d * init_std**2
    c = mlp_ratio * d * d * init_std**2
    rho0, g, ones, gamma, tau = np.broadcast_arrays(
        *(np.asarray(v, float) for v in (rho0, g, c if ones_w2 is None else ones_w2, gamma, tau))
    )
    rho_h = drift_fraction_after(rho0, g)
    out = np.empty(rho0.shape)
    for i in np.ndindex(rho0.shape):
        gbar, phi2, g2 = gelu_mean_field(rho_h[i], s2)
        m2 = gbar**2 * ones[i] + (phi2 - gbar**2) * c
        num = rho_h[i] * d * (1.0 + 2.0 * gamma[i]) + m2
        cross = 2.0 * d * (rho_h[i] * gamma[i] + (1.0 - rho_h[i]) * tau[i])
        out[i] = num / (d + cross + m2 + (g2 - phi2) * c) - rho0[i]
    return out


def expected_drift_gain_factor(d_model: int, init_std: float = 0.02) -> float:
    """E g = 1 + E k = 1 + d^2 init_std^4 (beta has mean 0) at BERT init: the average seed's
    factor, for overlays drawn without the seeds' own weights."""
    return 1.0 + float(d_model) ** 2 * init_std**4
