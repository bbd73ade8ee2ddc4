"""Width: the anisotropy a BERT-init post-LN block adds through its GELU MLP's mean output.

Derived here for the width experiment (docs/gallery.md, "6. Width"): the MLP's output has a
part gbar 1^T W_2 shared by every token, whose size follows from the GELU's Gaussian moments.
"""

from __future__ import annotations

import math

import numpy as np


def gelu_moments(s2) -> tuple[np.ndarray, np.ndarray]:
    """(E g, Var g) of g = GELU(z) (the tanh form simlab and BERT use), z ~ N(0, s2), by
    200-point Gauss-Hermite quadrature (exact to float64 rounding for this smooth integrand).
    For the exact GELU z Phi(z), E g = s2 / sqrt(2 pi (1 + s2)) (Stein's lemma)."""
    x, w = np.polynomial.hermite_e.hermegauss(200)
    w = w / w.sum()
    z = np.sqrt(np.asarray(s2, float))[..., None] * x
    g = 0.5 * z * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z**3)))
    m = np.sum(w * g, axis=-1)
    return m, np.sum(w * g * g, axis=-1) - m**2


def mlp_mean_gain(d_model, mlp_ratio: int = 4, init_std: float = 0.02) -> np.ndarray:
    """out_cos - input_cos of a BERT-init post-LN block on nearly orthogonal tokens (small
    drift), from the MLP's shared output alone (derived here; docs/gallery.md, "6. Width").

    h = LN1(x + Attn(x)) ~ LN1(x) has unit-variance coordinates, so each pre-activation
    z = h W_1 is N(0, s^2) with s^2 = d init_std^2 and g = GELU(z) has mean gbar and variance v
    (gelu_moments). MLP(h) = gbar 1^T W_2 + r_t: a vector m shared by every token, with
    E|m|^2 = gbar^2 c, and a token-specific part with E|r_t|^2 = v c, c = F d init_std^2
    (F = mlp_ratio d). For t != s the pairs h_t, h_s, r_t, r_s are nearly orthogonal, so the
    output LN2(h + MLP(h)) has pairwise cosine

        gain = gbar^2 c / (d + (gbar^2 + v) c)

    above the input's. LN2's mean subtraction changes |m|^2 by a factor 1 - 1/d; the attention
    branch (|Attn| ~ 0.015 |x| at d 768) is left out. mlp_center removes m: gain 0."""
    d = np.asarray(d_model, float)
    m, v = gelu_moments(d * init_std**2)
    c = mlp_ratio * d * d * init_std**2
    return m * m * c / (d + (m * m + v) * c)
