"""Per-head lambda: one head's shaped queries and keys multiplied by the traced knob head_scale
(lambda_h), the head chosen by the static field `BlockSpec.scaled_head`, every other head
unchanged (docs/instruments.md, "Per-head lambda"). The global lambda of the lab is the pair
q_scale = k_scale (simlab.core.attention.shape_qk), which sharpens every head at once; this one
asks what a single head's sharpness (a sink head, say) does. For head h:

    q'_h <- lambda_h q'_h,   k_h <- lambda_h k_h   (after QK-norm, rotary and q_scale; before
                                                    k_scale and the key shift)

so its logits are l_ij = lambda_h^2 q'_i . k_scale k_j / (sqrt(K) temperature) (the key
shift's term is constant over j), lambda_h^2 times the unscaled head's, on every path that
shapes its queries here (plain, tiled, clamped); the lab does not factor layer 0 with it
(simlab.core.lab.Lab.factor). The shaped means (Layer.q_mean, k_mean) carry the factor too.
Tests: tests/core/test_decoder_instruments.py (numpy float64 logits of the head times
lambda^2, the others identical).
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp

from simlab.core import attention


def scale_head(q_BTHK, k_BSHK, knobs: Mapping[str, jax.Array], head: int | None):
    """(q, k) with head `head` of both multiplied by knobs["head_scale"] (None: unchanged)."""
    if head is None:
        return q_BTHK, k_BSHK
    s_H = jnp.where(jnp.arange(q_BTHK.shape[2]) == head, knobs["head_scale"], 1.0)
    s_H1 = s_H.astype(q_BTHK.dtype)[:, None]
    return q_BTHK * s_H1, k_BSHK * s_H1.astype(k_BSHK.dtype)


def shaped(spec, q_BTHK, k_BSHK, knobs: Mapping[str, jax.Array], u_q_HK):
    """Every attention path's start (simlab.core.block): attention.shape_q with the spec's
    QK-norm and rotary embeddings, then `scale_head` of head spec.scaled_head."""
    q, k = attention.shape_q(
        q_BTHK, k_BSHK, knobs, u_q_HK, spec.qk_norm, spec.rotary_dims, spec.rotary_base
    )
    return scale_head(q, k, knobs, spec.scaled_head)
