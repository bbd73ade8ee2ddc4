"""M2 of simlab.studies.bench (docs/performance.md, "M2: the decoder study's counterfactual
sweep"): the HF hooks peer (simlab.studies.bench.hf_decoder: transformers' own GGUF load, forward
hooks doing the study's interventions, a whole-model forward per point) is an independent oracle
for simlab's side (simlab.studies.bench.decoder: experiments/smollm2_counterfactual.py's own
programs) on the tiny Llama GGUF fixture: every condition, both reads, every measure and head
statistic, in float32. No timing is asserted."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from simlab.checkpoints import load
from simlab.studies import bench
from simlab.studies.bench import decoder, trained_decoder
from simlab.studies.bench.workloads import hooks_config

from conftest import doc_block

ROOT = Path(__file__).resolve().parents[2]
needs_hf = pytest.mark.skipif(
    any(
        importlib.util.find_spec(m) is None for m in ("torch", "transformers", "accelerate", "gguf")
    ),
    reason="the HF hooks peer needs torch, transformers, gguf and accelerate (pip install -e "
    "'.[bench,models]' accelerate)",
)
# float32: the two sides round differently (simlab's moments and centring against a plain
# covariance; the renormalised sink rows); observed up to 8e-7 relative on the fixture
F32_RTOL = 1e-5


@pytest.fixture(scope="module")
def both():
    """simlab's and the peer's values on the --quick settings, at a length of their own."""
    from simlab.studies.bench import hf_decoder

    cfg = hooks_config("M2", quick=True)
    path = decoder.gguf_path(cfg["source"])
    ck = load(path)
    dims = decoder.massive_dims(cfg["massive"], cfg["layers"])
    wins = decoder.windows(ck.vocab, 2, 12, 1)
    got = decoder.Sweep(ck, cfg["layers"], dims).values(wins[0])
    want = hf_decoder.sweep(hf_decoder.load_model(path), cfg["layers"], dims, wins)
    return got, (want[0][0], want[1][0])


@needs_hf
def test_hooks_peer_equals_simlab_in_float32(both):
    """Every condition at both layers, both reads, the seven measures and the per-head sink mass
    and entropy: the same numbers (NaN nowhere: both layers have massive dims)."""
    (vals, heads), (hv, hh) = both
    assert vals.shape == (2, 6, 2, 7) and heads.shape == (2, 6, 2, 4)
    assert not np.isnan(vals).any() and not np.isnan(hv).any()
    np.testing.assert_allclose(vals, hv, rtol=F32_RTOL, atol=1e-6)
    np.testing.assert_allclose(heads, hh, rtol=F32_RTOL, atol=1e-6)
    assert trained_decoder.difference(vals, hv) < F32_RTOL
    # the interventions act, as they must: the causal uniform clamp has H / ln n = 1 in every
    # head and sink mass mean_i 1 / (i + 1); the sink clamp leaves key 0 to row 0 alone (1 / T)
    t = 12
    np.testing.assert_allclose(heads[:, 1, 1], 1.0, rtol=0, atol=1e-6)
    np.testing.assert_allclose(heads[:, 1, 0], np.mean(1.0 / np.arange(1, t + 1)), rtol=1e-6)
    np.testing.assert_allclose(heads[:, 2, 0], 1.0 / t, rtol=1e-6)
    # every condition changes the layer's output measures relative to trained
    assert np.all(np.abs(vals[:, 1:, 0] - vals[:, :1, 0]).max(-1) > 1e-4)


def test_a_mismatch_in_the_defined_conditions_is_infinite():
    """difference: a condition defined on one side only is not agreement."""
    a = np.array([1.0, np.nan])
    assert trained_decoder.difference(a, np.array([1.0, 2.0])) == float("inf")
    assert trained_decoder.difference(np.array([3.0, 0.5]), np.array([2.0, 0.25])) == 0.5


def test_massive_dims_are_the_studys_calibration():
    meta = json.loads(decoder.STUDY_META.read_text())["calibration"]["massive_dims"]
    dims = decoder.massive_dims("study", (0, 12, 29))
    assert dims[0] is None and dims[12] == tuple(meta["12"]) and dims[29] == tuple(meta["29"])
    assert decoder.massive_dims({"1": [3]}, (0, 1)) == {0: None, 1: (3,)}


def test_docs_state_m2_settings_from_the_registry():
    text = (ROOT / "docs" / "performance.md").read_text()
    assert doc_block(text, "m2-settings") == trained_decoder.settings("M2")


@needs_hf
@pytest.mark.slow
def test_quick_m2_writes_its_row(tmp_path):
    """M2 at --quick size in this process: both sides timed, their numbers compared in the run,
    the floor at the run's own matmul peak, the row and the verdict in the table."""
    rep, path = bench.run_bench(
        ["M2"], quick=True, isolate=False, out_dir=tmp_path, peak_n=64, log=lambda *a: None
    )
    m2 = json.loads(path.read_text())["workloads"][0]
    assert m2["name"] == "M2" and m2["layers"] == [0, 1]
    assert m2["hooks"]["forwards_per_window"] == 1 + 2 * 5
    assert m2["max_difference"] < F32_RTOL
    floor = m2["simlab"]["flops_per_window"]["total"] / (rep["peak"]["gflops"] * 1e9)
    assert m2["simlab_floor_s"] == pytest.approx(floor, rel=1e-12)
    assert m2["ceiling"] == pytest.approx(m2["hooks"]["steady_s"] / floor, rel=1e-12)
    assert m2["simlab"]["compile_s"] > 0 and m2["hooks"]["steady_s"] > 0
    text = bench.format_table(rep)
    assert "| M2 the decoder study's counterfactual sweep (tied.gguf, layers 0, 1)" in text
    assert "M2 target (the HF hooks peer" in text
