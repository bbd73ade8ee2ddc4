"""Every registry entry through simlab.testing, the conformance checks plugin authors use: each
block kind, each input kind, each metric (paths agree with the plain oracle, float64 on the same
sample, finite and in bounds at the extreme knobs, chunk bit-identity). A new entry is tested by
adding it to its registry: the cases are built from the registries (testing.covering_cases)."""

from __future__ import annotations

import pytest

from simlab import testing
from simlab.core.block import BLOCKS
from simlab.core.inputs import INPUTS
from simlab.core.metrics import METRICS

CASES = {c.name: c for c in testing.covering_cases()}
ENTRIES = [("block", k) for k in BLOCKS] + [("inputs", k) for k in INPUTS]


def cases_of(registry: str, entry: str) -> list[str]:
    kind = {"block": lambda c: c.block.kind, "inputs": lambda c: c.inputs.kind}[registry]
    names = [n for n, c in CASES.items() if kind(c) == entry]
    assert names, f"no case uses {registry} {entry!r}"
    return names


@pytest.fixture(scope="module")
def paths():
    return dict(zip(CASES, testing.path_outputs(list(CASES.values()))))


@pytest.fixture(scope="module")
def x64():
    return dict(zip(CASES, zip(*testing.x64_outputs(list(CASES.values())))))


@pytest.fixture(scope="module")
def extremes():
    return dict(zip(CASES, testing.extreme_outputs(list(CASES.values()))))


@pytest.mark.xdist_group("conformance")
@pytest.mark.parametrize("registry,entry", ENTRIES)
def test_paths_agree_with_the_plain_oracle(registry, entry, paths):
    for n in cases_of(registry, entry):
        testing.assert_paths_agree(CASES[n], paths[n])


@pytest.mark.xdist_group("conformance")
@pytest.mark.parametrize("registry,entry", ENTRIES)
def test_float64_same_sample(registry, entry, x64):
    for n in cases_of(registry, entry):
        testing.assert_x64_agrees(CASES[n], *x64[n])
        testing.assert_really_float64(CASES[n])


@pytest.mark.xdist_group("conformance")
@pytest.mark.parametrize("registry,entry", ENTRIES)
def test_finite_and_in_bounds_at_extreme_knobs(registry, entry, extremes):
    for n in cases_of(registry, entry):
        testing.assert_finite_and_in_bounds(CASES[n], extremes[n])


@pytest.mark.xdist_group("conformance")
@pytest.mark.parametrize("name", list(METRICS))
def test_metric_in_bounds_on_every_case(name, extremes):
    """Each metric inside its declared bounds at every extreme point of every case."""
    lo, hi = METRICS[name].bounds
    assert lo < hi
    for n, out in extremes.items():
        testing.assert_finite_and_in_bounds(CASES[n], {name: out[name]})


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(BLOCKS))
def test_sweeps_identical_across_chunk_sizes(kind):
    testing.assert_sweeps_identical(testing.block_cases([kind])[0])


@pytest.mark.parametrize("kind", list(INPUTS))
def test_drift_is_a_common_shift(kind):
    testing.assert_drift_is_common_shift(kind)


@pytest.mark.slow
def test_check_functions_for_one_entry():
    """The one-call checks a plugin author uses, on a built-in entry of each kind."""
    testing.check_block_kind("parallel", identity=False)
    testing.check_input_kind("rademacher", identity=False)
    testing.check_metric("out_cos_gain", identity=False)
