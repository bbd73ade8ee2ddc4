"""Synthetic token corpora from a seed: a Markov (bigram) chain with a chosen unigram law.

The chain lives on the quantile scale. Token i owns the interval I_i = [F_{i-1}, F_i) of
[0, 1), |I_i| = pi_i (the unigram law, F its CDF). One step from token i:
  x ~ U(I_i);  k ~ U{0..K-1};  y = T_k(x);  with probability `noise` y ~ U[0, 1) instead;
  next token = the j with y in I_j.
Each T_k is an interval exchange: [0, 1) is cut into M = vocab equal pieces, permuted by a
random permutation tau_k, T_k(x) = (tau_k[floor(M x)] + frac(M x)) / M. Every T_k preserves
the Lebesgue measure, so if x ~ U[0, 1) then y ~ U[0, 1): pi is *exactly* the stationary law,
and sequences start from pi, so every position has unigram law pi. The maps tau_k depend on
the seed only, so the Zipf and the uniform corpora share the same bigram map on the quantile
scale (the "same Markov structure"); they differ only in pi:
  "zipf":    pi_k proportional to (k + 1)^-s, k = 0..V-1 (long-tailed, as natural text);
  "uniform": pi_k = 1 / V.
With the uniform law each token has at most K successors (plus the noise), so
H(next | current) ~ log K + noise * log V, far below the unigram entropy log V.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from simlab.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class CorpusSpec:
    kind: str = "zipf"  # "zipf" | "uniform" unigram law
    vocab: int = 512
    zipf_s: float = 1.1  # Zipf exponent (kind = "zipf")
    branches: int = 4  # K interval-exchange maps (successors per token)
    noise: float = 0.1  # probability of an independent draw from pi
    seed: int = 0  # draws the maps tau_k

    def validate(self) -> CorpusSpec:
        if self.kind not in ("zipf", "uniform"):
            raise ConfigError(f"corpus.kind: {self.kind!r} is not one of 'zipf', 'uniform'")
        if not 2 <= self.vocab <= 1 << 20:
            raise ConfigError(f"corpus.vocab: {self.vocab} is outside [2, 1048576]")
        if not self.zipf_s > 0:
            raise ConfigError(f"corpus.zipf_s: {self.zipf_s} must be > 0")
        if not 1 <= self.branches <= 64:
            raise ConfigError(f"corpus.branches: {self.branches} is outside [1, 64]")
        if not 0.0 <= self.noise <= 1.0:
            raise ConfigError(f"corpus.noise: {self.noise} is outside [0, 1]")
        return self


def unigram(spec: CorpusSpec) -> np.ndarray:
    """pi (float64, sums to 1)."""
    if spec.kind == "uniform":
        return np.full(spec.vocab, 1.0 / spec.vocab)
    w = np.arange(1, spec.vocab + 1, dtype=np.float64) ** -spec.zipf_s
    return w / w.sum()


def permutations(spec: CorpusSpec) -> np.ndarray:
    """tau: (K, M) random permutations of the M = vocab pieces (from spec.seed only)."""
    rng = np.random.default_rng([spec.seed, 0x5EED])
    return np.stack([rng.permutation(spec.vocab) for _ in range(spec.branches)])


def _cdf(pi: np.ndarray) -> np.ndarray:
    f = np.cumsum(pi)
    f[-1] = 1.0
    return f


def _token(f: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The j with y in [F_{j-1}, F_j)."""
    return np.minimum(np.searchsorted(f, y, side="right"), len(f) - 1)


def _exchange(tau_k: np.ndarray, x: np.ndarray) -> np.ndarray:
    """T_k(x) = (tau_k[floor(M x)] + frac(M x)) / M (also works with tau^-1 for T^-1)."""
    m = len(tau_k)
    mx = x * m
    piece = np.minimum(np.floor(mx).astype(np.int64), m - 1)
    return (tau_k[piece] + (mx - piece)) / m


def sample(spec: CorpusSpec, n_seqs: int, length: int, rng: np.random.Generator) -> np.ndarray:
    """(n_seqs, length) int32 token ids: stationary Markov chains (see the module docstring)."""
    pi, tau = unigram(spec), permutations(spec)
    f = _cdf(pi)
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


def transition_matrix(spec: CorpusSpec) -> np.ndarray:
    """P[i, j] = P(next = j | current = i), exact: for each map T_k the joint mass
    |I_i cap T_k^-1(I_j)| is summed over the atoms of the partition of [0, 1) cut at the F_i,
    the piece boundaries and the preimages T_k^-1(F_j)."""
    pi, tau = unigram(spec), permutations(spec)
    f, m = _cdf(pi), spec.vocab
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


def entropies(spec: CorpusSpec) -> dict[str, float]:
    """Unigram entropy H(X) and the exact bigram conditional entropy H(X_t+1 | X_t) in nats;
    the latter is the lowest next-token loss any model can reach on this (first-order
    Markov) corpus."""
    pi, p = unigram(spec), transition_matrix(spec)
    h1 = float(-np.sum(pi * np.log(pi)))
    logp = np.log(np.where(p > 0, p, 1.0))
    return {"unigram_entropy": h1, "conditional_entropy": float(-np.sum(pi[:, None] * p * logp))}


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
