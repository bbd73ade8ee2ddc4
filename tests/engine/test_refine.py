"""Adaptive refinement (simlab.engine.refine and the [refine] table): the refinement's own
invariants on a known field, its boundary against the dense grid of its finest lattice (exact
in every resolved cell), reload, resume, growth with more seeds, workers, validation, and the
refined phase diagram."""

from __future__ import annotations

import json

import numpy as np
import pytest

import simlab
from simlab.cli import main
from simlab.engine import levelset, refine, rules
from simlab.engine.config import load_config
from simlab.engine.sweep import run_sweep
from simlab.errors import ConfigError

from conftest import ToyLab

LAB = ToyLab()
AXES = [
    {"name": "drift_norm", "space": "log", "start": 0.01, "stop": 100.0, "num": 5},
    {
        "name": "lambda",
        "knobs": ["q_scale", "k_scale"],
        "space": "log",
        "start": 0.3,
        "stop": 30.0,
        "num": 5,
    },
]
TOY = {
    "axes": AXES,
    "knobs": {"temperature": 0.7},
    "refine": {"metric": "entropy", "level": 1.0, "levels": 2},
    "sweep": {"seeds": 2, "base_seed": 3, "micro_batch": 4},
}


def field_config(levels=3, num=5, rule="mean"):
    return load_config(
        {
            "axes": [
                {
                    "name": "a",
                    "knobs": ["q_scale"],
                    "space": "lin",
                    "start": 0,
                    "stop": 1,
                    "num": num,
                },
                {
                    "name": "b",
                    "knobs": ["k_scale"],
                    "space": "lin",
                    "start": 0,
                    "stop": 1,
                    "num": num,
                },
            ],
            "refine": {"metric": "m", "level": 0.3, "levels": levels, "rule": rule},
        }
    )


def circle(lat):
    """A field whose 0.3 level set is a circle of radius 0.3 about (0.5, 0.5), two seeds."""

    def f(idx):
        k = lat.knob_values(idx)
        r = np.hypot(k["q_scale"] - 0.5, k["k_scale"] - 0.5)
        return np.stack([r, r + 0.02 * np.sin(40 * k["q_scale"])], axis=1)

    return f


def test_refinement_invariants_on_a_known_field():
    """Leaves tile the domain without overlap; every leaf's corners are points; the cells that
    straddle the level are all finest; the points sit on the lattice, sorted; the boundary is
    the dense grid's exactly; rule "any" refines a superset of "mean"."""
    cfg = field_config()
    lat = refine.Lattice.from_config(cfg)
    assert lat.shape == (33, 33) and lat.step == 8
    st = refine.simulate(lat, circle(lat), 0.3)
    assert st.done and st.added[0] == 25 and len(st.points) == sum(st.added)
    flat = lat.flat(st.points)
    assert np.all(np.diff(flat) > 0)
    assert np.sum(st.leaves[:, 2] ** 2) == 32 * 32  # tiling: areas add up
    cover = np.zeros((32, 32), int)
    for i, j, h in st.leaves:
        cover[i : i + h, j : j + h] += 1
    assert np.all(cover == 1)
    vals = circle(lat)(st.points)
    corners = levelset.leaf_values(lat, st.points, st.leaves, vals.mean(1))
    assert np.all(np.isfinite(corners))
    hit = rules.straddle(corners, 0.3)
    assert np.all(st.leaves[hit, 2] == 1)  # straddling leaves are finest cells
    n = lat.shape
    idx = np.stack(np.unravel_index(np.arange(n[0] * n[1]), n), axis=1)
    lows = np.stack(np.unravel_index(np.arange(32 * 32), (32, 32)), axis=1)
    every = np.concatenate([lows, np.ones((len(lows), 1), int)], axis=1)
    dense = levelset.level_set(lat, idx, every, circle(lat)(idx).mean(1), 0.3)
    ref = levelset.level_set(lat, st.points, st.leaves, vals.mean(1), 0.3)
    assert len(ref) == len(dense) > 50 and levelset.hausdorff(ref, dense) < 1e-12
    anyrule = refine.simulate(lat, circle(lat), 0.3, rule="any")
    assert set(flat) <= set(lat.flat(anyrule.points)) and len(anyrule.points) > len(flat)


def test_marching_squares_and_hausdorff():
    """A single cell: a straight crossing, a saddle split by the centre's value; distances in
    lattice units."""
    lat = levelset.view_lattice(
        {"axes": ["x", "y"], "space": ["lin", "lin"], "finest": {"x": [0, 1], "y": [0, 1]}}
    )
    idx = np.array([[0, 0], [0, 1], [1, 0], [1, 1]])
    leaf = np.array([[0, 0, 1]])
    seg = levelset.level_set(lat, idx, leaf, np.array([0.0, 0.0, 1.0, 1.0]), 0.25)
    np.testing.assert_allclose(seg, [[[0.25, 0.0], [0.25, 1.0]]])
    # saddle: 00 and 11 high; centre mean 0.5 >= 0.5: they join, segments cut off 10 and 01
    saddle = levelset.level_set(lat, idx, leaf, np.array([1.0, 0.0, 0.0, 1.0]), 0.5)
    assert len(saddle) == 2
    mids = sorted(tuple(np.round(s.mean(0), 3)) for s in saddle)
    assert mids == [(0.25, 0.75), (0.75, 0.25)]
    a = np.array([[[0.0, 0.0], [1.0, 0.0]]])
    assert levelset.hausdorff(a, a + [0.0, 0.5]) == pytest.approx(0.5)
    assert levelset.hausdorff(a, np.zeros((0, 2, 2))) == np.inf


@pytest.mark.slow
def test_refined_sweep_equals_the_dense_grid_where_both_resolve(tmp_path):
    """The toy lab refined 2 levels from 5 x 5 and the dense 17 x 17 grid of the same axes: the
    refined points' numbers are the dense grid's bit for bit, the boundaries coincide, and the
    refined sweep computed fewer points. Reloaded from its directory it is the same."""
    from simlab.studies.bench.refine import dense_config

    res = run_sweep(TOY, lab=LAB, quiet=True)
    dense = run_sweep(dense_config(TOY), lab=LAB, quiet=True)
    r, idx, leaves = levelset.structure(res)
    assert r["lattice"] == [17, 17] and len(idx) == sum(r["points_per_level"]) < 17 * 17
    for k in res.metrics:
        np.testing.assert_array_equal(res[k], dense[k][tuple(idx.T)], err_msg=k)
    b = levelset.refined_boundary(res)
    bd = levelset.grid_boundary(dense, "entropy", 1.0)
    assert len(b.segments) > 5 and levelset.hausdorff(b.segments, bd.segments) < 1e-9
    assert b.lo is not None and b.hi is not None  # the band over two seeds
    saved = run_sweep(TOY, lab=LAB, out=tmp_path / "r", quiet=True)
    again = simlab.load(tmp_path / "r")
    for k in res.metrics:
        np.testing.assert_array_equal(saved[k], res[k])
        np.testing.assert_array_equal(again[k], res[k])
    assert again.meta["refine"]["cells"] == res.meta["refine"]["cells"]
    ds = again.to_xarray()
    assert ds["entropy"].dims == ("point", "seed", "layer") or ds["entropy"].dims[0] == "point"
    assert ds["drift_norm"].dims == ("point",) and "refine_level" in ds.coords


@pytest.mark.slow
def test_resume_grow_and_workers(tmp_path):
    """Interrupted at any chunk, a refined sweep resumes to the same result; with a third seed
    it grows to exactly the fresh 3-seed refinement; two --worker runs and a merge give it too."""

    class Abort(Exception):
        pass

    want = run_sweep(TOY, lab=LAB, quiet=True)
    out = tmp_path / "a"
    calls = []

    def abort(info):
        calls.append(info)
        if len(calls) == 3:
            raise Abort

    with pytest.raises(Abort):
        run_sweep(TOY, lab=LAB, out=out, quiet=True, chunk_size=4, on_chunk=abort)
    done = []
    got = run_sweep(TOY, lab=LAB, out=out, quiet=True, chunk_size=4, on_chunk=done.append)
    n_points = len(got.meta["refine"]["index"])
    assert sum(c.points for c in calls[:3] + done) == 2 * n_points
    for k in want.metrics:
        np.testing.assert_array_equal(got[k], want[k])
    three = {**TOY, "sweep": {**TOY["sweep"], "seeds": 3}}
    grown = run_sweep(three, lab=LAB, out=out, quiet=True)
    fresh = run_sweep(three, lab=LAB, quiet=True)
    assert grown.meta["refine"]["index"] == fresh.meta["refine"]["index"]
    for k in fresh.metrics:
        np.testing.assert_array_equal(grown[k], fresh[k])
    assert grown.meta["history"][-1]["change"] == ["sweep.seeds"]
    w = tmp_path / "w"
    for i in (0, 1):
        assert run_sweep(TOY, lab=LAB, out=w, quiet=True, worker=(i, 2)) is None
    merged = run_sweep(json.loads((w / "sweep.json").read_text())["config"], lab=LAB, out=w)
    for k in want.metrics:
        np.testing.assert_array_equal(merged[k], want[k])


@pytest.mark.parametrize(
    "table, message",
    [
        ({"level": 0.5, "levels": 2}, r"refine\.metric: must be a metric name"),
        ({"metric": "m", "levels": 2}, r"refine\.level: must be a finite number"),
        ({"metric": "m", "level": 0.5}, r"refine\.levels: must be an integer"),
        ({"metric": "m", "level": 0.5, "levels": 0}, r"refine\.levels: 0 is outside"),
        ({"metric": "m", "level": 0.5, "levels": 2, "rule": "max"}, r"refine\.rule: 'max'"),
        ({"metric": "m", "level": 0.5, "levels": 2, "axes": ["c"]}, r"refine\.axes: 'c' is not"),
        ({"metric": "m", "level": 0.5, "levels": 2, "lvl": 1}, r"refine\.lvl: unknown field"),
        ({"metric": "m", "level": 0.5, "levels": 2, "axes": ["a"]}, r"axis 'b' has 3 values"),
        ({"metric": "m", "level": 0.5, "levels": 16}, r"refine\.levels: 16 levels make"),
    ],
)
def test_refine_table_errors_name_the_field(table, message):
    axes = [
        {"name": "a", "knobs": ["q_scale"], "space": "lin", "start": 0, "stop": 1, "num": 3},
        {"name": "b", "knobs": ["k_scale"], "space": "lin", "start": 0, "stop": 1, "num": 3},
    ]
    with pytest.raises(ConfigError, match=message):
        load_config({"axes": axes, "refine": table})


def test_refining_a_list_axis_or_an_unknown_metric_is_refused(tmp_path, capsys):
    axes = [{"name": "b", "knobs": ["k_scale"], "values": [0.5, 1.0, 2.0]}]
    with pytest.raises(ConfigError, match=r"refine\.axes: axis 'b' must be space = 'lin' or"):
        load_config({"axes": axes, "refine": {"metric": "m", "level": 0.5, "levels": 1}})
    with pytest.raises(ConfigError, match=r"refine\.metric: 'm' is not among the sweep's"):
        run_sweep({**TOY, "refine": {"metric": "m", "level": 0.5, "levels": 1}}, lab=LAB)
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[block]\nkind = "attention"\nd_model = 8\nn_heads = 2\nmlp = false\n'
        '[inputs]\nkind = "gaussian"\nbatch = 2\nlength = 4\n'
        '[[axes]]\nname = "temperature"\nspace = "log"\nstart = 0.1\nstop = 10.0\nnum = 3\n'
        '[refine]\nmetric = "attn_entropy"\nlevel = 0.5\nlevels = 1\nrule = "some"\n'
    )
    assert main(["sweep", str(cfg), "--out", str(tmp_path / "o")]) == 2
    assert "refine.rule: 'some' is not one of 'mean', 'any'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_refined_phase_diagram_and_simlab_plot(tmp_path):
    """`simlab plot` draws a refined sweep (its cells, boundary and band; a contour of another
    metric); a layer of a stacked metric can be the refined one."""
    out = tmp_path / "r"
    cfg = {**TOY, "refine": {"metric": "cos", "level": 0.5, "levels": 1, "layer": 1}}
    run_sweep(cfg, lab=LAB, out=out, quiet=True)
    png = tmp_path / "p.png"
    argv = ["plot", str(out), "--x", "lambda", "--y", "drift_norm", "--metric", "entropy"]
    assert main([*argv, "--contour", "cos", "--levels", "0.5", "--out", str(png)]) == 0
    assert png.stat().st_size > 10_000
    res = simlab.load(out)
    fig, ax = simlab.plot.refined_phase_diagram(res, x="drift_norm", y="lambda", metric="cos")
    assert ax.get_xscale() == "log" and len(ax.collections) >= 2
    with pytest.raises(ConfigError, match="drawn over its refined axes"):
        simlab.plot.plot_results(res, x="drift_norm", y="temperature", metric="cos")


@pytest.mark.slow
def test_refining_a_finished_grid_reuses_it(tmp_path):
    """A [refine] config run on a directory holding its coarse grid computes only the levels
    above it (the coarse points are the lattice's, bit for bit); the result equals the fresh
    refinement."""
    out = tmp_path / "r"
    grid = {k: v for k, v in TOY.items() if k != "refine"}
    run_sweep(grid, lab=LAB, out=out, quiet=True)
    done = []
    got = run_sweep(TOY, lab=LAB, out=out, quiet=True, on_chunk=done.append)
    n = len(got.meta["refine"]["index"])
    assert sum(c.points for c in done) == 2 * (n - 25)
    want = run_sweep(TOY, lab=LAB, quiet=True)
    for k in want.metrics:
        np.testing.assert_array_equal(got[k], want[k])


def test_a_registered_rule_drives_the_refinement():
    """A rule registered in simlab.engine.rules.RULES is accepted by [refine] and decides the
    split: a rule that splits nothing leaves the coarse grid, "mean" splits what it straddles."""
    rule = rules.Rule("plug_never", "never splits a cell", lambda v, level: np.zeros(len(v), bool))
    rules.register_rule(rule)
    try:
        with pytest.raises(ConfigError, match="refine.rule: 'nope' is not one of.*'plug_never'"):
            load_config({**TOY, "refine": {**TOY["refine"], "rule": "nope"}})
        never = {**TOY, "refine": {**TOY["refine"], "rule": "plug_never"}}
        coarse = run_sweep(never, lab=ToyLab(), quiet=True)
        mean = run_sweep(TOY, lab=ToyLab(), quiet=True)
        assert coarse.axes["point"].size == 5 * 5 < mean.axes["point"].size
    finally:
        rules.RULES.unregister("plug_never")


def test_a_refine_level_outside_the_data_warns(capsys):
    """refine.level beyond the coarse grid's range of its metric (entropy lies in [0, log 6])
    warns on stderr, as `simlab plot --levels` does; a level inside it does not."""
    coarse = {**TOY, "refine": {**TOY["refine"], "levels": 1}}
    run_sweep({**coarse, "refine": {**coarse["refine"], "level": 5.0}}, lab=LAB, quiet=True)
    err = capsys.readouterr().err
    assert "refine.level 5 is outside the range of entropy on the coarse grid" in err
    run_sweep(coarse, lab=LAB, quiet=True)
    assert "refine.level" not in capsys.readouterr().err


def test_refine_select_and_its_layer_sugar():
    """[refine] select = {dim = index} reads the metric at an index of any further dimension;
    refine.layer = I is its sugar and stays so in the resolved config (the fingerprint of a
    sweep written with it is unchanged); a dimension selected twice is refused by name, and one
    the metric does not have when the refinement reads it."""
    sugar = load_config({**TOY, "refine": {"metric": "cos", "level": 0.5, "levels": 1, "layer": 1}})
    assert sugar.refine.select == (("layer", 1),)
    assert sugar.refine.to_dict()["layer"] == 1 and "select" not in sugar.refine.to_dict()
    table = {"metric": "cos", "level": 0.5, "levels": 1, "select": {"head": -1}}
    got = load_config({**TOY, "refine": table}).refine
    assert got.select == (("head", -1),) and got.to_dict()["select"] == {"head": -1}
    with pytest.raises(ConfigError, match=r"refine.layer: 'layer' is selected twice"):
        load_config({**TOY, "refine": {**table, "select": {"layer": 0}, "layer": 1}})
    with pytest.raises(ConfigError, match=r"refine.select: head is not a dimension of cos"):
        run_sweep({**TOY, "refine": table}, lab=LAB, out=None, quiet=True)
