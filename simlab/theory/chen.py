"""Claim 3: Chen, Lin, Polyanskiy & Rigollet, critical attention scaling beta = gamma ln n.

Source: "Critical attention scaling in long-context transformers", ICLR 2026, arXiv
2510.05554.  Identity Q = K = V on unit tokens whose pairwise cosines all equal rho (their
Assumption 1, the simplex), logits beta <y_i, y_j>, beta = gamma ln n: the output cosine
jumps at gamma_c = 1 / (1 - rho).  The limits and the exact finite-n cosine are re-derived
here from Assumption 1.  docs/theory.md, "Claim 3".
"""

from __future__ import annotations

import math

import numpy as np


def chen_gamma_c(rho) -> np.ndarray:
    """gamma_c = 1 / (1 - rho)."""
    return 1.0 / (1.0 - np.asarray(rho, dtype=float))


def chen_output_cosine(gamma, rho) -> np.ndarray:
    """n -> infinity limit of the output cosine at beta = gamma ln n.

    Statement (Chen, Lin, Polyanskiy, Rigollet, "Critical attention scaling in long-context
    transformers", ICLR 2026, arXiv 2510.05554).  Model (as summarised by the abstract and the
    paper notes the search returned, en.papernotes.org/ICLR2026; the theorem's own text was not
    among the search results, which held excerpts of abstract pages only): identity
    Q = K = V, tokens normalised y_i = x_i / |x_i|, scores a_ij = beta <y_i, y_j>, output
    x_i' = sum_j softmax_j(a_ij) y_j + alpha x_i, beta = gamma log n; Assumption 1 (simplex):
    <y_i, y_j> = rho for all i != j.  Critical gamma_c = 1 / (1 - rho) (confirmed by the
    reviews); the limits below follow exactly from Assumption 1 with alpha = 0 (derivation in
    chen_output_cosine_finite: A_ii -> 0, 1/2, 1 below, at, above gamma_c):

        cos_out -> 1                      gamma < gamma_c   (all tokens collapse),
        cos_out -> 4 rho / (1 + 3 rho)    gamma = gamma_c,
        cos_out -> rho                    gamma > gamma_c   (attention = identity).

    Knob mapping: with identity projections and unit-norm queries and keys, simlab's logit is
    q_scale k_scale <y_i, y_j> / (sqrt(d_head) temperature), so
    beta = q_scale k_scale q_norm k_norm / (sqrt(d_head) temperature) with q_norm = k_norm = 1
    for unit vectors (QK-norm with gain g: q_norm = g sqrt(d_head)), rho = input_corr for
    Gaussian inputs at large d (the pairwise cosine of the inputs).  No residual
    (attn_residual = 0), drift_norm = 0.
    """
    gamma = np.asarray(gamma, dtype=float)
    rho = np.asarray(rho, dtype=float)
    gc = chen_gamma_c(rho)
    crit = 4.0 * rho / (1.0 + 3.0 * rho)
    return np.where(
        np.isclose(gamma, gc, rtol=1e-9, atol=0.0), crit, np.where(gamma < gc, 1.0, rho)
    )


def chen_output_cosine_finite(gamma, rho, n) -> np.ndarray:
    """Exact output cosine at finite n for the simplex configuration (Assumption 1 below):
    a = A_ii = 1 / (1 + (n - 1) e^(-beta (1 - rho))), b = (1 - a) / (n - 1),
    |o|^2 = rho + (1 - rho)(a^2 + (n - 1) b^2), o_i.o_k = rho + (1 - rho)(2ab + (n - 2) b^2)."""
    gamma = np.asarray(gamma, dtype=float)
    rho = np.asarray(rho, dtype=float)
    n = np.asarray(n, dtype=float)
    beta = gamma * np.log(n)
    e = np.exp(np.log(n - 1.0) - beta * (1.0 - rho))
    a = 1.0 / (1.0 + e)
    b = (1.0 - a) / (n - 1.0)
    norm2 = rho + (1.0 - rho) * (a**2 + (n - 1.0) * b**2)
    cross = rho + (1.0 - rho) * (2.0 * a * b + (n - 2.0) * b**2)
    return cross / norm2


def chen_beta_from_knobs(
    q_scale=1.0, k_scale=1.0, temperature=1.0, *, d_head=1, q_norm=1.0, k_norm=1.0
):
    """beta of claim 3 from simlab knobs:
    q_scale k_scale q_norm k_norm / (sqrt(d_head) temperature)."""
    return (
        np.asarray(q_scale)
        * np.asarray(k_scale)
        * q_norm
        * k_norm
        / (math.sqrt(d_head) * np.asarray(temperature))
    )


def chen_boundary_curve(
    n,
    *,
    d_head=1,
    q_scale=1.0,
    k_scale=1.0,
    q_norm=1.0,
    k_norm=1.0,
    rho=None,
    x="inverse_temperature",
):
    """Claim-3 critical line beta = ln n / (1 - rho) in simlab knob coordinates, as
    (x_arr, y_arr, label) with y = input_corr (= rho); x = 1/temperature, temperature, or
    beta ("beta")."""
    if rho is None:
        rho = np.linspace(0.0, 0.98, 200)
    rho = np.asarray(rho, dtype=float)
    beta = np.log(float(n)) / (1.0 - rho)
    inv_t = beta * math.sqrt(d_head) / (q_scale * k_scale * q_norm * k_norm)
    xs = {"inverse_temperature": inv_t, "temperature": 1.0 / inv_t, "beta": beta}[x]
    return xs, rho, f"gamma = 1/(1-rho) (n={int(n)})"
