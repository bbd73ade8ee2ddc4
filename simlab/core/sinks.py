"""The sink clamp: the block's own softmax with key position 0 removed, in every head or in one
(`BlockSpec.pattern = "sink"`, `BlockSpec.pattern_head`; docs/instruments.md, "The sink
clamp"). An attention sink is a head that puts most of its mass on the first token (Xiao et al.
2024, "Efficient Streaming Language Models with Attention Sinks", ICLR; Gu et al. 2025, "When
Attention Sink Emerges in Language Models", ICLR); the clamp asks what the layer does without
it. For a clamped head, row i of the logits l_ij keeps the keys K_i = {j attended, j != 0}:

    w_ij = exp(l_ij) / sum_{j' in K_i} exp(l_ij')   for j in K_i,   w_i0 = 0,

the softmax renormalised over the rest; a row whose only attended key is 0 (row 0 under the
causal mask) keeps it (w_00 = 1). The other heads, and everything else of the block, are
unchanged. Unlike the clamps of simlab.core.patterns the weights still read the logits (the
knobs temperature, q_scale, ... act): the pattern is a `Pattern` with `reads_logits` and a
`keeps` rule, and `attended` turns any such rule into the boolean mask of the attended keys
that the plain path (simlab.core.attention.attention_weights) and the tiled path
(simlab.core.tiled.attend) apply before their softmax. The factored layer 0 of the lab, which
never forms the logits row by row, is not used with it (simlab.core.lab.Lab.factor).
Tests: tests/core/test_decoder_instruments.py (a numpy float64 attention with key 0 masked).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from simlab.core.patterns import PATTERNS, Pattern
from simlab.registry import BUILTIN


def without_key0(i_R1, j_1S, causal: bool):
    """The sink clamp's kept keys (R, S): every key but 0, except on a row whose only attended
    key is 0 (row 0 under the causal mask; without the mask every row has S >= 2 keys)."""
    drop = j_1S == 0
    return ~drop | (i_R1 == 0) if causal else ~drop | jnp.zeros_like(i_R1, bool)


PATTERNS.register(
    Pattern(
        "sink",
        "w_ij = softmax over the attended keys j != 0 of l_ij (key 0 removed, the rest "
        "renormalised; causal row 0 keeps its only key), in every head or in block.pattern_head",
        reads_logits=True,
        keeps=without_key0,
    ),
    source=BUILTIN,
)


def attended(spec, i_R, s: int) -> jax.Array | None:
    """The keys each query row i_R (R,) attends out of s: a boolean (R, S) mask (every head
    alike), (H, R, S) when the pattern's `keeps` acts on the one head spec.pattern_head, or None
    when every key is attended (no causal mask, no `keeps`). The causal mask j <= i is included."""
    j_1S = jnp.arange(s)[None, :]
    causal_RS = j_1S <= i_R[:, None] if spec.causal else None
    keeps = PATTERNS[spec.pattern].keeps
    if keeps is None:
        return causal_RS
    kept_RS = keeps(i_R[:, None], j_1S, spec.causal)
    if causal_RS is not None:
        kept_RS = kept_RS & causal_RS
    if spec.pattern_head is None:
        return kept_RS
    every_RS = causal_RS if causal_RS is not None else jnp.ones_like(kept_RS)
    head_H11 = (jnp.arange(spec.n_heads) == spec.pattern_head)[:, None, None]
    return jnp.where(head_H11, kept_RS, every_RS)
