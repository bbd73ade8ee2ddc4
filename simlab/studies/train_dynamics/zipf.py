"""The unigram laws of the synthetic corpora and the fit of a Zipf exponent (docs/training.md,
"Corpora").

  "zipf":    pi_k proportional to (k + 1)^-s, k = 0..V-1 (long-tailed, as word-level text);
  "uniform": pi_k = 1 / V.
The token id is the frequency rank, so a fitted exponent needs no sorting.
"""

from __future__ import annotations

import numpy as np


def unigram(law: str, vocab: int, s: float) -> np.ndarray:
    """pi (float64, sums to 1) of law "zipf" (exponent s) or "uniform"."""
    if law == "uniform":
        return np.full(vocab, 1.0 / vocab)
    w = np.arange(1, vocab + 1, dtype=np.float64) ** -s
    return w / w.sum()


def entropy(pi: np.ndarray) -> float:
    """H(pi) = -sum_k pi_k log pi_k in nats (0 log 0 = 0)."""
    p = pi[pi > 0]
    return float(-np.sum(p * np.log(p)))


def cdf(pi: np.ndarray) -> np.ndarray:
    """F_k = pi_0 + ... + pi_k with F_{V-1} = 1 exactly."""
    f = np.cumsum(pi)
    f[-1] = 1.0
    return f


def draw(pi: np.ndarray, shape, rng: np.random.Generator) -> np.ndarray:
    """iid ids from pi (inverse CDF of uniforms), int32."""
    f = cdf(pi)
    return np.minimum(np.searchsorted(f, rng.random(shape), side="right"), len(f) - 1).astype(
        np.int32
    )


def fit_zipf_exponent(ids: np.ndarray, vocab: int) -> float:
    """Maximum-likelihood s of P(k) proportional to (k + 1)^-s on ids (k = the id, which is the
    frequency rank by construction): solves E_s[log(k + 1)] = mean log(ids + 1) by bisection
    (the left side decreases in s)."""
    logr = np.log(np.arange(1, vocab + 1, dtype=np.float64))
    target = float(np.mean(logr[np.asarray(ids).ravel()]))

    def mean_log(s):
        w = np.exp(-s * logr - np.max(-s * logr))
        return float(np.sum(w * logr) / np.sum(w))

    lo, hi = -5.0, 10.0
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mean_log(mid) > target else (lo, mid)
    return (lo + hi) / 2
