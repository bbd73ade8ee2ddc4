"""The example plugin's tests: simlab's conformance check on each entry (one call each), a numpy
oracle for the block and the metric, and the claim's verdict at tiny sizes."""

from __future__ import annotations

import jax
import numpy as np
import pytest
import simlab_sandwich

import simlab
from simlab import testing
from simlab.core.block import layer_apply
from simlab.core.init import init_params, layer
from simlab.core.knobs import knob_arrays
from simlab.core.spec import BlockSpec


def test_block_kind_conformance():
    testing.check_block_kind("sandwich")


def test_input_kind_conformance():
    testing.check_input_kind("uniform", identity=False)


def test_metric_conformance():
    testing.check_metric("out_mean_ratio", identity=False)


def np_norm(x):
    x = np.asarray(x, np.float64)
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-12)


def test_sandwich_token_wise_against_numpy():
    """y = m h + LN(MLP(LN(h))), h = a x + LN(attn), against float64 numpy (tanh GELU)."""
    spec = BlockSpec(kind="sandwich", d_model=8, n_heads=2, mlp_ratio=2, init="fan_in")
    p = layer(init_params(spec, jax.random.PRNGKey(0)), 0)
    r = np.random.default_rng(0)
    x, attn = r.standard_normal((2, 2, 3, 8)).astype(np.float32)
    kn = knob_arrays(dict(attn_residual=0.7, mlp_residual=1.3))
    got = simlab_sandwich._sandwich_token_wise(spec, p, x, attn, kn)
    h = 0.7 * x + np_norm(attn)
    w1, w2 = (np.asarray(p[k], np.float64) for k in ("w1", "w2"))
    z = np_norm(h) @ w1
    g = 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z**3)))
    want = 1.3 * h + np_norm(g @ w2)
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=2e-5)
    # and the projections see LN(x): the block differs from pre-LN only after attention
    lay = layer_apply(spec, p, x, kn, np.zeros((2, 4)), np.zeros((2, 4)))
    np.testing.assert_allclose(
        np.asarray(lay.y),
        simlab_sandwich._sandwich_token_wise(spec, p, x, lay.attn, kn),
        rtol=1e-6,
        atol=1e-6,
    )


def test_out_mean_ratio_against_numpy():
    r = np.random.default_rng(1)
    y = r.standard_normal((3, 5, 4)) + 2.0
    want = (
        np.linalg.norm(y.reshape(-1, 4).mean(0)) / np.linalg.norm(y.reshape(-1, 4), axis=1).mean()
    )
    got = float(simlab_sandwich.out_mean_ratio(y.astype(np.float32)))
    assert abs(got - want) < 1e-5
    same = np.broadcast_to(r.standard_normal(4), (2, 3, 4)).astype(np.float32)
    assert abs(float(simlab_sandwich.out_mean_ratio(same)) - 1.0) < 1e-6  # one common vector
    assert float(simlab_sandwich.out_mean_ratio(np.zeros((1, 2, 3), np.float32))) == 0.0


def test_head_metric_conformance():
    """The per-head metric through simlab.testing's checks (paths, float64, extremes); the
    sweeps of the next tests run it through the engine."""
    testing.check_metric("attn_max_head", identity=False)


def test_max_weight_per_head_against_numpy():
    r = np.random.default_rng(4)
    w = r.random((3, 2, 5, 5)) ** 2
    w /= w.sum(-1, keepdims=True)
    want = [np.mean([w[b, h, i].max() for b in range(3) for i in range(5)]) for h in range(2)]
    got = simlab_sandwich.max_weight_per_head(w.max(-1).astype(np.float32))
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-6)


def test_a_head_metric_through_every_command(tmp_path, capsys):
    """A plugin metric with a `head` dimension through sweep, grow, merge, info, plot
    (--select head=1) and export, with no change to simlab: the arrays carry the dimension
    named head, of size block.n_heads, with its values from the lab."""
    from simlab.cli import main

    cfg = {
        "plugins": ["simlab_sandwich"],
        "block": {"kind": "sandwich", "d_model": 8, "n_heads": 2, "mlp_ratio": 2},
        "inputs": {"kind": "uniform", "batch": 2, "length": 4},
        "axes": [{"name": "drift_norm", "values": [0.0, 1.0, 3.0]}],
        "sweep": {"seeds": 2, "metrics": ["attn_max_head", "out_cos"], "micro_batch": 2},
    }
    out = tmp_path / "s"
    for i in range(2):  # two workers, then `simlab merge`
        assert simlab.run_sweep(cfg, out=out, quiet=True, worker=(i, 2)) is None
    assert main(["merge", str(out), "--quiet"]) == 0
    res = simlab.load(out)
    assert res["attn_max_head"].shape == (3, 2, 2)
    assert res.dims("attn_max_head") == ["drift_norm", "seed", "head"]
    lab = simlab.Lab(
        simlab.BlockSpec(**cfg["block"]), simlab.InputSpec(**cfg["inputs"]), ["attn_max_head"]
    )
    assert lab.metric_dims() == {"attn_max_head": ["head"]}
    # grow: more seeds and a wider axis, only the new pairs computed
    grown = {**cfg, "axes": [{"name": "drift_norm", "values": [0.0, 1.0, 3.0, 9.0]}]}
    grown["sweep"] = {**cfg["sweep"], "seeds": 3}
    res2 = simlab.run_sweep(grown, out=tmp_path / "s", quiet=True)
    assert res2["attn_max_head"].shape == (4, 3, 2)
    np.testing.assert_array_equal(res2["attn_max_head"][:3, :2], res["attn_max_head"])
    assert res2.dims("attn_max_head") == ["drift_norm", "seed", "head"]
    assert main(["info", str(out)]) == 0
    assert "attn_max_head: 4 x 3 x 2 (drift_norm, seed, head)" in capsys.readouterr().out
    png = tmp_path / "h.png"
    argv = ["plot", str(out), "--x", "drift_norm", "--metric", "attn_max_head"]
    assert main([*argv, "--select", "head=1", "--out", str(png)]) == 0
    assert png.stat().st_size > 5_000
    pytest.importorskip("xarray")
    nc = tmp_path / "s.nc"
    assert main(["export", str(out), "--to", str(nc)]) == 0
    import xarray

    with xarray.open_dataset(nc) as ds:
        assert ds["attn_max_head"].dims == ("drift_norm", "seed", "head")
        np.testing.assert_array_equal(ds["head"].values, [0, 1])
        np.testing.assert_array_equal(
            ds["attn_max_head"].sel(head=1).values, res2["attn_max_head"][..., 1]
        )


def test_uniform_inputs_have_the_stated_variance():
    from simlab.core import inputs

    spec = simlab.InputSpec(kind="uniform", batch=8, length=64, sigma=2.0)
    x = np.asarray(inputs.sample(spec, 32, jax.random.PRNGKey(3), {"drift_norm": 0.0}))
    assert np.max(np.abs(x)) <= 2.0 * np.sqrt(3.0) + 1e-6
    assert abs(x.var() - 4.0) < 0.1 and abs(x.mean()) < 0.05


@pytest.mark.parametrize("profile", ["quick"])
def test_claim_agrees_at_quick_sizes(profile, tmp_path):
    """The prediction's error shrinks along the size path and the computed verdict follows the
    declared criterion (the claim's TOML)."""
    from simlab.studies import check_theory

    (r,) = check_theory.run_checks(profile, ["uniform_drift_cos"], figures_dir=tmp_path, log=None)
    errors = [float(v) for _, v in r.details if _ != "criterion"]
    assert errors[-1] < errors[0]
    assert r.verdict in ("agrees", "agrees to leading order"), r.details
    assert (tmp_path / "theory_uniform_drift_cos.png").stat().st_size > 10_000
