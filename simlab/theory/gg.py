"""Claim 2: Giorlandino & Goldt, the output cosine of one attention layer on correlated tokens.

Source: A. Giorlandino and S. Goldt, "Two failure modes of deep transformers and how to avoid
them", arXiv 2505.24333, and their code (github.com/aGiorlandino/ICLR-Signal-Propagation-
Transformers, theory_update_general.py, get_attention_update).  The limit (gg_output_cosine)
is re-derived here from claim 1's REM; the finite-(T, d) prediction (gg_finite_cosine) and
the limit of simlab's anisotropy (gg_mean_cosine) are derived here; their Monte Carlo parts
live in simlab.theory.sampling.  Knob coordinates for phase diagrams: gg_boundary_curve,
gg_cosine_contours.  docs/theory.md, "Claim 2".
"""

from __future__ import annotations

import math

import numpy as np

from simlab.theory.common import logit_std
from simlab.theory.rem import rem_critical_std
from simlab.theory.sampling import (
    gg_pair_geometry,
    pd_sum_sq_samples,
    rem_pair_moments,
    softmax_level_std,
)


def gg_beta_c(p) -> np.ndarray:
    """beta_c = sqrt(2 / (1 - p)): the critical inverse temperature of claim 2."""
    return np.sqrt(2.0 / (1.0 - np.asarray(p, dtype=float)))


def gg_output_cosine(beta, p) -> np.ndarray:
    """Limiting output cosine of one softmax attention layer on tokens with correlation p.

    Statement (Giorlandino & Goldt, arXiv 2505.24333, "Two failure modes of deep transformers
    and how to avoid them"; the formula matches their official code exactly:
    github.com/aGiorlandino/ICLR-Signal-Propagation-Transformers, theory_update_general.py,
    get_attention_update; it is also re-derived below):

        cos_out = 1                                         for beta <= beta_c,
        cos_out = p / (p + (1 - p) (1 - beta_c / beta))     for beta >  beta_c,
        beta_c  = sqrt(2 / (1 - p)).

    Derivation.  Tokens x_i = sqrt(p) z_0 + sqrt(1 - p) z_i (d -> infinity), independent
    random W_Q, W_K, identity values.  The logits have std lambda = beta sqrt(ln T) (this is
    the sqrt(ln T) in their scaling); for a fixed query the key-dependent part is, exactly
    for Gaussian inputs, i.i.d. N(0, (1 - p) lambda^2) over keys: a REM with
    s = sqrt(1 - p) beta sqrt(ln T), which freezes at s = sqrt(2 ln T), i.e. beta = beta_c.
    The output o_i = sum_j A_ij x_j has o_i . o_k / d -> p + (1 - p) sum_j A_ij A_kj and
    |o_i|^2 / d -> p + (1 - p) Y_i with Y_i = sum_j A_ij^2.  Y -> 0 in the annealed phase and
    E[Y] -> 1 - m, m = beta_c / beta, in the frozen phase (PD(m)); the overlap of two queries
    -> 0 (their landscapes share only a fraction p of the variance: REM chaos).  The formula is
    therefore a ratio of expectations, E[o_i . o_k] / E[|o_i|^2] ("kernel cosine" in
    check_theory).  Because Y_i does not self-average in the frozen phase, simlab's
    anisotropy (the mean of per-pair cosines) converges instead to gg_mean_cosine(beta, p)
    >= gg_output_cosine(beta, p) (Jensen).

    Assumptions: T -> infinity, d_model, d_head -> infinity first, drift_norm = 0, no shifts,
    identity (or random orthogonal-like) values, no residual, no normalisation.  The limit is
    not uniform in p: in the annealed phase Y = Z(2s) / Z(s)^2 ~ T^(2 x^2 - 1), x = beta/beta_c,
    for beta < beta_c / 2 (where Z(2s) is still annealed) and ~ T^(-2 (1 - x)^2) between
    beta_c / 2 and beta_c (Z(2s) frozen), so 1 - cos ~ (1 - p)/p * Y needs T large against a
    power of (1 - p)/p; at p = 0 the annealed formula is 0/0 (p / (p + (1 - p) Y) with p = 0 and
    Y -> 0: the limits p -> 0 and T -> infinity do not commute) and the finite-T cosine is 0,
    not 1 (two queries share no key preference); gg_finite_cosine covers p = 0.  Near beta_c the
    approach is logarithmically slow (REM critical point).

    At finite T and d_model: gg_finite_cosine (derived here), whose 1/d terms are the
    finite-width floor ~ ln T / d of the simulation at fixed d_model.

    Knob mapping (gg_beta_from_knobs): beta = logit_std(q_scale, k_scale, temperature,
    q_std, k_std) / sqrt(ln T); p = input_corr.  Critical inverse temperature in simlab knobs:
    1 / temperature_c = sqrt(2 ln T / (1 - p)) / (q_scale k_scale q_std k_std); d_head drops
    out (it only enters through finite-size fluctuations of |q_i|).
    """
    beta = np.asarray(beta, dtype=float)
    p = np.asarray(p, dtype=float)
    bc = gg_beta_c(p)
    with np.errstate(divide="ignore", invalid="ignore"):
        frozen = p / (p + (1.0 - p) * (1.0 - bc / np.maximum(beta, 1e-300)))
    return np.where(beta <= bc, 1.0, frozen)


def gg_finite_cosine(
    beta, p, T: int, d_model: int, d_head: int, *, rows=None, seed: int = 0, batches: int = 8
):
    """Claim 2 at finite T and finite width (derived here; verified against the simulation in
    check_theory.gg_attention): the kernel cosine E[o_i . o_k] / E|o_i|^2 of one head with
    W_Q, W_K ~ N(0, 1/d_model), identity values, tokens x_j = sqrt(p) z_0 + sqrt(1 - p) z_j:

        cos = (p + (1 - p) [(1 - 2/d) O + m_cross / d]) / (p + (1 - p) [(1 - 2/d) Y + m_self / d])

    with Y, O, m_self, m_cross the means of rem_pair_moments over pairs whose (s_1, s_2, rho) are
    drawn by gg_pair_geometry: s = sqrt(1 - p) lambda n, lambda = beta sqrt(ln T), d = d_model.
    Returns (cos, se) arrays over beta: se is the Monte Carlo standard error (batch means over
    `batches` groups of pairs; `rows` pairs in all, default max(512, min(4096, 2^22 / T))).

    Derivation: for query i the logits are l_ij = c_i + s_i xi_j^(i), xi_j^(i) = g_i . z_j /
    |g_i|: a REM over keys; two queries' landscapes correlate rho = cos(g_i, g_k) (-> p as
    d_head, d_model -> infinity; sampled with its fluctuations, which are of the same order as
    the 1/d terms below).  Given the landscapes, each z_j is Gaussian with mean mu_j in the plane
    of g_i, g_k and the rest (d - 2 dimensions) independent of the attention, so
    E|o_i|^2 / d = p + (1 - p) [(1 - 2/d) Y + |sum_j a_ij mu_j|^2 / d] and
    E o_i . o_k / d = p + (1 - p) [(1 - 2/d) O + (sum_j a_ij mu_j) . (sum_l a_kl mu_l) / d].
    Neglected: terms in z_0 . z_j (they move numerator and denominator by the same delta, so
    the cosine by delta (1 - cos): second order), the fluctuation of |z_0|^2 / d and |z_j|^2 / d,
    and the query token's own key (O(1/T)).  The 1/d terms are the finite-width floor: the
    attended keys are the ones aligned with the query's direction, so each output carries a
    query-specific component of squared length ~ min(s^2, 2 ln T) (the Gibbs mean of xi); at
    leading order 1 - cos ~ ((1 - p) / p) (Y - O + (1 - p) m / d), m ~ min(s, sqrt(2 ln T))^2,
    which grows like ln T / d at fixed d: the d -> infinity limit (gg_output_cosine) needs
    d >> ln T.  As T, d_head, d_model -> infinity, O -> 0, Y -> 0 or 1 - beta_c / beta and the
    formula becomes gg_output_cosine."""
    beta = np.atleast_1d(np.asarray(beta, dtype=float))
    if rows is None:
        rows = int(min(4096, max(512, 2**22 // T)))
    rows = batches * max(1, rows // batches)
    geo = gg_pair_geometry(p, d_model, d_head, rows, seed=seed)
    d = float(d_model)
    cos, se = np.empty_like(beta), np.empty_like(beta)
    for i, b in enumerate(beta):
        s = math.sqrt(1.0 - p) * b * math.sqrt(math.log(T)) * geo[:, :2]
        m = rem_pair_moments(T, s[:, 0], s[:, 1], geo[:, 2], seed=seed + 1 + i)
        Y, O, m_self, m_cross = m.reshape(batches, -1, 4).mean(1).T
        c_B = (p + (1 - p) * ((1 - 2 / d) * O + m_cross / d)) / (
            p + (1 - p) * ((1 - 2 / d) * Y + m_self / d)
        )
        Ya, Oa, msa, mca = m.mean(0)
        cos[i] = (p + (1 - p) * ((1 - 2 / d) * Oa + mca / d)) / (
            p + (1 - p) * ((1 - 2 / d) * Ya + msa / d)
        )
        se[i] = c_B.std(ddof=1) / math.sqrt(batches)
    return cos, se


def gg_mean_cosine(beta, p, *, n_samples: int = 20000, seed: int = 0) -> np.ndarray:
    """Limit of simlab's anisotropy metric (mean pairwise cosine of the outputs) in the setting
    of gg_output_cosine.  Derived here, not in the source: per pair, cos = p / sqrt(N_i N_k)
    with N = p + (1 - p) Y and Y_i independent PD(m) sums of squares, so the mean cosine is
    p * E[N^(-1/2)]^2 in the frozen phase (1 below beta_c).  Monte Carlo over PD(m) (seeded,
    deterministic); scalar p, array beta."""
    beta = np.atleast_1d(np.asarray(beta, dtype=float))
    p = float(p)
    bc = float(gg_beta_c(p))
    out = np.ones_like(beta)
    for i, b in enumerate(beta):
        if b > bc:
            y = pd_sum_sq_samples(bc / b, n_samples, seed=seed)
            out[i] = p * np.mean((p + (1.0 - p) * y) ** -0.5) ** 2
    return out


def gg_beta_from_knobs(T, q_scale=1.0, k_scale=1.0, temperature=1.0, *, q_std=1.0, k_std=1.0):
    """beta of claim 2 from simlab knobs: logit_std(...) / sqrt(ln T)."""
    lam = logit_std(q_scale, k_scale, temperature, q_std=q_std, k_std=k_std)
    return lam / np.sqrt(np.log(np.asarray(T, dtype=float)))


def gg_inverse_temperature_c(T, p, *, q_scale=1.0, k_scale=1.0, q_std=1.0, k_std=1.0):
    """1 / temperature at the claim-2 (and claim-1) boundary for T keys and input_corr p."""
    lam_c = np.sqrt(2.0 * np.log(float(T)) / (1.0 - np.asarray(p, dtype=float)))
    return lam_c / (q_scale * k_scale * q_std * k_std)


def gg_boundary_curve(
    T, *, q_scale=1.0, k_scale=1.0, q_std=1.0, k_std=1.0, p=None, x="inverse_temperature"
):
    """Claim-1/2 phase boundary in simlab knob coordinates, as (x_arr, y_arr, label).

    y is input_corr p; x is 1/temperature ("inverse_temperature"), temperature
    ("temperature") or the claim-2 beta ("beta").  Left of the curve (small 1/temperature) the
    key-dependent logits are annealed (uniform-like attention, output cosine -> 1); right of
    it they are frozen (a few keys per query).  For the temperature x correlation phase
    diagram of a block with i.i.d. N(0, w^2) projections, pass
    q_std = k_std = projected_std(w, d_model, sigma); with QK-norm, the gain."""
    if p is None:
        p = np.linspace(0.0, 0.98, 200)
    p = np.asarray(p, dtype=float)
    inv_t = gg_inverse_temperature_c(
        T, p, q_scale=q_scale, k_scale=k_scale, q_std=q_std, k_std=k_std
    )
    if x == "inverse_temperature":
        xs = inv_t
    elif x == "temperature":
        xs = 1.0 / inv_t
    elif x == "beta":
        xs = gg_beta_c(p)
    else:
        raise ValueError(f"x: {x!r} is not one of 'inverse_temperature', 'temperature', 'beta'")
    return xs, p, f"REM freezing line (T={int(T)})"


def gg_iso_entropy_curve(T, level=0.5, *, p=None, q_std=1.0, k_std=1.0):
    """The predicted H / ln T = level line of the temperature x correlation diagram at finite
    T, as (1/temperature, p, label): the freezing line gg_boundary_curve scaled by
    s_level / s_c, where s_level is the logit std at which a softmax over T Gaussian logits has
    entropy `level` (simlab.theory.sampling.softmax_level_std; 0.82 at T = 512 and level 0.5)
    and s_c = sqrt(2 ln T) the freezing threshold (the logit std grows linearly in
    1/temperature, so the two lines differ by that factor at every p)."""

    xs, ps, _ = gg_boundary_curve(T, q_std=q_std, k_std=k_std, p=p)
    ratio = softmax_level_std(int(T), level) / float(rem_critical_std(T))
    return xs * ratio, ps, f"predicted H/ln T = {level:g} line (finite T = {int(T)})"


def gg_cosine_contours(
    T,
    levels=(0.5, 0.7, 0.9),
    *,
    q_scale=1.0,
    k_scale=1.0,
    q_std=1.0,
    k_std=1.0,
    x="inverse_temperature",
    n: int = 200,
):
    """Iso-lines of the predicted output cosine (claim 2) in the (x, input_corr) plane, as a
    list of (x_arr, y_arr, label).  For a level c > p the frozen formula gives
    1 - beta_c / beta = p (1 - c) / (c (1 - p)); points with p >= c do not exist (the cosine
    never drops below p)."""
    out = []
    for c in levels:
        p = np.linspace(0.0, c, n, endpoint=False)[1:]
        frac = p * (1.0 - c) / (c * (1.0 - p))  # 1 - beta_c/beta
        beta = gg_beta_c(p) / (1.0 - frac)
        lam = beta * np.sqrt(np.log(float(T)))
        inv_t = lam / (q_scale * k_scale * q_std * k_std)
        xs = {"inverse_temperature": inv_t, "temperature": 1.0 / inv_t, "beta": beta}[x]
        out.append((xs, p, f"predicted cos = {c:g}"))
    return out
