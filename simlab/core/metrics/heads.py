"""Per-head statistics of the attention, one value per head (the metric dimension `head`):
the normalised row entropy and the mass on key position 0, the attention sink (Xiao et al. 2024,
"Efficient Streaming Language Models with Attention Sinks", ICLR; Gu et al. 2025, "When
Attention Sink Emerges in Language Models", ICLR). The attention gives each row's entropy in
nats and its weight w_i0 on key 0 (block.Layer.row_entropy and .sink, (B, H, T)) on every path
(tiled, plain, clamped). Tests: tests/core/test_metric_dims.py (loops over rows and heads; the
numpy float64 block on each path).
"""

from __future__ import annotations

import jax.numpy as jnp

from simlab.core.metrics.registry import METRICS, Metric
from simlab.core.metrics.rows import _row_weights
from simlab.registry import BUILTIN


def entropy_per_head(h_BHT, keys: int, causal: bool):
    """Per head (H,): the mean over its rows (all B sequences, the rows with more than one
    attended key) of H_i / log(n_i), as `entropy_of_rows` pools over heads; the mean over
    heads equals `entropy_of_rows` (every head has the same rows)."""
    b, _, t = h_BHT.shape
    n_keys, valid = _row_weights(t, keys, causal)
    norm = jnp.log(jnp.where(valid, n_keys, 2).astype(h_BHT.dtype))
    h_BHT = jnp.where(valid, h_BHT / norm, 0.0)
    rows = jnp.sum(valid).astype(h_BHT.dtype) * float(b)
    return jnp.sum(h_BHT, axis=(0, 2)) / rows


def sink_per_head(w0_BHT):
    """Per head (H,): the mean over all B T query rows of w_i0, the weight on key position 0
    (every row attends to key 0, under the causal mask too): 1/S for uniform attention over S
    keys, 1 when every query attends to the first token alone."""
    return jnp.mean(w0_BHT, axis=(0, 2))


for _metric in (
    Metric(
        "attn_entropy_head",
        lambda c: entropy_per_head(c.layer.row_entropy, c.layer.x.shape[1], c.causal),
        ("row_entropy",),
        "per head, mean over its rows of H(w_i) / log(n_i): 1 uniform, 0 one-hot",
        (0.0, 1.0),
        default=False,
        dims=("head",),
    ),
    Metric(
        "attn_sink_head",
        lambda c: sink_per_head(c.layer.sink),
        ("sink",),
        "per head, mean over its rows of w_i0: the attention mass on key position 0 (the sink)",
        (0.0, 1.0),
        default=False,
        dims=("head",),
    ),
):
    METRICS.register(_metric, source=BUILTIN)
