"""simlab's first metrics, registered in METRICS in a fixed order (the default metric set, and
with it the fingerprints of earlier results, depend on it). Metrics added since are one module
each (pairs, heads, position0), registered after these, all with default=False.

The decomposition metrics (within-sequence gain, the branches' own cosines, the centred
cosines) and the covariance measures (docs/metrics.md) are registered with default=False: a
sweep computes them where `sweep.metrics` names them.
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp

from simlab.core import geometry
from simlab.core.metrics.registry import METRICS, RANK_BOUNDED, Metric
from simlab.core.metrics.rows import entropy_of_rows
from simlab.core.metrics.tokens import (
    qk_mean_stats,
    residual_ratio,
    stable_rank,
    token_cos,
)
from simlab.registry import BUILTIN

# IsoScore*'s shrinkage towards the isotropic covariance in the registered metrics (another zeta:
# isoscore_star_metric)
ISOSCORE_STAR_ZETA = 0.2
# the covariance measures among them, bounded by the rank of C (registry.RANK_BOUNDED)
_COVARIANCE_ROWS = ("participation_ratio", "effective_rank", "pc1_share", "pc10_share")
_COVARIANCE_ROWS += ("isoscore", "isoscore_star")


def _cos_metrics(tag: str, field: str, what: str) -> tuple[Metric, Metric]:
    return (
        Metric(
            f"{tag}_cos",
            lambda c: c.cos(field)[0],
            (field,),
            f"mean pairwise cosine over the n(n-1) distinct pairs of all B*T tokens of {what}",
            (-1.0, 1.0),
        ),
        Metric(
            f"{tag}_cos_within",
            lambda c: c.cos(field)[1],
            (field,),
            f"the same within each sequence, averaged over sequences ({what})",
            (-1.0, 1.0),
        ),
    )


def _centred_metrics(tag: str, field: str, what: str) -> tuple[Metric, Metric]:
    return (
        Metric(
            f"{tag}_cos_centred",
            lambda c: c.cos_centred(field)[0],
            (field,),
            f"mean pairwise cosine of the B*T tokens of {what} minus their mean over all B*T",
            (-1.0, 1.0),
            default=False,
        ),
        Metric(
            f"{tag}_cos_centred_within",
            lambda c: c.cos_centred(field)[1],
            (field,),
            f"the same within each sequence, its own mean removed, averaged ({what})",
            (-1.0, 1.0),
            default=False,
        ),
    )


def _geometry_metrics(tag: str, field: str, what: str) -> tuple[Metric, ...]:
    """The covariance, norm-split and partition measures of a field (simlab.core.geometry;
    docs/metrics.md), none computed by default."""
    g = geometry
    one = (0.0, 1.0)
    rows = (
        (
            "participation_ratio",
            lambda c: g.participation_ratio(c.covariance(field)),
            "(tr C)^2 / ||C||_F^2 of the centred covariance C of all B*T tokens: in [1, rank C]",
            (0.0, math.inf),
        ),
        (
            "effective_rank",
            lambda c: g.effective_rank(c.spectrum(field)),
            "exp(entropy of the centred tokens' singular values / their sum) (Roy & Vetterli "
            "2007): in [1, rank C]",
            (0.0, math.inf),
        ),
        (
            "pc1_share",
            lambda c: g.top_share(c.spectrum(field), 1),
            "the share of the variance in C's top principal direction",
            one,
        ),
        (
            "pc10_share",
            lambda c: g.top_share(c.spectrum(field), 10),
            "the share of the variance in C's top 10 principal directions",
            one,
        ),
        (
            "isoscore",
            lambda c: g.isoscore_of(c.covariance(field)),
            "IsoScore (Rudman et al. 2022) = (PR - 1) / (D - 1): 0 one direction, 1 isotropic",
            one,
        ),
        (
            "isoscore_star",
            lambda c: _isoscore_star(c.covariance(field), ISOSCORE_STAR_ZETA),
            f"IsoScore* (Rudman & Eickhoff 2023), zeta {ISOSCORE_STAR_ZETA}, towards (tr C / D) I",
            one,
        ),
        (
            "partition_iso",
            lambda c: g.partition_isotropy(c.tokens(field)),
            "Mu & Viswanath's min_c Z(c) / max_c Z(c) over +- the eigenvectors of X^T X",
            one,
        ),
        (
            "partition_iso_centred",
            lambda c: g.partition_isotropy(c.tokens(field), True),
            "the same on the tokens minus their mean",
            one,
        ),
        (
            "mean_sq_norm",
            lambda c: g.mean_variance(c.tokens(field))[0],
            "|xbar|^2: the squared norm of the mean token (the common part)",
            (0.0, math.inf),
        ),
        (
            "variance",
            lambda c: g.mean_variance(c.tokens(field))[1],
            "mean_i |x_i - xbar|^2 = tr C: the private parts",
            (0.0, math.inf),
        ),
        (
            "common_share",
            lambda c: g.common_share(c.tokens(field)),
            "|xbar|^2 / mean_i |x_i|^2: the share of the squared norm the mean holds",
            one,
        ),
        (
            "rank1_residual",
            lambda c: g.rank_one_residual(getattr(c.layer, field)),
            "per sequence |X - 1 xbar^T|_F / |X|_F (Dong et al. 2021), averaged",
            one,
        ),
    )
    by_type = (
        (
            "variance_within_type",
            lambda c: c.by_type(field)[0],
            "(1/n) sum_i |x_i - xbar_type(i)|^2: the variance within token types (same id)",
        ),
        (
            "variance_between_type",
            lambda c: c.by_type(field)[1],
            "(1/n) sum_t n_t |xbar_t - xbar|^2: between types; within + between = variance",
        ),
    )
    RANK_BOUNDED.update(f"{tag}_{name}" for name in _COVARIANCE_ROWS)
    return tuple(
        Metric(f"{tag}_{name}", fn, (field,), f"{doc} ({what})", bounds, default=False)
        for name, fn, doc, bounds in rows
    ) + tuple(
        Metric(f"{tag}_{name}", fn, (field, "ids"), f"{doc} ({what})", (0.0, math.inf), False)
        for name, fn, doc in by_type
    )


def _isoscore_star(c_DE, zeta: float):
    return geometry.isoscore_star(c_DE, zeta, geometry.isotropic_target(c_DE))


def isoscore_star_metric(tag: str, zeta: float) -> Metric:
    """IsoScore* of the input ("input") or the output ("out") at another zeta, to register
    (register_metric): named <tag>_isoscore_star_<zeta>."""
    field = {"input": "x", "out": "y"}[tag]
    RANK_BOUNDED.add(f"{tag}_isoscore_star_{zeta:g}")
    return Metric(
        f"{tag}_isoscore_star_{zeta:g}",
        lambda c: _isoscore_star(c.covariance(field), zeta),
        (field,),
        f"IsoScore* (Rudman & Eickhoff 2023), zeta {zeta:g}, towards (tr C / D) I",
        (0.0, 1.0),
        default=False,
    )


def _qk(i: int):
    return lambda c: qk_mean_stats(c.layer.q_mean, c.layer.k_mean)[i]


for _metric in (
    *_cos_metrics("input", "x", "the layer input"),
    *_cos_metrics(
        "attn", "attn", "the attention sub-layer output (after W_O, before the residual)"
    ),
    *_cos_metrics("out", "y", "the block output"),
    Metric(
        "out_cos_gain",
        lambda c: c.cos("y")[0] - c.cos("x")[0],
        ("y", "x"),
        "out_cos - input_cos: the anisotropy the block adds to its input",
        (-2.0, 2.0),
    ),
    Metric(
        "out_cos_within_gain",
        lambda c: c.cos("y")[1] - c.cos("x")[1],
        ("y", "x"),
        "out_cos_within - input_cos_within: the within-sequence anisotropy the block adds",
        (-2.0, 2.0),
        default=False,
    ),
    *_centred_metrics("input", "x", "the layer input"),
    *_centred_metrics("out", "y", "the block output"),
    *_geometry_metrics("input", "x", "the layer input"),
    *_geometry_metrics("out", "y", "the block output"),
    Metric(
        "out_cos_centred_gain",
        lambda c: c.cos_centred("y")[0] - c.cos_centred("x")[0],
        ("y", "x"),
        "out_cos_centred - input_cos_centred: the gain that no common vector can make",
        (-2.0, 2.0),
        default=False,
    ),
    Metric(
        "out_cos_centred_within_gain",
        lambda c: c.cos_centred("y")[1] - c.cos_centred("x")[1],
        ("y", "x"),
        "out_cos_centred_within - input_cos_centred_within: the within-sequence gain that no "
        "vector common to a sequence can make",
        (-2.0, 2.0),
        default=False,
    ),
    Metric(
        "attn_x_cos",
        lambda c: token_cos(c.layer.attn, c.layer.x),
        ("attn", "x"),
        "mean over tokens of cos(Attn_i, x_i): the attention branch against its own token",
        (-1.0, 1.0),
        default=False,
    ),
    Metric(
        "mlp_x_cos",
        lambda c: token_cos(c.layer.mlp, c.layer.x),
        ("mlp", "x"),
        "mean over tokens of cos(MLP_i, x_i): the MLP branch against the layer input's token",
        (-1.0, 1.0),
        default=False,
    ),
    *(
        dataclasses.replace(m, default=False)
        for m in _cos_metrics("mlp", "mlp", "the MLP branch's output (before mlp_gain)")
    ),
    Metric(
        "attn_entropy",
        lambda c: entropy_of_rows(c.layer.row_entropy, c.layer.x.shape[1], c.causal),
        ("row_entropy",),
        "mean over rows of H(w_i) / log(n_i): 1 uniform, 0 one-hot",
        (0.0, 1.0),
    ),
    Metric(
        "attn_max",
        lambda c: jnp.mean(c.layer.row_max),
        ("row_max",),
        "mean over rows of max_j w_ij",
        (0.0, 1.0),
    ),
    Metric(
        "stable_rank",
        lambda c: stable_rank(c.layer.y),
        ("y",),
        "per sequence ||Y||_F^2 / ||Y||_2^2 of the output, averaged",
        (0.0, math.inf),
    ),
    Metric(
        "attn_residual_ratio",
        lambda c: residual_ratio(c.layer.attn, c.layer.x),
        ("attn", "x"),
        "mean over tokens of |Attn_i| / |x_i|: the attention update against its input",
        (0.0, math.inf),
    ),
    Metric(
        "q_mean_norm",
        _qk(0),
        ("q_mean",),
        "per head |mean shaped query|, averaged",
        (0.0, math.inf),
    ),
    Metric(
        "k_mean_norm",
        _qk(1),
        ("k_mean",),
        "per head |mean shaped key|, averaged",
        (0.0, math.inf),
    ),
    Metric(
        "qk_mean_cos",
        _qk(2),
        ("q_mean", "k_mean"),
        "per head cos(mean query, mean key) (0 if one is zero), averaged",
        (-1.0, 1.0),
    ),
):
    METRICS.register(_metric, source=BUILTIN)
