"""Numerical robustness of the Lab: finite metrics (and their exact ranges) at extreme knobs,
the temperature limits, and float64 (JAX_ENABLE_X64) against float32."""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from simlab.core.knobs import KNOB_DEFAULTS
from simlab.core.lab import Lab, knob_arrays
from simlab.core.metrics import METRIC_NAMES
from simlab.core.spec import BlockSpec, InputSpec

SPEC_KW = dict(d_model=32, n_heads=4, mlp_ratio=2)  # the shapes shared by the Lab tests
ISPEC = InputSpec(kind="gaussian", batch=2, length=8)
T, D, K = 8, 32, 8
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def stacked(points):
    """knob dicts -> knob name -> (n_points,) array (for vmap over points)."""
    return {k: jnp.stack([knob_arrays(p)[k] for p in points]) for k in KNOB_DEFAULTS}


# ----------------------------------------------------------------------------- finiteness
GRID = [
    dict(q_scale=q, temperature=t, drift_norm=n)
    for q, t, n in itertools.product((1e-4, 1.0, 1e4), (1e-4, 1.0, 1e4), (0.0, 1e3, 1e6))
]


SPECS = list(itertools.product(("post_ln", "attention"), (False, True), ("none", "layernorm")))


@pytest.fixture(scope="module")
def grid_results():
    """All 8 specs x 27 points in ONE compiled call (XLA compiles one module with 8 Labs
    about twice as fast as 8 modules)."""
    labs = [Lab(BlockSpec(kind=k, causal=c, qk_norm=q, **SPEC_KW), ISPEC) for k, c, q in SPECS]
    states = [lab.seed_state(jax.random.PRNGKey(0)) for lab in labs]
    run = jax.jit(
        lambda sts, kn: [
            jax.vmap(lab.point, in_axes=(None, 0))(st, kn) for lab, st in zip(labs, sts)
        ]
    )
    outs = run(states, stacked(GRID))
    return {
        spec: {k: np.asarray(v, np.float64) for k, v in out.items()}
        for spec, out in zip(SPECS, outs)
    }


@pytest.mark.parametrize("kind,causal,qk_norm", SPECS)
def test_metrics_finite_and_in_range_at_extreme_knobs(grid_results, kind, causal, qk_norm):
    """Every metric finite on the 27-point grid q_scale x temperature x drift_norm, and inside
    its exact range: cosines in [-1, 1], entropy in [0, 1], 1/S <= mean max weight <= 1,
    stable rank in [1, min(T, D)], norms >= 0 (ranges up to a few float32 ulp)."""
    out = grid_results[kind, causal, qk_norm]
    assert set(out) == set(METRIC_NAMES)
    for name, arr in out.items():
        bad = [GRID[i] for i in np.nonzero(~np.isfinite(arr))[0]]
        assert not bad, f"{name} not finite at {bad[:3]}"
    e = 1e-5
    for name in (
        "input_cos",
        "input_cos_within",
        "attn_cos",
        "attn_cos_within",
        "out_cos",
        "out_cos_within",
        "qk_mean_cos",
    ):
        assert np.all(np.abs(out[name]) <= 1 + e), name
    assert np.all((out["attn_entropy"] >= -e) & (out["attn_entropy"] <= 1 + e))
    assert np.all((out["attn_max"] >= 1 / T - e) & (out["attn_max"] <= 1 + e))
    assert np.all((out["stable_rank"] >= 1 - e) & (out["stable_rank"] <= min(T, D) + 1e-3))
    assert np.all(out["q_mean_norm"] >= 0) and np.all(out["k_mean_norm"] >= 0)
    # the knobs have their effect at the extremes too: a huge drift makes the inputs one
    # direction (input cosine -> 1), tiny temperature and big q_scale make attention sharp
    i_drift = GRID.index(dict(q_scale=1.0, temperature=1.0, drift_norm=1e6))
    assert out["input_cos"][i_drift] > 1 - 1e-6
    if qk_norm == "none":
        i_sharp = GRID.index(dict(q_scale=1e4, temperature=1e-4, drift_norm=0.0))
        assert out["attn_max"][i_sharp] > 0.99


# ----------------------------------------------------------------------------- limits
@pytest.fixture(scope="module")
def limit_results():
    temps = (1e-4, 1.0, 1e4)
    labs, states = [], []
    for causal in (False, True):
        spec = BlockSpec(kind="post_ln", causal=causal, init="fan_in", **SPEC_KW)
        labs.append(Lab(spec, ISPEC, metrics=("attn_entropy", "attn_max")))
        states.append(labs[-1].seed_state(jax.random.PRNGKey(2)))
    outs = jax.jit(
        lambda sts, kn: [
            jax.vmap(lab.point, in_axes=(None, 0))(st, kn) for lab, st in zip(labs, sts)
        ]
    )(states, stacked([dict(temperature=t) for t in temps]))
    return {c: (lab, st, out) for c, lab, st, out in zip((False, True), labs, states, outs)}


@pytest.mark.parametrize("causal", [False, True])
def test_temperature_limits(limit_results, causal):
    """t = 1e4: the logits l_ij / t are ~1e-4, so the normalised entropy is 1 to O(1e-8); the
    float32 sum -sum w log w adds a few ulp, hence 2e-6. t = 1e-4: with top-two logit gap g_i
    per row, 1 - max_j w_ij <= (n_i - 1) exp(-g_i / (sqrt(K) t)) exactly; the bound is
    computed from the layer-0 logits in float64 numpy (inputs with distinct logits: the seed is
    one whose rows have well separated top-two logits, checked by `bound < 1e-3`; four of six
    seeds tried are)."""
    lab, state, out = limit_results[causal]
    ent, mx = np.asarray(out["attn_entropy"]), np.asarray(out["attn_max"])
    assert abs(ent[2] - 1.0) < 2e-6, ent
    # float64 oracle for the layer-0 logits (post-LN: the projections see x itself)
    x, _ = lab.inputs_of(state, knob_arrays({}))
    p = {n: np.asarray(v[0], np.float64) for n, v in state["params"].items()}
    x = np.asarray(x, np.float64)
    q = np.einsum("btd,dhk->bhtk", x, p["wq"]) + p["bq"][:, None]
    k = np.einsum("btd,dhk->bhtk", x, p["wk"]) + p["bk"][:, None]
    logits = np.einsum("bhtk,bhsk->bhts", q, k) / math.sqrt(K)
    bound = []
    for row_i in range(T):
        n = row_i + 1 if causal else T
        top = np.sort(logits[:, :, row_i, :n], axis=-1)
        if n == 1:
            bound.append(np.zeros(top.shape[:2]))
            continue
        gap = top[..., -1] - top[..., -2]
        bound.append((n - 1) * np.exp(-gap / (math.sqrt(K) * 1e-4)))
    bound = float(np.mean(bound))
    assert bound < 1e-3  # distinct logits: the limit is (nearly) reached
    assert 1 - mx[0] <= bound + 1e-6, (mx[0], bound)
    assert mx[0] > 1 - 1e-3 and mx[1] < 0.9
    assert ent[0] < 1e-3
    assert 0.05 < ent[1] < 0.999  # t = 1 is in between: the limits are not trivially met


# ----------------------------------------------------------------------------- float64
X64_SCRIPT = textwrap.dedent(r"""
    import json, sys
    import numpy as np, jax, jax.numpy as jnp
    from simlab.core.lab import Lab, knob_arrays
    from simlab.core.spec import BlockSpec, InputSpec
    assert jnp.asarray(1.0).dtype == jnp.float64, "x64 not enabled"
    spec, ispec = BlockSpec(**json.loads(sys.argv[2])), InputSpec(**json.loads(sys.argv[3]))
    knobs = json.loads(sys.argv[4])
    for hoist in (False, True):  # the Lab's own state must follow the default float dtype
        shapes = jax.eval_shape(Lab(spec, ispec, hoist=hoist).seed_state, jax.random.PRNGKey(0))
        dts = {str(l.dtype) for l in jax.tree.leaves(shapes)}
        assert dts == {"float64"}, ("seed_state dtypes", hoist, dts)
    lab = Lab(spec, ispec, hoist=False)
    data = np.load(sys.argv[1])
    state = {"params": {}, "comps": {}}
    for name in data.files:
        head, _, leaf = name.partition(".")
        arr = jnp.asarray(data[name], jnp.float64)
        if leaf:
            state[head][leaf] = arr
        else:
            state[head] = arr
    kn = knob_arrays(knobs)
    assert {str(v.dtype) for v in kn.values()} == {"float64"}, "knob_arrays dtype"
    out = jax.jit(lab.point)(state, kn)
    assert {str(v.dtype) for v in out.values()} == {"float64"}, "metric dtype"
    print("RESULT" + json.dumps({k: np.asarray(v).tolist() for k, v in out.items()}))
""")


def test_float64_agrees_with_float32(tmp_path):
    """The same weights and inputs (drawn once in float32, then cast exactly to float64), run
    under JAX_ENABLE_X64=1 in a subprocess (x64 must be set before jax initialises): the Lab
    must really compute in float64 (state, knobs and metrics all float64) and agree with the
    float32 run within 1e-4 on a moderate config."""
    spec_kw = dict(kind="post_ln", causal=True, depth=2, init="fan_in", **SPEC_KW)
    ispec_kw = dict(kind="gaussian", batch=2, length=8)
    knobs = dict(
        q_scale=2.0,
        temperature=0.7,
        drift_norm=1.5,
        input_corr=0.2,
        q_shift=0.5,
        k_shift=0.5,
        attn_residual=0.8,
    )
    lab = Lab(BlockSpec(**spec_kw), InputSpec(**ispec_kw), hoist=False)
    state = lab.seed_state(jax.random.PRNGKey(5))
    assert {str(v.dtype) for v in jax.tree.leaves(state)} == {"float32"}
    out32 = jax.jit(lab.point)(state, knob_arrays(knobs))
    f32 = {k: np.asarray(v, np.float64) for k, v in out32.items()}
    flat = {f"params.{n}": np.asarray(v) for n, v in state["params"].items()}
    flat.update({f"comps.{n}": np.asarray(v) for n, v in state["comps"].items()})
    flat.update(u_q=np.asarray(state["u_q"]), u_k=np.asarray(state["u_k"]))
    assert set(state) == {"params", "comps", "u_q", "u_k"}  # nothing hoisted to carry over
    np.savez(tmp_path / "state.npz", **flat)
    script = tmp_path / "run_x64.py"
    script.write_text(X64_SCRIPT)
    env = dict(os.environ, JAX_ENABLE_X64="1", JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [
            sys.executable,
            str(script),
            str(tmp_path / "state.npz"),
            json.dumps(spec_kw),
            json.dumps(ispec_kw),
            json.dumps(knobs),
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")][-1]
    f64 = {k: np.asarray(v) for k, v in json.loads(line[len("RESULT") :]).items()}
    assert set(f64) == set(f32)
    worst = 0.0
    for name in f32:
        np.testing.assert_allclose(f32[name], f64[name], rtol=1e-4, atol=1e-4, err_msg=name)
        worst = max(worst, float(np.max(np.abs(f32[name] - f64[name]))))
    assert worst > 0  # it did not silently run the same float32 arithmetic
