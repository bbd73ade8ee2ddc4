"""Claim 1: the entropy of a softmax of T i.i.d. Gaussian logits, the random energy model.

A softmax row softmax(s g), g_j i.i.d. N(0, 1), j = 1..T, is the Gibbs measure of Derrida's
random energy model (B. Derrida, "Random-energy model: an exactly solvable model of disordered
systems", Phys. Rev. B 24, 2613, 1981) with T levels at inverse temperature s.  Below the
freezing threshold s_c = sqrt(2 ln T) the row is spread over ~T e^(-s^2/2) keys (annealed);
above it a few keys carry O(1) weight (frozen, Poisson-Dirichlet).  docs/theory.md, "Claim 1".
"""

from __future__ import annotations

import numpy as np


def rem_critical_std(T) -> np.ndarray:
    """s_c = sqrt(2 ln T): the freezing threshold of a softmax over T i.i.d. N(0, s^2) logits."""
    return np.sqrt(2.0 * np.log(np.asarray(T, dtype=float)))


def rem_normalized_entropy(x) -> np.ndarray:
    """Large-T limit of H / ln T for the softmax of T i.i.d. N(0, s^2) logits, x = s / s_c.

    Statement (Derrida 1981, "Random-energy model: an exactly solvable model of disordered
    systems", Phys. Rev. B 24, 2613; the softmax row is the Gibbs measure of a REM with
    2^N = T levels and energies -s g_j).  Annealed phase (s < s_c = sqrt(2 ln T)):
    ln Z = ln T + s^2/2 + o(ln T), the Gibbs mean of the logit is s^2, so
    H = ln Z - <l> = ln T - s^2 / 2 + o(ln T).  Frozen phase (s >= s_c): the weights converge
    to a Poisson-Dirichlet PD(m) law with m = s_c / s and H = O(1).  Hence
    H / ln T -> 1 - x^2 for x < 1 and 0 for x >= 1 (continuous, with a kink at x = 1).
    Assumptions: i.i.d. Gaussian logits in a row, T -> infinity at fixed x.  Checked against the
    textbook REM free energy (the REM entropy per level is ln 2 - beta^2/2 below beta_c).
    Finite-size corrections are slow: in the frozen phase they are the O(1) entropy over ln T;
    at the kink x = 1 the entropy grows like sqrt(ln T), so the error of H / ln T there falls
    like (ln T)^(-1/2), not 1/ln T (check-theory measures the exponent: docs/theory.md,
    "Claim 1").

    Knobs: s is the key-dependent logit std, s = sqrt(1 - input_corr) * logit_std(...)
    (simlab.theory's docstring), so
    x = sqrt(1 - p) * q_scale k_scale q_std k_std / (temperature s_c).
    """
    x = np.asarray(x, dtype=float)
    return np.where(x < 1.0, 1.0 - x**2, 0.0)


def rem_entropy(s, T) -> np.ndarray:
    """Leading-order entropy ln T * rem_normalized_entropy(s / sqrt(2 ln T)) (nats)."""
    T = np.asarray(T, dtype=float)
    return np.log(T) * rem_normalized_entropy(np.asarray(s, float) / rem_critical_std(T))


def rem_frozen_entropy(x) -> np.ndarray:
    """O(1) limit of the entropy itself in the frozen phase x = s / s_c > 1: the mean entropy of
    PD(m), m = 1/x, which is E[-ln w*] for a size-biased pick w* ~ Beta(1 - m, m):
    psi(1) - psi(1 - m).  Derived here (not in the source); it diverges as x -> 1+, where the
    O(ln T) annealed entropy takes over.  Returns nan for x <= 1."""
    from scipy.special import digamma  # scipy: a dependency of simlab, imported where used

    x = np.asarray(x, dtype=float)
    m = np.where(x > 1.0, 1.0 / np.where(x > 1.0, x, 2.0), np.nan)
    return digamma(1.0) - digamma(1.0 - m)


def rem_entropy_finite(s, T, *, n_t: int = 600, n_g: int = 1200) -> float:
    """Mean entropy (nats) of softmax(s g) over T i.i.d. N(0, 1) logits g at finite T, from the
    Poissonized model: the T logits replaced by a Poisson process of intensity T phi(g) dg (the
    same law up to O(1/T): at s = 0 it gives ln T - 1/(2T) instead of ln T).

    Derived here, with exact formulas for Poisson processes: Z = sum_j e^{s g_j}, and
        E ln Z = int_0^inf (e^{-t} - L(t)) dt / t                     (Frullani),
        L(t) = E e^{-t Z} = exp(-T int phi(g) (1 - exp(-t e^{s g})) dg)   (Campbell),
        E sum_j s g_j e^{s g_j} / Z
            = T int phi(g) s g e^{s g} E[1 / (e^{s g} + Z)] dg               (Mecke),
        E[1 / (a + Z)] = int_0^inf e^{-t a} L(t) dt,
    so E H = E ln Z - E sum_j w_j s g_j. Both integrals are evaluated on fixed grids in
    log t and in g (n_t x n_g points; converged to 1e-5 nats at the defaults for T <= 2^16).
    Unlike the T -> infinity laws (rem_normalized_entropy, rem_frozen_entropy) it holds at every
    x = s / sqrt(2 ln T), the kink included: the finite-T entropy with no free parameter."""
    s, T = float(s), float(T)
    g_max = np.sqrt(2.0 * np.log(T)) + 8.0
    g = np.linspace(-12.0, g_max, n_g)
    dg = g[1] - g[0]
    phi = np.exp(-0.5 * g**2) / np.sqrt(2.0 * np.pi)
    u = np.linspace(-s * g_max - 40.0, s * 12.0 + 40.0, n_t)  # log t
    du = u[1] - u[0]
    t = np.exp(u)
    tz = np.exp(np.minimum(u[:, None] + s * g[None, :], 700.0))  # t e^{s g}, (n_t, n_g)
    L = np.exp(-T * (phi[None, :] * -np.expm1(-tz)).sum(1) * dg)
    e_ln_z = ((np.exp(-t) - L) * du).sum()
    inv = (np.exp(-tz) * (L * t)[:, None] * du).sum(0)  # E[1 / (e^{s g} + Z)] per g
    e_sgw = T * (phi * s * g * np.exp(s * g) * inv).sum() * dg
    return float(e_ln_z - e_sgw)
