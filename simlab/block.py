"""Transformer blocks and depth-L stacks as pure functions (params, x, knobs) -> output.

With a = attn_residual, m = mlp_residual (DESIGN.md; BERT: Devlin et al. 2019; pre-LN:
Xiong et al. 2020):
  attention: h = a x + Attn(x);             y = m h + MLP(h)            (y = h without MLP)
  post_ln:   h = LN1(a x + Attn(x));        y = LN2(m h + MLP(h))       (y = h without MLP)
  pre_ln:    h = a x + Attn(LN1(x));        y = m h + MLP(LN2(h))       (y = h without MLP)
MLP(h) = act(h W_1 + b_1) W_2 + b_2 with act = GELU (tanh form, as BERT) or ReLU.

Every layer hands its intermediates to an `observe` function (e.g. the metrics), so a
stack never keeps all layers' attention maps in memory.
"""
from __future__ import annotations

from typing import Callable, Mapping, NamedTuple

import jax
import jax.numpy as jnp

from simlab import attention as A
from simlab.spec import BlockSpec


class Layer(NamedTuple):
    """What one layer computed: input x, attention sub-layer output (after W_O, before the
    residual) attn, output y, attention weights w (B, H, T, S), shaped queries q and keys k."""
    x: jax.Array
    attn: jax.Array
    y: jax.Array
    w: jax.Array
    q: jax.Array
    k: jax.Array


def mlp(spec: BlockSpec, p, h_BTD):
    act = jax.nn.gelu if spec.activation == "gelu" else jax.nn.relu
    return act(h_BTD @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]


def attn_input(spec: BlockSpec, p, x_BTD):
    """What the projections see: LN1(x) for pre-LN, x otherwise."""
    return A.layer_norm(x_BTD, p["ln1_g"], p["ln1_b"], spec.ln_eps) if spec.kind == "pre_ln" else x_BTD


def qkv(p, a_BTD):
    return (A.project(p["wq"], p["bq"], a_BTD), A.project(p["wk"], p["bk"], a_BTD),
            A.project(p["wv"], p["bv"], a_BTD))


def layer_apply(spec: BlockSpec, p, x_BTD, knobs: Mapping[str, jax.Array], u_q_HK, u_k_HK,
                qkv_pre=None, attn_fn=None) -> Layer:
    """One block. `qkv_pre` = (q, k, v) already projected (hoisted by the sweep); else computed.
    `attn_fn(q, k) -> (w, q, k)` replaces the QK shaping and softmax (simlab.factored)."""
    q, k, v = qkv(p, attn_input(spec, p, x_BTD)) if qkv_pre is None else qkv_pre
    if attn_fn is None:
        q, k = A.shape_qk(q, k, knobs, u_q_HK, u_k_HK, spec.qk_norm)
        w = A.attention_weights(q, k, knobs["temperature"], spec.causal)
    else:
        w, q, k = attn_fn(q, k)
    attn = A.attend(w, v, p["wo"], p["bo"])
    a, m = knobs["attn_residual"], knobs["mlp_residual"]
    if spec.kind == "post_ln":
        h = A.layer_norm(a * x_BTD + attn, p["ln1_g"], p["ln1_b"], spec.ln_eps)
        y = A.layer_norm(m * h + mlp(spec, p, h), p["ln2_g"], p["ln2_b"], spec.ln_eps) \
            if spec.mlp else h
    elif spec.kind == "pre_ln":
        h = a * x_BTD + attn
        y = m * h + mlp(spec, p, A.layer_norm(h, p["ln2_g"], p["ln2_b"], spec.ln_eps)) \
            if spec.mlp else h
    else:
        h = a * x_BTD + attn
        y = m * h + mlp(spec, p, h) if spec.mlp else h
    return Layer(x_BTD, attn, y, w, q, k)


def stack_apply(spec: BlockSpec, params, x_BTD, knobs, u_q_LHK, u_k_LHK,
                observe: Callable[[Layer], object] = lambda l: l, qkv0=None, attn_fn0=None):
    """Apply spec.depth layers (params stacked on a leading layer axis).

    Returns (y, observed) with observed = observe(layer) stacked over a leading layer axis.
    `qkv0` optionally gives layer 0's hoisted projections and `attn_fn0` its attention
    (see layer_apply). Layers 1.. run in a lax.scan.
    """
    first = jax.tree.map(lambda a: a[0], params)
    l0 = layer_apply(spec, first, x_BTD, knobs, u_q_LHK[0], u_k_LHK[0], qkv0, attn_fn0)
    obs0 = jax.tree.map(lambda a: a[None], observe(l0))
    if spec.depth == 1:
        return l0.y, obs0

    def body(x, layer):
        p, uq, uk = layer
        lo = layer_apply(spec, p, x, knobs, uq, uk)
        return lo.y, observe(lo)

    rest = jax.tree.map(lambda a: a[1:], (params, u_q_LHK, u_k_LHK))
    y, obs = jax.lax.scan(body, l0.y, rest)
    return y, jax.tree.map(lambda a, b: jnp.concatenate([a, b]), obs0, obs)
