"""Real text that ships with Python: a byte-level corpus built from the interpreter's standard
library (docs/training.md, "Corpora").

What is read, in this order (deterministic for a given Python installation):
  * every *.py file below sysconfig.get_paths()["stdlib"], in sorted order of its relative
    POSIX path, leaving out any path with a part in EXCLUDED (tests, third-party packages);
    a file that does not parse (ast) is skipped and counted;
  * from each file, the docstrings of the module, its classes and its functions
    (ast.get_docstring(node, clean=True)), in source order (line, column), joined by a blank
    line: one document per file, named by its relative path; files without docstrings are
    left out;
  * the interpreter's LICENSE.txt (stdlib directory, else sys.base_prefix), one document named
    "LICENSE.txt", if present.
A document is held out when the first 8 hex digits of sha256(name), read as an integer and
divided by 16^8, fall below `text_heldout`: the split is by document, so the two splits share
no document, and it does not depend on the order of the files. Each split is its documents
joined by a blank line, as UTF-8 bytes; token = byte (vocab 256). Training and held-out
sequences are windows at uniform random offsets of their split.
The content depends on the Python version and installation: `describe` records the version,
the sizes and the sha256 of both splits.

No loss floor is known for text (loss_floor None). The context-free baseline is the byte
bigram model fitted on the training split (add-1/2 smoothing) scored on the held-out split:
its cross-entropy is what the current byte alone tells (up to the estimation error of a
256 x 256 table from the training split).
"""

from __future__ import annotations

import functools
import hashlib
import sys

import numpy as np

from simlab.checkpoints.corpus import (  # noqa: F401  (the standard library's text, read there)
    EXCLUDED,
    docstrings,
    documents,
    license_path,
    stdlib_dir,
)
from simlab.errors import ConfigError

SEPARATOR = b"\n\n"
SMOOTHING = 0.5


def is_heldout(name: str, fraction: float) -> bool:
    return int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) / 16**8 < fraction


@functools.lru_cache(maxsize=4)
def splits(fraction: float) -> dict[str, np.ndarray]:
    """{"train": uint8 bytes, "heldout": uint8 bytes} (module docstring)."""
    docs, _ = documents()
    parts = {"train": [], "heldout": []}
    for name, b in docs:
        parts["heldout" if is_heldout(name, fraction) else "train"].append(b)
    return {k: np.frombuffer(SEPARATOR.join(v), np.uint8) for k, v in parts.items()}


def sample(
    spec, n_seqs: int, length: int, rng: np.random.Generator, split: str = "train"
) -> np.ndarray:
    """(n_seqs, length) int32 windows of the split at uniform random offsets."""
    data = splits(spec.text_heldout)[split]
    if len(data) < length:
        raise ConfigError(
            f"corpus.text: the {split} split of the standard library's docstrings below "
            f"{stdlib_dir()} has {len(data)} bytes, fewer than one sequence of {length}"
        )
    start = rng.integers(0, len(data) - length + 1, size=n_seqs)
    return data[start[:, None] + np.arange(length)].astype(np.int32)


def unigram(spec) -> np.ndarray:
    """Byte frequencies of the training split."""
    c = np.bincount(splits(spec.text_heldout)["train"], minlength=256).astype(np.float64)
    return c / c.sum()


def bigram_cross_entropy(train: np.ndarray, heldout: np.ndarray, alpha: float) -> float:
    """Mean -log p(y | x) over the held-out byte pairs, p from train pair counts + alpha."""
    counts = np.full((256, 256), alpha)
    np.add.at(counts, (train[:-1], train[1:]), 1.0)
    logp = np.log(counts / counts.sum(1, keepdims=True))
    return float(-np.mean(logp[heldout[:-1], heldout[1:]]))


def unigram_cross_entropy(train: np.ndarray, heldout: np.ndarray, alpha: float) -> float:
    counts = np.bincount(train, minlength=256) + alpha
    return float(-np.mean(np.log(counts / counts.sum())[heldout]))


def floors(spec, length: int) -> dict[str, float]:
    s = splits(spec.text_heldout)
    return {
        "loss_floor": None,
        "context_free_loss": bigram_cross_entropy(s["train"], s["heldout"], SMOOTHING),
        "unigram_cross_entropy": unigram_cross_entropy(s["train"], s["heldout"], SMOOTHING),
    }


def describe(spec) -> dict:
    """What the corpus was built from: Python version, sizes, sha256 of each split."""
    docs, skipped = documents()
    s = splits(spec.text_heldout)
    lic = license_path()
    return {
        "python": sys.version.split()[0],
        "implementation": sys.implementation.name,
        "stdlib": str(stdlib_dir()),
        "license": str(lic) if lic else None,
        "documents": len(docs),
        "heldout_documents": sum(is_heldout(n, spec.text_heldout) for n, _ in docs),
        "unparsed_files": skipped,
        **{f"{k}_bytes": int(len(v)) for k, v in s.items()},
        **{f"{k}_sha256": hashlib.sha256(v.tobytes()).hexdigest() for k, v in s.items()},
    }
