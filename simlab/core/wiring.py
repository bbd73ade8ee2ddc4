"""The token-wise parts of a block, read from its structure data (simlab.core.structure): the
norms, the MLP (plain or gated) and the wiring of the residuals around both branches.

With a = attn_residual, m = mlp_residual, g_M = mlp_gain, Norm_P the norm at place P of a branch
(absent where the structure declares none) and A the attention sub-layer's output after its
gain g_A (simlab.core.block.layer_apply applies it):
  sequential (mlp_reads "h"):  h = Norm_post(a x + Norm_out(A));
                               y = Norm_post(m h + g_M Norm_out(MLP(Norm_pre(h))))
  parallel   (mlp_reads "x"):  y = h + g_M Norm_out(MLP(Norm_pre(x)))
and the projections see Norm_pre(x) of the attention branch (`attn_input`). Each built-in kind
is one preset of the data (post_ln: both norms "post"; pre_ln: both "pre"; ...); the functions
compute for every preset the very operations of the kind's hand-written form before the data
(bit-identical results; tests/core/test_structure.py compares the programs).
MLP(h) = act(h W_1 + b_1) W_2 + b_2; the gated GLU(h) = (act(h W_1 + b_1) * h W_3) W_2 + b_2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from simlab.core import attention

if TYPE_CHECKING:  # annotations only
    from simlab.core.spec import BlockSpec


def _act(spec: BlockSpec):
    return {
        "gelu": jax.nn.gelu,
        "gelu_exact": lambda g: jax.nn.gelu(g, approximate=False),
        "relu": jax.nn.relu,
        "linear": lambda g: g,
        "silu": jax.nn.silu,
    }[spec.activation]


def mlp(spec: BlockSpec, p, h_BTD):
    """MLP(h) = act(h W_1 + b_1) W_2 + b_2, act = GELU (tanh form; "gelu_exact": the exact
    z Phi(z), Hendrycks & Gimpel 2016), ReLU or the identity
    (activation "linear": MLP(h) = h W_1 W_2 + b_1 W_2 + b_2, an ablation of the nonlinearity).
    With spec.mlp_center (an ablation) each token's hidden activation g_t (F units) is centred
    over its units first, g_t - mean_f(g_tf) 1: this removes exactly the term
    mean_f(g_tf) 1^T W_2, which is nearly the same vector for every token when the activation
    has a nonzero mean (GELU's E[GELU(z)] = s^2 / sqrt(2 pi (1 + s^2)) for the exact GELU and
    z ~ N(0, s^2); s^2 = 768 * 0.02^2 at BERT-base init gives 0.107), so it isolates that
    shared output (docs/gallery.md, "6. Width")."""
    g_BTF = _act(spec)(h_BTD @ p["w1"] + p["b1"])
    if spec.mlp_center:
        g_BTF = g_BTF - jnp.mean(g_BTF, axis=-1, keepdims=True)
    return g_BTF @ p["w2"] + p["b2"]


def gated_mlp(spec: BlockSpec, p, h_BTD):
    """GLU(h) = (act(h W_1 + b_1) * (h W_3)) W_2 + b_2, elementwise product over the F hidden
    units (Shazeer 2020; act = SiLU: SwiGLU, Llama's down(silu(gate h) * up h)); W_3: (D, F).
    spec.mlp_center centres the gated hidden activation over its units, as in `mlp`."""
    g_BTF = _act(spec)(h_BTD @ p["w1"] + p["b1"]) * (h_BTD @ p["w3"])
    if spec.mlp_center:
        g_BTF = g_BTF - jnp.mean(g_BTF, axis=-1, keepdims=True)
    return g_BTF @ p["w2"] + p["b2"]


def norm(spec: BlockSpec, p, leaf: str, x_BTD):
    """The block's norm (spec.structure: LayerNorm or RMSNorm, with or without gain and bias)
    with the parameters p[leaf + "_g"], p[leaf + "_b"]."""
    s = spec.structure
    if s.norm == "rmsnorm":
        y = attention.rms_norm(x_BTD, spec.ln_eps)
        y = y * p[f"{leaf}_g"] if s.norm_gain else y
        return y + p[f"{leaf}_b"] if s.norm_bias else y
    if s.norm_gain and s.norm_bias:
        return attention.layer_norm(x_BTD, p[f"{leaf}_g"], p[f"{leaf}_b"], spec.ln_eps)
    y = attention.layer_norm(x_BTD, None, None, spec.ln_eps)
    y = y * p[f"{leaf}_g"] if s.norm_gain else y
    return y + p[f"{leaf}_b"] if s.norm_bias else y


def _at(spec: BlockSpec, p, branch: int, place: str, x_BTD):
    """x through the branch's norm at `place`, or x itself where the structure has none."""
    s = spec.structure
    if place not in (s.attn_norm if branch == 1 else s.mlp_norm):
        return x_BTD
    return norm(spec, p, s.leaf(branch, place), x_BTD)


def attn_input(spec: BlockSpec, p, x_BTD):
    """What the projections see: the attention branch's pre-norm of x, or x."""
    return _at(spec, p, 1, "pre", x_BTD)


def branches(spec: BlockSpec, p, x_BTD, attn_BTD, knobs):
    """The rest of the layer, token by token: (y, the MLP branch's output before its gain;
    None without an MLP). Module docstring for the formula."""
    s = spec.structure
    h = _at(spec, p, 1, "post", knobs["attn_residual"] * x_BTD + _at(spec, p, 1, "out", attn_BTD))
    if not spec.mlp:
        return h, None
    u = _at(spec, p, 2, "pre", h if s.mlp_reads == "h" else x_BTD)
    f = _at(spec, p, 2, "out", (gated_mlp if s.mlp == "gated" else mlp)(spec, p, u))
    if s.mlp_reads == "x":  # parallel: no skip around the MLP alone
        return h + knobs["mlp_gain"] * f, f
    return _at(spec, p, 2, "post", knobs["mlp_residual"] * h + knobs["mlp_gain"] * f), f


def token_wise(spec: BlockSpec, p, x_BTD, attn_BTD, knobs):
    """`branches`' y alone (XLA drops the unused MLP output)."""
    return branches(spec, p, x_BTD, attn_BTD, knobs)[0]


# The helpers a hand-written kind (a plugin's) builds from: the built-in kinds' norms by name.
def ln1(spec: BlockSpec, p, x_BTD):
    """LN1(x) with the layer's ln1 gain and bias."""
    return attention.layer_norm(x_BTD, p["ln1_g"], p["ln1_b"], spec.ln_eps)


def ln2(spec: BlockSpec, p, h_BTD):
    """LN2(h) with the layer's ln2 gain and bias."""
    return attention.layer_norm(h_BTD, p["ln2_g"], p["ln2_b"], spec.ln_eps)


def rms1(spec: BlockSpec, p, x_BTD):
    """RMS1(x) = x / sqrt(mean_d x_d^2 + eps) * g with the layer's ln1 gain (no bias, no mean
    removal; Zhang & Sennrich 2019; eps = spec.ln_eps, HF's rms_norm_eps)."""
    return attention.rms_norm(x_BTD, spec.ln_eps) * p["ln1_g"]


def rms2(spec: BlockSpec, p, h_BTD):
    """RMS2(h) with the layer's ln2 gain."""
    return attention.rms_norm(h_BTD, spec.ln_eps) * p["ln2_g"]


def identity(spec: BlockSpec, p, x_BTD):
    """x itself: the projections see the layer input (no norm before them)."""
    return x_BTD
