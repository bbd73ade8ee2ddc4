"""Claim 7: signal propagation through depth, Giorlandino & Goldt's layer recursion.

Source: A. Giorlandino and S. Goldt, arXiv 2505.24333, and their code
(github.com/aGiorlandino/ICLR-Signal-Propagation-Transformers, theory_update_general.py):
the per-coordinate order parameters of the tokens (squared norm, overlap within a sequence,
overlap across sequences) mapped layer by layer, ported here to simlab's block wirings and
activation, with the softmax overlaps at finite T (sampled in simlab.theory.sampling).
docs/theory.md, "Claim 7".
"""

from __future__ import annotations

import math

import numpy as np

from simlab.errors import ConfigError
from simlab.theory.sampling import softmax_pair_overlaps


def activation_kernel(c, activation: str = "gelu") -> tuple[float, float]:
    """(E g(z)^2, E g(z1) g(z2)) for unit-variance Gaussians with correlation c and g the MLP
    activation: ReLU in closed form (Cho & Saul's arc-cosine kernel of degree 1,
    (sqrt(1 - c^2) + (pi - arccos c) c) / (2 pi), and 1/2), the tanh-form GELU by 80 x 80-point
    Gauss-Hermite quadrature (smooth integrand: accurate to ~1e-6)."""
    if activation not in ("relu", "gelu"):
        raise ConfigError(
            f"block.activation: {activation!r} has no kernel here (the layer recursion computes "
            "'gelu' (tanh form) and 'relu')"
        )
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


def softmax_overlaps(s, c, n: int, *, finite: bool = True, rows: int = 512, seed: int = 0):
    """(Y, Z) for softmax rows over n keys whose logits are i.i.d. N(0, s^2) over the keys:
    Y = E sum_j A_j^2 (a row with itself) and Z = E sum_j A_j A'_j (two rows whose logits have
    correlation c over the same keys: two queries of one sequence). finite=False: the
    n -> infinity limit of Giorlandino & Goldt (their code's get_attention_update):
    Y = max(0, 1 - sqrt(2 ln n) / s) (the REM frozen weight), Z = 0. finite=True: sampled
    (`rows` pairs of rows, float64, a fixed seed), exact at finite n up to sampling error."""
    if not finite:
        return max(0.0, 1.0 - math.sqrt(2.0 * math.log(n)) / s) if s > 0 else 0.0, 0.0
    return softmax_pair_overlaps(s, c, n, rows=rows, seed=seed)


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
        raise ConfigError(
            f"block.kind: {kind!r} has no layer recursion here (post_ln, pre_ln, attention: a "
            "LayerNorm and a plain act(h W_1) W_2 MLP)"
        )

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
