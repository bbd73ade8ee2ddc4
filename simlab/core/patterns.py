"""Attention patterns: the block's softmax, or a clamp whose weights replace the softmax's with
everything else of the block (weights, inputs, V, W_O, residuals, norms, MLP) left as it is, so
that the sharpness of the attention and its sharing across queries can be set independently of
the input (`BlockSpec.pattern`; docs/instruments.md, "Attention-pattern clamps"). The patterns
are one registry, PATTERNS (a `Pattern` each), read live; a new clamp is one
`register_pattern` call (docs/extending.md).

Row i of a sequence attends to n_i keys (n_i = S, or i + 1 under the causal mask). A clamped row
puts the weight p_i on one target key t_i and o_i on each of the n_i - 1 others:

    p_i = e^beta / (e^beta + n_i - 1),      o_i = (1 - p_i) / (n_i - 1) = 1 / (e^beta + n_i - 1)

with beta = pattern_beta >= 0 (a traced knob) for a pattern that `sharpens`, and the target
`Pattern.target` (t, s, causal) -> (t_i), attended under the causal mask (t_i <= i):
    "token":   t_i = i   (each query its own key: a token-specific pattern)
    "shared":  t_i = 0   (the first key of the sequence for every query: one shared pattern)
    "other":   t_i = i - 1 for i >= 1, t_0 = S - 1   (the previous key, cyclically: like
               "token" every key is the target of exactly one query, but never the query's
               own; under the causal mask t_0 = 0, the only key row 0 attends)
    "uniform": no target, beta = 0  (p_i = o_i = 1 / n_i: 1/S per key, 1/(i+1) under the mask)
The row entropy and maximum depend on beta and n_i only, never on the target: at equal beta
every sharpening clamp (shared, token, other) has exactly the same rows; they differ only in
which key each query copies.
With r_i = (n_i - 1) e^-beta (computed so that nothing overflows for any finite beta):

    p_i = 1 / (1 + r_i),   o_i = e^-beta / (1 + r_i),
    H_i = -p_i log p_i - (n_i - 1) o_i log o_i = log(1 + r_i) + (n_i - 1) o_i beta   (nats),
    max_j w_ij = p_i   (p_i >= o_i for beta >= 0).

A V from the closed form, in O(T D) per sequence, never a (B, H, T, S) array: the pattern is the
same in every head, so with vo_j = sum_h v_jh W_O,h (D) and C_i = sum_{j attended} vo_j (a sum
over the sequence, or a cumulative sum under the causal mask),

    out_i = o_i C_i + (p_i - o_i) vo_{t_i}       (then + b_O; no second term without a target);
for "other" vo_{t_i} is vo rolled by one key along the sequence.

`weights` builds the full (B, H, T, S) weights explicitly: the plain path, the oracle.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from simlab.core import attention
from simlab.registry import BUILTIN, Registry, require


@dataclasses.dataclass(frozen=True)
class Pattern:
    """One attention pattern (a value of `BlockSpec.pattern`).

    formula: the weights of row i, stated (docs, messages).
    reads_logits: the weights are the block's own softmax of its logits (temperature acts; the
    fields below are unused); False: a clamp with the weights of the module docstring.
    target: (T, S, causal) -> (T,) integer array, the target key t_i of each query row, in
    [0, S) and attended under the causal mask (t_i <= i); None: no target (every attended key
    weighs 1 / n_i).
    sharpens: the clamp reads the knob pattern_beta (needs a target); False: beta = 0.
    keeps: for a pattern that reads the logits, (i (R, 1), j (1, S), causal) -> (R, S) bool, the
    keys its softmax keeps besides the causal mask (simlab.core.sinks.attended); None: all."""

    name: str
    formula: str
    reads_logits: bool = False
    target: Callable[[int, int, bool], np.ndarray] | None = None
    sharpens: bool = False
    keeps: Callable | None = None


def _check_pattern(p: Pattern) -> None:
    require(
        "attention pattern",
        p.name,
        {
            "formula": (
                isinstance(p.formula, str) and bool(p.formula.strip()),
                "must be a non-empty string",
            ),
            "reads_logits": (isinstance(p.reads_logits, bool), "must be a bool"),
            "target": (
                p.target is None or (callable(p.target) and not p.reads_logits),
                "must be None or callable (t, s, causal) -> (t,) target keys, and None when "
                "reads_logits",
            ),
            "sharpens": (
                isinstance(p.sharpens, bool) and (not p.sharpens or p.target is not None),
                "must be a bool, and False without a target",
            ),
            "keeps": (
                p.keeps is None or (callable(p.keeps) and p.reads_logits),
                "must be None or callable (i, j, causal) -> kept keys, and None for a clamp",
            ),
        },
    )


# name -> Pattern, read live (a plugin's patterns appear here once it is imported)
PATTERNS: Registry[Pattern] = Registry("attention pattern", Pattern, _check_pattern)


def register_pattern(pattern: Pattern) -> Pattern:
    """Add an attention pattern (validated; a duplicate name is an error): docs/extending.md."""
    return PATTERNS.register(pattern)


def _own_key(t: int, s: int, causal: bool) -> np.ndarray:
    return np.arange(t)


def _key0(t: int, s: int, causal: bool) -> np.ndarray:
    return np.zeros(t, int)


def _previous_key(t: int, s: int, causal: bool) -> np.ndarray:
    """t_i = i - 1; t_0 = S - 1 (a cyclic shift), or 0 under the causal mask."""
    target = np.arange(t) - 1
    target[0] = 0 if causal else s - 1
    return target


for _pattern in (
    Pattern("softmax", "w_ij = softmax_j(q'_i . k'_j / (sqrt(K) temperature))", reads_logits=True),
    Pattern("uniform", "w_ij = 1 / n_i on every attended key"),
    Pattern(
        "shared",
        "p_i on key 0 for every query, o_i on each other key: one shared distribution",
        target=_key0,
        sharpens=True,
    ),
    Pattern(
        "token",
        "p_i on the query's own key j = i, o_i on each other key: a token-specific pattern",
        target=_own_key,
        sharpens=True,
    ),
    Pattern(
        "other",
        "p_i on the previous key j = i - 1 (key S - 1 for i = 0; 0 under the causal mask), o_i "
        "on each other key: a token-specific pattern that copies another token",
        target=_previous_key,
        sharpens=True,
    ),
):
    PATTERNS.register(_pattern, source=BUILTIN)


def beta(pattern: str, knobs: Mapping[str, jax.Array]) -> jax.Array:
    """The sharpness beta of a clamped pattern: the knob pattern_beta if it `sharpens`, else 0."""
    b = knobs["pattern_beta"]
    return b if PATTERNS[pattern].sharpens else jnp.zeros_like(b)


def n_keys(t: int, s: int, causal: bool, dtype) -> jax.Array:
    """Attended keys per query row (T,): S, or min(i + 1, S) under the causal mask."""
    n = jnp.minimum(jnp.arange(1, t + 1), s) if causal else jnp.full((t,), s)
    return n.astype(dtype)


def row_stats(beta_, n_T):
    """(p, o, H): the target's weight, each other key's weight and the row entropy (nats) of
    rows with n_T attended keys at sharpness beta (the module docstring's closed forms)."""
    e = jnp.exp(-beta_)
    r = (n_T - 1.0) * e
    p = 1.0 / (1.0 + r)
    o = e / (1.0 + r)
    return p, o, jnp.log1p(r) + (n_T - 1.0) * o * beta_


def targets(pattern: str, t: int, s: int, causal: bool) -> jax.Array:
    """(T, S) boolean: True at the target key t_i of row i (all False without a target)."""
    target = PATTERNS[pattern].target
    if target is None:
        return jnp.zeros((t, s), bool)
    return jnp.arange(s)[None, :] == target(t, s, causal)[:, None]


def weights(pattern: str, beta_, batch: int, heads: int, t: int, s: int, causal: bool, dtype):
    """The full weights (B, H, T, S) of a clamped pattern (the plain path's oracle): p_i at the
    target, o_i at every other attended key, 0 where masked (beta taken as 0 unless the pattern
    `sharpens`)."""
    beta_ = beta_ if PATTERNS[pattern].sharpens else jnp.zeros_like(beta_)
    p, o, _ = row_stats(beta_, n_keys(t, s, causal, dtype))
    w_TS = jnp.where(targets(pattern, t, s, causal), p[:, None], o[:, None])
    if causal:
        w_TS = jnp.where(attention.causal_mask(t, s), w_TS, 0.0)
    return jnp.broadcast_to(w_TS, (batch, heads, t, s))


def attend(pattern: str, beta_, v_BSHK, wo_HKD, causal: bool):
    """(out (B, T, D) without b_O, row entropy (T,), row max (T,)) of a clamped pattern from
    the closed form: out_i = o_i C_i + (p_i - o_i) vo_{t_i} (the module docstring; beta taken
    as 0 unless the pattern `sharpens`)."""
    entry = PATTERNS[pattern]
    beta_ = beta_ if entry.sharpens else jnp.zeros_like(beta_)
    vo_BSD = jnp.einsum("bshk,hkd->bsd", v_BSHK, wo_HKD)
    t = s = vo_BSD.shape[1]
    p, o, h = row_stats(beta_, n_keys(t, s, causal, vo_BSD.dtype))
    c_BTD = jnp.cumsum(vo_BSD, axis=1) if causal else jnp.sum(vo_BSD, axis=1, keepdims=True)
    out = o[:, None] * c_BTD
    if entry.target is not None:
        out = out + (p - o)[:, None] * take_keys(vo_BSD, entry.target(t, s, causal))
    return out, h, p


def key0_weight(pattern: str, beta_, t: int, s: int, causal: bool) -> jax.Array:
    """(T,): each row's weight w_i0 on key position 0 (the sink mass), p_i where the target is
    key 0 (t_i = 0) and o_i otherwise (beta taken as 0 unless the pattern `sharpens`)."""
    entry = PATTERNS[pattern]
    beta_ = beta_ if entry.sharpens else jnp.zeros_like(beta_)
    p, o, _ = row_stats(beta_, n_keys(t, s, causal, jnp.result_type(beta_)))
    if entry.target is None:
        return o
    return jnp.where(jnp.asarray(entry.target(t, s, causal)) == 0, p, o)


def take_keys(x_BSD, t_T, max_runs: int = 8):
    """x_BSD[:, t_T] (B, T, D) for static target keys t_T (T,), without a gather where the
    targets form few runs of consecutive keys: one slice per run, concatenated (the same key
    for every query: one row, broadcast over T). More than max_runs runs: a gather."""
    t_T = np.asarray(t_T)
    if np.all(t_T == t_T[0]):
        return x_BSD[:, t_T[0] : t_T[0] + 1]
    runs = np.split(t_T, np.flatnonzero(np.diff(t_T) != 1) + 1)
    if len(runs) > max_runs:
        return jnp.take(x_BSD, t_T, axis=1)
    pieces = [x_BSD[:, r[0] : r[0] + len(r)] for r in runs]
    return pieces[0] if len(pieces) == 1 else jnp.concatenate(pieces, axis=1)
