"""Every registry entry through simlab.testing, the conformance checks plugin authors use: each
block kind and each input kind (float64 on the same sample, chunk bit-identity, the drift). The
cases are built from the registries (testing.covering_cases), so a new entry is tested by adding
it to its registry. The input kinds' chunk and device identity and the one-call check are in
tests/test_conformance_inputs.py (a file of its own: `--dist loadfile` runs the two files on two
workers at once). The other per-entry checks run on cases built from the registries too: the
fast paths against the plain oracle in tests/core/test_tiled.py, finite values and every
metric's bounds at the extreme knobs in tests/core/test_numerics.py."""

from __future__ import annotations

import dataclasses

import pytest

from simlab import testing
from simlab.core.block import BLOCKS
from simlab.core.inputs import INPUTS
from simlab.core.metrics import default_metrics

# not computed by default: the per-head metrics (dimension head), the pair split of the cosine
# and the position-0 norm ratio, added to the post-LN case's chunk and device identity
DIMENSIONED = (
    "attn_entropy_head",
    "attn_sink_head",
    "out_cos_within_pooled",
    "out_cos_between",
    "attn_cos_between",
    "input_cos_between",
    "out_pos0_norm_ratio",
)

CASES = {c.name: c for c in testing.covering_cases()}
ENTRIES = [("block", k) for k in BLOCKS] + [("inputs", k) for k in INPUTS]


def cases_of(registry: str, entry: str) -> list[str]:
    kind = {"block": lambda c: c.block.kind, "inputs": lambda c: c.inputs.kind}[registry]
    names = [n for n, c in CASES.items() if kind(c) == entry]
    assert names, f"no case uses {registry} {entry!r}"
    return names


@pytest.fixture(scope="module")
def precisions():
    """Per case: the default Lab's metrics in float32 and, the same seed, in float64."""
    cases = list(CASES.values())
    f32 = testing.run_labs([c.lab(**testing.PATHS["default"]) for c in cases], cases)
    return dict(zip(CASES, zip(f32, testing.x64_outputs(cases))))


@pytest.mark.slow
@pytest.mark.parametrize("registry,entry", ENTRIES)
def test_float64_same_sample(registry, entry, precisions):
    for n in cases_of(registry, entry):
        testing.assert_x64_agrees(CASES[n], *precisions[n])


@pytest.mark.parametrize("registry,entry", ENTRIES)
def test_really_float64(registry, entry):
    """Under x64 the seed state, the knobs and the metrics are float64 (traced, not compiled:
    the fast tier's test of this file)."""
    for n in cases_of(registry, entry):
        testing.assert_really_float64(CASES[n])


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(BLOCKS))
def test_sweeps_identical_across_chunk_sizes_and_devices(kind):
    """Every block kind, every metric: chunks of 1, 2 and 8 micro-batches and 1 and 2 devices
    give the same arrays bit for bit (the README's promise); post-LN also on 4 devices (each
    device compiles its own copy of the program, so every extra device costs a compile)."""
    devices = (1, 2, 4) if kind == "post_ln" else (1, 2)
    case = testing.block_cases([kind])[1]
    if kind == "post_ln":  # and the metrics with dimensions or pair splits, in the same program
        case = dataclasses.replace(case, metrics=(*default_metrics(), *DIMENSIONED))
    testing.assert_sweeps_identical(case, devices=devices)


def test_path_check_takes_a_one_layer_block():
    """assert_paths_agree on a block without a layer axis (depth 1: metrics one number per
    point) as on a stack: the fast paths agree with the plain oracle, and the non-vacuity check
    (the points move the attention entropy) reads each point's first entry and still fires when
    the points do not differ."""
    import numpy as np

    case = testing.block_cases(["post_ln"])[0]
    one = dataclasses.replace(case, block=dataclasses.replace(case.block, depth=1))
    (out,), _ = testing.path_and_extreme_outputs([one], extremes=False)
    assert np.ndim(out["plain"]["attn_entropy"]) == 1  # no layer axis: the case under test
    testing.assert_paths_agree(one, out)
    n = len(testing.POINTS)
    for c, shape in ((one, (n,)), (case, (n, case.block.depth))):
        flat = {p: {"attn_entropy": np.ones(shape)} for p in out}
        with pytest.raises(AssertionError, match="points do not differ"):
            testing.assert_paths_agree(c, flat)
