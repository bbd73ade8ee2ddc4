"""Per-seed covariates (simlab.core.lab.Lab.covariates, simlab.engine.covariates): the closed
forms' statistics of the weights against float64 numpy loops over heads and units with the same
weights, and their way through a sweep: one row per seed from the sweep's own keys, stored in
results.npz ("cov:<name>") with their dims in meta.json, loaded, shown, exported to xarray and
back, absent (not an error) for labs without them and for results written before them."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

import simlab
from simlab.core.lab import Lab
from simlab.core.spec import BlockSpec, InputSpec
from simlab.engine.config import fingerprint, load_config
from simlab.engine.results import from_xarray
from simlab.engine.sweep import run_sweep

from conftest import ToyLab

ROOT = Path(__file__).resolve().parents[2]


def np_covariates(state):
    """The statistics from their definitions, head by head and unit by unit, in float64."""
    p = {k: np.asarray(v, np.float64) for k, v in state["params"].items()}
    u = np.asarray(state["comps"]["u_b"], np.float64).reshape(-1)
    u = u / np.linalg.norm(u)
    depth, d, heads, _ = p["wv"].shape
    names = ("drift_vo", "drift_vo_dot", "vo_iso", "vo_trace", "drift_q", "mlp_shared")
    out = {k: [] for k in (*names, "mlp_drift_dot", "mlp_trace")}
    for layer in range(depth):
        vo = sum(p["wv"][layer, :, h, :] @ p["wo"][layer, h] for h in range(heads))  # D x D
        out["drift_vo"].append(float(np.sum((u @ vo) ** 2)))
        out["drift_vo_dot"].append(float((u @ vo) @ u))
        out["vo_iso"].append(float(np.sum(vo * vo)) / d)
        out["vo_trace"].append(sum(float(vo[i, i]) for i in range(d)) / d)
        out["drift_q"].append(
            sum(float(np.sum((u @ p["wq"][layer, :, h, :]) ** 2)) for h in range(heads))
        )
        f = p["w2"].shape[1]
        ones_w2 = sum(p["w2"][layer, j] for j in range(f))
        out["mlp_shared"].append(float(ones_w2 @ ones_w2) / f)
        # the MLP's linear part at the GELU's mean slope 1/2, A = W_1 W_2 / 2, along the unit
        # vector of u + u W_V W_O and averaged over directions (its trace / D)
        a = sum(0.5 * np.outer(p["w1"][layer, :, j], p["w2"][layer, j]) for j in range(f))
        w = u + u @ vo
        w = w / np.sqrt(w @ w)
        out["mlp_drift_dot"].append(float(w @ a @ w))
        out["mlp_trace"].append(sum(float(a[i, i]) for i in range(d)) / d)
    return {k: np.asarray(v) for k, v in out.items()}


SPEC = BlockSpec(kind="post_ln", d_model=16, n_heads=4, mlp_ratio=2, depth=2)
ISPEC = InputSpec(kind="gaussian", batch=2, length=8)


@pytest.mark.slow
def test_lab_covariates_vs_numpy():
    """drift_vo = |u_b W_V W_O|^2, drift_q = |u_b W_Q|^2 (summed over heads), mlp_shared =
    |1^T W_2|^2 / F, mlp_drift_dot = w^T A w and mlp_trace = tr(A) / D (A = W_1 W_2 / 2, w along
    u_b + u_b W_V W_O), per layer, against the loops; their order of magnitude at BERT init
    (N(0, 0.02^2): E drift_vo = D^2 sigma^4, E drift_q = D sigma^2, E mlp_shared = D sigma^2)."""
    lab = Lab(SPEC, ISPEC)
    state = jax.jit(lab.seed_state)(jax.random.PRNGKey(3))
    got, want = lab.covariates(state), np_covariates(state)
    assert set(got) == set(want)
    for k in want:
        assert got[k].shape == (2,)
        np.testing.assert_allclose(got[k], want[k], rtol=1e-10, err_msg=k)
    s2 = 0.02**2
    for k, e in (("drift_vo", 16**2 * s2**2), ("drift_q", 16 * s2), ("mlp_shared", 16 * s2)):
        assert 0.05 * e < got[k].mean() < 20 * e, (k, got[k], e)
    no_mlp = Lab(BlockSpec(d_model=16, n_heads=4, mlp=False), ISPEC)
    assert set(no_mlp.covariates(jax.jit(no_mlp.seed_state)(jax.random.PRNGKey(0)))) == {
        "drift_vo",
        "drift_vo_dot",
        "vo_iso",
        "vo_trace",
        "drift_q",
    }


CONFIG = dict(
    block=dict(kind="post_ln", d_model=16, n_heads=4, mlp_ratio=2, depth=2),
    inputs=dict(kind="gaussian", batch=2, length=8),
    axes=[dict(name="drift_norm", values=[0.0, 1.0])],
    sweep=dict(seeds=3, base_seed=11, metrics=["out_cos"]),
)


@pytest.mark.slow
def test_sweep_stores_covariates_per_seed(tmp_path):
    """run_sweep computes them once per seed from the sweep's keys fold_in(PRNGKey(base_seed),
    s): (seeds, depth) arrays, saved, loaded, summarised, and through xarray and back; the
    fingerprint is the config's (no covariate in it), so a finished directory reloads."""
    res = run_sweep(CONFIG, out=tmp_path / "run", quiet=True)
    lab = Lab(SPEC, ISPEC, ("out_cos",))
    for s in range(3):
        key = jax.random.fold_in(jax.random.PRNGKey(11), s)
        want = np_covariates(jax.jit(lab.seed_state)(key))
        for k in want:
            np.testing.assert_allclose(res.covariates[k][s], want[k], rtol=1e-10, err_msg=k)
    assert res.meta["covariates"] == {k: ["seed", "layer"] for k in res.covariates}
    with np.load(tmp_path / "run" / "results.npz") as z:
        assert {f"cov:{k}" for k in res.covariates} <= set(z.files)
    loaded = simlab.load(tmp_path / "run")
    assert set(loaded.metrics) == {"out_cos"}
    for k, v in res.covariates.items():
        np.testing.assert_array_equal(loaded.covariates[k], v)
    assert "covariate drift_vo: 3 x 2 (seed, layer)" in loaded.summary()
    assert res.meta["fingerprint"] == fingerprint(res.meta["config"])
    again = run_sweep(CONFIG, out=tmp_path / "run", quiet=True)  # finished: loaded
    np.testing.assert_array_equal(again.covariates["drift_q"], res.covariates["drift_q"])
    pytest.importorskip("xarray")
    ds = loaded.to_xarray()
    assert ds["cov_drift_vo"].dims == ("seed", "layer")
    back = from_xarray(ds)
    assert set(back.metrics) == {"out_cos"}
    for k, v in res.covariates.items():
        np.testing.assert_array_equal(back.covariates[k], v)


@pytest.mark.slow
def test_no_covariates_for_labs_without_them_and_older_results():
    """A lab without a covariates method (the toy lab) gives none, and meta.json says nothing;
    the committed results, written before covariates existed, load with none."""
    res = run_sweep(
        dict(axes=[dict(name="drift_norm", values=[0.0, 1.0])], sweep=dict(seeds=2)),
        lab=ToyLab(),
        quiet=True,
    )
    assert res.covariates == {} and "covariates" not in res.meta
    paper = simlab.load(ROOT / "figures" / "data" / "paper")
    assert paper.covariates == {} and "input_cos" in paper.metrics
    # and its fingerprint is the one the current code computes for its config (under the
    # fingerprint rule the record was made under: absent, rule 1)
    rule = paper.meta.get("fingerprint_rule", 1)
    assert paper.meta["fingerprint"] == fingerprint(
        load_config(paper.meta["config"]).to_dict(), rule
    )


def test_seed_covariates_one_row_per_seed_key():
    """seed_covariates calls lab.covariates(state_fn(key_s)) with the sweep's keys, in seed
    order, and stacks the rows; dims name the seed and the layer axes; no method, nothing."""
    from simlab.engine.covariates import covariate_dims, seed_covariates

    class Keys:
        def covariates(self, state):
            return {"k": np.asarray(state, np.float64)[None].repeat(2, 0), "s": state[0]}

    got = seed_covariates(Keys(), 5, 3, state_fn=lambda key: np.asarray(key))
    keys = [np.asarray(jax.random.fold_in(jax.random.PRNGKey(5), s)) for s in range(3)]
    np.testing.assert_array_equal(got["k"][:, 0], np.stack(keys))
    assert got["k"].shape == (3, 2, 2) and got["s"].shape == (3,)
    cov = {"a": np.zeros((3, 4)), "b": np.zeros(3), "c": np.zeros((3, 2, 5))}
    assert covariate_dims(cov) == {
        "a": ["seed", "dim0"],
        "b": ["seed"],
        "c": ["seed", "dim0", "dim1"],
    }

    class Named:  # a lab that names its covariates' dimensions (Lab: one value per layer)
        def covariate_dims(self):
            return {"a": ["layer"], "c": ["x"]}  # "c" names too few: generic names

    assert covariate_dims(cov, Named()) == {
        "a": ["seed", "layer"],
        "b": ["seed"],
        "c": ["seed", "dim0", "dim1"],
    }
    assert seed_covariates(ToyLab(), 0, 3) == {}
