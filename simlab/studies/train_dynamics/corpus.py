"""The corpora of the training study, one registry (`CORPORA`): name -> (task, unigram law)
(docs/training.md, "Corpora").

Tasks, each a module with sample(spec, n, length, rng) and floors(spec, length):
  markov     a first-order Markov chain (needs no attention),
  recall     key-value pairs, then queries answered only by the context,
  induction  a random segment repeated with a random period,
  text       bytes of the standard library's docstrings and license (real text).
The synthetic tasks come in a long-tailed ("zipf": pi_k proportional to (k + 1)^-s) and a
"uniform" variant with the same context structure: all draws are made the same way, only
the unigram law differs. Everything derives from the seed; nothing is downloaded.

floors(spec, length) gives, in nats per target token (targets 1..L-1 of an L-token sequence):
  loss_floor         what a perfect model reaches (None for text: unknown),
  context_free_loss  the best loss from the current token and its position alone (the
                     bigram loss), the bar a model must clear to show that it uses attention,
  unigram_entropy    H(pi).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from simlab.errors import ConfigError
from simlab.studies.train_dynamics import induction, markov, recall, text, zipf

TASKS = {"markov": markov, "recall": recall, "induction": induction, "text": text}

# name -> (task, unigram law)
CORPORA: dict[str, tuple[str, str]] = {
    "zipf": ("markov", "zipf"),
    "uniform": ("markov", "uniform"),
    "recall_zipf": ("recall", "zipf"),
    "recall_uniform": ("recall", "uniform"),
    "induction_zipf": ("induction", "zipf"),
    "induction_uniform": ("induction", "uniform"),
    "text": ("text", "bytes"),
}


@dataclasses.dataclass(frozen=True)
class CorpusSpec:
    name: str = "zipf"  # a key of CORPORA
    vocab: int = 256
    zipf_s: float = 1.1  # Zipf exponent (law "zipf")
    branches: int = 4  # markov: K interval-exchange maps (successors per token)
    noise: float = 0.1  # markov: probability of an independent draw from pi
    pairs: int = 32  # recall: key-value pairs before the queries
    period_min: int = 16  # induction: smallest period
    period_max: int = 48  # induction: largest period
    text_heldout: float = 0.1  # text: fraction of documents held out (by sha256 of the name)
    seed: int = 0  # draws the Markov maps and the induction floor's Monte Carlo sample

    @property
    def task(self) -> str:
        return CORPORA[self.name][0]

    @property
    def law(self) -> str:
        return CORPORA[self.name][1]

    def validate(self, length: int | None = None) -> CorpusSpec:
        """Check every field (and the sequence length, if given) against its allowed range."""
        if self.name not in CORPORA:
            raise ConfigError(f"corpus: {self.name!r} is not one of {', '.join(CORPORA)}")
        if not 2 <= self.vocab <= 1 << 20:
            raise ConfigError(f"corpus.vocab: {self.vocab} is outside [2, 1048576]")
        if self.task == "text" and self.vocab != 256:
            raise ConfigError(f"corpus.vocab: {self.vocab}; the text corpus is bytes (vocab 256)")
        if not (math.isfinite(self.zipf_s) and 0 < self.zipf_s <= 10):
            raise ConfigError(f"corpus.zipf_s: {self.zipf_s} is outside (0, 10]")
        if not 1 <= self.branches <= 64:
            raise ConfigError(f"corpus.branches: {self.branches} is outside [1, 64]")
        if not 0.0 <= self.noise <= 1.0:
            raise ConfigError(f"corpus.noise: {self.noise} is outside [0, 1]")
        if not 0.0 < self.text_heldout < 1.0:
            raise ConfigError(f"corpus.text_heldout: {self.text_heldout} is outside (0, 1)")
        if not 2 <= self.period_min <= self.period_max:
            raise ConfigError(
                f"corpus.period_min: {self.period_min}; need 2 <= period_min <= period_max "
                f"({self.period_max})"
            )
        if self.pairs < 1:
            raise ConfigError(f"corpus.pairs: {self.pairs} must be >= 1")
        if length is not None:
            if self.task == "recall" and not 2 * self.pairs + 2 <= length:
                raise ConfigError(
                    f"corpus.pairs: {self.pairs} leaves no query in a sequence of {length} "
                    f"tokens; allowed: [1, {(length - 2) // 2}]"
                )
            if self.task == "induction" and not self.period_max < length:
                raise ConfigError(
                    f"corpus.period_max: {self.period_max} leaves no copy in a sequence of "
                    f"{length} tokens; allowed: [period_min, {length - 1}]"
                )
        return self

    def unigram(self) -> np.ndarray:
        """pi: the law every token has (text: the training split's byte frequencies)."""
        if self.task == "text":
            return text.unigram(self)
        return zipf.unigram(self.law, self.vocab, self.zipf_s)


def sample(
    spec: CorpusSpec, n_seqs: int, length: int, rng: np.random.Generator, split: str = "train"
) -> np.ndarray:
    """(n_seqs, length) int32 ids. split "heldout" draws the text corpus from its held-out
    documents; a synthetic corpus has no split (held-out data is a separate random stream)."""
    if spec.task == "text":
        return text.sample(spec, n_seqs, length, rng, split)
    return TASKS[spec.task].sample(spec, n_seqs, length, rng)


def floors(spec: CorpusSpec, length: int) -> dict[str, float]:
    """loss_floor, context_free_loss, unigram_entropy (module docstring) and the task's own
    (text: what it was built from, text.describe); computed once per (spec, length)."""
    return dict(_floors(spec, length))


@functools.lru_cache(maxsize=32)
def _floors(spec: CorpusSpec, length: int) -> dict[str, float]:
    out = {"unigram_entropy": zipf.entropy(spec.unigram()), **TASKS[spec.task].floors(spec, length)}
    if spec.task == "text":
        out.update(text.describe(spec))
    return out


fit_zipf_exponent = zipf.fit_zipf_exponent
