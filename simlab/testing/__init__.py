"""Conformance checks: what simlab's own tests run for every registry entry, one call per kind of
entry, so that a new block kind, input kind, metric or attention pattern (built in or a
plugin's) gets the project's guarantees with one test:

    from simlab import testing
    def test_my_block():
        testing.check_block_kind("sandwich")

Each check builds small labs (d_model 16, 4 heads, depth 2, fan_in init, 2 x 12 tokens) that use
the entry (an input kind of trained layers, `InputKind.trained`, on layers 1..2 of
`random_checkpoint`, a BERT-layout checkpoint of random weights held in memory), and asserts:
  paths      the default Lab (hoisted projections, factored logits where the block allows,
             tiles small enough that every tile loop runs) equals the plain oracle
             Lab(hoist=False, factor=False, tiled=False) within PATH_TOL (float32 rounding: the
             same math, reassociated), at knob points that really differ;
  float64    the same seed under `jax.enable_x64(True)` draws the same sample (every random
             number is drawn in float32 and cast) and agrees with float32 within X64_TOL
             (absolute) plus X64_RTOL (relative);
  extremes   every metric finite at the corners of the knobs' promised ranges (docs/config.md,
             "Numerics") and inside its declared mathematical range `Metric.bounds`, on the
             default path's Lab (its small tiles: every tile loop; the engine's own tiles at the
             extremes are tests/core/test_numerics.py's);
  identity   `run_sweep` gives bit-identical arrays for chunks of 1, 2 and 8 micro-batches and
             on one and two devices (when the process has several).
The building blocks, each importable from here: simlab.testing.cases (the small labs: `Case`,
`block_cases`, `input_cases`, ..., `run_labs`, which runs many labs in one compiled call, about
twice as fast to compile as one call per lab), simlab.testing.checks (the assertions:
`path_outputs`, `assert_paths_agree`, ...), simlab.testing.checkpoint (`random_checkpoint` and
its tokenizer); this module holds one check per kind of entry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import simlab.checkpoints  # noqa: F401  (registers the trained input kinds)
from simlab.core.block import BLOCKS
from simlab.core.inputs import INPUTS
from simlab.core.metrics import METRICS
from simlab.core.patterns import PATTERNS
from simlab.testing.cases import (
    EXTREMES,
    POINTS,
    SMALL_CORPUS,
    Case,
    block_cases,
    covering_cases,
    input_cases,
    metric_cases,
    pattern_cases,
    run_labs,
    small_block,
    small_inputs,
    trained_case,
)
from simlab.testing.checkpoint import (
    SEED,
    TINY_WORDS,
    random_checkpoint,
    tiny_tokenizer_json,
    weights_for,
)
from simlab.testing.checks import (
    BOUND_TOL,
    PATH_TOL,
    PATHS,
    X64_RTOL,
    X64_TOL,
    assert_clamp_closed_forms,
    assert_drift_is_common_shift,
    assert_finite_and_in_bounds,
    assert_paths_agree,
    assert_really_float64,
    assert_sweeps_identical,
    assert_x64_agrees,
    extreme_outputs,
    extreme_points,
    path_and_extreme_outputs,
    path_outputs,
    sweep_config,
    x64_outputs,
)

__all__ = [
    "BOUND_TOL", "EXTREMES", "PATHS", "PATH_TOL", "POINTS", "SEED", "SMALL_CORPUS", "TINY_WORDS",
    "X64_RTOL", "X64_TOL", "Case", "assert_clamp_closed_forms", "assert_drift_is_common_shift",
    "assert_finite_and_in_bounds", "assert_paths_agree", "assert_really_float64",
    "assert_sweeps_identical", "assert_x64_agrees", "block_cases", "check_block_kind",
    "check_cases", "check_input_kind", "check_metric", "check_pattern", "covering_cases",
    "extreme_outputs", "extreme_points", "input_cases", "metric_cases", "path_and_extreme_outputs",
    "path_outputs", "pattern_cases", "random_checkpoint", "run_labs", "small_block",
    "small_inputs", "sweep_config", "tiny_tokenizer_json", "trained_case", "weights_for",
    "x64_outputs",
]  # fmt: skip


def check_cases(
    cases: Sequence[Case], identity: bool = True, x64: Callable[[Case], bool] | None = None
) -> None:
    """Every check on the given cases (paths, float64, extremes and bounds, identity). x64: the
    cases whose float64 run is compared with float32 (default every case; a declared sample
    where a test has the others' elsewhere: one compile fewer); the float64 dtypes are checked
    on every case (a trace, no compile)."""
    paths, extremes = path_and_extreme_outputs(cases)
    in64 = [i for i, c in enumerate(cases) if x64 is None or x64(c)]
    f64 = dict(zip(in64, x64_outputs([cases[i] for i in in64]))) if in64 else {}
    for i, (case, out) in enumerate(zip(cases, paths)):
        assert_paths_agree(case, out)
        if i in f64:
            assert_x64_agrees(case, out["default"], f64[i])
        assert_really_float64(case)
    for case, out in zip(cases, extremes):
        assert_finite_and_in_bounds(case, out)
    if identity:
        for case in cases:
            assert_sweeps_identical(case)


def check_block_kind(kind: str, identity: bool = True) -> None:
    """Every check for one block kind of simlab.core.block.BLOCKS (block_cases)."""
    assert kind in BLOCKS, f"{kind!r} is not a registered block kind"
    check_cases(block_cases([kind]), identity)


def check_input_kind(kind: str, identity: bool = True) -> None:
    """Every check for one input kind of simlab.core.inputs.INPUTS (input_cases), plus the
    drift: x(N) - x(0) = N u_b exactly for every token."""
    assert kind in INPUTS, f"{kind!r} is not a registered input kind"
    assert_drift_is_common_shift(kind)
    check_cases(input_cases([kind]), identity)


def check_pattern(name: str, identity: bool = True) -> None:
    """Every check for one attention pattern of simlab.core.patterns.PATTERNS (pattern_cases),
    and for a clamp its targets, weights and closed forms (assert_clamp_closed_forms)."""
    assert name in PATTERNS, f"{name!r} is not a registered attention pattern"
    if not PATTERNS[name].reads_logits:
        assert_clamp_closed_forms(name)
    check_cases(pattern_cases([name]), identity)


def check_metric(name: str, identity: bool = True) -> None:
    """Every check for one metric of simlab.core.metrics.METRICS, on every block kind."""
    assert name in METRICS, f"{name!r} is not a registered metric"
    lo, hi = METRICS[name].bounds
    assert lo <= hi, f"{name}: bounds {lo} > {hi}"
    check_cases(metric_cases([name]), identity)
