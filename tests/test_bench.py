"""simlab.bench and the engine changes it motivated (docs/performance.md).

* The analytic FLOP counts equal the dot_general FLOPs of the traced programs (counted from
  the jaxpr, scan bodies times their length), for every path (factored / hoisted / plain),
  with and without MLP, depth 1 and 2, T below and above the Lanczos threshold.
* The factored layer-0 logits (the performance lead) give the plain path's metrics.
* The stable rank's top eigenvalue (LAPACK tridiagonalisation up to 64 x 64, Lanczos beyond)
  and the entropy's log(max(w, tiny)) form agree with float64 oracles / the previous formula.
* A quick benchmark writes a JSON with every required key; the worker subprocess protocol works.
"""
from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from simlab import bench
from simlab import metrics as M
from simlab.lab import Lab, knob_arrays
from simlab.spec import BlockSpec, InputSpec


# ----------------------------------------------------------------------------- FLOP counts
def dot_flops(jaxpr) -> int:
    """2 * batch * contracted * free sizes of every dot_general, recursing into sub-jaxprs;
    a scan body counts `length` times. A while loop holding a dot_general is an error (its
    trip count is not static)."""
    total = 0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
            ls, rs = eqn.invars[0].aval.shape, eqn.invars[1].aval.shape
            free_l = [s for i, s in enumerate(ls) if i not in lc and i not in lb]
            free_r = [s for i, s in enumerate(rs) if i not in rc and i not in rb]
            total += 2 * math.prod(ls[i] for i in lb) * math.prod(ls[i] for i in lc) \
                * math.prod(free_l) * math.prod(free_r)
            continue
        subs = []
        for v in eqn.params.values():
            for x in (v if isinstance(v, (tuple, list)) else (v,)):
                j = getattr(x, "jaxpr", x)
                if hasattr(j, "eqns"):
                    subs.append(j)
        inner = sum(dot_flops(j) for j in subs)
        if name == "scan":
            inner *= eqn.params["length"]
        elif name == "while":
            assert inner == 0, "dot_general inside a while loop of unknown trip count"
        total += inner
    return total


def traced_flops(lab: Lab) -> tuple[int, int]:
    """(per point, per seed) dot_general FLOPs of lab.point and lab.seed_state, after dead-code
    elimination (what XLA runs)."""
    from jax._src.interpreters import partial_eval as pe
    key = jax.random.PRNGKey(0)
    state = jax.eval_shape(lab.seed_state, key)
    point = jax.make_jaxpr(lab.point)(state, knob_arrays({})).jaxpr
    point, _ = pe.dce_jaxpr(point, [True] * len(point.outvars))
    seed = jax.make_jaxpr(lab.seed_state)(key).jaxpr
    return dot_flops(point), dot_flops(seed)


FLOP_CASES = [  # block, inputs
    (dict(kind="attention", d_model=32, n_heads=4, mlp=False), dict(kind="embedding", batch=2, length=12, vocab=50)),
    (dict(kind="post_ln", d_model=32, n_heads=4, depth=2), dict(kind="gaussian", batch=2, length=12)),
    (dict(kind="pre_ln", d_model=32, n_heads=2, mlp_ratio=2), dict(kind="anisotropic", batch=3, length=8)),
    (dict(kind="post_ln", d_model=16, n_heads=2, qk_norm="rmsnorm", causal=True), dict(kind="student_t", batch=2, length=10)),
    # T and D > 64: the stable rank's Lanczos path
    (dict(kind="attention", d_model=72, n_heads=4, mlp=False, depth=2), dict(kind="embedding", batch=1, length=80, vocab=50)),
]


@pytest.mark.parametrize("blk,inp,metrics", [c + (None,) for c in FLOP_CASES] + [
    (FLOP_CASES[0][0], FLOP_CASES[0][1], ("attn_entropy", "attn_max")),        # A V, W_O dead
    (FLOP_CASES[1][0], FLOP_CASES[1][1], ("attn_entropy", "qk_mean_cos")),     # depth 2: whole
    (FLOP_CASES[3][0], FLOP_CASES[3][1], ("attn_max",)),
    (FLOP_CASES[2][0], FLOP_CASES[2][1], ("stable_rank",))])
def test_flop_counts_equal_traced_dot_generals(blk, inp, metrics):
    fl = bench.flop_counts(blk, inp, metrics)
    block, inputs = BlockSpec(**blk), InputSpec(**inp)
    engine = Lab(block, inputs, metrics)
    assert fl["path"] == ("factored" if engine.factor else "hoisted" if engine.hoist else "plain")
    assert traced_flops(engine) == (fl["engine_per_point"], fl["engine_per_seed"])
    plain = Lab(block, inputs, metrics, hoist=False, factor=False)
    assert traced_flops(plain) == (fl["plain_per_point"], fl["plain_per_seed"])


def test_flop_counts_paper_size_by_hand():
    """W2/W3 per point, by hand (B=16, T=512, D=768, H=12, F=3072; Lanczos 64 steps on the
    512 x 512 Gram matrices)."""
    b, t, d, f = 16, 512, 768, 3072
    lanczos = b * 64 * (2 * t * t + 8 * 64 * t)
    metrics = 2 * b * 12 * t * t + 2 * b * t * t * d + lanczos      # entropy, Gram, Lanczos
    av, wo, proj, logits = 2 * b * t * t * d, 2 * b * t * d * d, 6 * b * t * d * d, 2 * b * t * t * d
    w2 = bench.flop_counts(bench._ATTN, bench._PAPER_INPUTS)
    assert w2["engine_per_point"] == av + wo + metrics
    assert w2["plain_per_point"] == proj + logits + av + wo + metrics
    w3 = bench.flop_counts(bench._BERT, bench._PAPER_INPUTS)
    assert w3["engine_per_point"] == av + wo + 4 * b * t * d * f + metrics
    assert w3["engine_per_seed"] == proj + 6 * d * d + 2 * b * t * t * d + 2 * b * t * d + 4 * b * t * d


# ----------------------------------------------------------------------------- factored == plain
FACTOR_POINTS = [
    dict(q_scale=1.0, k_scale=1.0, temperature=1.0),
    dict(q_scale=3.0, k_scale=0.5, temperature=0.7, q_shift=2.0, k_shift=1.5, drift_norm=0.8),
    dict(q_scale=0.2, k_scale=4.0, temperature=2.5, q_shift=0.3, drift_norm=3.0, input_corr=0.6),
    dict(q_scale=8.0, temperature=0.5, k_shift=3.0, drift_norm=0.1, input_corr=0.95,
         attn_residual=0.5, mlp_residual=2.0),
]


@pytest.mark.parametrize("kind,causal", [("attention", True), ("post_ln", False)])
def test_factored_point_equals_plain_point(kind, causal):
    """Lab() (factored layer-0 logits) vs Lab(hoist=False) (the plain oracle), gaussian inputs
    with input_corr, depth 2, every knob of the lead moving together. The math is the same;
    float32 rounding differs (sum_c a_c (X_c W) reassociates (sum_c a_c X_c) W: relative ~ D eps
    ~ 4e-6; the plain path carries the j-constant logit terms of size |drift| |W_K b|, that the
    factored one drops exactly, ~ eps of them). Measured <= 5e-7 of (1 + |value|) here
    (stable_rank is O(T)); 2e-5 abs + 2e-5 rel leaves ~40x room and stays far below the knob
    effects (>= 1e-2)."""
    block = BlockSpec(kind=kind, d_model=32, n_heads=4, mlp_ratio=2, depth=2, causal=causal,
                      init="fan_in")
    inputs = InputSpec(kind="gaussian", batch=2, length=12)
    fast, plain = Lab(block, inputs), Lab(block, inputs, hoist=False, factor=False)
    assert fast.factor and not plain.hoist
    key = jax.random.PRNGKey(5)
    pf, pp = jax.jit(fast.point), jax.jit(plain.point)
    sf, sp = jax.jit(fast.seed_state)(key), jax.jit(plain.seed_state)(key)
    for pt in FACTOR_POINTS:
        kn = knob_arrays(pt)
        got, want = pf(sf, kn), pp(sp, kn)
        for k in fast.metric_names:
            np.testing.assert_allclose(got[k], want[k], rtol=2e-5, atol=2e-5, err_msg=f"{k} at {pt}")


def test_micro_batch_of_one_point_equals_point_loop():
    """sweep.micro_batch_fn calls lab.point without vmap for a micro-batch of one point: the
    results match jit(lab.point) per point and do not depend on the chunk size."""
    from simlab.config import load_config
    from simlab.sweep import grid_knobs, run_sweep
    cfg = {"block": {"kind": "post_ln", "d_model": 16, "n_heads": 2},
           "inputs": {"kind": "gaussian", "batch": 2, "length": 8},
           "axes": [{"name": "drift_norm", "values": [0.0, 0.5, 2.0]},
                    {"name": "input_corr", "values": [0.0, 0.7]}],
           "sweep": {"seeds": 2, "micro_batch": 1}}
    a = run_sweep(cfg, chunk_size=1, quiet=True)
    b = run_sweep(cfg, chunk_size=4, quiet=True)
    c = load_config(cfg)
    lab = Lab(c.block, c.inputs)
    point, grid = jax.jit(lab.point), grid_knobs(c)
    for s in range(2):
        state = jax.jit(lab.seed_state)(jax.random.fold_in(jax.random.PRNGKey(0), s))
        for i in range(c.n_points):
            kn = {**{k: np.float32(v) for k, v in c.knobs.items()}, **{k: v[i] for k, v in grid.items()}}
            want = point(state, kn)
            for k in lab.metric_names:
                got = a[k][np.unravel_index(i, c.shape) + (s,)]
                np.testing.assert_allclose(got, want[k], rtol=1e-6, atol=1e-6, err_msg=k)
    for k in lab.metric_names:
        assert np.array_equal(a[k], b[k]), k


# ----------------------------------------------------------------------------- metrics changes
def np_top(g):
    return np.linalg.eigvalsh(np.asarray(g, np.float64))[..., -1]


@pytest.mark.parametrize("n", [8, 64, 96])
def test_top_eigenvalue_vs_float64(n):
    """Exact path (n <= 64) and Lanczos path (n > 64) on Gram matrices of isotropic Gaussian
    rows (the slowest Lanczos convergence we found), a drift (one dominant direction), rank one
    (breakdown after one step) and orthonormal rows (all eigenvalues equal: breakdown).
    float32 eigvalsh itself is ~3e-7 off; 2e-6 relative is ~10x the measured error."""
    r = np.random.default_rng(n)
    d = n + n // 2
    ys = [r.standard_normal((3, n, d)), r.standard_normal((2, n, d)) + 0.7 * r.standard_normal(d),
          np.einsum("bt,bd->btd", r.standard_normal((2, n)), r.standard_normal((2, d))),
          np.linalg.qr(r.standard_normal((2, d, n)))[0].transpose(0, 2, 1) * 3.0]
    top = jax.jit(M.top_eigenvalue)
    for y in ys:
        g = np.einsum("btd,bsd->bts", y, y)
        want = np_top(g)
        got = np.asarray(top(jnp.asarray(g, jnp.float32)))
        np.testing.assert_allclose(got, want, rtol=2e-6)
    assert float(top(jnp.zeros((1, n, n)))[0]) == 0.0


def test_stable_rank_paper_size_vs_svd():
    """T = 512 > 64 (Lanczos) on an isotropic and a drifted 512 x 768 sequence."""
    r = np.random.default_rng(0)
    y = np.stack([r.standard_normal((512, 768)), r.standard_normal((512, 768)) + 0.2 * r.standard_normal(768)])
    s = np.linalg.svd(y.astype(np.float64), compute_uv=False)
    want = np.mean(np.sum(s ** 2, -1) / s[:, 0] ** 2)
    got = float(jax.jit(M.stable_rank)(jnp.asarray(y, jnp.float32)))
    assert abs(got - want) < 2e-6 * want


def test_tridiagonal_top_vs_float64():
    r = np.random.default_rng(3)
    d, e = r.standard_normal((6, 40)), r.standard_normal((6, 39))
    e[0, 5:10] = 0.0                                           # split matrices too
    t = np.stack([np.diag(d[i]) + np.diag(e[i], 1) + np.diag(e[i], -1) for i in range(6)])
    want = np_top(t)
    got = np.asarray(jax.jit(M.tridiagonal_top)(jnp.asarray(d, jnp.float32), jnp.asarray(e, jnp.float32)))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


@pytest.mark.parametrize("causal", [False, True])
def test_entropy_equals_previous_formula(causal):
    """-sum w log(max(w, tiny)) vs the previous -sum w log(where(w > 0, w, 1)), with exact zeros
    (causal mask, underflow of very sharp rows)."""
    r = np.random.default_rng(1)
    logits = jnp.asarray(r.standard_normal((2, 3, 16, 16)) * np.array([1.0, 30.0, 300.0])[None, :, None, None],
                         jnp.float32)
    if causal:
        logits = jnp.where(jnp.tril(jnp.ones((16, 16), bool)), logits, -jnp.inf)
    w = jax.nn.softmax(logits, -1)
    assert float(jnp.min(w)) == 0.0

    def previous(w_BHTS, causal):
        _, _, t, s = w_BHTS.shape
        n_keys, valid = M._row_weights(t, s, causal)
        h = -jnp.sum(w_BHTS * jnp.log(jnp.where(w_BHTS > 0, w_BHTS, 1.0)), axis=-1)
        norm = jnp.log(jnp.where(valid, n_keys, 2).astype(h.dtype))
        h = jnp.where(valid, h / norm, 0.0)
        return jnp.sum(h) / (jnp.sum(valid) * w_BHTS.shape[0] * w_BHTS.shape[1])
    assert abs(float(M.attn_entropy(w, causal)) - float(previous(w, causal))) < 1e-6


# ----------------------------------------------------------------------------- the benchmark
REQUIRED = {"points", "seeds", "points_per_s", "flops", "engine_gflops", "peak_fraction", "speedup",
            "loop", "engine", "target", "met"}


def test_quick_bench_writes_json(tmp_path):
    """W2 (a loop timed on a subset, the Lanczos path) and W4 (two grids) at quick sizes, in
    this process (W1 and W3 differ only in their configs)."""
    report, path = bench.run_bench(["W2", "W4"], quick=True, isolate=False, out_dir=tmp_path,
                                   peak_n=256, log=lambda *a: None)
    data = json.loads(path.read_text())
    assert path.parent == tmp_path and data["quick"] is True
    assert data["peak"]["gflops"] > 0 and data["machine"]["cores"] >= 1
    by = {w["name"]: w for w in data["workloads"]}
    assert list(by) == ["W2", "W4"]
    for name in ("W2",):
        w = by[name]
        assert REQUIRED <= set(w), name
        assert w["flops"]["path"] == "factored"
        assert w["engine"]["rss_peak_mb"] > 0 and w["loop"]["total_s"] > 0
        assert w["speedup"] > 0 and 0 < w["peak_fraction"]
        assert set(w["met"]) == set(bench.TARGETS[name])
    assert by["W2"]["loop"]["extrapolated"] and by["W2"]["loop"]["timed_points"] == 2
    w4 = by["W4"]
    assert [g["points"] for g in w4["grids"].values()] == [100, 1000]
    assert w4["memory_ratio"] > 0 and "memory_ratio" in w4["met"]
    assert "| W2 (factored) |" in bench.format_table(report)
    assert set(bench.workload_configs("W1", quick=True)) == {""}                 # W1, W3 configs load
    assert bench.flop_counts(**{k: bench.workload_configs("W3", True)[""][k] for k in ("block", "inputs")})["path"] == "factored"


def test_worker_subprocess():
    out = bench.run_worker({"kind": "peak", "n": 64, "repeats": 2}, isolate=True, timeout=120)
    assert out["n"] == 64 and out["gflops"] > 0


def test_cli_arguments():
    from simlab.cli import build_parser
    args = build_parser(["bench"]).parse_args(["bench", "--quick", "--only", "W1,W4", "--no-json"])
    assert args.quick and args.only == "W1,W4" and args.no_json and callable(args.cli_main)
