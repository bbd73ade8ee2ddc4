"""Exact metrics as pure functions of a block's intermediates.

Anisotropy (mean pairwise cosine over distinct pairs, Ethayarajh 2019; Godey et al. 2024)
is computed exactly in O(n d) from unit vectors u_i = x_i / |x_i|:
    cos = (|sum_i u_i|^2 - sum_i |u_i|^2) / (n (n - 1)).
A zero vector has u_i = 0: its cosine with every other vector counts as 0, and it still
counts in the n (n - 1) pairs (so n zero vectors give 0, not NaN). The centred cosines apply
the same formula to x_i - xbar, the mean of the set removed first (`centred`,
`anisotropy_centred`): a vector common to every token, which moves the raw cosine toward 1,
leaves them unchanged by construction.

The metrics are one registry, METRICS: name -> Metric(function of the layer, the `Layer`
fields it reads, its definition, its exact range, whether it is computed by default), read
live. A metric reading "full" (the full attention weights) makes the Lab take the plain path;
none does today; a metric reading "mlp" (the MLP branch's output) makes the Lab keep it.
The decomposition metrics (within-sequence gain, the branches' own cosines, the centred
cosines) are registered with default=False: a sweep computes them where `sweep.metrics` names
them, so the default metric set, and with it the fingerprints of earlier results, stays as it
was. A new metric is
one `register_metric` call, in simlab or in a plugin (docs/extending.md).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp

from simlab.core import attention, geometry
from simlab.core.block import Layer
from simlab.core.linalg import top_eigenvalue, unit_vectors
from simlab.errors import ConfigError
from simlab.registry import BUILTIN, Registry, require


def mean_pairwise_cos(x_ND):
    """Mean cosine over the n (n - 1) ordered distinct pairs of rows of x (..., n, d); the
    count in float (n (n - 1) overflows int32 from n = 46342)."""
    u = unit_vectors(x_ND)
    n = float(x_ND.shape[-2])
    s = jnp.sum(u, axis=-2)
    num = jnp.sum(s * s, axis=-1) - jnp.sum(u * u, axis=(-2, -1))
    return num / (n * (n - 1))


def anisotropy(x_BTD):
    """(global cosine over all B*T tokens, mean over sequences of the within-sequence cosine),
    from one pass of unit vectors: per sequence s_b = sum_t u_bt and q_b = sum_t |u_bt|^2;
    global (|sum_b s_b|^2 - sum_b q_b) / (n (n - 1)), n = B T; within (|s_b|^2 - q_b) /
    (T (T - 1)). Counts in float (no int32 overflow of n (n - 1) for large n)."""
    b, t, _ = x_BTD.shape
    u = unit_vectors(x_BTD)
    # the barrier keeps XLA from fusing the per-sequence sums (and so the unit vectors) into
    # each of their consumers (docs/performance.md, "Engine changes", item 4).
    s_BD, q_B = jax.lax.optimization_barrier((jnp.sum(u, axis=1), jnp.sum(u * u, axis=(1, 2))))
    s_D = jnp.sum(s_BD, axis=0)
    n = float(b * t)
    glob = (jnp.sum(s_D * s_D) - jnp.sum(q_B)) / (n * (n - 1.0))
    within = (jnp.sum(s_BD * s_BD, axis=-1) - q_B) / (float(t) * (t - 1.0))
    return glob, jnp.mean(within)


def centred(x_ND):
    """Rows of x (..., n, d) minus their mean over the n rows, c_i = x_i - xbar with
    xbar = (1/n) sum_i x_i, computed so that a common vector much larger than the spread
    cancels: x is divided by the power of two 2^e >= max|x| (exact: no rounding, no overflow
    of the sums), then the corrected two-pass algorithm (Chan, Golub & LeVeque 1983,
    "Algorithms for computing the sample variance"): c = x - mean(x), then c - mean(c). The
    first mean is off by ~eps |xbar|; where x_i and the mean agree to a factor 2, x_i - mean is
    exact (Sterbenz), so that error is the same vector in every row and the second pass removes
    it. The centred rows are then accurate to a few float32 ulp of the spread itself, however
    large the common vector (the float32 input holds the spread to eps |x_i|: a spread below
    that is not in the input)."""
    m = jnp.max(jnp.abs(x_ND), axis=(-2, -1), keepdims=True)
    f, _ = jnp.frexp(m)
    p = jnp.where(m > 0, m / jnp.where(m > 0, f, 1.0), 1.0)  # m = f 2^e, f in [1/2, 1): 2^e
    x = x_ND / p
    c = x - jnp.mean(x, axis=-2, keepdims=True)
    return c - jnp.mean(c, axis=-2, keepdims=True)


def anisotropy_centred(x_BTD):
    """(global, within-sequence) mean pairwise cosine of the mean-centred tokens: global over
    the n = B T vectors x_bt - xbar, xbar the mean over all B T tokens; within, per sequence
    over the T vectors x_bt - xbar_b, xbar_b that sequence's mean, averaged over sequences.
    Both exact in O(n d) (`centred`, then `mean_pairwise_cos`). Centring removes every vector
    common to the set by construction: cos(x + v) = cos(x) for any v (for the within-sequence
    one, any v_b per sequence). For n vectors of equal centred norm sum_i u_i = 0, so the value
    is exactly -1/(n-1); it lies in [-1/(n-1), 1) in general (the zero-vector convention of
    `mean_pairwise_cos`: a set of equal tokens gives 0). The mean removal is that of Mu &
    Viswanath 2018 ("All-but-the-Top", ICLR); whether the anisotropy of Transformer states is
    more than such a common vector: Machina & Mercer 2024 ("Anisotropy is Not Inherent to
    Transformers", NAACL)."""
    b, t, d = x_BTD.shape
    glob = mean_pairwise_cos(centred(x_BTD.reshape(b * t, d)))
    return glob, jnp.mean(mean_pairwise_cos(centred(x_BTD)))


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


def stable_rank(y_BTD):
    """Mean over sequences of ||Y||_F^2 / ||Y||_2^2 (Y: T x D); ||Y||_2^2 is the top eigenvalue
    of the smaller Gram matrix (`top_eigenvalue`: exact up to 64 x 64, Lanczos beyond, converged
    to float32 rounding). A zero Y counts as stable rank 0; otherwise the ratio is clamped to
    its exact lower bound 1 (||Y||_2 <= ||Y||_F), which rounding can undercut by an ulp."""
    _, t, d = y_BTD.shape
    m = jnp.max(jnp.abs(y_BTD), axis=(-2, -1), keepdims=True)
    y_BTD = y_BTD / jnp.where(m > 0, m, 1.0)
    # the smaller Gram matrix: (B, T, S) over tokens, or (B, D, E) over features
    gram = (
        jnp.einsum("btd,bsd->bts", y_BTD, y_BTD)
        if t <= d
        else jnp.einsum("btd,bte->bde", y_BTD, y_BTD)
    )
    top = top_eigenvalue(gram)
    fro = jnp.sum(y_BTD * y_BTD, axis=(-2, -1))
    ratio = jnp.maximum(fro / jnp.where(top > 0, top, 1.0), 1.0)
    return jnp.mean(jnp.where(top > 0, ratio, 0.0))


def residual_ratio(a_BTD, x_BTD):
    """mean_i |a_i| / |x_i| over all B * T tokens (0 where x_i = 0). Both norms are taken
    after dividing by max_d |x_i| so that |x|^2 cannot overflow."""
    m = jnp.max(jnp.abs(x_BTD), axis=-1, keepdims=True)
    m = jnp.where(m > 0, m, 1.0)
    na = jnp.linalg.norm(a_BTD / m, axis=-1)
    nx = jnp.linalg.norm(x_BTD / m, axis=-1)
    return jnp.mean(jnp.where(nx > 0, na / jnp.where(nx > 0, nx, 1.0), 0.0))


def token_cos(a_BTD, x_BTD):
    """mean_i cos(a_i, x_i) over all B * T tokens: how much of each token's own direction a
    branch's output a_i carries (a zero vector has cosine 0 with everything)."""
    return jnp.mean(jnp.sum(unit_vectors(a_BTD) * unit_vectors(x_BTD), axis=-1))


def qk_drift(q_BTHK, k_BSHK):
    """Per head: the mean query and mean key over all tokens of the batch; returns the
    head averages of |mean q|, |mean k| and cos(mean q, mean k) (0 if either is zero)."""
    return qk_mean_stats(jnp.mean(q_BTHK, axis=(0, 1)), jnp.mean(k_BSHK, axis=(0, 1)))


def qk_mean_stats(mq_HK, mk_HK):
    """Head averages of |mean q|, |mean k| and cos(mean q, mean k) from the means (H, K)."""
    nq, nk = jnp.linalg.norm(mq_HK, axis=-1), jnp.linalg.norm(mk_HK, axis=-1)
    dot = jnp.sum(unit_vectors(mq_HK) * unit_vectors(mk_HK), axis=-1)
    return jnp.mean(nq), jnp.mean(nk), jnp.mean(dot)


class Shared:
    """What several metrics of one layer share, computed once: the anisotropy of a field. `ids`:
    the token ids (B, T) of the layer's tokens where the input kind has them (simlab.core.
    inputs.InputKind.ids; read by the metrics that split by token type), else None."""

    def __init__(self, layer, causal: bool, ids=None):
        self.layer, self.causal, self.ids, self._cos = layer, causal, ids, {}

    def cos(self, field: str):
        """(global, within-sequence) mean pairwise cosine of layer.<field> (B, T, D)."""
        if field not in self._cos:
            self._cos[field] = anisotropy(getattr(self.layer, field))
        return self._cos[field]

    def cos_centred(self, field: str):
        """(global, within-sequence) mean pairwise cosine of the mean-centred layer.<field>."""
        key = ("centred", field)
        if key not in self._cos:
            self._cos[key] = anisotropy_centred(getattr(self.layer, field))
        return self._cos[key]

    def covariance(self, field: str):
        """The centred covariance (D, D) of all B*T tokens of layer.<field>, streamed by
        sequence (simlab.core.geometry.moments)."""
        key = ("cov", field)
        if key not in self._cos:
            self._cos[key] = geometry.covariance(geometry.moments(getattr(self.layer, field)))
        return self._cos[key]

    def spectrum(self, field: str):
        """The covariance's eigenvalues, descending (simlab.core.geometry.spectrum)."""
        key = ("spectrum", field)
        if key not in self._cos:
            self._cos[key] = geometry.spectrum(self.covariance(field))
        return self._cos[key]

    def tokens(self, field: str):
        """layer.<field> as the (B*T, D) cloud of its tokens."""
        x = getattr(self.layer, field)
        return x.reshape(-1, x.shape[-1])

    def by_type(self, field: str):
        """(within, between) token types of layer.<field>'s variance (geometry.variance_by_type
        on the ids renumbered; computed once per field)."""
        key = ("type", field)
        if key not in self._cos:
            self._cos[key] = geometry.variance_by_type(self.tokens(field), self.ids.reshape(-1))
        return self._cos[key]


@dataclasses.dataclass(frozen=True)
class Metric:
    """One metric: fn(Shared) -> () array, the Layer fields it reads, its definition, and its
    exact mathematical range [low, high] (checked by simlab.testing on every path)."""

    name: str
    fn: Callable[[Shared], jax.Array]
    reads: tuple[str, ...]
    doc: str
    bounds: tuple[float, float] = (-math.inf, math.inf)
    default: bool = True  # computed when sweep.metrics is not given


# what a Metric may read: the Layer's fields and the token ids of its inputs ("ids")
READABLE = (*Layer._fields, "ids")
# IsoScore*'s shrinkage towards the isotropic covariance in the registered metrics (another zeta:
# isoscore_star_metric)
ISOSCORE_STAR_ZETA = 0.2
# the metrics of the centred covariance of all B*T tokens, which its rank (at most B*T - 1)
# bounds: cautioned when B*T <= d_model (simlab.engine.cautions); a plugin may add its own
RANK_BOUNDED: set[str] = set()
_COVARIANCE_ROWS = ("participation_ratio", "effective_rank", "pc1_share", "pc10_share")
_COVARIANCE_ROWS += ("isoscore", "isoscore_star")


def _check_metric(m: Metric) -> None:
    fields = READABLE
    lo, hi = m.bounds if isinstance(m.bounds, tuple) and len(m.bounds) == 2 else (None, None)
    bad = [f for f in m.reads if f not in fields] if isinstance(m.reads, tuple) else None
    require(
        "metric",
        m.name,
        {
            "fn": (callable(m.fn), "must be callable (Shared) -> () array"),
            "reads": (
                isinstance(m.reads, tuple) and bool(m.reads) and not bad,
                f"must be a non-empty tuple of Layer fields {fields} (unknown: {bad})",
            ),
            "doc": (isinstance(m.doc, str) and bool(m.doc.strip()), "must be a non-empty string"),
            "bounds": (
                isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and lo < hi,
                f"must be (low, high) numbers with low < high, got {m.bounds!r}",
            ),
            "default": (isinstance(m.default, bool), "must be a bool"),
        },
    )


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
            "exp(entropy of C's eigenvalues / their sum) (Roy & Vetterli 2007): in [1, rank C]",
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


def reads_ids(names) -> list[str]:
    """The requested metrics that read the token ids of the inputs."""
    return [n for n in names if "ids" in METRICS[n].reads]


def _qk(i: int):
    return lambda c: qk_mean_stats(c.layer.q_mean, c.layer.k_mean)[i]


# name -> Metric, read live (a plugin's metrics appear here once it is imported)
METRICS: Registry[Metric] = Registry("metric", Metric, _check_metric)


def register_metric(metric: Metric) -> Metric:
    """Add a metric (validated; a duplicate name is an error): docs/extending.md."""
    return METRICS.register(metric)


def default_metrics() -> tuple[str, ...]:
    """The metrics a sweep computes when sweep.metrics is not given (Metric.default)."""
    return tuple(n for n, m in METRICS.items() if m.default)


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


def needs_full_weights(names) -> bool:
    """True when a requested metric reads the full attention weights (Layer.full)."""
    return any("full" in METRICS[n].reads for n in names)


def layer_metrics(names, causal: bool, layer, ids=None) -> dict[str, jax.Array]:
    """The requested metrics of one layer (simlab.core.block.Layer; ids: its tokens' ids, for
    the metrics that read "ids"). A metric whose fn does not return a scalar is refused while
    the sweep is traced (its preflight: nothing computed or written), naming the metric and the
    module that registered it."""
    shared = Shared(layer, causal, ids)
    out = {}
    for n in names:
        v = METRICS[n].fn(shared)
        if jnp.shape(v) != ():
            raise ConfigError(
                f"metric {n!r} (registered by {METRICS.source(n)}): returns shape "
                f"{tuple(jnp.shape(v))} per layer; a Metric's fn returns one number per layer "
                "(simlab.core.metrics.Metric)"
            )
        out[n] = v
    return out
