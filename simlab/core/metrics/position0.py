"""The norm of position 0 over the median norm of the other positions: the massive activation
of trained decoders (Sun, Chen, Kolter & Liu 2024, "Massive Activations in Large Language
Models", COLM, report the largest activation over the median; Queipo-de-Llano et al. 2025,
"Attention Sinks and Compression Valleys", the position-0 norm spike).

One number per point, no dimension: a ratio per sequence, averaged over sequences (the
sequences of a point are exchangeable draws, so their mean is the estimate, and the ratio
stays comparable across batch sizes). Per position norms would need a `position` dimension of
length T and say the same thing less directly (position 0 against a robust centre of the rest).
Tests: tests/core/test_metric_dims.py.
"""

from __future__ import annotations

import jax.numpy as jnp

from simlab.core.metrics.registry import METRICS, Metric
from simlab.registry import BUILTIN


def position0_norm_ratio(x_BTD):
    """Per sequence |x_0| / median_{t >= 1} |x_t| (the median of the T - 1 other positions'
    norms: the mean of the two middle ones when T - 1 is even), averaged over sequences; a
    sequence whose median is 0 counts as 0. Norms after dividing each sequence by its
    max |x| (no overflow of |x|^2; the ratio is scale-free). Sun et al. 2024 report the
    largest activation over the median; Queipo-de-Llano et al. 2025 the position-0 norm spike."""
    m = jnp.max(jnp.abs(x_BTD), axis=(-2, -1), keepdims=True)
    n_BT = jnp.linalg.norm(x_BTD / jnp.where(m > 0, m, 1.0), axis=-1)
    med_B = jnp.median(n_BT[:, 1:], axis=-1)
    return jnp.mean(jnp.where(med_B > 0, n_BT[:, 0] / jnp.where(med_B > 0, med_B, 1.0), 0.0))


for _tag, _field, _what in (("input", "x", "the layer input"), ("out", "y", "the block output")):
    METRICS.register(
        Metric(
            f"{_tag}_pos0_norm_ratio",
            lambda c, field=_field: position0_norm_ratio(getattr(c.layer, field)),
            (_field,),
            f"per sequence |x_0| / median_(t>=1) |x_t|, averaged over sequences ({_what})",
            (0.0, float("inf")),
            default=False,
        ),
        source=BUILTIN,
    )
