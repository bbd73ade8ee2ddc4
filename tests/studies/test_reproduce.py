"""The facts the reproduction figures rely on, and `simlab reproduce` end to end at tiny sizes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import simlab
from simlab.cli import main as cli_main
from simlab.core.lab import Lab, knob_arrays
from simlab.core.spec import BlockSpec, InputSpec
from simlab.engine.config import read_toml
from simlab.errors import ConfigError
from simlab.studies import reproduce

TINY = {
    "num": 3,
    "block": {"d_model": 16, "n_heads": 2},
    "inputs": {"batch": 2, "length": 8},
    "sweep": {"seeds": 1},
}


def _points(lab, knob_list):
    state = lab.seed_state(jax.random.PRNGKey(3))
    stacked = {k: jnp.stack([knob_arrays(d)[k] for d in knob_list]) for k in knob_arrays({})}
    return jax.jit(jax.vmap(lab.point, in_axes=(None, 0)))(state, stacked)


def test_entropy_decreases_monotonically_with_scale():
    # H(softmax(c l)) is non-increasing in c for every row (dH/dc = -c Var_w(l) <= 0), so the
    # mean normalised entropy is too: q_scale = k_scale = lambda scales the logits by lambda^2.
    lab = Lab(
        BlockSpec(kind="post_ln", d_model=32, n_heads=4, init="fan_in"),
        InputSpec(kind="embedding", vocab=100, batch=2, length=16, embed_std=1.0),
        metrics=("attn_entropy",),
    )
    lams = np.geomspace(0.05, 20, 12)
    ent = np.asarray(_points(lab, [dict(q_scale=l, k_scale=l) for l in lams])["attn_entropy"])
    assert ent[0] > 0.99 and ent[-1] < 0.1
    assert np.all(np.diff(ent) <= 1e-6), ent


def test_uniform_attention_gives_within_cosine_one():
    # Uniform rows: every token of a sequence receives the same average value vector.
    lab = Lab(
        BlockSpec(kind="attention", d_model=32, n_heads=4, mlp=False, init="fan_in"),
        InputSpec(kind="gaussian", batch=3, length=16),
        metrics=("out_cos_within", "attn_entropy"),
    )
    out = _points(lab, [dict(temperature=t, attn_residual=0.0) for t in (1.0, 1e6)])
    assert float(out["out_cos_within"][0]) < 0.9
    assert float(out["out_cos_within"][1]) > 1 - 1e-5
    assert float(out["attn_entropy"][1]) > 1 - 1e-6


def test_experiment_config_quick_and_errors(tmp_path):
    full = reproduce.experiment_config("paper", quick=False)
    quick = reproduce.experiment_config("paper", quick=True)
    assert full["block"]["d_model"] == 768 and full["inputs"]["length"] == 512
    assert all(a["num"] >= 25 for a in full["axes"]) and full["sweep"]["seeds"] >= 3
    assert quick["block"]["d_model"] < 768 and quick["axes"][0]["num"] < 25
    assert quick["block"]["kind"] == full["block"]["kind"] == "post_ln"
    with pytest.raises(ConfigError, match="extra.bogus"):
        reproduce.experiment_config("paper", quick=True, extra={"bogus": 1})
    with pytest.raises(ConfigError, match="unknown experiment 'nope'"):
        reproduce.reproduce(["nope"], out=tmp_path, quick=True)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_reproduce_all_tiny(tmp_path, capsys):
    done = reproduce.reproduce(None, out=tmp_path, quick=True, quiet=True, extra=TINY)
    files = reproduce.experiment_files()
    assert set(done) == set(files) and len(done) >= 12
    # one figure per metric for heatmaps and per_metric curves, else one, as declared
    declared = {
        name: sum(
            len(f["metrics"]) if f["kind"] == "heatmap" or f.get("per_metric") else 1
            for f in read_toml(path)["figures"]
        )
        for name, path in files.items()
    }
    assert {name: len(f) for name, (f, _) in done.items()} == declared
    for files, _ in done.values():
        for f in files:
            assert f.exists() and f.stat().st_size > 10_000, f
    # the data beside the figures reloads, at the tiny sizes asked for
    res = simlab.load(tmp_path / "data" / "paper")
    assert list(res.axes) == ["drift_norm", "lambda"]
    assert res["out_cos"].shape == (3, 3, 1)
    assert res.meta["config"]["block"]["d_model"] == 16
    # k_shift has no effect on the attention: the entropy is the same along the k_shift axis
    ks = simlab.load(tmp_path / "data" / "mechanism_kshift")["attn_entropy"]
    np.testing.assert_allclose(ks, np.broadcast_to(ks[:, :1], ks.shape), rtol=0, atol=2e-6)
    # depth stacks carry a layer axis
    assert simlab.load(tmp_path / "data" / "depth_pre_ln")["out_cos"].shape == (3, 1, 12)
    # `simlab plot` redraws a panel from the saved data without recomputing
    out = tmp_path / "redraw.png"
    rc = cli_main(
        [
            "plot",
            str(tmp_path / "data" / "paper"),
            "--x",
            "drift_norm",
            "--y",
            "lambda",
            "--metric",
            "attn_entropy",
            "--out",
            str(out),
        ]
    )
    assert rc == 0 and out.exists()
    # a re-run loads the finished sweeps instead of recomputing them
    mtime = (tmp_path / "data" / "paper" / "results.npz").stat().st_mtime_ns
    reproduce.reproduce(["paper"], out=tmp_path, quick=True, quiet=True, extra=TINY)
    assert (tmp_path / "data" / "paper" / "results.npz").stat().st_mtime_ns == mtime
