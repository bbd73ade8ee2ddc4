"""Closed-form predictions about attention sharpness and anisotropy, each with its source.

Eleven claims (the numbering is the one of `simlab check-theory` and docs/theory.md), one
module each, named after the claim (claims 8-11 share one):

  1. REM entropy      (rem) softmax of T i.i.d. Gaussian logits (Derrida's random energy model);
                      the limit law and the finite-T mean entropy (rem_entropy_finite).
  2. Giorlandino-Goldt  (gg) output cosine of one attention layer on correlated tokens
                      (arXiv 2505.24333), re-derived here from the REM.
  3. Chen et al.      (chen) critical attention scaling beta = gamma ln n (ICLR 2026,
                      arXiv 2510.05554).
  4. Zhai et al.      (zhai) attention-entropy lower bound from a spectral norm (arXiv 2303.06296).
  5. Dong et al.      (dong) rank collapse of pure attention, doubly exponential in depth
                      (arXiv 2103.03404).
  6. Iso-entropy line (freezing) of the paper's protocol (BERT init, drifted embeddings):
                      claim 1's REM law (Giorlandino & Goldt's threshold) applied to the logit
                      variance lambda^4 sigma_w^4 sigma_e^2 d (d sigma_e^2 + N^2), no free
                      parameter; its freezing line s^2 = 2 ln T beside it.
  7. Signal propagation  (signal) per-layer token cosines of post-LN / pre-LN /
                      attention-only stacks (Giorlandino & Goldt's layer recursion, ported to
                      simlab's blocks).
  8-11. Gains         (gains) the anisotropy a BERT-init block adds, branch by branch: the
                      attention branch under uniform attention, a shared clamped pattern, and
                      the whole block's mean-field curve against the drift, each seed with its
                      own weight statistics; the attention branch under every clamped pattern
                      at any drift (claim 11), and the sharp softmax's limit; derived here.
  Width:              (width) the anisotropy a BERT-init post-LN block adds through the GELU
                      MLP's mean output at N -> 0 (mlp_mean_gain), derived here.

Beside them: common (the knob mapping every claim uses: projected_std, logit_std) and sampling
(the seeded Monte Carlo samplers of the predictions that have no closed form at finite size).
Every public name is re-exported here, so `from simlab import theory; theory.gg_output_cosine`
is the way to call them.

Conventions (simlab's public interface; docs/design.md).  One head computes

    l_ij = (q_i' . k_j') / (sqrt(d_head) * temperature),
    q_i' = q_scale * q_i + q_shift * u_q,   k_j' = k_scale * k_j + k_shift * u_k,

softmax over keys j.  Gaussian inputs with correlation p = input_corr are
x_i = sqrt(p) z_0 + sqrt(1 - p) z_i, z ~ N(0, sigma^2 I_d).  Anisotropy is the mean pairwise
cosine over distinct pairs, (|sum_i u_i|^2 - sum_i |u_i|^2) / (n (n - 1)), u_i = x_i / |x_i|.

How the knobs set the size of the logits.  If the unscaled queries and keys have i.i.d.
coordinates of standard deviation q_std and k_std (independent projections W_Q, W_K of the
tokens), then q . k / sqrt(d_head) has standard deviation q_std * k_std whatever d_head, so

    lambda = q_scale * k_scale * q_std * k_std / temperature                    (logit_std)

is the standard deviation of every logit.  For a projection with i.i.d. N(0, w^2) weights of
tokens with per-coordinate std sigma in d_model dimensions, q_std = w * sqrt(d_model) * sigma
(projected_std): w = 1/sqrt(d_model) with sigma = 1 gives q_std = 1; BERT's w = 0.02 at
d_model = 768 gives q_std = 0.55 sigma.  After QK-norm with gain g, q_std = g.  Of the logit
variance lambda^2, the fraction p (the common z_0) is either constant over keys (softmax
ignores it) or a pattern shared by all queries; the key-dependent part of one row has variance
(1 - p) lambda^2.  drift_norm adds a common vector b to every token: it raises the input
cosine, but it is not a larger p.  On unnormalised attention inputs it also raises the squared
norm per coordinate, q = 1 + n with n = |b|^2 / (d sigma^2), and the overlap to p + n, so
Giorlandino & Goldt's general threshold beta_c = sqrt(2 / (q (q - p_overlap))) becomes
sqrt(2 / ((1 + n)(1 - p))): drift lowers beta_c (attention freezes sooner), where a larger p
raises it (sqrt(2 / (1 - p))).  Behind a LayerNorm the norm is reset and drift acts on the
overlap only.  The claims below assume drift_norm = 0 unless stated otherwise.
q_shift adds m_q . k_j (a shared pattern); k_shift adds q_i . m_k, constant over j, which
softmax ignores exactly.

Every function here is plain numpy (float64; scipy for special functions and quantiles) so that
predictions do not depend on JAX's precision; simulations live in simlab.studies.check_theory.
Curve functions return (x_arr, y_arr, label) triples, the `theory=` format of
simlab.plot.phase_diagram / curves.
"""

from __future__ import annotations

from simlab.theory.chen import (
    chen_beta_from_knobs,
    chen_boundary_curve,
    chen_gamma_c,
    chen_output_cosine,
    chen_output_cosine_finite,
)
from simlab.theory.common import (
    logit_std,
    projected_std,
)
from simlab.theory.dong import (
    collapse_exponent,
    composite_norm,
    dong_cubic_term,
    dong_explicit_constant,
    dong_residual_bound,
    dong_theorem_constant,
)
from simlab.theory.freezing import (
    paper_entropy,
    paper_freezing_line_curve,
    paper_iso_entropy_curve,
    paper_iso_entropy_lambda,
    paper_iso_entropy_lambda_finite,
    paper_logit_var,
)
from simlab.theory.gains import (
    CLAMP_COS,
    clamp_gain,
    clamp_weights,
    doubly_stochastic_cos,
    drift_fraction_after,
    drift_gain_uniform,
    expected_drift_gain_factor,
    gelu_mean_field,
    logit_parts,
    mean_field_gain,
    other_clamp_cos,
    row_stochastic_cos,
    shared_clamp_cos,
    shared_global_gain,
    shared_weight,
    shared_within_gain,
    sharp_softmax_cos,
    token_clamp_cos,
    uniform_clamp_cos,
)
from simlab.theory.gg import (
    gg_beta_c,
    gg_beta_from_knobs,
    gg_boundary_curve,
    gg_cosine_contours,
    gg_finite_cosine,
    gg_inverse_temperature_c,
    gg_iso_entropy_curve,
    gg_mean_cosine,
    gg_output_cosine,
)
from simlab.theory.rem import (
    rem_critical_std,
    rem_entropy,
    rem_entropy_finite,
    rem_frozen_entropy,
    rem_normalized_entropy,
)
from simlab.theory.sampling import (
    gaussian_softmax_entropy,
    gg_pair_geometry,
    pd_sum_sq_samples,
    rem_pair_moments,
    softmax_level_std,
    softmax_pair_overlaps,
)
from simlab.theory.signal import (
    activation_kernel,
    signal_propagation,
    softmax_overlaps,
)
from simlab.theory.width import (
    gelu_moments,
    mlp_mean_gain,
)
from simlab.theory.zhai import (
    entropy_floor,
    zhai_entropy_lower_bound,
    zhai_stated_bound,
)

__all__ = [
    "activation_kernel",
    "chen_beta_from_knobs",
    "chen_boundary_curve",
    "chen_gamma_c",
    "chen_output_cosine",
    "chen_output_cosine_finite",
    "collapse_exponent",
    "composite_norm",
    "dong_cubic_term",
    "dong_explicit_constant",
    "dong_residual_bound",
    "dong_theorem_constant",
    "entropy_floor",
    "gaussian_softmax_entropy",
    "softmax_level_std",
    "gelu_moments",
    "gg_beta_c",
    "gg_beta_from_knobs",
    "gg_boundary_curve",
    "gg_iso_entropy_curve",
    "gg_cosine_contours",
    "gg_finite_cosine",
    "gg_inverse_temperature_c",
    "gg_mean_cosine",
    "gg_output_cosine",
    "gg_pair_geometry",
    "logit_std",
    "mlp_mean_gain",
    "paper_entropy",
    "paper_freezing_line_curve",
    "paper_iso_entropy_curve",
    "paper_iso_entropy_lambda",
    "paper_iso_entropy_lambda_finite",
    "paper_logit_var",
    "pd_sum_sq_samples",
    "projected_std",
    "rem_critical_std",
    "rem_entropy",
    "rem_entropy_finite",
    "rem_frozen_entropy",
    "rem_normalized_entropy",
    "rem_pair_moments",
    "signal_propagation",
    "softmax_overlaps",
    "softmax_pair_overlaps",
    "zhai_entropy_lower_bound",
    "zhai_stated_bound",
    "drift_fraction_after",
    "drift_gain_uniform",
    "expected_drift_gain_factor",
    "gelu_mean_field",
    "mean_field_gain",
    "shared_global_gain",
    "shared_weight",
    "shared_within_gain",
    "CLAMP_COS",
    "clamp_gain",
    "clamp_weights",
    "doubly_stochastic_cos",
    "logit_parts",
    "other_clamp_cos",
    "row_stochastic_cos",
    "shared_clamp_cos",
    "sharp_softmax_cos",
    "token_clamp_cos",
    "uniform_clamp_cos",
]
