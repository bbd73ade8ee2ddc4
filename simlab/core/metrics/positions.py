"""The anisotropy and the covariance measures with position 0 left out: a decoder's first token
carries the attention sink and the massive activation (Sun, Chen, Kolter & Liu 2024, "Massive
Activations in Large Language Models", COLM; Queipo-de-Llano et al. 2025, "Attention Sinks and
Compression Valleys"), and one token with coordinates a thousand times the median dominates a
mean of unit vectors little but a covariance entirely. Reading each measure over all tokens
(the registered `<tag>_cos`, `<tag>_participation_ratio`, `<tag>_pc1_share`) and over the
positions t >= 1 alone (`<tag>_cos_rest`, `<tag>_participation_ratio_rest`,
`<tag>_pc1_share_rest`, these) separates what position 0 does from what the rest of the
sequence does. With x_rest the B (T - 1) tokens at positions 1 .. T - 1:

    cos_rest  = (|sum_i u_i|^2 - sum_i |u_i|^2) / (n (n - 1)),   u_i = x_i / |x_i|, n = B (T - 1)
    PR_rest   = (tr C)^2 / ||C||_F^2,   pc1_rest = lambda_1(C) / tr C,
    C = the centred covariance of x_rest (simlab.core.geometry).

Separate metrics rather than a dimension `first`/`rest`: the covariance of the B tokens at
position 0 alone says nothing the norm ratio (`<tag>_pos0_norm_ratio`) does not, and a Dim
has a size, not labels. Registered (default=False) for the layer input, the attention branch
and the block output. Tests: tests/core/test_decoder_instruments.py (numpy float64 oracles).
"""

from __future__ import annotations

import math

from simlab.core import geometry
from simlab.core.metrics.cosine import anisotropy
from simlab.core.metrics.pairs import FIELDS
from simlab.core.metrics.registry import METRICS, RANK_BOUNDED, Metric
from simlab.registry import BUILTIN


def cos_rest(x_BTD):
    """The global mean pairwise cosine of the B (T - 1) tokens at positions t >= 1."""
    return anisotropy(x_BTD[:, 1:])[0]


def covariance_rest(x_BTD):
    """The centred covariance (D, D) of the tokens at positions t >= 1."""
    return geometry.covariance(geometry.moments(x_BTD[:, 1:]))


def participation_ratio_rest(x_BTD):
    """(tr C)^2 / ||C||_F^2 of the covariance of the tokens at positions t >= 1."""
    return geometry.participation_ratio(covariance_rest(x_BTD))


def pc1_share_rest(x_BTD):
    """The top eigenvalue's share lambda_1 / tr C of the covariance of positions t >= 1."""
    return geometry.top_share(geometry.spectrum(covariance_rest(x_BTD)), 1)


def _position_metrics(tag: str, field: str, what: str) -> tuple[Metric, ...]:
    rows = (
        ("cos_rest", cos_rest, "mean pairwise cosine of the tokens at positions t >= 1", (-1, 1)),
        (
            "participation_ratio_rest",
            participation_ratio_rest,
            "(tr C)^2 / ||C||_F^2 of the covariance C of the tokens at positions t >= 1",
            (0.0, math.inf),
        ),
        (
            "pc1_share_rest",
            pc1_share_rest,
            "the share of the variance in the top direction of C of positions t >= 1",
            (0.0, 1.0),
        ),
    )
    return tuple(
        Metric(
            f"{tag}_{name}",
            lambda c, fn=fn: fn(getattr(c.layer, field)),
            (field,),
            f"{doc} ({what})",
            (float(lo), float(hi)),
            default=False,
        )
        for name, fn, doc, (lo, hi) in rows
    )


for _tag, (_field, _what) in FIELDS.items():
    for _metric in _position_metrics(_tag, _field, _what):
        METRICS.register(_metric, source=BUILTIN)
    RANK_BOUNDED.update(f"{_tag}_{n}" for n in ("participation_ratio_rest", "pc1_share_rest"))
