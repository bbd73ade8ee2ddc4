"""`simlab reproduce` of each experiment config at tiny sizes (TINY), the check shared by
tests/studies/test_reproduce.py and tests/studies/test_reproduce_experiments.py: each runs one
of two fixed halves of the configs (HALVES: the sorted names, alternately; the two files run on
two workers at once under `--dist loadfile`, where one file ran them all on one)."""

from __future__ import annotations

import numpy as np

import simlab
from simlab.cli import main as cli_main
from simlab.engine.tomlio import read_toml
from simlab.studies import reproduce

from conftest import POST_LN_COVARIATES

TINY = {
    "num": 3,
    "block": {"d_model": 16, "n_heads": 2},
    "inputs": {"batch": 2, "length": 8},
    "sweep": {"seeds": 1},
}


def declared_figures(path) -> int:
    """One figure per metric for heatmaps, refined maps, variants and per_metric curves, else
    one."""
    per_metric = ("heatmap", "variants", "refined")
    return sum(
        len(f["metrics"]) if f["kind"] in per_metric or f.get("per_metric") else 1
        for f in read_toml(path)["figures"]
    )


def check_paper(tmp_path):
    res = simlab.load(tmp_path / "data" / "paper")
    assert list(res.axes) == ["drift_norm", "lambda"]
    assert res["out_cos"].shape == (3, 3, 1)
    assert res.meta["config"]["block"]["d_model"] == 16
    # `simlab plot` redraws a panel from the saved data without recomputing
    out = tmp_path / "redraw.png"
    argv = ["plot", str(tmp_path / "data" / "paper"), "--x", "drift_norm", "--y", "lambda"]
    assert cli_main([*argv, "--metric", "attn_entropy", "--out", str(out)]) == 0
    assert out.exists()
    # a re-run loads the finished sweeps instead of recomputing them
    mtime = (tmp_path / "data" / "paper" / "results.npz").stat().st_mtime_ns
    reproduce.reproduce(["paper"], out=tmp_path, quick=True, quiet=True, extra=TINY)
    assert (tmp_path / "data" / "paper" / "results.npz").stat().st_mtime_ns == mtime


def check_mechanism_kshift(tmp_path):
    # k_shift has no effect on the attention: the entropy is the same along the k_shift axis
    ks = simlab.load(tmp_path / "data" / "mechanism_kshift")["attn_entropy"]
    np.testing.assert_allclose(ks, np.broadcast_to(ks[:, :1], ks.shape), rtol=0, atol=2e-6)


def check_width(tmp_path):
    # one sweep per variant, each with its own overrides applied
    for v in reproduce.experiment_variants("width", quick=True):
        meta = simlab.load(tmp_path / "data" / "width" / v.name).meta["config"]["block"]
        assert (meta["d_model"], meta["mlp_center"]) == (
            v.tables["block"]["d_model"],
            v.tables["block"]["mlp_center"],
        )


def check_depth_pre_ln(tmp_path):
    # depth stacks carry a layer axis
    assert simlab.load(tmp_path / "data" / "depth_pre_ln")["out_cos"].shape == (3, 1, 12)


def check_paper_refined(tmp_path):
    # a point set refined from the coarse grid, its boundary against the freezing line drawn
    res = simlab.load(tmp_path / "data" / "paper_refined")
    r = res.meta["refine"]
    assert list(res.axes) == ["point"] and r["axes"] == ["drift_norm", "lambda"]
    assert r["lattice"] == [33, 33] and r["points_per_level"][0] == 9  # num 3, 4 levels
    assert (tmp_path / "paper_refined_boundary.png").exists()


def check_patterns(tmp_path):
    # the two clamps, one sweep each on the same seeds: identical sharpness, recorded
    # covariates, a paired difference with an interval
    shared, token = (simlab.load(tmp_path / "data" / "patterns" / v) for v in ("shared", "token"))
    np.testing.assert_array_equal(shared["attn_entropy"], token["attn_entropy"])
    assert shared.meta["config"]["block"]["pattern"] == "shared"
    assert set(shared.covariates) == POST_LN_COVARIATES
    np.testing.assert_array_equal(shared.covariates["drift_vo"], token.covariates["drift_vo"])


SPECIFIC = {
    "patterns": check_patterns,
    "paper": check_paper,
    "paper_refined": check_paper_refined,
    "mechanism_kshift": check_mechanism_kshift,
    "width": check_width,
    "depth_pre_ln": check_depth_pre_ln,
}


EXPERIMENTS = sorted(reproduce.experiment_files())
HALVES = (EXPERIMENTS[0::2], EXPERIMENTS[1::2])


def check_experiment_tiny(name, tmp_path):
    """Each experiment TOML at tiny sizes: its declared figures drawn, its data reloadable at
    the sizes asked for, and the experiment's own facts (SPECIFIC)."""
    done = reproduce.reproduce([name], out=tmp_path, quick=True, quiet=True, extra=TINY)
    assert set(done) == {name}
    files, _ = done[name]
    assert len(files) == declared_figures(reproduce.experiment_files()[name])
    for f in files:
        assert f.exists() and f.stat().st_size > 10_000, f
    data = tmp_path / "data" / name
    if reproduce.scripted_only(name):  # drawn from committed data: no sweep, no sweep data
        assert not data.exists()
        return
    for results in [data] if (data / "results.npz").exists() else sorted(data.iterdir()):
        res = simlab.load(results)
        shape = tuple(len(c) for c in res.axes.values()) + (res.meta["seeds"],)
        assert all(a.shape[: len(shape)] == shape for a in res.metrics.values()), results
    if name in SPECIFIC:
        SPECIFIC[name](tmp_path)
