"""The massive activation of a trained decoder, found and removed (issue 51, item 3).

Found (`find`): Sun, Chen, Kolter & Liu 2024 ("Massive Activations in Large Language Models",
COLM) call a few activations massive when they are orders of magnitude above the median; they
sit at the first token (or the first delimiter) in a handful of fixed dimensions, appear
abruptly at one early layer and stay. For each hidden state h^(l) (B, T, D) of a checkpoint
(`Checkpoint.hidden_states`: the embeddings, then each layer's output), in float64:

    ratio_l = max_{b,t,d} |h_btd| / median_{b,t,d} |h_btd|      (the median over every coordinate)
    (b*, t*, d*) = argmax |h_btd|,   dims_l = {d : |h_b*t*d| >= threshold median |h|} (d* always),

dims in order of |h| descending. `appears` is the first l with ratio_l >= threshold (Sun et al.
report ratios near 10^4 in Llama 2; the default threshold 100 is their absolute floor used as a
ratio). A hidden state of all zeros has median 0: ratio inf where max > 0, 0 where max = 0.

Removed (`remove`, `Removed`): the counterfactual input of a layer without it. At the input x of
a chosen layer the massive coordinates, position t* and dims S, are set per sequence to the mean
of the other positions in those dims,

    x'_bt*d = (1 / (T - 1)) sum_{t != t*} x_btd   (d in S),   x'_btd = x_btd elsewhere,

and the layers from the chosen one up run on x' with their weights unchanged: `Removed` is the
checkpoint's `Weights` (simlab.checkpoints.checkpoint) whose `hidden` (what the first studied
layer sees: the embeddings through the layers below) applies `remove`, so a Lab on it is the
layer's sweep with the intervention on its input, on every input kind that goes through
`hidden` (tokens, fixed ids, text). Its identity names the intervention (the fingerprint).
Tests: tests/studies/test_massive.py (a tiny random Llama checkpoint with a planted massive
activation; numpy float64 oracles).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from simlab.checkpoints.checkpoint import Weights
from simlab.errors import ConfigError

# Sun et al. 2024's absolute floor for a massive activation, used here as a ratio to the median
THRESHOLD = 100.0


@dataclasses.dataclass(frozen=True)
class Massive:
    """One hidden state's largest activation: `layer` its index in the list given to `find`,
    `ratio` = `value` / `median` (max |h| over the median |h| of every coordinate), at sequence
    `seq`, position `position`; `dims`: that token's coordinates at or above threshold times the
    median (its own largest always), by |h| descending."""

    layer: int
    ratio: float
    value: float
    median: float
    seq: int
    position: int
    dims: tuple[int, ...]


def find(hidden: Sequence, threshold: float = THRESHOLD) -> list[Massive]:
    """The largest activation of each hidden state (B, T, D) of `hidden` (the module docstring),
    computed in float64 numpy."""
    out = []
    for layer, h in enumerate(hidden):
        a = np.abs(np.asarray(h, np.float64))
        med, top = float(np.median(a)), float(a.max())
        b, t, d = np.unravel_index(int(np.argmax(a)), a.shape)
        row = a[b, t]
        order = np.argsort(-row, kind="stable")
        dims = tuple(int(i) for i in order if row[i] >= threshold * med and row[i] > 0)
        ratio = top / med if med > 0 else (np.inf if top > 0 else 0.0)
        out.append(Massive(layer, ratio, top, med, int(b), int(t), dims or (int(d),)))
    return out


def appears(found: Sequence[Massive], threshold: float = THRESHOLD) -> int | None:
    """The first hidden state whose ratio reaches `threshold` (None: none does)."""
    return next((m.layer for m in found if m.ratio >= threshold), None)


def remove(x_BTD, position: int, dims: Sequence[int]):
    """x with x[:, position, dims] set to each sequence's mean over its other positions in those
    dims (the module docstring); every other coordinate unchanged."""
    t, d = x_BTD.shape[-2:]
    other_T = jnp.arange(t) != position
    mean_BD = jnp.sum(jnp.where(other_T[:, None], x_BTD, 0.0), axis=-2) / (t - 1)
    dims_D = jnp.zeros(d, bool).at[jnp.asarray(list(dims), jnp.int32)].set(True)
    hit_TD = (~other_T)[:, None] & dims_D[None, :]
    return jnp.where(hit_TD, mean_BD[..., None, :], x_BTD)


@dataclasses.dataclass(frozen=True, eq=False)
class Removed(Weights):
    """Weights whose first layer sees its input with the massive activation removed
    (`remove` at `position`, `dims`); the weights themselves, and so every layer, unchanged."""

    position: int = 0
    dims: tuple[int, ...] = ()

    def hidden(self, ids_BT, dtype=None):
        return remove(super().hidden(ids_BT, dtype), self.position, self.dims)

    def check(self, block, inputs) -> None:
        super().check(block, inputs)
        if not 0 <= self.position < inputs.length:
            raise ConfigError(
                f"massive.position: {self.position} is outside the positions 0..{inputs.length - 1}"
            )
        bad = [d for d in self.dims if not 0 <= d < block.d_model]
        if not self.dims or bad:
            raise ConfigError(
                f"massive.dims: {list(self.dims)} must be dims in 0..{block.d_model - 1} "
                "(at least one)"
            )

    def identity(self) -> dict:
        return {
            **super().identity(),
            "massive_removed": {"position": self.position, "dims": list(self.dims)},
        }


def removed(weights: Weights, found: Massive) -> Removed:
    """`weights` (a checkpoint's layers, `Checkpoint.at`) with the massive activation `found`
    removed from their input: its position and dims."""
    return Removed(
        weights.checkpoint,
        weights.layers,
        weights.ids,
        weights.source,
        position=found.position,
        dims=tuple(found.dims),
    )
