"""Refinement rules: when a cell of a [refine] lattice straddles the level set metric = level
and is split (simlab.engine.refine; docs/config.md, "Refinement of a phase boundary"). One
registry, RULES, read live; a new rule is one `register_rule` call (docs/extending.md, "Add a
growth or refinement rule").

A rule sees the metric at each cell's 2^d corners for every seed, v_CKZ (cells C, corners K,
seeds Z; NaN where a value is not finite), and the level; it returns which cells straddle it
(C,). `straddle(v_CK, level)` is the test on one set of values per corner: some finite
value >= level and some < level.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from simlab.registry import BUILTIN, Registry, require


def straddle(v_CK: np.ndarray, level: float) -> np.ndarray:
    """Per row: some finite value >= level and some < level."""
    finite = np.isfinite(v_CK)
    above = np.any(finite & (v_CK >= level), axis=1)
    below = np.any(finite & (v_CK < level), axis=1)
    return above & below


@dataclasses.dataclass(frozen=True)
class Rule:
    """A refinement rule: name, what it tests (one line, for docs and messages), and
    straddles(v_CKZ, level) -> (C,) bool."""

    name: str
    doc: str
    straddles: Callable[[np.ndarray, float], np.ndarray]


def _check(rule: Rule) -> None:
    require(
        "refine rule",
        rule.name,
        {
            "doc": (isinstance(rule.doc, str) and bool(rule.doc.strip()), "must be a sentence"),
            "straddles": (callable(rule.straddles), "must be callable (v_CKZ, level) -> (C,)"),
        },
    )


RULES: Registry[Rule] = Registry("refine rule", Rule, _check)


def register_rule(rule: Rule) -> Rule:
    """Add a refinement rule (validated; a duplicate name is an error)."""
    return RULES.register(rule)


def _mean(v_CKZ, level):
    return straddle(np.mean(v_CKZ, axis=2), level)


def _any(v_CKZ, level):
    hit = _mean(v_CKZ, level)
    for z in range(v_CKZ.shape[2]):
        hit |= straddle(v_CKZ[:, :, z], level)
    return hit


for _rule in (
    Rule("mean", "the seed mean (float64) of each corner straddles the level", _mean),
    Rule("any", "the seed mean or any single seed's values straddle the level", _any),
):
    RULES.register(_rule, source=BUILTIN)
