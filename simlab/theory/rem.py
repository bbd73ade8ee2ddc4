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
