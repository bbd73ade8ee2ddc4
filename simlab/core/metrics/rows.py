"""Statistics of the attention rows: the normalised row entropy (sharpness) and the row maximum,
pooled over all heads (per head: simlab.core.metrics.heads).

The attention computes per row, in nats, H_i = -sum_j w_ij log w_ij (block.Layer.row_entropy,
(B, H, T)); these functions average it."""

from __future__ import annotations

import jax.numpy as jnp

from simlab.core import attention


def _row_weights(t: int, s: int, causal: bool):
    """Number of attended keys per query row and which rows count for the entropy."""
    n_keys = jnp.minimum(jnp.arange(1, t + 1), s) if causal else jnp.full((t,), s)
    return n_keys, n_keys > 1


def entropy_of_rows(h_BHT, keys: int, causal: bool):
    """Mean over rows of H_i / log(n_i) from per-row entropies H_i in nats (B, H, T), n_i the
    number of attended keys: 1 = uniform, 0 = one-hot. Rows with a single attended key (the
    first causal row) are excluded."""
    b, h, t = h_BHT.shape
    n_keys, valid = _row_weights(t, keys, causal)
    norm = jnp.log(jnp.where(valid, n_keys, 2).astype(h_BHT.dtype))
    h_BHT = jnp.where(valid, h_BHT / norm, 0.0)
    rows = jnp.sum(valid).astype(h_BHT.dtype) * float(b * h)  # a float count: no int32 overflow
    return jnp.sum(h_BHT) / rows


def attn_entropy(w_BHTS, causal: bool):
    """Mean over rows of H(w_i) / log(n_i) of full weights (B, H, T, S); 0 log 0 = 0."""
    return entropy_of_rows(attention.row_entropy(w_BHTS), w_BHTS.shape[-1], causal)


def attn_max(w_BHTS):
    """Mean over all rows of max_j w_ij."""
    return jnp.mean(jnp.max(w_BHTS, axis=-1))
