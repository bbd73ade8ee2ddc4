"""The statistics tracked during training, per layer and head (see the package docstring)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from simlab.core import attention, block, metrics
from simlab.core.spec import BlockSpec

PER_HEAD = (
    "q_mean_norm",
    "k_mean_norm",
    "qk_mean_cos",
    "qk_mean_dot",
    "q_rms",
    "k_rms",
    "attn_entropy",
    "attn_max",
    "logit_std",
    "token_logit_std",
    "shift_logit_std",
)

PER_LAYER = ("input_cos", "input_cos_within", "out_cos", "out_cos_within", "attn_input_corr")


# ---------------------------------------------------------------- statistics of one layer
def _masked_row_std(l_BHTS, causal: bool):
    """Per head: sqrt(mean over rows with >= 2 keys of the variance over attended keys)."""
    t, s = l_BHTS.shape[-2:]
    mask = attention.causal_mask(t, s) if causal else jnp.ones((t, s), bool)
    n_T = jnp.sum(mask, -1)
    mean = jnp.sum(jnp.where(mask, l_BHTS, 0.0), -1, keepdims=True) / n_T[:, None]
    var = jnp.sum(jnp.where(mask, (l_BHTS - mean) ** 2, 0.0), -1) / n_T
    valid = n_T > 1
    return jnp.sqrt(jnp.sum(jnp.where(valid, var, 0.0), (0, 2)) / (jnp.sum(valid) * var.shape[0]))


def logit_parts(q_BTHK, k_BSHK, mq_HK):
    """(total, token-specific, shared) logits: q.k, (q - mq).k and mq.k over sqrt(K)."""
    sk = jnp.sqrt(jnp.float32(q_BTHK.shape[-1]))
    tok = jnp.einsum("bthk,bshk->bhts", q_BTHK - mq_HK, k_BSHK) / sk
    shift = jnp.einsum("hk,bshk->bhs", mq_HK, k_BSHK)[:, :, None, :] / sk
    return tok + shift, tok, jnp.broadcast_to(shift, tok.shape)


def layer_stats(spec: BlockSpec, p, layer: block.Layer) -> dict[str, jax.Array]:
    """PER_HEAD stats (H,) and PER_LAYER stats () of one layer (see the module docstring)."""
    q, k, w = layer.full.q, layer.full.k, layer.full.w  # the plain path's full intermediates
    heads = [metrics.qk_drift(q[:, :, h : h + 1], k[:, :, h : h + 1]) for h in range(spec.n_heads)]
    out = {
        n: jnp.stack([hd[i] for hd in heads])
        for i, n in enumerate(("q_mean_norm", "k_mean_norm", "qk_mean_cos"))
    }
    mq, mk = jnp.mean(q, (0, 1)), jnp.mean(k, (0, 1))
    out["qk_mean_dot"] = jnp.abs(jnp.sum(mq * mk, -1))
    out["q_rms"] = jnp.sqrt(jnp.mean(jnp.sum((q - mq) ** 2, -1), (0, 1)))
    out["k_rms"] = jnp.sqrt(jnp.mean(jnp.sum((k - mk) ** 2, -1), (0, 1)))
    out["attn_entropy"] = jnp.stack(
        [metrics.attn_entropy(w[:, h : h + 1], spec.causal) for h in range(spec.n_heads)]
    )
    out["attn_max"] = jnp.mean(jnp.max(w, -1), (0, 2))
    for name, part in zip(
        ("logit_std", "token_logit_std", "shift_logit_std"), logit_parts(q, k, mq)
    ):
        out[name] = _masked_row_std(part, spec.causal)
    out["input_cos"], out["input_cos_within"] = metrics.anisotropy(layer.x)
    out["out_cos"], out["out_cos_within"] = metrics.anisotropy(layer.y)
    a = block.attn_input(spec, p, layer.x)
    out["attn_input_corr"] = metrics.anisotropy(a - jnp.mean(a, (0, 1)))[1]
    return out
