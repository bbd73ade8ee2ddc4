"""A first-order Markov (bigram) chain with a chosen unigram law: needs no attention
(docs/training.md, "Corpora").

The chain lives on the quantile scale. Token i owns the interval I_i = [F_{i-1}, F_i) of
[0, 1), |I_i| = pi_i (the unigram law, F its CDF). One step from token i:
  x ~ U(I_i);  k ~ U{0..K-1};  y = T_k(x);  with probability `noise` y ~ U[0, 1) instead;
  next token = the j with y in I_j.
Each T_k is an interval exchange: [0, 1) is cut into M = vocab equal pieces, permuted by a
random permutation tau_k, T_k(x) = (tau_k[floor(M x)] + frac(M x)) / M. Every T_k preserves
the Lebesgue measure, so if x ~ U[0, 1) then y ~ U[0, 1): pi is *exactly* the stationary law,
and sequences start from pi, so every position has unigram law pi. The maps tau_k depend on
the seed only, so the Zipf and the uniform chains share the same bigram map on the quantile
scale (the "same Markov structure"); they differ only in pi.
With the uniform law each token has at most K successors (plus the noise), so
H(next | current) ~ log K + noise * log V, far below the unigram entropy log V.
"""

from __future__ import annotations

import numpy as np

from simlab.studies.train_dynamics import zipf


def permutations(spec) -> np.ndarray:
    """tau: (K, M) random permutations of the M = vocab pieces (from spec.seed only)."""
    rng = np.random.default_rng([spec.seed, 0x5EED])
    return np.stack([rng.permutation(spec.vocab) for _ in range(spec.branches)])


def _token(f: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The j with y in [F_{j-1}, F_j)."""
    return np.minimum(np.searchsorted(f, y, side="right"), len(f) - 1)


def _exchange(tau_k: np.ndarray, x: np.ndarray) -> np.ndarray:
    """T_k(x) = (tau_k[floor(M x)] + frac(M x)) / M (also works with tau^-1 for T^-1)."""
    m = len(tau_k)
    mx = x * m
    piece = np.minimum(np.floor(mx).astype(np.int64), m - 1)
    return (tau_k[piece] + (mx - piece)) / m


def sample(spec, n_seqs: int, length: int, rng: np.random.Generator) -> np.ndarray:
    """(n_seqs, length) int32 token ids: stationary Markov chains (see the module docstring)."""
    pi, tau = spec.unigram(), permutations(spec)
    f = zipf.cdf(pi)
    lo = f - pi
    ids = np.empty((n_seqs, length), np.int32)
    ids[:, 0] = _token(f, rng.random(n_seqs))
    for t in range(1, length):
        i = ids[:, t - 1]
        x = lo[i] + rng.random(n_seqs) * pi[i]
        k = rng.integers(spec.branches, size=n_seqs)
        m = spec.vocab
        piece = np.minimum(np.floor(x * m).astype(np.int64), m - 1)
        y = (tau[k, piece] + (x * m - piece)) / m
        y = np.where(rng.random(n_seqs) < spec.noise, rng.random(n_seqs), y)
        ids[:, t] = _token(f, y)
    return ids


def transition_matrix(spec) -> np.ndarray:
    """P[i, j] = P(next = j | current = i), exact: for each map T_k the joint mass
    |I_i cap T_k^-1(I_j)| is summed over the atoms of the partition of [0, 1) cut at the F_i,
    the piece boundaries and the preimages T_k^-1(F_j)."""
    pi, tau = spec.unigram(), permutations(spec)
    f, m = zipf.cdf(pi), spec.vocab
    joint = np.zeros((spec.vocab, spec.vocab))
    for tau_k in tau:
        inv = np.argsort(tau_k)
        cuts = np.concatenate([[0.0, 1.0], f, np.arange(m + 1) / m, _exchange(inv, f[:-1])])
        cuts = np.unique(np.clip(cuts, 0.0, 1.0))
        length = np.diff(cuts)
        mid = cuts[:-1] + length / 2
        np.add.at(joint, (_token(f, mid), _token(f, _exchange(tau_k, mid))), length)
    cond = joint / spec.branches / pi[:, None]
    return (1.0 - spec.noise) * cond + spec.noise * pi[None, :]


def conditional_entropy(spec) -> float:
    """The exact H(X_t+1 | X_t) in nats (stationary chain)."""
    pi, p = spec.unigram(), transition_matrix(spec)
    logp = np.log(np.where(p > 0, p, 1.0))
    return float(-np.sum(pi[:, None] * p * logp))


def floors(spec, length: int) -> dict[str, float]:
    """The chain is first order and stationary: the loss floor (what a perfect model reaches)
    and the best context-free loss (current token and position only) are both the exact
    H(X_t+1 | X_t), at every position."""
    h = conditional_entropy(spec)
    return {"loss_floor": h, "context_free_loss": h}
