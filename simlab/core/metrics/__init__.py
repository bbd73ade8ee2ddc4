"""Exact metrics as pure functions of a block's intermediates, one registry, METRICS.

The metrics are one registry, METRICS: name -> Metric(function of the layer, the `Layer`
fields it reads, its definition, its exact range, whether it is computed by default, and the
named dimensions of its per-layer value), read live. A metric reading "full" (the full attention
weights) makes the Lab take the plain path; none does today; a metric reading "mlp" (the MLP
branch's output) makes the Lab keep it. A metric's dimensions (`Metric.dims`: none, or e.g.
("head",)) are names of the registry DIMS, each with its size read from the specs; a depth > 1
lab adds `layer` in front (docs/extending.md, "Metric dimensions"). A new metric is one
`register_metric` call, in simlab or in a plugin (docs/extending.md).

The package, by concept: `registry` (Metric, Dim, METRICS, DIMS, layer_metrics), `shared` (what
the metrics of one layer share), `cosine` (mean pairwise cosines), `rows` (the attention rows:
entropy, maximum), `tokens` (stable rank, a branch against its token, the mean query and key),
`builtin` (the first metrics, registered in a fixed order); then one module per metric family
added since, each its functions and its registrations: `pairs` (the cosine within and between
sequences), `heads` (per-head entropy and sink mass, dimension `head`), `position0` (the
position-0 norm ratio), `positions` (the cosine and covariance measures without position 0),
`sample_size` (covariance measures against their isotropic reference at the same n and D).
A new family is one such module (and its import below) plus its test.
"""

from __future__ import annotations

from simlab.core.linalg import unit_vectors

# simlab's own metrics, registered in this order (builtin's order fixes the default set)
from simlab.core.metrics import (  # noqa: F401
    builtin,  # noqa: F401
    heads,
    pairs,
    position0,
    positions,
    sample_size,
)
from simlab.core.metrics.builtin import (
    ISOSCORE_STAR_ZETA,
    _isoscore_star,  # noqa: F401 -- kept: tests and scripts read it here
    isoscore_star_metric,
)
from simlab.core.metrics.cosine import (
    anisotropy,
    anisotropy_centred,
    centred,
    mean_pairwise_cos,
    pair_split,
)
from simlab.core.metrics.heads import entropy_per_head, sink_per_head
from simlab.core.metrics.position0 import position0_norm_ratio
from simlab.core.metrics.registry import (
    DIMS,
    METRICS,
    RANK_BOUNDED,
    READABLE,
    REDEFINED,
    STACK_DIM,
    Dim,
    Metric,
    default_metrics,
    dim_sizes,
    layer_metrics,
    needs_full_weights,
    reads_ids,
    redefined,
    register_dim,
    register_metric,
)
from simlab.core.metrics.rows import (
    _row_weights,  # noqa: F401 -- kept: tests and scripts read it here
    attn_entropy,
    attn_max,
    entropy_of_rows,
)
from simlab.core.metrics.shared import Shared
from simlab.core.metrics.tokens import (
    qk_drift,
    qk_mean_stats,
    residual_ratio,
    stable_rank,
    token_cos,
)

__all__ = [
    "RANK_BOUNDED",
    "REDEFINED",
    "DIMS",
    "ISOSCORE_STAR_ZETA",
    "METRICS",
    "READABLE",
    "STACK_DIM",
    "Dim",
    "Metric",
    "Shared",
    "anisotropy",
    "anisotropy_centred",
    "attn_entropy",
    "attn_max",
    "centred",
    "default_metrics",
    "dim_sizes",
    "entropy_of_rows",
    "entropy_per_head",
    "isoscore_star_metric",
    "layer_metrics",
    "mean_pairwise_cos",
    "needs_full_weights",
    "pair_split",
    "position0_norm_ratio",
    "qk_drift",
    "qk_mean_stats",
    "reads_ids",
    "redefined",
    "register_dim",
    "register_metric",
    "residual_ratio",
    "sink_per_head",
    "stable_rank",
    "token_cos",
    "unit_vectors",
]
