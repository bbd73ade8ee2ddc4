"""The decoder instruments in a [checkpoint] sweep on the tiny random Llama fixture: the sink
clamp on one head and the per-head lambda, set in [block] on trained layers and swept, against
HuggingFace's float64 attention weights of the fixture (tests/fixtures/checkpoints/llama's
oracle.npz): removing key 0 from a softmax and renormalising is w_ij / (1 - w_i0) for j >= 1."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

FIXTURE = pathlib.Path(__file__).parents[1] / "fixtures" / "checkpoints" / "llama"


def np_entropy_per_head(w):
    """Per head: the mean over sequences and rows with more than one attended key (causal:
    rows i >= 1) of H(w_i) / log(i + 1)."""
    t = w.shape[-1]
    ent = -np.sum(np.where(w > 0, w * np.log(np.where(w > 0, w, 1.0)), 0.0), -1)
    return (ent[..., 1:] / np.log(np.arange(2, t + 1))).mean(axis=(0, 2))


@pytest.mark.slow
def test_sink_clamp_and_head_lambda_on_trained_layers(tmp_path):
    """Layer 1 with pattern "sink" on head 1 and scaled_head 0, head_scale swept over (1, 2):
    head 1's sink mass is 1/T (row 0's only key) and its entropy that of HF's weights with key
    0 removed and renormalised; at head_scale 1 the other heads' sink mass and entropy are
    HF's; head_scale moves head 0 only."""
    import simlab

    oracle = np.load(FIXTURE / "oracle.npz")
    np.save(tmp_path / "ids.npy", oracle["ids"])
    b, t = oracle["ids"].shape
    cfg = {
        "checkpoint": {"path": str(FIXTURE), "layer": 1, "ids": str(tmp_path / "ids.npy")},
        "block": {"depth": 1, "pattern": "sink", "pattern_head": 1, "scaled_head": 0},
        "inputs": {"kind": "tokens", "vocab": 100, "batch": b, "length": t},
        "axes": [{"name": "head_scale", "values": [1.0, 2.0]}],
        "sweep": {"seeds": 1, "metrics": ["attn_sink_head", "attn_entropy_head"]},
    }
    res = simlab.run_sweep(cfg, out=tmp_path / "run", quiet=True)
    sink, ent = res["attn_sink_head"][:, 0], res["attn_entropy_head"][:, 0]  # (head_scale, H)
    w = oracle["attn64"][1]  # (B, H, T, S)
    cut = w.copy()
    cut[:, 1, 1:, 0] = 0.0
    cut[:, 1, 1:] /= cut[:, 1, 1:].sum(-1, keepdims=True)
    np.testing.assert_allclose(sink[0], cut[..., 0].mean(axis=(0, 2)), atol=2e-6)
    np.testing.assert_allclose(ent[0], np_entropy_per_head(cut), atol=2e-5)
    np.testing.assert_allclose(sink[:, 1], 1 / t, rtol=1e-6)  # only causal row 0 keeps key 0
    np.testing.assert_allclose(sink[1, 2:], sink[0, 2:], rtol=1e-6)
    np.testing.assert_allclose(ent[1, 1:], ent[0, 1:], rtol=1e-6)
    assert abs(ent[1, 0] - ent[0, 0]) > 1e-3
    assert res.meta["config"]["block"]["pattern_head"] == 1
