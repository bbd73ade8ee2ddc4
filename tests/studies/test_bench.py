"""simlab.studies.bench (docs/performance.md): the traced FLOP counts against hand formulas,
the PyTorch peer against simlab on the same weights, a quick benchmark's JSON, the worker
subprocess protocol and the CLI."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from simlab.core.knobs import knob_arrays
from simlab.core.lab import Lab
from simlab.core.spec import BlockSpec, InputSpec
from simlab.studies import bench


# ----------------------------------------------------------------------------- FLOP counts
def test_traced_flops_paper_size_by_hand():
    """bench.traced_flops (dot_generals of the traced programs, loop bodies times their trip
    count) against the counts by hand, W2/W3 per point and per seed (B=16, T=512, D=768, H=12,
    F=3072; Lanczos 64 steps on the 512 x 512 Gram matrices). The factored tiled path runs A V
    and W_O per tile, the position-constant value part through W_O once (2 D^2), and no dot for
    the entropy; the plain path also projects, forms Q K^T and contracts w log w."""
    b, t, d, f, h = 16, 512, 768, 3072, 12
    lanczos = b * 64 * (2 * t * t + 8 * 64 * t)
    metrics = 2 * b * t * t * d + lanczos  # Gram, Lanczos
    av, wo, proj, logits = (
        2 * b * t * t * d,
        2 * b * t * d * d,
        6 * b * t * d * d,
        2 * b * t * t * d,
    )
    w2 = bench.flop_counts(bench.workload_configs("W2")[""])
    assert w2["path"] == "factored"
    assert w2["engine_per_point"] == av + wo + 2 * d * d + metrics
    assert w2["plain_per_point"] == proj + logits + 2 * b * h * t * t + av + wo + metrics
    w3 = bench.flop_counts(bench.workload_configs("W3")[""])
    assert w3["engine_per_point"] == av + wo + 2 * d * d + 4 * b * t * d * f + metrics
    assert (
        w3["engine_per_seed"]
        == proj + 6 * d * d + 2 * b * t * t * d + 2 * b * t * d + 4 * b * t * d
    )
    assert w3["plain_per_seed"] == 0


def test_dot_flops_counts_scan_bodies():
    """A lax.map of n matmuls counts n times; a dot in a while loop of unknown length is refused."""
    a = jnp.ones((5, 3, 4))
    j = jax.make_jaxpr(lambda a: jax.lax.map(lambda x: x @ x.T, a))(a).jaxpr
    assert bench.dot_flops(j) == 5 * 2 * 3 * 4 * 3
    w = jax.make_jaxpr(
        lambda x, n: jax.lax.while_loop(
            lambda c: c[1] < n, lambda c: (c[0] @ c[0], c[1] + 1), (x, 0)
        )[0]
    )(jnp.ones((3, 3)), 4).jaxpr
    with pytest.raises(ValueError):
        bench.dot_flops(w)


# ----------------------------------------------------------------------------- the benchmark
REQUIRED = {
    "points",
    "seeds",
    "points_per_s",
    "flops",
    "engine_gflops",
    "peak_fraction",
    "speedup",
    "loop",
    "engine",
    "target",
    "met",
}
PEER_REQUIRED = {
    "points",
    "seeds",
    "flops",
    "engine_cold",
    "engine_warm",
    "torch",
    "engine_ms_per_point",
    "engine_gflops",
    "peak_fraction",
    "target",
    "met",
}


@pytest.mark.slow
def test_quick_bench_writes_json(tmp_path):
    """P1 (engine cold / warm cache; the PyTorch loop when torch is installed), W2 (a loop timed
    on a subset, the Lanczos path) and W4 (two grids) at quick sizes, in this process."""
    try:
        import torch  # noqa: F401

        device = "cpu"
    except ImportError:
        device = None
    report, path = bench.run_bench(
        ["P1", "W2", "W4"],
        quick=True,
        isolate=False,
        out_dir=tmp_path,
        peak_n=256,
        log=lambda *a: None,
        torch_device=device,
    )
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
    assert set(bench.workload_configs("W1", quick=True)) == {""}  # W1, W3 configs load
    assert bench.flop_counts(bench.workload_configs("W3", True)[""])["path"] == "factored"


@pytest.mark.slow
def test_torch_peer_equals_simlab_on_the_same_weights():
    """The PyTorch loop fed simlab's own weights and tokens (torch_loop.from_simlab) computes
    the metrics of simlab's engine (tiled, factored) to float32 rounding, for the attention-only
    and the BERT block, across drift and lambda: two independent implementations agree."""
    torch = pytest.importorskip("torch")
    from simlab.studies.bench import torch_loop

    for kind in ("attention", "post_ln"):
        block = BlockSpec(kind=kind, d_model=48, n_heads=4, mlp=kind == "post_ln", mlp_ratio=2)
        inputs = InputSpec(kind="embedding", batch=3, length=20, vocab=97, embed_std=0.5)
        lab = Lab(block, inputs, torch_loop.METRICS)
        state = jax.jit(lab.seed_state)(jax.random.PRNGKey(3))
        drawn = torch_loop.from_simlab(state)
        point = jax.jit(lab.point)
        with torch.inference_mode():
            for drift, lam in ((0.0, 1.0), (0.7, 3.0), (5.0, 0.3)):
                want = torch_loop.point(drawn, kind, 4, drift, lam, block.ln_eps)
                got = point(
                    state, knob_arrays({"drift_norm": drift, "q_scale": lam, "k_scale": lam})
                )
                for k in torch_loop.METRICS:
                    np.testing.assert_allclose(
                        float(got[k]),
                        want[k],
                        rtol=2e-5,
                        atol=2e-5,
                        err_msg=f"{kind} {k} at N={drift}, lambda={lam}",
                    )


@pytest.mark.slow
def test_worker_subprocess():
    out = bench.run_worker({"kind": "peak", "n": 64, "repeats": 2}, isolate=True, timeout=120)
    assert out["n"] == 64 and out["gflops"] > 0


def test_cli_arguments():
    from simlab.cli import build_parser

    args = build_parser(["bench"]).parse_args(["bench", "--quick", "--only", "W1,W4", "--no-json"])
    assert args.quick and args.only == "W1,W4" and args.no_json and callable(args.cli_main)


# ----------------------------------------------------------------------------- R1: refinement
@pytest.mark.slow
def test_refined_paper_map_against_the_dense_grid_at_tiny_sizes(tmp_path):
    """R1 at tiny sizes (the paper's protocol, d 16, 2 x 16 tokens, 5 x 5 + 2 levels against the
    dense 17 x 17 grid): the shared points bit-identical, the boundaries within one finest cell
    (they coincide), fewer points; the closed-form prediction counts the same levels."""
    from simlab.studies.bench import refine as r1

    cfg = r1.paper_map(levels=2, quick=True)
    cfg["block"] = {**cfg["block"], "d_model": 16, "n_heads": 2, "mlp": False}
    cfg["inputs"] = {**cfg["inputs"], "batch": 2, "length": 16, "vocab": 100}
    cfg["axes"] = [{**a, "num": 5} for a in cfg["axes"]]
    cfg["sweep"] = {**cfg["sweep"], "metrics": ["attn_entropy"]}
    res = r1.refine_vs_dense(cfg, out=tmp_path)
    assert res["lattice"] == [17, 17] and res["dense_points"] == 289
    assert res["equal_at_shared_points"]
    assert res["deviation_cells"] <= 1.0 and res["met"]["deviation_cells"]
    assert res["boundary_segments"][0] > 5
    assert res["refined_points"] == sum(res["points_per_level"]) < 289 / 2
    assert "finest cells" in r1.format_report(res)
    pred = r1.predicted_points(cfg)
    assert len(pred) == 3 and pred[0] == 25
    full = r1.predicted_points(r1.paper_map(levels=2, quick=False))
    assert sum(full) <= 625  # experiments/paper_refined.toml: within experiment 1's budget


def test_compile_profile_sums_every_process_by_file_and_function(tmp_path):
    """benchmarks/compile_profile.py: the report sums the events of every worker's file, per
    event, per test file and per compiled function (exact on made-up records)."""
    from benchmarks import compile_profile as cp

    compile_ev, trace_ev, _ = cp.EVENTS
    (tmp_path / "gw0.json").write_text(
        json.dumps(
            {
                "records": [
                    ["tests/a.py", compile_ev, 2.0, "jit(f)"],
                    ["tests/a.py", trace_ev, 0.5, "f"],
                    ["tests/b.py", compile_ev, 1.0, "jit(g)"],
                ],
                "hits": {"tests/a.py": 1},
            }
        )
    )
    (tmp_path / "gw1.json").write_text(
        json.dumps({"records": [["tests/b.py", compile_ev, 4.0, "jit(f)"]], "hits": {"x": 2}})
    )
    lines = cp.summary(tmp_path)
    assert lines[1].split() == [
        "backend",
        "compile",
        "7.0",
        "s,",
        "3",
        "programs",
        "(3",
        "loaded",
        "from",
        "the",
        "cache)",
    ]
    assert lines[2].split() == ["tracing", "0.5", "s"]
    files = lines[lines.index("  backend compile by test file (top 10):") + 1 :][:2]
    assert [ln.split() for ln in files] == [["5.0", "s", "tests/b.py"], ["2.0", "s", "tests/a.py"]]
    funs = lines[-2:]
    assert [ln.split() for ln in funs] == [
        ["6.0", "s", "2", "x", "jit(f)"],
        ["1.0", "s", "1", "x", "jit(g)"],
    ]
    assert cp.summary(tmp_path / "none") == ["compile profile: no jax events recorded"]
