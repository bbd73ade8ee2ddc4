"""Claim 5: Dong, Cordonnier & Loukas, rank collapse of pure attention.

Source: Y. Dong, J.-B. Cordonnier, A. Loukas, "Attention is not all you need: pure attention
loses rank doubly exponentially with depth", ICML 2021, arXiv 2103.03404, and the authors'
code (github.com/twistedcubic/attention-rank-collapse).  The bound r_{l+1} <= c r_l^3, the
composite norm and the theorem's constant; the exact one-layer leading order (dong_cubic_term)
and its explicit constant are derived here.  Shapes: H heads, T tokens, D model width; a
D x D map has the second index E in einsum strings ("hde").  docs/theory.md, "Claim 5".
"""

from __future__ import annotations

import math

import numpy as np


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
    in its appendix, which was not among the search results: check_theory.dong_constant reports
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
