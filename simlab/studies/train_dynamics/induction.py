"""Induction: a random segment repeated until the context is full (docs/training.md,
"Corpora").

A sequence is x_t = s_(t mod h), t = 0..L-1, with s iid from the unigram law pi and the
period h ~ U{period_min..period_max} drawn per sequence: the first h tokens are fresh, every
later token copies the one h positions back. Every token has law pi. Predicting a copy needs
the context (which earlier token to copy), and the period is not known in advance, so a
model must find it (an induction head: attend to the token after an earlier occurrence of the
current one).

Loss floor: the Bayes predictive over the periods. Given x_<t the posterior weight of
period h is proportional to its prior times the likelihood of the prefix,
    log P(x_<t | h) = sum_{u < min(t, h)} log pi(x_u) + (0 if x_u = x_(u-h) for all
                      h <= u < t, else -inf),
and -log p(x_t | x_<t) = -(LSE_h log P(x_<=t | h) - LSE_h log P(x_<t | h)). Its mean over
targets t = 1..L-1 is averaged over a fixed Monte Carlo sample of `FLOOR_SEQS` sequences
(from the corpus seed; the standard error is reported).
Best context-free loss (current token and position only): H(pi), because for h >= 2 the next
token s_((t+1) mod h) and the current one s_(t mod h) are different draws of s.
"""

from __future__ import annotations

import numpy as np

from simlab.studies.train_dynamics import zipf

FLOOR_SEQS = 2048


def sample_with_periods(
    spec, n_seqs: int, length: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """((n_seqs, length) int32 ids, (n_seqs,) periods h)."""
    h = rng.integers(spec.period_min, spec.period_max + 1, size=n_seqs)
    s = zipf.draw(spec.unigram(), (n_seqs, length), rng)
    t = np.arange(length)
    return np.take_along_axis(s, t[None, :] % h[:, None], 1), h


def sample(spec, n_seqs: int, length: int, rng: np.random.Generator) -> np.ndarray:
    return sample_with_periods(spec, n_seqs, length, rng)[0]


def bayes_losses(spec, ids: np.ndarray) -> np.ndarray:
    """(n, L - 1) -log p(x_t | x_<t) of the Bayes predictive, targets t = 1..L-1."""
    n, length = ids.shape
    logpi = np.log(spec.unigram())[ids]
    cum = np.concatenate([np.zeros((n, 1)), np.cumsum(logpi, 1)], 1)  # sum_{u<t}, t = 0..L
    t = np.arange(length + 1)
    lls = []
    for h in range(spec.period_min, spec.period_max + 1):
        miss = np.zeros((n, length))
        if h < length:
            miss[:, h:] = ids[:, h:] != ids[:, :-h]
        bad = np.concatenate([np.zeros((n, 1)), np.cumsum(miss, 1)], 1) > 0  # any u < t
        ll = cum[:, np.minimum(t, h)]
        lls.append(np.where(bad, -np.inf, ll))
    ll_HNT = np.stack(lls)
    top = np.max(ll_HNT, 0)
    lse = top + np.log(np.sum(np.exp(ll_HNT - top), 0))  # (n, L + 1), the prior cancels
    return -(lse[:, 2:] - lse[:, 1:-1])


def floors(spec, length: int) -> dict[str, float]:
    rng = np.random.default_rng([spec.seed, 0xF1002])
    per_seq = np.mean(bayes_losses(spec, sample(spec, FLOOR_SEQS, length, rng)), 1)
    return {
        "loss_floor": float(np.mean(per_seq)),
        "loss_floor_se": float(np.std(per_seq, ddof=1) / np.sqrt(FLOOR_SEQS)),
        "context_free_loss": zipf.entropy(spec.unigram()),
    }
