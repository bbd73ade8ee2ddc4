"""Associative recall: key-value pairs, then queries whose answer is only in the context
(docs/training.md, "Corpora").

A sequence of length L is the layout
    k_1 v_1 k_2 v_2 ... k_n v_n | q_1 a_1 q_2 a_2 ...        (cut at L tokens)
with n = `pairs`. Keys k_j and values v_j are iid from the unigram law pi; each query is
q_i = k_J with J ~ U{1..n} (iid over queries), and its answer a_i = v_j* with
j* = max{j : k_j = q_i} (the latest pair with that key, so the answer is a function of the
context even when a key repeats). Every token then has law pi exactly: a uniformly chosen
member of iid pi draws is pi-distributed, and v_j* is independent of the keys.

Loss floor (a perfect model), per target position:
  key or value      H(pi)                    (iid);
  query             E[-log(c / n)]           (the query law given the context is the
                                              empirical law of the n keys; c = the count of
                                              the query among them, c - 1 ~ Bin(n - 1, pi_w)
                                              given the query w, exact sum below);
  answer            0                        (a function of the context).
Best context-free loss (current token and position only): H(pi) at every position, since the
next token is independent of the current one given the position (a value is independent of
its key, a query of the previous answer).
"""

from __future__ import annotations

import math

import numpy as np

from simlab.studies.train_dynamics import zipf

KEY, VALUE, QUERY, ANSWER = 0, 1, 2, 3


def roles(pairs: int, length: int) -> np.ndarray:
    """(length,) role of each position: KEY, VALUE (first 2 n), then QUERY, ANSWER alternating."""
    t = np.arange(length)
    return np.where(t < 2 * pairs, t % 2, QUERY + (t - 2 * pairs) % 2)


def sample(spec, n_seqs: int, length: int, rng: np.random.Generator) -> np.ndarray:
    """(n_seqs, length) int32 ids (the layout of the module docstring)."""
    pi, n = spec.unigram(), spec.pairs
    m = (length - 2 * n + 1) // 2  # queries (the last answer may be cut)
    keys = zipf.draw(pi, (n_seqs, n), rng)
    values = zipf.draw(pi, (n_seqs, n), rng)
    j = rng.integers(n, size=(n_seqs, m))
    q = np.take_along_axis(keys, j, 1)
    match_BMN = keys[:, None, :] == q[:, :, None]
    latest = n - 1 - np.argmax(match_BMN[:, :, ::-1], -1)
    a = np.take_along_axis(values, latest, 1)
    ids = np.empty((n_seqs, 2 * n + 2 * m), np.int32)
    ids[:, 0 : 2 * n : 2], ids[:, 1 : 2 * n : 2] = keys, values
    ids[:, 2 * n :: 2], ids[:, 2 * n + 1 :: 2] = q, a
    return ids[:, :length]


def query_loss(pi: np.ndarray, n: int) -> float:
    """E[-log(c / n)], c - 1 ~ Bin(n - 1, pi_w) for the query w ~ pi (exact sum)."""
    b = np.arange(n)
    logc = np.array([math.lgamma(n) - math.lgamma(k + 1) - math.lgamma(n - k) for k in b])
    p = np.clip(pi[:, None], 1e-300, 1.0)
    logpmf = logc + b * np.log(p) + (n - 1 - b) * np.log1p(-np.minimum(p, 1 - 1e-16))
    return float(np.sum(pi[:, None] * np.exp(logpmf) * -np.log((b + 1) / n)))


def position_losses(spec, length: int) -> np.ndarray:
    """(length - 1,) the floor's expected loss at targets t = 1..L-1 (module docstring)."""
    pi = spec.unigram()
    per_role = np.array([zipf.entropy(pi), zipf.entropy(pi), query_loss(pi, spec.pairs), 0.0])
    return per_role[roles(spec.pairs, length)[1:]]


def floors(spec, length: int) -> dict[str, float]:
    return {
        "loss_floor": float(np.mean(position_losses(spec, length))),
        "context_free_loss": zipf.entropy(spec.unigram()),
    }
