"""Attention in tiles: the softmax statistics and A V W_O without materialising (B, H, T, S).

A tile is `seqs` sequences x `rows` query rows x all heads (`Tiling`, chosen from the sizes
alone so that the numbers never depend on the machine). Letters besides the legend's
(docs/design.md, "Shape letters"): R query rows of a tile, Q blocks of rows of a sequence,
G the sequences x heads of a tile flattened. For each tile, in one pass over its
unscaled scores s_ij (docs/design.md, "Per-point work at the paper's size"):

    m_i = max_j s_ij,   l_ij = c (s_ij - m_i)       c >= 0: the scalar factor of the logits
    e_ij = exp(l_ij),   z_i = sum_j e_ij            (log-sum-exp of c s_i: c m_i + log z_i)
    H_i = log z_i - (sum_j e_ij l_ij) / z_i         the row entropy, with no log of the weights
    max_j w_ij = 1 / z_i                            (the arg max has l = 0, e = 1)
    w_i0 = e_i0 / z_i                               (the mass on key 0, the sink)
    o_i = (sum_j e_ij v_j) / z_i,  out_i = o_i W_O  (A V and the output projection in the tile)

Keeping c apart from the scores and subtracting the row maximum of the *unscaled* scores first
means l <= 0 and nothing overflows for any c; both terms of H_i are >= 0 (l <= 0), so the
entropy has no cancellation. Terms of s_ij constant in j are dropped by the callers (softmax
ignores them exactly). A causal mask sets e_ij = 0 for j > i. The plain path
(simlab.core.attention.attention_weights and the metrics on the full weights) is the oracle.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

# Logits per tile (per grid point): 2^22 float32 = 16 MiB. One BERT-base sequence (12 heads x
# 512 x 512 = 3.1M) fits; smaller tiles (one head) and whole points both measured slower
# (docs/performance.md, "Findings cited in the code").
TILE_ELEMENTS = 1 << 22
# exp(-1e4) == 0 in every float dtype: clamping l there keeps e * l = 0 * finite (never NaN).
L_FLOOR = -1e4


@dataclasses.dataclass(frozen=True)
class Tiling:
    """`seqs` sequences x `rows` query rows per tile; seqs > 1 only when rows == length."""

    batch: int
    length: int
    seqs: int
    rows: int

    @property
    def groups(self) -> int:
        """Tiles along the batch (outer loop)."""
        return self.batch // self.seqs

    @property
    def blocks(self) -> int:
        """Tiles along the query positions of a sequence (inner loop)."""
        return self.length // self.rows


def _largest_divisor(n: int, at_most: int) -> int:
    return max(d for d in range(1, max(1, min(n, at_most)) + 1) if n % d == 0)


def choose_tiling(
    batch: int, length: int, heads: int, keys: int, budget: int | None = None
) -> Tiling:
    """Whole sequences per tile while heads x length x keys fits `budget` logits (default
    TILE_ELEMENTS), else blocks of query rows of one sequence (the largest divisor of length
    that fits; at least 1 row)."""
    budget = TILE_ELEMENTS if budget is None else budget
    per_seq = heads * length * keys
    if per_seq <= budget:
        return Tiling(batch, length, _largest_divisor(batch, budget // per_seq), length)
    return Tiling(batch, length, 1, _largest_divisor(length, budget // (heads * keys)))


class RowStats(NamedTuple):
    """What the tiled attention returns: out = (A V) W_O (B, T, D), per-row entropy H_i in nats,
    max_j w_ij and the weight w_i0 on key position 0, each (B, H, T)."""

    out: jax.Array
    entropy: jax.Array
    max: jax.Array
    sink: jax.Array


def softmax_stats(s_NHRS, factor, mask_RS=None):
    """(e, z, H) of one tile from unscaled scores s (..., R, S) and the scalar factor c >= 0:
    e = exp(c (s - max_j s)) (0 where masked), z = sum_j e, H = log z - sum_j e l / z."""
    if mask_RS is not None:
        s_NHRS = jnp.where(mask_RS, s_NHRS, -jnp.inf)
    m = jnp.max(s_NHRS, axis=-1, keepdims=True)
    d = s_NHRS - m  # <= 0; -inf where masked
    l_NHRS = (
        jnp.maximum(factor * d, L_FLOOR)
        if mask_RS is None
        else jnp.where(mask_RS, jnp.maximum(factor * jnp.where(mask_RS, d, 0.0), L_FLOOR), L_FLOOR)
    )
    e_NHRS = jnp.exp(l_NHRS)
    z_NHR = jnp.sum(e_NHRS, axis=-1)
    el_NHR = jnp.sum(e_NHRS * l_NHRS, axis=-1)
    return e_NHRS, z_NHR, jnp.log(z_NHR) - el_NHR / z_NHR


def attend(
    tiling: Tiling,
    score_fn: Callable,
    factor,
    query_xs,
    key_xs,
    v_BHSK,
    wo_HKD,
    causal: bool,
    kept: Callable | None = None,
) -> RowStats:
    """Tiled softmax, statistics and (A V) W_O.

    query_xs: pytree of arrays with leading dims (B, Q, ...) (Q = tiling.blocks: one entry per
    block of query rows), key_xs: pytree with leading dim B, v_BHSK: the values (B, H, S, K).
    score_fn(query tile, key group) -> unscaled scores (seqs, H, rows, S) of the tile.
    kept(rows i (R,)) -> the attended keys, (R, S) or per head (H, R, S) bool, the causal mask
    included (simlab.core.sinks.attended); None: the causal mask alone."""
    t, n, q = tiling, tiling.seqs, tiling.blocks
    keys = v_BHSK.shape[2]

    def group(g):  # (B, ...) -> (G, seqs, ...)
        return jax.tree.map(lambda a: a.reshape((t.groups, n) + a.shape[1:]), g)

    def block(qx, kx, v_GSK, b):
        # Tiles are handled as (seqs * H, R, S): a size-1 dimension in a tile slows XLA:CPU's
        # softmax reductions (docs/performance.md, "Engine changes", item 2).
        s_GRS = score_fn(qx, kx)
        s_GRS = s_GRS.reshape((-1,) + s_GRS.shape[-2:])
        mask, i = None, b * t.rows + jnp.arange(t.rows)
        if kept is not None:
            mask = kept(i)
            if mask is not None and mask.ndim == 3:  # per head: (seqs * H, R, S), as the scores
                mask = jnp.tile(mask, (n, 1, 1))
        elif causal:
            mask = jnp.arange(keys)[None, :] <= i[:, None]
        e, z, h = softmax_stats(s_GRS, factor, mask)
        o_GRK = jnp.einsum("grs,gsk->grk", e, v_GSK.astype(e.dtype)) / z[..., None]
        heads, d_head = wo_HKD.shape[:2]
        o_NRF = jnp.swapaxes(o_GRK.reshape(n, heads, t.rows, d_head), 1, 2).reshape(
            n * t.rows, heads * d_head
        )
        out = (o_NRF.astype(wo_HKD.dtype) @ wo_HKD.reshape(heads * d_head, -1)).reshape(
            n, t.rows, -1
        )
        rows = (n, heads, t.rows)
        return out, h.reshape(rows), (1.0 / z).reshape(rows), (e[..., 0] / z).reshape(rows)

    def one_group(xs):
        qx, kx, v_NHSK = xs
        v_NHSK = v_NHSK.reshape((-1,) + v_NHSK.shape[2:])
        if q == 1:
            return block(jax.tree.map(lambda a: a[:, 0], qx), kx, v_NHSK, 0)
        qx = jax.tree.map(lambda a: jnp.swapaxes(a, 0, 1), qx)  # (Q, seqs, ...)
        out, *rs = jax.lax.map(lambda a: block(a[0], kx, v_NHSK, a[1]), (qx, jnp.arange(q)))
        # (Q, seqs, R, D) -> (seqs, Q * R, D); (Q, seqs, H, R) -> (seqs, H, Q * R)
        out = jnp.swapaxes(out, 0, 1).reshape(n, t.length, -1)
        return (out, *(jnp.moveaxis(a, 0, 2).reshape(n, a.shape[2], t.length) for a in rs))

    xs = (group(query_xs), group(key_xs), group(v_BHSK))
    if t.groups == 1:
        return RowStats(*one_group(jax.tree.map(lambda a: a[0], xs)))
    return RowStats(*(a.reshape((t.batch,) + a.shape[2:]) for a in jax.lax.map(one_group, xs)))


def by_tokens(tiling: Tiling, fn: Callable, xs):
    """fn applied tile by tile to token-wise work: xs a pytree of (B, T, ...) arrays, fn maps a
    tile of seqs x rows tokens, flattened to (seqs * rows, ...), to an array of that shape (or
    a pytree of them).
    The MLP of a BERT-base sequence (512 x 3072 hidden) stays in cache this way
    (docs/performance.md, "Engine changes", item 3)."""
    t = tiling
    if t.groups == 1 and t.blocks == 1:
        return fn(xs)
    tiled_xs = jax.tree.map(
        lambda a: a.reshape((t.groups * t.blocks, t.seqs * t.rows) + a.shape[2:]), xs
    )
    out = jax.lax.map(fn, tiled_xs)
    return jax.tree.map(lambda o: o.reshape((t.batch, t.length) + o.shape[2:]), out)
