"""Warnings for a sweep that runs, but whose numbers a bound of its setup decides rather than the
geometry studied: said once before anything is computed ("simlab: warning: ..." on the
command line), each naming the field and the bound.

  positions: inputs.length beyond the max_position_embeddings of the checkpoint's config.json
             (where the architecture does not already refuse it: rotary positions run at any
             length, so rotary extrapolation is a valid experiment, but not the trained one).
  rank:      a requested covariance measure (simlab.core.metrics.RANK_BOUNDED) of the n =
             inputs.batch * inputs.length tokens at width d = block.d_model with n <= d: the
             centred covariance of n points has rank at most n - 1 < d, so the measure is
             bounded by the sample, not by the hidden states (e.g. a participation ratio in
             [1, n - 1]).
"""

from __future__ import annotations

import warnings

from simlab.core.lab import RANK_BOUNDED  # the engine's door to the metric registry


def warn(cfg, lab, names) -> None:
    """Every caution of a validated config `cfg` run by `lab` for metrics `names`."""
    positions(cfg.inputs.length, getattr(lab, "weights", None) or cfg.weights)
    rank(names, cfg.inputs.batch * cfg.inputs.length, cfg.block.d_model)


def positions(length: int, weights) -> None:
    ck = getattr(weights, "checkpoint", None)
    n = getattr(ck, "trained_positions", 0)
    if n and length > n:
        warnings.warn(
            f"inputs.length: {length} tokens exceed the {n} positions the checkpoint was trained "
            f"on (max_position_embeddings of {ck.folder / 'config.json'}); positions beyond them "
            "are extrapolated",
            stacklevel=3,
        )


def rank(names, n: int, d: int) -> None:
    bounded = [m for m in names if m in RANK_BOUNDED]
    if bounded and n <= d:
        warnings.warn(
            f"sweep.metrics: {', '.join(bounded)} measure the covariance of n = {n} tokens "
            f"(inputs.batch x inputs.length) at d = {d} (block.d_model): its rank is at most "
            f"n - 1 = {n - 1} < d, so they are bounded by the sample size",
            stacklevel=3,
        )
