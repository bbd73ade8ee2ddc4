"""Claim 6: the entropy-0.5 line (and the freezing line) of the paper's protocol (drift N x
joint q/k scale lambda).

An untrained BERT-init block (W_Q, W_K ~ N(0, init_std^2)) on drifted embeddings
(std embed_std, drift N) has logits whose variance over the keys is
s^2 = lambda^4 init_std^4 embed_std^2 d (d embed_std^2 + N^2) / temperature^2 (paper_logit_var,
derived here); claim 1's REM law (Giorlandino & Goldt's threshold, arXiv 2505.24333) then puts
the iso-entropy lines, with no free parameter: in the n -> infinity limit
(paper_iso_entropy_lambda) and at finite length and d_head (paper_iso_entropy_lambda_finite,
with the finite-n softmax entropy of simlab.theory.sampling.gaussian_softmax_entropy).
docs/theory.md, "Claim 6".
"""

from __future__ import annotations

import numpy as np

from simlab.errors import ConfigError
from simlab.theory.common import require_structure
from simlab.theory.rem import rem_critical_std, rem_normalized_entropy
from simlab.theory.sampling import gaussian_softmax_entropy
from simlab.theory.signal import CLASSIC


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


def _check_block(b: dict, structure=None) -> None:
    """The paper's logit variance is of projections that see the tokens x themselves through
    W_Q, W_K drawn N(0, init_std^2) without biases: a block with no norm before the projections
    (a property of its structure, simlab.core.structure: e.g. kinds post_ln and attention),
    no rotary embeddings and no init_var or bias_var on wq, wk, bq, bk. `structure`: the block's
    (BlockSpec.structure); None: one of the classic wirings named by b["kind"]
    (simlab.theory.signal.CLASSIC) without structure fields. Anything else is a ConfigError
    naming the field."""
    if structure is None:
        overrides = [f for f in ("attn_norm", "mlp_norm", "norm", "mlp_kind") if b.get(f)]
        kind = b.get("kind", "post_ln")
        if kind not in CLASSIC or overrides:
            raise ConfigError(
                f"block.kind: {kind!r}{' with ' + overrides[0] if overrides else ''}: pass the "
                "block's structure (BlockSpec.structure) to check the paper's closed form"
            )
        structure = CLASSIC[kind]
    require_structure(structure, ("no_pre_norm",), "the paper's closed form")
    if b.get("rotary_pct", 0.0):
        raise ConfigError("block.rotary_pct: the paper's closed form has no rotary embeddings")
    for field, names in (("init_var", ("wq", "wk")), ("bias_var", ("bq", "bk"))):
        given = dict(b.get(field) or ())
        if any(n in given for n in names):
            raise ConfigError(
                f"block.{field}: the paper's closed form has W_Q, W_K ~ N(0, 0.02^2) and no "
                "query or key bias"
            )


def paper_iso_entropy_curve(config: dict, level: float = 0.5, n=None, *, structure=None):
    """The predicted iso-entropy line H / ln T = level of a sweep's config (its block and inputs
    tables; paper_iso_entropy_lambda_finite: finite T and d_head) in the (drift_norm, lambda)
    plane, as (x_arr, y_arr, label) for plot.phase_diagram(theory=...). At level 0.5 and the
    paper's T = 512 it lies ~10% below the freezing line proper (paper_freezing_line_curve):
    the finite-T softmax reaches H / ln T = 0.5 at s^2 = 1.34 ln T, not 2 ln T. `structure`: the
    block's structure (BlockSpec.structure; _check_block says what the closed form needs)."""
    b, i = config["block"], config["inputs"]
    _check_block(b, structure)
    init_std = 0.02 if b.get("init", "bert") == "bert" else None
    if init_std is None or i.get("kind") != "embedding":
        raise ValueError("paper_iso_entropy_curve: needs init = 'bert' and embedding inputs")
    n = np.geomspace(1e-2, 1e5, 200) if n is None else np.asarray(n, float)
    lam = paper_iso_entropy_lambda_finite(
        n,
        level,
        length=i["length"],
        d_model=b["d_model"],
        n_heads=b["n_heads"],
        embed_std=i.get("embed_std", 0.02),
    )
    return n, lam, f"predicted H/ln T = {level:g} line (finite T, no fit)"


def paper_freezing_line_curve(config: dict, n=None, *, structure=None):
    """The REM freezing line proper of a sweep's config, s^2 = 2 ln T (paper_iso_entropy_lambda
    at level 0: where H / ln T -> 0 as T -> infinity), as (x_arr, y_arr, label)."""
    b, i = config["block"], config["inputs"]
    _check_block(b, structure)
    if b.get("init", "bert") != "bert" or i.get("kind") != "embedding":
        raise ValueError("paper_freezing_line_curve: needs init = 'bert' and embedding inputs")
    n = np.geomspace(1e-2, 1e5, 200) if n is None else np.asarray(n, float)
    lam = paper_iso_entropy_lambda(
        n, 0.0, length=i["length"], d_model=b["d_model"], embed_std=i.get("embed_std", 0.02)
    )
    return n, lam, "REM freezing line s^2 = 2 ln T"
