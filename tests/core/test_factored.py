"""The factored layer-0 attention (simlab.core.factored) against the plain oracle, and the
unvmapped micro-batch of one point against a per-point loop."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from simlab.core.knobs import knob_arrays
from simlab.core.lab import Lab
from simlab.core.spec import BlockSpec, InputSpec

FACTOR_POINTS = [
    dict(q_scale=1.0, k_scale=1.0, temperature=1.0),
    dict(q_scale=3.0, k_scale=0.5, temperature=0.7, q_shift=2.0, k_shift=1.5, drift_norm=0.8),
    dict(q_scale=0.2, k_scale=4.0, temperature=2.5, q_shift=0.3, drift_norm=3.0, input_corr=0.6),
    dict(
        q_scale=8.0,
        temperature=0.5,
        k_shift=3.0,
        drift_norm=0.1,
        input_corr=0.95,
        attn_residual=0.5,
        mlp_residual=2.0,
    ),
]


@pytest.mark.parametrize(
    "kind,causal", [("attention", True), pytest.param("post_ln", False, marks=pytest.mark.slow)]
)
def test_factored_point_equals_plain_point(kind, causal):
    """Lab() (factored layer-0 logits) vs Lab(hoist=False) (the plain oracle), gaussian inputs
    with input_corr, depth 2, every knob of the lead moving together. The math is the same;
    float32 rounding differs (sum_c a_c (X_c W) reassociates (sum_c a_c X_c) W: relative ~ D eps
    ~ 4e-6; the plain path carries the j-constant logit terms of size |drift| |W_K b|, that the
    factored one drops exactly, ~ eps of them). Measured <= 5e-7 of (1 + |value|) here
    (stable_rank is O(T)); 2e-5 abs + 2e-5 rel leaves ~40x room and stays far below the knob
    effects (>= 1e-2)."""
    block = BlockSpec(
        kind=kind, d_model=32, n_heads=4, mlp_ratio=2, depth=2, causal=causal, init="fan_in"
    )
    inputs = InputSpec(kind="gaussian", batch=2, length=12)
    fast, plain = Lab(block, inputs), Lab(block, inputs, hoist=False, factor=False, tiled=False)
    assert fast.factor and not plain.hoist
    key = jax.random.PRNGKey(5)
    pf, pp = jax.jit(fast.point), jax.jit(plain.point)
    sf, sp = jax.jit(fast.seed_state)(key), jax.jit(plain.seed_state)(key)
    for pt in FACTOR_POINTS:
        kn = knob_arrays(pt)
        got, want = pf(sf, kn), pp(sp, kn)
        for k in fast.metric_names:
            np.testing.assert_allclose(
                got[k], want[k], rtol=2e-5, atol=2e-5, err_msg=f"{k} at {pt}"
            )


@pytest.mark.slow
def test_micro_batch_of_one_point_equals_point_loop():
    """micro_batch_fn (simlab.engine.compile) calls lab.point without vmap for a micro-batch of
    one point: the results match jit(lab.point) per point and do not depend on the chunk
    size."""
    from simlab.engine.compile import grid_knobs
    from simlab.engine.config import load_config
    from simlab.engine.sweep import run_sweep

    cfg = {
        "block": {"kind": "post_ln", "d_model": 16, "n_heads": 2},
        "inputs": {"kind": "gaussian", "batch": 2, "length": 8},
        "axes": [
            {"name": "drift_norm", "values": [0.0, 0.5, 2.0]},
            {"name": "input_corr", "values": [0.0, 0.7]},
        ],
        "sweep": {"seeds": 2, "micro_batch": 1},
    }
    a = run_sweep(cfg, chunk_size=1, quiet=True)
    b = run_sweep(cfg, chunk_size=4, quiet=True)
    c = load_config(cfg)
    lab = Lab(c.block, c.inputs)
    point, grid = jax.jit(lab.point), grid_knobs(c)
    for s in range(2):
        state = jax.jit(lab.seed_state)(jax.random.fold_in(jax.random.PRNGKey(0), s))
        for i in range(c.n_points):
            kn = {
                **{k: np.float32(v) for k, v in c.knobs.items()},
                **{k: v[i] for k, v in grid.items()},
            }
            want = point(state, kn)
            for k in lab.metric_names:
                got = a[k][np.unravel_index(i, c.shape) + (s,)]
                np.testing.assert_allclose(got, want[k], rtol=1e-6, atol=1e-6, err_msg=k)
    for k in lab.metric_names:
        assert np.array_equal(a[k], b[k]), k
