"""Claim 7: signal propagation through depth, Giorlandino & Goldt's layer recursion.

Source: A. Giorlandino and S. Goldt, arXiv 2505.24333, and their code
(github.com/aGiorlandino/ICLR-Signal-Propagation-Transformers, theory_update_general.py):
the per-coordinate order parameters of the tokens (squared norm, overlap within a sequence,
overlap across sequences) mapped layer by layer, ported here to simlab's block wirings and
activation, with the softmax overlaps at finite T (sampled in simlab.theory.sampling).
docs/theory.md, "Claim 7".
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from simlab.errors import ConfigError
from simlab.theory.common import require_structure
from simlab.theory.sampling import softmax_pair_overlaps


def activation_kernel(c, activation: str = "gelu", q: float = 1.0) -> tuple[float, float]:
    """(E g(z)^2, E g(z1) g(z2)) for Gaussians of variance q with correlation c and g the MLP
    activation: ReLU in closed form (Cho & Saul's arc-cosine kernel of degree 1,
    q (sqrt(1 - c^2) + (pi - arccos c) c) / (2 pi), and q / 2: ReLU is homogeneous), the
    tanh-form GELU by 80 x 80-point Gauss-Hermite quadrature of g(sqrt(q) z) (smooth
    integrand: accurate to ~1e-6)."""
    if activation not in ("relu", "gelu"):
        raise ConfigError(
            f"block.activation: {activation!r} has no kernel here (the layer recursion computes "
            "'gelu' (tanh form) and 'relu')"
        )
    c = float(np.clip(c, -1.0, 1.0))
    if activation == "relu":
        k = (math.sqrt(1.0 - c * c) + (math.pi - math.acos(c)) * c) / (2.0 * math.pi)
        return 0.5 * q, q * k
    x, w = np.polynomial.hermite_e.hermegauss(80)
    w = w / w.sum()
    x = math.sqrt(q) * x

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


@dataclasses.dataclass(frozen=True)
class Wiring:
    """The part of a block's structure the recursion reads (simlab.core.structure.Structure has
    these fields; any object with them will do): each branch's norm places ("pre", "out",
    "post"), the norm, the MLP kind and what the MLP reads."""

    attn_norm: tuple[str, ...]
    mlp_norm: tuple[str, ...]
    norm: str = "layernorm"
    mlp: str = "plain"
    mlp_reads: str = "h"


# The three wirings a name may still give (equal to simlab.core.structure.PRESETS' entries of
# the same names: tests/theory/test_signal_structure.py); any other block passes its structure.
CLASSIC = {
    "post_ln": Wiring(("post",), ("post",)),
    "pre_ln": Wiring(("pre",), ("pre",)),
    "attention": Wiring((), ()),
}


def signal_propagation(
    kind,
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
    p0: float = 0.0,
    p0_across: float = 0.0,
    var_w: float = 1.0,
    var_v: float = 1.0,
    var_b: float = 0.0,
    w_o: bool = True,
) -> dict[str, np.ndarray]:
    """Per-layer token cosines of a depth stack at init, from a layer-to-layer recursion of the
    per-coordinate order parameters: q (squared norm / d), p_w (overlap of two tokens of one
    sequence) and p_x (of two sequences). Inputs: Gaussian tokens with q = 1, cosine p0 within
    a sequence and p0_across across sequences (0, 0: i.i.d. unit Gaussian tokens; simlab's
    gaussian inputs at input_corr p: p0 = p, p0_across = 0). Weights N(0, v / fan_in)
    (simlab's init = "fan_in"): v = 1 for W_Q, W_K and W_O, var_v for W_V, var_w for W_1 and
    W_2; the biases b_V, b_O, b_1, b_2 drawn N(0, var_b) (b_Q = b_K = 0); w_o False: no W_O (nor
    b_O); logit scale lam = q_scale k_scale / temperature, d -> infinity.
    `kind`: the block's structure (simlab.core.structure.Structure, e.g. BlockSpec.structure,
    or any object with Wiring's fields), or one of the names in CLASSIC. The recursion covers
    every placement of LayerNorms (pre, out, post on each branch) around a plain MLP that follows
    the attention branch; it refuses RMSNorm, a gated MLP and parallel branches, naming the field.

    Source: Giorlandino & Goldt, arXiv 2505.24333, and their code
    (github.com/aGiorlandino/ICLR-Signal-Propagation-Transformers, theory_update_general.py and
    theory_update_relu.py: get_attention_update, get_MLP_update, get_block_update_wres), ported
    here to simlab's structures and activation. Steps:
      attention  on inputs (q, p_w, p_x): the key-dependent logits of a query have std
                 s = lam sqrt(q (q - p_w)) (their general threshold beta_c = sqrt(2 / (q (q - p))))
                 and two queries of a sequence correlation c = p_w / q; the mixed values have
                 q' = p_w + (q - p_w) Y, p_w' = p_w + (q - p_w) Z, p_x' = p_x (softmax_overlaps;
                 in their n -> infinity limit Z = 0: p' = p);
      values     W_V and b_V: (q, p) -> var_v (q, p) + var_b (the bias is common to every
                 token, so it adds to the overlaps too; rows of A sum to 1, so A (x W_V + b_V) =
                 (A x) W_V + b_V); W_O and b_O likewise with variance 1 and var_b;
      residual   a x + branch: q and p add (a^2 on x; cross terms vanish at large d: the
                 branch's weights are independent of x);
      LayerNorm  q -> 1, p -> p / q;
      MLP        pre-activations (q1, p1) = var_w (q, p) + var_b, then
                 (var_w E g^2 + var_b, var_w E g(z1) g(z2) + var_b) at variance q1 and
                 correlation p1 / q1 (activation_kernel; their code: tanh and ReLU);
    with a norm wherever the structure puts one: pre (the branch's input), out (its output),
    post (the residual sum). Their Figure 1 (post-LN, ReLU, one head, no W_O, var_v = var_w =
    0.2, var_b = 4e-4, finite=False, lam = beta sqrt(ln T)) is this recursion from p0
    (docs/theory.md, "Claim 7", the mapping of their beta, var_w and var_b).
    Returns out_cos_within (p_w / q) and out_cos, the mean over all B T (B T - 1) pairs of
    tokens ((T - 1) / (B T - 1) of them within a sequence), each (depth,)."""
    s = CLASSIC.get(kind) if isinstance(kind, str) else kind
    if s is None:
        raise ConfigError(
            f"block.kind: {kind!r}: pass the block's structure (BlockSpec.structure); by name "
            f"the recursion knows {', '.join(CLASSIC)}"
        )
    require_structure(s, ("layernorm", "plain_mlp", "sequential"), "the layer recursion")

    def attend(q, pw, px):
        sd = lam * math.sqrt(max(q * (q - pw), 0.0))
        y, z = softmax_overlaps(sd, pw / q, length, finite=finite, rows=rows, seed=seed)
        a = (pw + (q - pw) * y, pw + (q - pw) * z, px)
        a = tuple(var_v * u + var_b for u in a)  # W_V, b_V
        return tuple(u + var_b for u in a) if w_o else a  # W_O (variance 1), b_O

    def add(a, x, b):  # a^2 x + b, componentwise
        return tuple(a * a * u + v for u, v in zip(x, b))

    def norm(x):
        return 1.0, x[1] / x[0], x[2] / x[0]

    def mlp_of(x):
        q1 = var_w * x[0] + var_b
        q2, pw2 = activation_kernel((var_w * x[1] + var_b) / q1, activation, q1)
        px2 = activation_kernel((var_w * x[2] + var_b) / q1, activation, q1)[1]
        return var_w * q2 + var_b, var_w * pw2 + var_b, var_w * px2 + var_b

    def at(places, place, x):
        return norm(x) if place in places else x

    x = (1.0, p0, p0_across)
    within, total = [], []
    fw = (length - 1) / (batch * length - 1)
    for _ in range(depth):
        a = at(s.attn_norm, "out", attend(*at(s.attn_norm, "pre", x)))
        h = at(s.attn_norm, "post", add(attn_residual, x, a))
        if mlp:
            f = at(s.mlp_norm, "out", mlp_of(at(s.mlp_norm, "pre", h)))
            x = at(s.mlp_norm, "post", add(mlp_residual, h, f))
        else:
            x = h
        within.append(x[1] / x[0])
        total.append(fw * x[1] / x[0] + (1 - fw) * x[2] / x[0])
    return {"out_cos_within": np.array(within), "out_cos": np.array(total)}
