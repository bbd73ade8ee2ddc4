"""Every input kind through simlab.testing, the conformance checks plugin authors use (the
block kinds and float64 are in tests/test_conformance.py; this file is its own so that
`--dist loadfile` runs the two on two workers at once): the drift is a common shift, and a sweep
is bit-identical across chunk sizes and device counts. The cases are built from the registry
(testing.input_cases), so a new input kind is tested by adding it to INPUTS.

Sizes: each input kind runs through a one-layer block (depth 1: the layer that reads the inputs,
hoisted and factored, is layer 0; a stack's further layers do not see the input kind and run per
block kind in tests/test_conformance.py), which compiles about a third faster than depth 2."""

from __future__ import annotations

import dataclasses

import pytest

from simlab import testing
from simlab.core.inputs import INPUTS
from simlab.testing.cases import Case, small_inputs
from simlab.testing.checkpoint import random_checkpoint


def one_layer(case: Case) -> Case:
    """The case with a one-layer block (a trained kind: the checkpoint's layer 1 alone, the
    first of the two that testing.trained_case runs)."""
    if case.weights is None:
        return dataclasses.replace(case, block=dataclasses.replace(case.block, depth=1))
    w = random_checkpoint(case.block.d_model, vocab=case.inputs.vocab).at([1])
    return Case(w.checkpoint.block(1), small_inputs(case.inputs.kind), case.metrics, weights=w)


@pytest.mark.parametrize("kind", list(INPUTS))
def test_drift_is_a_common_shift(kind):
    testing.assert_drift_is_common_shift(kind)


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(INPUTS))
def test_input_kind_sweeps_identical_across_devices(kind):
    """Every input kind through a post-LN block (hoisted and factored layer 0), every metric:
    chunks of 1, 2 and 8 micro-batches and 1 and 2 devices bit for bit (the plain path's
    pre-LN block runs per block kind in tests/test_conformance.py)."""
    case = one_layer(testing.input_cases([kind])[0])
    assert case.block.depth == 1 and case.block.kind == "post_ln", case.name
    testing.assert_sweeps_identical(case, devices=(1, 2))


@pytest.mark.slow
def test_one_call_check():
    """The one-call check a plugin author uses (paths, float64, extremes and bounds; identity
    runs above), on one case (two layers: simlab.testing.assert_paths_agree reads the layer
    axis of a stack's metrics)."""
    testing.check_cases(testing.covering_cases()[:1], identity=False)
