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

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from simlab import bench
from simlab import metrics as M
from simlab.lab import Lab, knob_arrays
from simlab.spec import BlockSpec, InputSpec


# ----------------------------------------------------------------------------- FLOP counts
def test_traced_flops_paper_size_by_hand():
    """bench.traced_flops (dot_generals of the traced programs, loop bodies times their trip
    count) against the counts by hand, W2/W3 per point and per seed (B=16, T=512, D=768, H=12,
    F=3072; Lanczos 64 steps on the 512 x 512 Gram matrices). The factored tiled path runs A V
    and W_O per tile, the position-constant value part through W_O once (2 D^2), and no dot for
    the entropy; the plain path also projects, forms Q K^T and contracts w log w."""
    b, t, d, f, h = 16, 512, 768, 3072, 12
    lanczos = b * 64 * (2 * t * t + 8 * 64 * t)
    metrics = 2 * b * t * t * d + lanczos                            # Gram, Lanczos
    av, wo, proj, logits = 2 * b * t * t * d, 2 * b * t * d * d, 6 * b * t * d * d, 2 * b * t * t * d
    w2 = bench.flop_counts(bench.workload_configs("W2")[""])
    assert w2["path"] == "factored"
    assert w2["engine_per_point"] == av + wo + 2 * d * d + metrics
    assert w2["plain_per_point"] == proj + logits + 2 * b * h * t * t + av + wo + metrics
    w3 = bench.flop_counts(bench.workload_configs("W3")[""])
    assert w3["engine_per_point"] == av + wo + 2 * d * d + 4 * b * t * d * f + metrics
    assert w3["engine_per_seed"] == proj + 6 * d * d + 2 * b * t * t * d + 2 * b * t * d + 4 * b * t * d
    assert w3["plain_per_seed"] == 0


def test_dot_flops_counts_scan_bodies():
    """A lax.map of n matmuls counts n times; a dot in a while loop of unknown length is refused."""
    a = jnp.ones((5, 3, 4))
    j = jax.make_jaxpr(lambda a: jax.lax.map(lambda x: x @ x.T, a))(a).jaxpr
    assert bench.dot_flops(j) == 5 * 2 * 3 * 4 * 3
    w = jax.make_jaxpr(lambda x, n: jax.lax.while_loop(lambda c: c[1] < n, lambda c: (c[0] @ c[0], c[1] + 1),
                                                       (x, 0))[0])(jnp.ones((3, 3)), 4).jaxpr
    with pytest.raises(ValueError):
        bench.dot_flops(w)


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
    fast, plain = Lab(block, inputs), Lab(block, inputs, hoist=False, factor=False, tiled=False)
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
PEER_REQUIRED = {"points", "seeds", "flops", "engine_cold", "engine_warm", "torch", "engine_ms_per_point",
                 "engine_gflops", "peak_fraction", "target", "met"}


def test_quick_bench_writes_json(tmp_path):
    """P1 (engine cold / warm cache; the PyTorch loop when torch is installed), W2 (a loop timed
    on a subset, the Lanczos path) and W4 (two grids) at quick sizes, in this process."""
    try:
        import torch  # noqa: F401
        device = "cpu"
    except ImportError:
        device = None
    report, path = bench.run_bench(["P1", "W2", "W4"], quick=True, isolate=False, out_dir=tmp_path,
                                   peak_n=256, log=lambda *a: None, torch_device=device)
    data = json.loads(path.read_text())
    assert path.parent == tmp_path and data["quick"] is True
    assert data["peak"]["gflops"] > 0 and data["machine"]["cores"] >= 1
    by = {w["name"]: w for w in data["workloads"]}
    assert list(by) == ["P1", "W2", "W4"]
    p1 = by["P1"]
    assert PEER_REQUIRED <= set(p1)
    assert p1["points"] == 4 and p1["engine_cold"]["wall_s"] > 0 and p1["engine_warm"]["wall_s"] > 0
    assert p1["rounds"][0]["engine_cold"]["matmul_precision"] == "highest"
    if device is not None:
        assert p1["torch"]["n_points"] == 4 and p1["ratio_cold"] > 0 and "ratio_warm" in p1["met"]
    w = by["W2"]
    assert REQUIRED <= set(w)
    assert w["flops"]["path"] == "factored"
    assert w["engine"]["rss_peak_mb"] > 0 and w["loop"]["total_s"] > 0
    assert w["speedup"] > 0 and 0 < w["peak_fraction"]
    assert set(w["met"]) == set(bench.TARGETS["W2"])
    assert w["loop"]["extrapolated"] and w["loop"]["timed_points"] == 2
    w4 = by["W4"]
    assert [g["points"] for g in w4["grids"].values()] == [100, 1000]
    assert w4["memory_ratio"] > 0 and "memory_ratio" in w4["met"]
    table = bench.format_table(report)
    assert "| W2 (factored) |" in table and "| P1 attention-only" in table
    assert set(bench.workload_configs("W1", quick=True)) == {""}                 # W1, W3 configs load
    assert bench.flop_counts(bench.workload_configs("W3", True)[""])["path"] == "factored"


def test_torch_peer_equals_simlab_on_the_same_weights():
    """The PyTorch loop fed simlab's own weights and tokens (bench_torch.from_simlab) computes
    the metrics of simlab's engine (tiled, factored) to float32 rounding, for the attention-only
    and the BERT block, across drift and lambda: two independent implementations agree."""
    torch = pytest.importorskip("torch")
    from simlab import bench_torch
    for kind in ("attention", "post_ln"):
        block = BlockSpec(kind=kind, d_model=48, n_heads=4, mlp=kind == "post_ln", mlp_ratio=2)
        inputs = InputSpec(kind="embedding", batch=3, length=20, vocab=97, embed_std=0.5)
        lab = Lab(block, inputs, bench_torch.METRICS)
        state = jax.jit(lab.seed_state)(jax.random.PRNGKey(3))
        drawn = bench_torch.from_simlab(state)
        point = jax.jit(lab.point)
        with torch.inference_mode():
            for drift, lam in ((0.0, 1.0), (0.7, 3.0), (5.0, 0.3)):
                want = bench_torch.point(drawn, kind, 4, drift, lam, block.ln_eps)
                got = point(state, knob_arrays({"drift_norm": drift, "q_scale": lam, "k_scale": lam}))
                for k in bench_torch.METRICS:
                    np.testing.assert_allclose(float(got[k]), want[k], rtol=2e-5, atol=2e-5,
                                               err_msg=f"{kind} {k} at N={drift}, lambda={lam}")


def test_worker_subprocess():
    out = bench.run_worker({"kind": "peak", "n": 64, "repeats": 2}, isolate=True, timeout=120)
    assert out["n"] == 64 and out["gflops"] > 0


def test_cli_arguments():
    from simlab.cli import build_parser
    args = build_parser(["bench"]).parse_args(["bench", "--quick", "--only", "W1,W4", "--no-json"])
    assert args.quick and args.only == "W1,W4" and args.no_json and callable(args.cli_main)
