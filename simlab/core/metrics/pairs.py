"""The cosine between sequences and the cosine within a sequence: the global mean pairwise
cosine split by where each pair lies.

Of the n (n - 1) ordered pairs of n = B T tokens in B sequences of T, B T (T - 1) lie within
a sequence and B (B - 1) T^2 between two sequences; each distinct pair is in exactly one of the
two. With u the unit vectors, s_b = sum_t u_bt, q_b = sum_t |u_bt|^2 and S = sum_b s_b:
    within (pooled) = sum_b (|s_b|^2 - q_b) / (B T (T - 1))
    between         = (|S|^2 - sum_b |s_b|^2) / (B (B - 1) T^2)
and the global cosine is their pair-weighted mix, exactly:
    global = [B T (T - 1) within + B (B - 1) T^2 between] / [B T (B T - 1)].
Every sequence of a point has T tokens, so the pooled within-sequence cosine equals the mean
over sequences of each sequence's cosine (`<tag>_cos_within`) algebraically; the two differ by
rounding only. The between-sequence cosine is the new information: unlike the global cosine it
does not depend on how many sequences are pooled (issue 50), and a vector common to all tokens
moves it, while one shared within each sequence only moves the within part.

The function is simlab.core.metrics.cosine.pair_split (computed once per field for the metrics
of a layer: `Shared.cos_pairs`). Registered (default=False) for the layer input (`input_`), the
attention branch (`attn_`) and the block output (`out_`): `<tag>_cos_within_pooled` and
`<tag>_cos_between`. Tests: tests/core/test_metric_dims.py (a pairwise oracle, the mixing
identity).
"""

from __future__ import annotations

from simlab.core.metrics.registry import METRICS, Metric
from simlab.registry import BUILTIN


def _pair_metrics(tag: str, field: str, what: str) -> tuple[Metric, Metric]:
    return (
        Metric(
            f"{tag}_cos_within_pooled",
            lambda c: c.cos_pairs(field)[0],
            (field,),
            f"mean cosine over the B T (T-1) ordered pairs i != j of one sequence ({what})",
            (-1.0, 1.0),
            default=False,
        ),
        Metric(
            f"{tag}_cos_between",
            lambda c: c.cos_pairs(field)[1],
            (field,),
            f"mean cosine over the B (B-1) T^2 ordered pairs of two sequences ({what}); "
            "NaN for one sequence",
            (-1.0, 1.0),
            default=False,
        ),
    )


# tag -> (Layer field, what it is)
FIELDS = {
    "input": ("x", "the layer input"),
    "attn": ("attn", "the attention sub-layer output (after W_O, before the residual)"),
    "out": ("y", "the block output"),
}

for _tag, (_field, _what) in FIELDS.items():
    for _metric in _pair_metrics(_tag, _field, _what):
        METRICS.register(_metric, source=BUILTIN)
