"""Closed-form predictions about attention sharpness and anisotropy, each with its source.

Seven claims (the numbering is the one of `simlab check-theory` and docs/theory.md):

  1. REM entropy      softmax of T i.i.d. Gaussian logits (Derrida's random energy model).
  2. Giorlandino-Goldt  output cosine of one attention layer on correlated tokens
                      (arXiv 2505.24333), re-derived here from the REM.
  3. Chen et al.      critical attention scaling beta = gamma ln n (ICLR 2026, arXiv 2510.05554).
  4. Zhai et al.      attention-entropy lower bound from a spectral norm (arXiv 2303.06296).
  5. Dong et al.      rank collapse of pure attention, doubly exponential in depth
                      (arXiv 2103.03404).
  6. Freezing line    of the paper's protocol (BERT init, drifted embeddings): claim 1's REM
                      law (Giorlandino & Goldt's threshold) applied to the logit variance
                      lambda^4 sigma_w^4 sigma_e^2 d (d sigma_e^2 + N^2), no free parameter.
  7. Signal propagation  per-layer token cosines of post-LN / pre-LN / attention-only stacks
                      (Giorlandino & Goldt's layer recursion, ported to simlab's blocks).
  Width:              the anisotropy a BERT-init post-LN block adds through the GELU MLP's
                      mean output (mlp_mean_gain), derived here for the width experiment.

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

Every function here is plain numpy (float64; scipy only inside rem_frozen_entropy) so that
predictions do not depend on JAX's precision; simulations live in simlab.studies.check_theory.
Curve functions return (x_arr, y_arr, label) triples, the `theory=` format of
simlab.plot.phase_diagram / curves.
"""

from __future__ import annotations

import math

import numpy as np

# --------------------------------------------------------------------------------------------
# Knob mapping shared by the claims
# --------------------------------------------------------------------------------------------


def projected_std(init_std: float, d_model: int, input_std: float = 1.0) -> float:
    """Per-coordinate std of x W for W with i.i.d. N(0, init_std^2) entries and tokens whose
    d_model coordinates have std input_std: init_std * sqrt(d_model) * input_std."""
    return float(init_std) * math.sqrt(d_model) * float(input_std)


def logit_std(q_scale=1.0, k_scale=1.0, temperature=1.0, *, q_std=1.0, k_std=1.0):
    """lambda = q_scale k_scale q_std k_std / temperature: the std of the logits
    l_ij = q.k / (sqrt(d_head) temperature) for queries and keys with i.i.d. coordinates of
    std q_std, k_std drawn independently (independent W_Q, W_K).  Broadcasts over arrays."""
    return np.asarray(q_scale) * np.asarray(k_scale) * q_std * k_std / np.asarray(temperature)


# --------------------------------------------------------------------------------------------
# Claim 1: random energy model (REM) entropy of a softmax row
# --------------------------------------------------------------------------------------------


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
    textbook REM free energy (the REM entropy per level is ln 2 - beta^2/2 below beta_c); this
    is the form given in the issue, re-derived here.  Finite-size corrections are slow: in the
    frozen phase the O(1) entropy over ln T; at the kink x = 1 the entropy grows like
    sqrt(ln T) (H(x=1) / sqrt(ln T) stays ~1.0 from T = 2^8 to 2^20, the review of issue 16),
    so the error of H / ln T there falls like (ln T)^(-1/2): check-theory measures the exponent
    (0.38 over T = 2^6..2^16; docs/theory.md, claim 1), not 1/ln T.

    Knobs: s is the key-dependent logit std, s = sqrt(1 - input_corr) * logit_std(...)
    (module docstring), so x = sqrt(1 - p) * q_scale k_scale q_std k_std / (temperature s_c).
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
    psi(1) - psi(1 - m).  Derived here (not in the issue); it diverges as x -> 1+, where the
    O(ln T) annealed entropy takes over.  Returns nan for x <= 1."""
    from scipy.special import digamma  # scipy: a dependency of simlab, imported where used

    x = np.asarray(x, dtype=float)
    m = np.where(x > 1.0, 1.0 / np.where(x > 1.0, x, 2.0), np.nan)
    return digamma(1.0) - digamma(1.0 - m)


# --------------------------------------------------------------------------------------------
# Claim 6: the freezing line of the paper's protocol (drift N x joint q/k scale lambda)
# --------------------------------------------------------------------------------------------


def paper_logit_var(lam, drift_norm, *, d_model, init_std=0.02, embed_std=0.02, temperature=1.0):
    """s^2: the variance over keys j of the logits l_ij = q_i . k_j / (sqrt(K) temperature) of
    an untrained block whose projections see the drifted embeddings x_i = e_i + N u_b (post-LN
    or attention-only: no norm before W_Q, W_K), with W_Q, W_K i.i.d. N(0, init_std^2), zero
    biases, e_i i.i.d. N(0, embed_std^2 I_d), q_scale = k_scale = lambda.

    Derivation (docs/theory.md, claim 6). For a fixed query, q_i = lambda x_i W_Q has |q_i|^2 =
    lambda^2 init_std^2 K |x_i|^2 (K = d_head, large-K average) and the key-dependent part of
    k_j = lambda x_j W_K is lambda e_j W_K ~ N(0, lambda^2 embed_std^2 d init_std^2 I_K); the
    drift's key term lambda N u_b W_K is the same for every key and drops out of the softmax.
    So s^2 = lambda^4 init_std^4 embed_std^2 d |x_i|^2 / temperature^2 with
    |x_i|^2 = d embed_std^2 + N^2 (K cancels): large N makes s grow like lambda^2 N."""
    lam, n = np.asarray(lam, float), np.asarray(drift_norm, float)
    x2 = d_model * embed_std**2 + n**2
    return lam**4 * init_std**4 * embed_std**2 * d_model * x2 / np.asarray(temperature) ** 2


def paper_entropy(
    lam, drift_norm, *, length, d_model, init_std=0.02, embed_std=0.02, temperature=1.0
):
    """Predicted normalised attention entropy H / ln T of the paper's protocol: the REM law
    of claim 1 (rem_normalized_entropy) at s = sqrt(paper_logit_var), T = length keys. Applies
    Giorlandino & Goldt's threshold (their general beta_c = sqrt(2 / (q (q - p))) in the order
    parameters of the attention inputs; here the REM form of the same i.i.d.-Gaussian-logit
    freezing) with no free parameter."""
    s2 = paper_logit_var(
        lam,
        drift_norm,
        d_model=d_model,
        init_std=init_std,
        embed_std=embed_std,
        temperature=temperature,
    )
    return rem_normalized_entropy(np.sqrt(s2) / rem_critical_std(length))


def paper_iso_entropy_lambda(
    drift_norm, level=0.5, *, length, d_model, init_std=0.02, embed_std=0.02, temperature=1.0
):
    """lambda on the predicted iso-entropy line H / ln T = level (0 < level < 1) at drift N:
    s^2 = 2 (1 - level) ln T solved for lambda. level -> 0 is the freezing line proper
    (s = sqrt(2 ln T)); at large N, lambda ~ N^(-1/2)."""
    n = np.asarray(drift_norm, float)
    target = 2.0 * (1.0 - level) * np.log(float(length)) * np.asarray(temperature) ** 2
    return (
        target / (init_std**4 * embed_std**2 * d_model * (d_model * embed_std**2 + n**2))
    ) ** 0.25


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


def paper_iso_entropy_lambda_finite(
    drift_norm,
    level=0.5,
    *,
    length,
    d_model,
    n_heads,
    init_std=0.02,
    embed_std=0.02,
    temperature=1.0,
    rows: int = 2048,
):
    """paper_iso_entropy_lambda with the two finite-size effects put back, still without a
    free parameter: the entropy of a softmax over n = length Gaussian logits at finite n
    (gaussian_softmax_entropy, tabulated) and the spread of the row logit variance across
    queries and heads, s_i^2 = s^2 c with c ~ chi^2_K / K (|q_i|^2 over the K = d_head query
    coordinates), averaged over 32 quantiles of c as the mean entropy over rows is."""
    from scipy.stats import chi2

    k = d_model // n_heads
    c = chi2.ppf((np.arange(32) + 0.5) / 32, k) / k
    grid = np.linspace(0.0, 4.0 * float(rem_critical_std(length)), 161)
    h_grid = gaussian_softmax_entropy(grid, length, rows=rows)

    def mean_h(s):
        return float(np.mean(np.interp(s * np.sqrt(c), grid, h_grid)))

    lo, hi = 1e-6, float(grid[-1] / np.sqrt(c.max()))
    for _ in range(60):  # mean_h decreases in s: bisection for mean_h(s) = level
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if mean_h(mid) > level else (lo, mid)
    s2 = (0.5 * (lo + hi)) ** 2 * np.asarray(temperature, float) ** 2
    n = np.asarray(drift_norm, float)
    x2 = d_model * embed_std**2 + n**2
    return (s2 / (init_std**4 * embed_std**2 * d_model * x2)) ** 0.25


def paper_freezing_curve(config: dict, level: float = 0.5, n=None):
    """The predicted iso-entropy line of a sweep's config (its block and inputs tables) in the
    (drift_norm, lambda) plane, as (x_arr, y_arr, label) for plot.phase_diagram(theory=...)."""
    b, i = config["block"], config["inputs"]
    init_std = 0.02 if b.get("init", "bert") == "bert" else None
    if init_std is None or i.get("kind") != "embedding":
        raise ValueError("paper_freezing_curve: needs init = 'bert' and embedding inputs")
    n = np.geomspace(1e-2, 1e5, 200) if n is None else np.asarray(n, float)
    lam = paper_iso_entropy_lambda_finite(
        n,
        level,
        length=i["length"],
        d_model=b["d_model"],
        n_heads=b["n_heads"],
        embed_std=i.get("embed_std", 0.02),
    )
    return n, lam, f"predicted H/ln T = {level:g} (no fit)"


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


# --------------------------------------------------------------------------------------------
# Claim 7: signal propagation through depth (Giorlandino & Goldt's layer recursion)
# --------------------------------------------------------------------------------------------


def activation_kernel(c, activation: str = "gelu") -> tuple[float, float]:
    """(E g(z)^2, E g(z1) g(z2)) for unit-variance Gaussians with correlation c and g the MLP
    activation: ReLU in closed form (Cho & Saul's arc-cosine kernel of degree 1,
    (sqrt(1 - c^2) + (pi - arccos c) c) / (2 pi), and 1/2), the tanh-form GELU by 80 x 80-point
    Gauss-Hermite quadrature (smooth integrand: accurate to ~1e-6)."""
    c = float(np.clip(c, -1.0, 1.0))
    if activation == "relu":
        return 0.5, (math.sqrt(1.0 - c * c) + (math.pi - math.acos(c)) * c) / (2.0 * math.pi)
    x, w = np.polynomial.hermite_e.hermegauss(80)
    w = w / w.sum()

    def g(z):
        return 0.5 * z * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z**3)))

    z2 = c * x[:, None] + math.sqrt(max(0.0, 1.0 - c * c)) * x[None, :]
    return float(np.sum(w * g(x) ** 2)), float(
        np.sum(w[:, None] * w[None, :] * g(x[:, None]) * g(z2))
    )


def _softmax_rows(l_RT):
    """Row-wise softmax of a (rows, keys) array (float64, max-subtracted)."""
    e = np.exp(l_RT - l_RT.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def softmax_overlaps(s, c, n: int, *, finite: bool = True, rows: int = 512, seed: int = 0):
    """(Y, Z) for softmax rows over n keys whose logits are i.i.d. N(0, s^2) over the keys:
    Y = E sum_j A_j^2 (a row with itself) and Z = E sum_j A_j A'_j (two rows whose logits have
    correlation c over the same keys: two queries of one sequence). finite=False: the
    n -> infinity limit of Giorlandino & Goldt (their code's get_attention_update):
    Y = max(0, 1 - sqrt(2 ln n) / s) (the REM frozen weight), Z = 0. finite=True: sampled
    (`rows` pairs of rows, float64, a fixed seed), exact at finite n up to sampling error."""
    if not finite:
        return max(0.0, 1.0 - math.sqrt(2.0 * math.log(n)) / s) if s > 0 else 0.0, 0.0
    rng = np.random.default_rng(seed)
    l1 = s * rng.standard_normal((rows, n))
    l2 = c * l1 + math.sqrt(max(0.0, 1.0 - c * c)) * s * rng.standard_normal((rows, n))
    a1, a2 = _softmax_rows(l1), _softmax_rows(l2)
    return float(np.mean(np.sum(a1 * a1, 1))), float(np.mean(np.sum(a1 * a2, 1)))


def signal_propagation(
    kind: str,
    depth: int,
    length: int,
    batch: int,
    lam: float,
    *,
    mlp: bool = True,
    activation: str = "gelu",
    attn_residual: float = 1.0,
    mlp_residual: float = 1.0,
    finite: bool = True,
    rows: int = 512,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Per-layer token cosines of a depth stack at init, from a layer-to-layer recursion of the
    per-coordinate order parameters: q (squared norm / d), p_w (overlap of two tokens of one
    sequence) and p_x (of two sequences). Inputs: i.i.d. unit Gaussian tokens (q = 1, p = 0).
    Weights N(0, 1/fan_in) (simlab's init = "fan_in", sigma 1), logit scale lam = q_scale
    k_scale / temperature, d -> infinity.

    Source: Giorlandino & Goldt, arXiv 2505.24333, and their code
    (github.com/aGiorlandino/ICLR-Signal-Propagation-Transformers, theory_update_general.py:
    get_attention_update, get_MLP_update, get_block_update_wres), ported here to simlab's
    block kinds and activation. Steps:
      attention  on inputs (q, p_w, p_x): the key-dependent logits of a query have std
                 s = lam sqrt(q (q - p_w)) (their general threshold beta_c = sqrt(2 / (q (q - p))))
                 and two queries of a sequence correlation c = p_w / q; the output has
                 q' = p_w + (q - p_w) Y, p_w' = p_w + (q - p_w) Z, p_x' = p_x (softmax_overlaps;
                 in their n -> infinity limit Z = 0: p' = p);
      residual   a x + branch: q and p add (a^2 on x; cross terms vanish at large d: the
                 branch's weights are independent of x);
      LayerNorm  q -> 1, p -> p / q;
      MLP        on unit-variance inputs with correlation c: q' = E g^2, p' = E g(z1) g(z2)
                 (activation_kernel; their code: tanh);
    in the wiring of simlab.core.block.BLOCKS (post_ln: LN1(a x + Attn(x)), LN2(m h + MLP(h));
    pre_ln: a x + Attn(LN1 x), m h + MLP(LN2 h); attention: a x + Attn(x), m h + MLP(h)).
    Returns out_cos_within (p_w / q) and out_cos, the mean over all B T (B T - 1) pairs of
    tokens ((T - 1) / (B T - 1) of them within a sequence), each (depth,)."""
    if kind not in ("post_ln", "pre_ln", "attention"):
        raise ValueError(f"signal_propagation: kind {kind!r} is not post_ln, pre_ln, attention")

    def attend(q, pw, px):
        sd = lam * math.sqrt(max(q * (q - pw), 0.0))
        y, z = softmax_overlaps(sd, pw / q, length, finite=finite, rows=rows, seed=seed)
        return pw + (q - pw) * y, pw + (q - pw) * z, px

    def add(a, x, b):  # a^2 x + b, componentwise
        return tuple(a * a * u + v for u, v in zip(x, b))

    def norm(x):
        return 1.0, x[1] / x[0], x[2] / x[0]

    def mlp_of(x):
        q2, pw2 = activation_kernel(x[1] / x[0], activation)
        return q2, pw2, activation_kernel(x[2] / x[0], activation)[1]

    x = (1.0, 0.0, 0.0)
    within, total = [], []
    fw = (length - 1) / (batch * length - 1)
    for _ in range(depth):
        if kind == "post_ln":
            h = norm(add(attn_residual, x, attend(*x)))
            x = norm(add(mlp_residual, h, mlp_of(h))) if mlp else h
        elif kind == "pre_ln":
            h = add(attn_residual, x, attend(*norm(x)))
            x = add(mlp_residual, h, mlp_of(norm(h))) if mlp else h
        else:
            h = add(attn_residual, x, attend(*x))
            x = add(mlp_residual, h, mlp_of(h)) if mlp else h
        within.append(x[1] / x[0])
        total.append(fw * x[1] / x[0] + (1 - fw) * x[2] / x[0])
    return {"out_cos_within": np.array(within), "out_cos": np.array(total)}


# --------------------------------------------------------------------------------------------
# Claim 2: Giorlandino & Goldt attention map on correlated tokens
# --------------------------------------------------------------------------------------------


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


def gg_pair_geometry(p: float, d_model: int, d_head: int, rows: int, *, seed: int = 0, block=64):
    """The geometry of pairs of queries of one head with W_Q, W_K ~ N(0, 1/d_model) (d x H,
    H = d_head) on tokens x = sqrt(p) z_0 + sqrt(1 - p) z: for each of `rows` pairs,
    (n_1, n_2, rho) with n = |g| and rho = cos(g_1, g_2), g = W_K W_Q^T x / sqrt(H) (the
    direction in token space a query's logits read, at lambda = 1).  Sampled exactly: one
    (W_Q, W_K, z_0) per `block` pairs, as the queries of one simulated head share them, fresh
    z per query.  So rho fluctuates around p from pair to pair and with the non-orthogonal
    Gram matrices of W_Q, W_K (spread ~ sqrt(H / d)), and n^2 around 1 (chi2-like over H)."""
    rng = np.random.default_rng(seed)
    out = []
    for start in range(0, rows, block):
        n = min(block, rows - start)
        wq, wk = (rng.standard_normal((d_model, d_head)) / math.sqrt(d_model) for _ in range(2))
        z0 = rng.standard_normal(d_model)
        x_2ND = math.sqrt(p) * z0 + math.sqrt(1.0 - p) * rng.standard_normal((2, n, d_model))
        g_2ND = (x_2ND @ wq) @ wk.T / math.sqrt(d_head)
        nrm_2N = np.linalg.norm(g_2ND, axis=-1)
        rho_N = np.einsum("nd,nd->n", g_2ND[0], g_2ND[1]) / (nrm_2N[0] * nrm_2N[1])
        out.append(np.stack([nrm_2N[0], nrm_2N[1], rho_N], 1))
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


def gg_beta_from_knobs(T, q_scale=1.0, k_scale=1.0, temperature=1.0, *, q_std=1.0, k_std=1.0):
    """beta of claim 2 from simlab knobs: logit_std(...) / sqrt(ln T)."""
    lam = logit_std(q_scale, k_scale, temperature, q_std=q_std, k_std=k_std)
    return lam / np.sqrt(np.log(np.asarray(T, dtype=float)))


def gg_inverse_temperature_c(T, p, *, q_scale=1.0, k_scale=1.0, q_std=1.0, k_std=1.0):
    """1 / temperature at the claim-2 (and claim-1) boundary for T keys and input_corr p."""
    lam_c = np.sqrt(2.0 * np.log(float(T)) / (1.0 - np.asarray(p, dtype=float)))
    return lam_c / (q_scale * k_scale * q_std * k_std)


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
    return xs, p, f"REM freezing (T={int(T)})"


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


# --------------------------------------------------------------------------------------------
# Claim 3: critical attention scaling beta = gamma ln n (Chen, Lin, Polyanskiy, Rigollet)
# --------------------------------------------------------------------------------------------


def chen_gamma_c(rho) -> np.ndarray:
    """gamma_c = 1 / (1 - rho)."""
    return 1.0 / (1.0 - np.asarray(rho, dtype=float))


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


# --------------------------------------------------------------------------------------------
# Claim 4: attention entropy lower bound (Zhai et al. 2023)
# --------------------------------------------------------------------------------------------


def entropy_floor(beta, T) -> np.ndarray:
    """h_T(beta) = ln(1 + (T - 1) e^-beta) + beta (T - 1) e^-beta / (1 + (T - 1) e^-beta): the
    entropy of a softmax row with one logit beta above T - 1 equal others.  Decreasing in
    beta >= 0, from ln T to 0.  Evaluated stably for large beta."""
    beta = np.asarray(beta, dtype=float)
    T = np.asarray(T, dtype=float)
    le = np.log(T - 1.0) - beta  # ln((T-1) e^-beta)
    e_over = np.exp(le - np.logaddexp(0.0, le))  # e / (1 + e)
    return np.logaddexp(0.0, le) + beta * e_over


def zhai_entropy_lower_bound(logit_spectral_norm, T) -> np.ndarray:
    """Lower bound on every row entropy of softmax(L) for a T x T logit matrix L.

    Source: Zhai et al., "Stabilizing Transformer Training by Preventing Attention Entropy
    Collapse" (ICML 2023, arXiv 2303.06296), Theorem 3.1: a "tight lower bound of the
    attention entropy, which decreases exponentially fast with the spectral norm of the
    attention logits" (abstract; confirmed).  The theorem's statement, as quoted by this
    project's review of the paper, is h_T(sqrt(T/(T-1)) ||W_K W_Q^T||_2 ||X X^T||_2)
    (zhai_stated_bound); the paper's own text was not among the search results.  This function
    is the same bound in terms of ||L||_2, proved here (stronger: ||L||_2 <= the product):

        H(softmax(L_i)) >= h_T(sqrt(T / (T - 1)) * ||L||_2)     for every row i.

    Proof sketch.  Softmax ignores the row mean; among rows with centred norm
    ||a - mean(a)||_2 <= r the entropy is minimal for one peak and T - 1 equal values
    (checked numerically, T = 2..16, by constrained minimisation from random starts), whose gap
    is r sqrt(T / (T - 1)); and ||L_i - mean|| <= ||L_i|| <= ||L||_2.  The bound is attained by
    L = e_i a^T with a one-peaked and centred.  With the weights: ||L||_2 <= ||X W_Q W_K^T X^T||_2
    / (sqrt(d_head) temperature) <= ||W_Q W_K^T||_2 ||X||_2^2 q_scale k_scale
    / (sqrt(d_head) temperature) when shifts are zero, which is how q_scale, k_scale,
    temperature and (through ||X||_2) drift_norm move the bound.  Assumptions: none beyond
    T >= 2 (any real logits; the property test draws shifts and drift too).
    """
    T = np.asarray(T, dtype=float)
    beta = np.sqrt(T / (T - 1.0)) * np.asarray(logit_spectral_norm, dtype=float)
    return entropy_floor(beta, T)


def zhai_stated_bound(w_norm, xx_norm, T) -> np.ndarray:
    """Zhai et al.'s statement in terms of the weights and the inputs:
    H(softmax(L_i)) >= h_T(sqrt(T / (T - 1)) ||W_K W_Q^T||_2 ||X X^T||_2) for L = X W_Q W_K^T X^T
    (the logit scale 1 / (sqrt(d_head) temperature) and the knobs q_scale, k_scale folded into
    W; shifts through an extra constant input column, zhai_bound.head_logits). It follows from
    zhai_entropy_lower_bound because ||X W X^T||_2 <= ||W||_2 ||X X^T||_2 and h_T decreases:
    weaker, and the form in which the knobs move the bound (w_norm ~ q_scale k_scale /
    temperature, xx_norm ~ T sigma^2 (1 + ...) + T drift_norm^2)."""
    return zhai_entropy_lower_bound(np.asarray(w_norm, float) * np.asarray(xx_norm, float), T)


# --------------------------------------------------------------------------------------------
# Claim 5: rank collapse of pure attention (Dong, Cordonnier, Loukas 2021)
# --------------------------------------------------------------------------------------------


def dong_residual_bound(r0, c, depth: int) -> np.ndarray:
    """Doubly exponential bound r_L <= c^((3^L - 1)/2) r0^(3^L), L = 0..depth, i.e. the
    recursion r_{l+1} <= c r_l^3 (computed in log space; may underflow to 0).

    Statement (Dong, Cordonnier, Loukas, "Attention is not all you need: pure attention loses
    rank doubly exponentially with depth", ICML 2021, arXiv 2103.03404; abstract confirmed:
    "without skip connections or MLPs, the output converges doubly exponentially to a rank-1
    matrix. On the other hand, skip connections and MLPs stop the output from degeneration").
    Theorem (Theorem 2.2 and its multi-head corollary, recalled: the body of the paper was not
    among the search results; the composite norm sqrt(||.||_1 ||.||_inf) and the column-mean
    residual of their figures are read from the authors' code, github.com/twistedcubic/
    attention-rank-collapse, paper-plotting/utils.py and walking_casual_transformers.ipynb):
    for a pure self-attention network of depth L with H heads,
    ||res(SAN(X))||_{1,inf} <= (4 gamma beta H / sqrt(d_qk))^((3^L - 1)/2) ||res(X)||_{1,inf}^(3^L),
    res(X) = X - 1 x^T, beta >= ||W_QK||_1 ||W_V||_{1,inf} and gamma a term that depends on
    the attention entries; c = 4 gamma beta H / sqrt(d_qk) (dong_theorem_constant computes it
    at gamma = 1 from the weights).  The cubic step is derived exactly here (dong_cubic_term:
    res(SA(1 x^T + R)) = R W_QK R^T R W_V / (T sqrt(d_qk)) + O(R^4)), with an explicit
    constant (dong_explicit_constant).

    Knobs: c grows with q_scale k_scale / temperature (sharper logits slow the collapse);
    attn_residual = 1 (skip) and an MLP between layers are the two ways out; the claim is
    qualitative in check_theory: r_l decays faster than any exponential (log r_{l+1} versus
    log r_l has slope > 1, ideally 3), with skips it does not decay.
    """
    r0 = float(r0)
    L = np.arange(depth + 1)
    logr = (3.0**L - 1.0) / 2.0 * math.log(c) + 3.0**L * math.log(r0)
    return np.exp(np.clip(logr, -745.0, 50.0))


def collapse_exponent(r, floor: float = 1e-5) -> float:
    """Least-squares slope k of log r_{l+1} against log r_l over layers with both above floor:
    k = 1 means exponential decay, k > 1 faster than exponential, k = 3 the cubic step of
    dong_residual_bound.  nan with fewer than 2 usable steps."""
    r = np.asarray(r, dtype=float)
    a, b = r[:-1], r[1:]
    ok = (a > floor) & (b > floor) & (a < 1.0)
    if ok.sum() < 2:
        return float("nan")
    la, lb = np.log(a[ok]), np.log(b[ok])
    return float(np.polyfit(la, lb, 1)[0])


def composite_norm(a) -> np.ndarray:
    """Dong et al.'s composite norm ||A||_{1,inf} = sqrt(||A||_1 ||A||_inf) over the last two
    axes: ||A||_1 the largest absolute column sum, ||A||_inf the largest absolute row sum (not a
    norm: no triangle inequality).  As in the authors' code, github.com/twistedcubic/
    attention-rank-collapse, paper-plotting/utils.py (`composite_norm`)."""
    a = np.abs(np.asarray(a, dtype=float))
    return np.sqrt(a.sum(-2).max(-1) * a.sum(-1).max(-1))


def dong_theorem_constant(w_qk_HDD, w_v_HDD, d_qk: int) -> float:
    """The constant of Dong et al.'s one-layer step ||res(SA(X))|| <= c ||res(X)||^3 (composite
    norm), c = 4 gamma beta H / sqrt(d_qk), returned with gamma = 1: beta = max over the H
    heads of ||W_QK,h||_1 ||W_V,h||_{1,inf}, W_QK,h = W_Q,h W_K,h^T (logits
    X W_QK X^T / sqrt(d_qk), any logit scale folded in) and W_V,h the head's value-and-output
    map (D x D).  Statement recalled from arXiv 2103.03404 (Theorem 2.2 and its multi-head
    corollary, which adds the factor H); gamma is the paper's attention-dependent term, defined
    in its appendix, which was not among the search results: check_theory.dong_collapse reports
    the gamma a simulation needs, gamma_needed = measured / dong_theorem_constant."""
    w_qk = np.abs(np.asarray(w_qk_HDD, dtype=float))
    beta = np.max(w_qk.sum(-2).max(-1) * composite_norm(w_v_HDD))
    return float(4.0 * beta * w_qk.shape[0] / math.sqrt(d_qk))


def dong_cubic_term(r_TD, w_qk_HDD, w_v_HDD, d_qk: int) -> np.ndarray:
    """The exact leading order of the residual one pure attention layer leaves, derived here.
    For X = 1 x^T + R with centred R (1^T R = 0) and SA(X) = sum_h softmax(X W_QK,h X^T /
    sqrt(d_qk)) X W_V,h:

        res(SA(X)) = M + O(|R|^4),   M = sum_h R W_QK,h R^T R W_V,h / (T sqrt(d_qk)).

    Proof: the logits are x W x^T + R_i W x + x W R_j + R_i W R_j (over sqrt(d_qk)); the first
    two are constant along a row (softmax ignores them), the third r_j = O(R) is shared by all
    rows, the fourth E_ij = O(R^2).  So A_ij = s_j (1 + E_ij - sum_k s_k E_ik) + O(R^4) with
    s = softmax(r) = 1/T + O(R), and A X W_V = 1 x^T W_V + 1 s^T R W_V + A' R W_V: the first
    two terms have identical rows, and A' R W_V = (1/T) E (I - 11^T/T) R W_V + O(R^4) = M +
    O(R^4) since (I - 11^T / T) R = R.  M is centred (1^T R = 0), so it is the column-mean
    residual itself (not the theorem's minimising one).  The O(R^4) remainder grows with |x|
    (through s - 1/T = O(|x W R|)): relative error ~eps |x| for R = eps Z.  Submultiplicativity
    of ||.||_1 and ||.||_inf then bounds the leading order, ||M||_{1,inf} <=
    dong_explicit_constant ||R||_{1,inf}^3 (tested): the cubic step of Dong et al. with a
    constant of another form (1/T, both norms of W_QK, a sum over heads)."""
    r_TD = np.asarray(r_TD, dtype=float)
    logits_HTS = np.einsum("td,hde,se->hts", r_TD, np.asarray(w_qk_HDD, float), r_TD)
    out_TD = np.einsum("hts,sd,hde->te", logits_HTS, r_TD, np.asarray(w_v_HDD, float))
    return out_TD / (r_TD.shape[0] * math.sqrt(d_qk))


def dong_explicit_constant(w_qk_HDD, w_v_HDD, d_qk: int, T: int) -> float:
    """The constant of the one-layer bound proved in dong_cubic_term's docstring:
    ||M||_{1,inf} <= c ||R||_{1,inf}^3 with
    c = (sum_h ||W_QK,h||_1 ||W_V,h||_1  sum_h ||W_QK,h||_inf ||W_V,h||_inf)^(1/2) / (T sqrt(d_qk))
    (the sums over heads come before the square root: the composite norm has no triangle
    inequality, its two factors do)."""

    def l1(a):
        return np.abs(np.asarray(a, dtype=float)).sum(-2).max(-1)

    def linf(a):
        return np.abs(np.asarray(a, dtype=float)).sum(-1).max(-1)

    s1 = np.sum(l1(w_qk_HDD) * l1(w_v_HDD))
    sinf = np.sum(linf(w_qk_HDD) * linf(w_v_HDD))
    return float(math.sqrt(s1 * sinf) / (T * math.sqrt(d_qk)))
