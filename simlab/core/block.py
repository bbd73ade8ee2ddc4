"""Transformer blocks and depth-L stacks as pure functions (params, x, knobs) -> output.

With a = attn_residual, m = mlp_residual and the branch gains g_A = attn_gain, g_M = mlp_gain
(docs/design.md; BERT: Devlin et al. 2019; pre-LN: Xiong et al. 2020):
  attention: h = a x + g_A Attn(x);         y = m h + g_M MLP(h)         (y = h without MLP)
  post_ln:   h = LN1(a x + g_A Attn(x));    y = LN2(m h + g_M MLP(h))    (y = h without MLP)
  pre_ln:    h = a x + g_A Attn(LN1(x));    y = m h + g_M MLP(LN2(h))    (y = h without MLP)
  parallel:  y = a x + g_A Attn(LN1(x)) + g_M MLP(LN1(x))  (GPT-J, Wang & Komatsuzaki 2021; one
             LayerNorm feeds both branches; m is inert: no skip around the MLP alone)
  parallel2: y = a x + g_A Attn(LN1(x)) + g_M MLP(LN2(x))  (GPT-NeoX, Black et al. 2022; Pythia:
             a LayerNorm of its own for each branch; m is inert)
  llama:     h = a x + g_A Attn(RMS1(x));    y = m h + g_M GLU(RMS2(h))  (Llama, Touvron et al.
             2023: RMSNorm with a gain and no bias, the gated MLP below; with spec.activation
             "silu" it is SwiGLU; grouped-query attention and rotary embeddings are spec fields,
             n_kv_heads and rotary_pct / rotary_base)
MLP(h) = act(h W_1 + b_1) W_2 + b_2 with act = GELU (tanh form, "gelu"; the exact erf form,
"gelu_exact"), ReLU, SiLU or the identity ("linear", an ablation); the gated MLP of a kind with
`gated` (Shazeer 2020, "GLU Variants Improve Transformer"): GLU(h) = (act(h W_1 + b_1) * h W_3) W_2
+ b_2, W_1 = HF's gate_proj, W_3 = up_proj, W_2 = down_proj. With spec.rotary_pct > 0 the
projected queries and keys are rotated by their positions (simlab.core.rotary) after the QK-norm
and before q_scale, k_scale and the shifts. g_A multiplies the attention sub-layer's output
before the token-wise part sees it (so it acts on every kind, a plugin's too); g_M is read by
the kinds that declare `mlp_gain` (all built-in ones). `Layer.attn` and `Layer.mlp` are the
branches' own outputs, before their gains. The kinds are one registry, BLOCKS (a BlockKind each:
what the projections see and the token-wise rest of the layer), read live. The built-in kinds
are data: each is a preset of simlab.core.structure (where the norms sit, LayerNorm or RMSNorm,
plain or gated MLP, parallel branches), computed by simlab.core.wiring, and a BlockSpec may
override the preset's fields (a new block variant with no code: docs/extending.md); a kind the
data cannot say is one `register_block` call, in simlab or in a plugin, with the helpers ln1,
ln2, rms1, rms2, identity, mlp and gated_mlp (simlab.core.wiring, re-exported here).

Two ways to compute the attention sub-layer, with one contract (`Layer`):
  plain  (tiling None): the full weights w (B, H, T, S), then A V (simlab.core.attention): the
         oracle; `Layer.full` holds the full shaped queries, keys and weights;
  tiled  (a simlab.core.tiled.Tiling): softmax statistics and A V W_O per tile, never the full
         weights; the terms of the logits constant over the keys (the key shift u_k) are
         dropped exactly; `Layer.full` is None.
Every path starts from the same shaped queries and normalised keys (simlab.core.attention.shape_q)
and scales its logits with the same function (simlab.core.attention.scale_logits). With a
clamped pattern (`BlockSpec.pattern`, an entry of simlab.core.patterns.PATTERNS that does not
read the logits) the weights are the clamp's: built in full on the plain path, A V from the
closed form in O(T D) on the other.
Every layer hands its `Layer` to an `observe` function (e.g. the metrics), so a stack never
keeps all layers' intermediates in memory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp

from simlab.core import attention, head_scale, patterns, sinks, tiled, wiring
from simlab.core.structure import PRESETS, Structure
from simlab.core.wiring import (  # noqa: F401  (the helpers' import path before the split)
    gated_mlp,
    identity,
    ln1,
    ln2,
    mlp,
    rms1,
    rms2,
)
from simlab.registry import BUILTIN, Registry, require

if TYPE_CHECKING:  # annotations only: spec validates names against the registries
    from simlab.core.spec import BlockSpec


class Full(NamedTuple):
    """The plain path's full attention intermediates: shaped queries q' (B, T, H, K), keys k'
    (B, S, H, K) and weights w (B, H, T, S)."""

    q: jax.Array
    k: jax.Array
    w: jax.Array


class Attn(NamedTuple):
    """The attention sub-layer: output after W_O (B, T, D), per-row entropy H(w_i) in nats and
    max_j w_ij (B, H, T), the token means of the shaped queries and keys (H, K), the full
    intermediates on the plain path (None when tiled), and the weight w_i0 on key 0 (B, H, T)."""

    out: jax.Array
    row_entropy: jax.Array
    row_max: jax.Array
    q_mean: jax.Array
    k_mean: jax.Array
    full: Full | None
    sink: jax.Array | None = None


class Layer(NamedTuple):
    """What one layer computed: input x, attention sub-layer output attn (after W_O, before its
    gain and the residual), output y (all (B, T, D)); per-row attention entropy (nats) and max
    (B, H, T); the means over all tokens of the shaped queries q' and keys k' (H, K); `full`
    (plain path only, else None): the full q', k' and weights; `mlp`: the MLP branch's output
    (B, T, D) before its gain, only where a metric reads it (else None); `sink`: each row's
    weight w_i0 on key position 0 (B, H, T)."""

    x: jax.Array
    attn: jax.Array
    y: jax.Array
    row_entropy: jax.Array
    row_max: jax.Array
    q_mean: jax.Array
    k_mean: jax.Array
    full: Full | None
    mlp: jax.Array | None = None
    sink: jax.Array | None = None


def attn_input(spec: BlockSpec, p, x_BTD):
    """What the projections see: LN1(x) for a kind with a norm before them, x otherwise."""
    return BLOCKS[spec.kind].attn_input(spec, p, x_BTD)


def qkv(p, a_BTD):
    return tuple(
        attention.project(p[w], p[b], a_BTD) for w, b in (("wq", "bq"), ("wk", "bk"), ("wv", "bv"))
    )


def rotary_of(spec: BlockSpec) -> tuple[int, float]:
    """(rotated dims per head, base) of the block's rotary embeddings ((0, base): none)."""
    return spec.rotary_dims, spec.rotary_base


def plain_attention(spec: BlockSpec, p, q, k, v, knobs, u_q_HK, u_k_HK) -> Attn:
    """The oracle: full weights, then A V W_O; entropy -sum_j w log w per row. The key shift's
    logit term k_shift q'_i . u_k is constant over j, so softmax ignores it: it is left out of
    the logits (as on the tiled path), which makes k_shift exactly invisible to the weights
    instead of invisible up to the rounding of a huge constant. `Full.k` holds the shifted keys."""
    q, k = head_scale.shaped(spec, q, k, knobs, u_q_HK)
    k = knobs["k_scale"] * k
    if patterns.PATTERNS[spec.pattern].reads_logits:
        kept = sinks.attended(spec, jnp.arange(q.shape[1]), k.shape[1])
        w = attention.attention_weights(q, k, knobs["temperature"], spec.causal, kept)
    else:  # a clamp: its full weights, built explicitly (simlab.core.patterns)
        b, t, s = q.shape[0], q.shape[1], k.shape[1]
        dtype = jnp.promote_types(q.dtype, jnp.float32)
        beta = patterns.beta(spec.pattern, knobs).astype(dtype)
        w = patterns.weights(spec.pattern, beta, b, spec.n_heads, t, s, spec.causal, dtype)
    k = k + knobs["k_shift"] * u_k_HK  # = attention.shift_k of the normalised keys
    out = attention.attend(w, v, p["wo"], p["bo"])
    return Attn(
        out,
        attention.row_entropy(w),
        jnp.max(w, axis=-1),
        jnp.mean(q, axis=(0, 1)),
        jnp.mean(k, axis=(0, 1)),
        Full(q, k, w),
        w[..., 0],
    )


def tiled_attention(
    spec: BlockSpec, p, q, k, v, knobs, u_q_HK, u_k_HK, tiling: tiled.Tiling
) -> Attn:
    """Tiled: scores s_ij = q'_i . k_j of the normalised keys k (the j-constant k_shift u_k . q'_i
    dropped), scalar factor k_scale / (sqrt(K) temperature) kept apart (simlab.core.tiled)."""
    q, k = head_scale.shaped(spec, q, k, knobs, u_q_HK)
    factor = attention.scale_logits(knobs["k_scale"], spec.d_head, knobs["temperature"], q.dtype)
    b, t = q.shape[:2]
    rs = tiled.attend(
        tiling,
        lambda q_BRHK, k_BSHK: jnp.einsum("brhk,bshk->bhrs", q_BRHK, k_BSHK),
        factor,
        q.reshape(b, tiling.blocks, tiling.rows, *q.shape[2:]),
        k,
        jnp.swapaxes(v, 1, 2),
        p["wo"],
        spec.causal,
        lambda i_R: sinks.attended(spec, i_R, k.shape[1]),
    )
    k_mean = attention.shift_k(jnp.mean(k, axis=(0, 1)), u_k_HK, knobs)
    q_mean = jnp.mean(q, axis=(0, 1))
    return Attn(rs.out + p["bo"], rs.entropy, rs.max, q_mean, k_mean, None, rs.sink)


def pattern_attention(spec: BlockSpec, p, q, k, v, knobs, u_q_HK, u_k_HK) -> Attn:
    """A clamped pattern (simlab.core.patterns) on the fast path: A V W_O, the row entropy and
    maximum from the closed form in O(T D), no (B, H, T, S) array; the shaped queries and keys
    give the same token means as on the softmax paths."""
    q, k = head_scale.shaped(spec, q, k, knobs, u_q_HK)
    beta = patterns.beta(spec.pattern, knobs).astype(jnp.promote_types(v.dtype, jnp.float32))
    out, h_T, max_T = patterns.attend(spec.pattern, beta, v, p["wo"], spec.causal)
    shape = (q.shape[0], spec.n_heads, q.shape[1])
    k_mean = attention.shift_k(jnp.mean(k, axis=(0, 1)), u_k_HK, knobs)
    w0_T = patterns.key0_weight(spec.pattern, beta, q.shape[1], k.shape[1], spec.causal)
    return Attn(
        out + p["bo"],
        jnp.broadcast_to(h_T, shape),
        jnp.broadcast_to(max_T, shape),
        jnp.mean(q, axis=(0, 1)),
        k_mean,
        None,
        jnp.broadcast_to(w0_T, shape),
    )


def token_wise(spec: BlockSpec, p, x_BTD, attn_BTD, knobs):
    """Everything after the attention sub-layer (residuals, norms, MLP): token by token."""
    return BLOCKS[spec.kind].token_wise(spec, p, x_BTD, attn_BTD, knobs)


# ------------------------------------------------------------------------------ the kinds
@dataclasses.dataclass(frozen=True)
class BlockKind:
    """One block wiring. attn_input(spec, p, x): what the projections see;
    token_wise(spec, p, x, attn, knobs): the rest of the layer, token by token.
    norm_before_projections: the projections see a norm of x, so layer 0's projections cannot
    be hoisted by linearity (simlab.core.lab). norm_after_attention: the token-wise part holds a
    LayerNorm even without the MLP (then it runs over tiles, like the MLP).
    mlp_residual: the knob m scales a skip around the MLP (else m is inert for this kind).
    mlp_gain: token_wise multiplies the MLP branch's output by the knob mlp_gain (else it is
    inert for this kind). token_wise_mlp (optional): (spec, p, x, attn, knobs) -> (y, the MLP
    branch's output before its gain), the same y as token_wise; the metrics that read
    `Layer.mlp` need it (without it they are refused for this kind).
    gated: the MLP is `gated_mlp` (simlab.core.init draws the third matrix w3; the closed forms
    and covariates of a plain act(h W_1) W_2 MLP refuse or skip it).
    typical: BlockSpec fields of this kind's usual block (e.g. Llama's SiLU gate, grouped-query
    attention and rotary embeddings), which simlab.testing's conformance cases set.
    structure (optional): the kind as data (simlab.core.structure.Structure); a kind with one
    is built by `structured` (its functions read the data, so a BlockSpec may override it:
    `attn_norm`, `mlp_norm`, `norm`, ...), a kind without one (a plugin's hand-written wiring)
    refuses those overrides."""

    name: str
    attn_input: Callable
    token_wise: Callable
    norm_before_projections: bool
    norm_after_attention: bool
    formula: str
    mlp_residual: bool = True
    mlp_gain: bool = False
    token_wise_mlp: Callable | None = None
    gated: bool = False
    typical: Mapping = dataclasses.field(default_factory=dict, hash=False)
    structure: Structure | None = None


def _check_kind(k: BlockKind) -> None:
    require(
        "block kind",
        k.name,
        {
            "attn_input": (callable(k.attn_input), "must be callable (spec, p, x) -> x"),
            "token_wise": (
                callable(k.token_wise),
                "must be callable (spec, p, x, attn, knobs) -> y",
            ),
            "norm_before_projections": (
                isinstance(k.norm_before_projections, bool),
                "must be a bool",
            ),
            "norm_after_attention": (isinstance(k.norm_after_attention, bool), "must be a bool"),
            "formula": (
                isinstance(k.formula, str) and bool(k.formula.strip()),
                "must be a non-empty string",
            ),
            "mlp_residual": (isinstance(k.mlp_residual, bool), "must be a bool"),
            "mlp_gain": (isinstance(k.mlp_gain, bool), "must be a bool"),
            "token_wise_mlp": (
                k.token_wise_mlp is None or callable(k.token_wise_mlp),
                "must be None or callable (spec, p, x, attn, knobs) -> (y, mlp)",
            ),
            "gated": (isinstance(k.gated, bool), "must be a bool"),
            "typical": (isinstance(k.typical, Mapping), "must be a mapping of BlockSpec fields"),
            "structure": (
                k.structure is None or isinstance(k.structure, Structure),
                "must be None or a simlab.core.structure.Structure",
            ),
        },
    )


# name -> BlockKind, read live (a plugin's kinds appear here once it is imported)
BLOCKS: Registry[BlockKind] = Registry("block kind", BlockKind, _check_kind)


def register_block(kind: BlockKind) -> BlockKind:
    """Add a block kind (validated; a duplicate name is an error): docs/extending.md."""
    return BLOCKS.register(kind)


def structured(name: str, structure: Structure, formula: str = "", **fields) -> BlockKind:
    """A block kind declared as data: its functions are simlab.core.wiring's, which read the
    spec's structure (the kind's, with the spec's overrides), and its flags follow from it."""
    structure.check(f"block kind {name!r}")
    return BlockKind(
        name,
        attn_input=wiring.attn_input,
        token_wise=wiring.token_wise,
        norm_before_projections=structure.norm_before_projections,
        norm_after_attention=structure.norm_after_attention,
        formula=formula or structure.formula(),
        mlp_residual=structure.mlp_reads == "h",
        mlp_gain=True,
        token_wise_mlp=wiring.branches,
        gated=structure.mlp == "gated",
        structure=structure,
        **fields,
    )


for _kind in (
    structured("attention", PRESETS["attention"], "h = a x + Attn(x); y = m h + MLP(h)"),
    structured(
        "post_ln",
        PRESETS["post_ln"],
        "h = LN1(a x + Attn(x)); y = LN2(m h + MLP(h))  (BERT)",
    ),
    structured("pre_ln", PRESETS["pre_ln"], "h = a x + Attn(LN1(x)); y = m h + MLP(LN2(h))"),
    structured("parallel", PRESETS["parallel"], "y = a x + Attn(LN1(x)) + MLP(LN1(x))  (GPT-J)"),
    structured(
        "parallel2",
        PRESETS["parallel2"],
        "y = a x + Attn(LN1(x)) + MLP(LN2(x))  (GPT-NeoX, Pythia)",
    ),
    structured(
        "llama",
        PRESETS["llama"],
        "h = a x + Attn(RMS1(x)); y = m h + GLU(RMS2(h))  (Llama, Mistral, Qwen2)",
        typical=dict(activation="silu", n_kv_heads=2, rotary_pct=1.0, ln_eps=1e-6),
    ),
):
    BLOCKS.register(_kind, source=BUILTIN)


def layer_apply(
    spec: BlockSpec,
    p,
    x_BTD,
    knobs: Mapping[str, jax.Array],
    u_q_HK,
    u_k_HK,
    tiling: tiled.Tiling | None = None,
    qkv_pre=None,
    attention_fn: Callable[[], Attn] | None = None,
    keep_mlp: bool = False,
) -> Layer:
    """One block. tiling None: the plain attention (the oracle), else the tiled one (or, for a
    clamped pattern, its closed form). `qkv_pre` = (q, k, v) already projected (hoisted by the
    lab); `attention_fn()` replaces the whole attention sub-layer (simlab.core.factored).
    keep_mlp: also return the MLP branch's output (`Layer.mlp`; the kind's token_wise_mlp)."""
    if attention_fn is not None:
        at = attention_fn()
    else:
        q, k, v = qkv(p, attn_input(spec, p, x_BTD)) if qkv_pre is None else qkv_pre
        if tiling is None:
            at = plain_attention(spec, p, q, k, v, knobs, u_q_HK, u_k_HK)
        elif not patterns.PATTERNS[spec.pattern].reads_logits:
            at = pattern_attention(spec, p, q, k, v, knobs, u_q_HK, u_k_HK)
        else:
            at = tiled_attention(spec, p, q, k, v, knobs, u_q_HK, u_k_HK, tiling)
    kind = BLOCKS[spec.kind]
    rest = kind.token_wise_mlp if keep_mlp else kind.token_wise

    def tokens(x, a):  # the attention branch's gain g_A, then the rest of the layer
        return rest(spec, p, x, knobs["attn_gain"] * a, knobs)

    if tiling is None or not (spec.mlp or spec.norm_after_attention):
        out = tokens(x_BTD, at.out)  # a x + attn: one elementwise pass
    else:
        out = tiled.by_tokens(tiling, lambda xa: tokens(*xa), (x_BTD, at.out))
    y, f = out if keep_mlp else (out, None)
    return Layer(
        x_BTD, at.out, y, at.row_entropy, at.row_max, at.q_mean, at.k_mean, at.full, f, at.sink
    )


def stack_apply(
    spec: BlockSpec,
    params,
    x_BTD,
    knobs,
    u_q_LHK,
    u_k_LHK,
    *,
    observe: Callable[[Layer], object] = lambda l: l,
    tiling=None,
    qkv0=None,
    attention_fn0=None,
    keep_mlp: bool = False,
):
    """Apply spec.depth layers (params stacked on a leading layer axis).

    Returns (y, observed) with observed = observe(layer) stacked over a leading layer axis.
    `qkv0` optionally gives layer 0's hoisted projections and `attention_fn0` its attention,
    keep_mlp the MLP branch's output of every layer (see layer_apply); these and observe and
    tiling are keyword-only. Layers 1.. run in a lax.scan.
    """
    first = jax.tree.map(lambda a: a[0], params)
    l0 = layer_apply(
        spec,
        first,
        x_BTD,
        knobs,
        u_q_LHK[0],
        u_k_LHK[0],
        tiling=tiling,
        qkv_pre=qkv0,
        attention_fn=attention_fn0,
        keep_mlp=keep_mlp,
    )
    obs0 = jax.tree.map(lambda a: a[None], observe(l0))
    if spec.depth == 1:
        return l0.y, obs0

    def body(x, layer):
        p, uq, uk = layer
        lo = layer_apply(spec, p, x, knobs, uq, uk, tiling=tiling, keep_mlp=keep_mlp)
        return lo.y, observe(lo)

    rest = jax.tree.map(lambda a: a[1:], (params, u_q_LHK, u_k_LHK))
    y, obs = jax.lax.scan(body, l0.y, rest)
    return y, jax.tree.map(lambda a, b: jnp.concatenate([a, b]), obs0, obs)
