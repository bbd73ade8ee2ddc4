"""Point sets: an axis setting each knob by its own function of the coordinate (c x^p, or a list
of values), and the [points] table. Checked against the lab called directly at the same knob
values, validated field by field, recorded in meta.json, the fingerprint and to_xarray."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from simlab.cli import main
from simlab.engine.compile import grid_knobs, jitted
from simlab.engine.config import fingerprint, load_config
from simlab.engine.sweep import run_sweep
from simlab.errors import ConfigError

from conftest import ToyLab

LAB = ToyLab()
X = [0.5, 1.0, 2.0, 4.0]
POWER = {
    "axes": [
        {
            "name": "x",
            "values": X,
            "knobs": {"q_scale": {}, "k_scale": {"coef": 0.5}, "temperature": {"power": 2.0}},
        },
        {"name": "drift_norm", "values": [0.0, 1.0]},
    ],
    "sweep": {"seeds": 2, "base_seed": 5, "micro_batch": 4},
}
POINTS = {
    "points": {"q_scale": [1.0, 2.0, 4.0], "temperature": [1.0, 4.0, 16.0]},
    "axes": [{"name": "drift_norm", "values": [0.0, 1.0]}],
    "sweep": {"seeds": 2, "base_seed": 5, "micro_batch": 4},
}


def direct(knob_list, seeds, base_seed, lab=LAB):
    """jit(lab.point) at each knob dict, per seed: metric -> (n points, seeds, ...)."""
    point = jax.jit(lab.point)
    seed_state = jitted(lab, tuple(lab.metric_names))[0]
    out = {k: [] for k in lab.metric_names}
    for s in range(seeds):
        state = seed_state(jax.random.fold_in(jax.random.PRNGKey(base_seed), s))
        for k in out:
            out[k].append([np.asarray(point(state, kn)[k]) for kn in knob_list])
    return {k: np.moveaxis(np.asarray(v), 0, 1) for k, v in out.items()}


def knobs(**values):
    """Every knob the toy lab reads, at its default unless given, as float32."""
    full = {"q_scale": 1.0, "k_scale": 1.0, "temperature": 1.0, "drift_norm": 0.0}
    full["attn_residual"] = 1.0
    full.update(values)
    return {k: np.float32(v) for k, v in full.items()}


def test_power_law_axis_against_the_lab_at_the_same_knobs():
    """q_scale = x, k_scale = 0.5 x, temperature = x^2 along x, times drift_norm: the knob values
    are c x^p (float64, then float32), and every metric matches lab.point called directly."""
    cfg = load_config(POWER)
    g = grid_knobs(cfg)
    x = np.repeat(np.asarray(X), 2)
    np.testing.assert_array_equal(g["temperature"], (x**2.0).astype(np.float32))
    np.testing.assert_array_equal(g["k_scale"], (0.5 * x).astype(np.float32))
    res = run_sweep(POWER, lab=LAB, quiet=True)
    pts = [
        knobs(q_scale=v, k_scale=0.5 * v, temperature=v**2, drift_norm=n)
        for v in X
        for n in (0.0, 1.0)
    ]
    want = direct(pts, 2, 5)
    for k in LAB.metric_names:
        got = np.asarray(res[k]).reshape((8, 2) + res[k].shape[3:])
        np.testing.assert_allclose(got, want[k], rtol=1e-5, atol=1e-6, err_msg=k)
    meta = res.meta["axes"][0]
    assert meta["knob_values"]["temperature"] == [v**2 for v in X]
    assert list(res.axes["x"]) == X


def test_points_table_and_value_lists_against_the_lab():
    """[points] (and the same as an axis of per-knob lists, with index coordinates): the points
    in order, times the other axes; equal to lab.point at each point; the same sweep."""
    res = run_sweep(POINTS, lab=LAB, quiet=True)
    assert list(res.axes) == ["point", "drift_norm"] and list(res.axes["point"]) == [0, 1, 2]
    pts = [
        knobs(q_scale=q, temperature=t, drift_norm=n)
        for q, t in ((1, 1), (2, 4), (4, 16))
        for n in (0.0, 1.0)
    ]
    want = direct(pts, 2, 5)
    for k in LAB.metric_names:
        got = np.asarray(res[k]).reshape((6, 2) + res[k].shape[3:])
        np.testing.assert_allclose(got, want[k], rtol=1e-5, atol=1e-6, err_msg=k)
    as_axis = {
        **{k: v for k, v in POINTS.items() if k != "points"},
        "axes": [{"name": "point", "knobs": POINTS["points"]}, *POINTS["axes"]],
    }
    assert load_config(as_axis).to_dict() == load_config(POINTS).to_dict()


def test_recorded_in_meta_fingerprint_and_xarray():
    """The resolved config reloads to itself; the laws enter the fingerprint (an identity law
    leaves it as the plain list of knobs); to_xarray has a point dimension with knob
    coordinates."""
    cfg = load_config(POINTS)
    assert load_config(cfg.to_dict()).to_dict() == cfg.to_dict()
    plain = {"axes": [{"name": "lam", "knobs": ["q_scale", "k_scale"], "values": X}]}
    same = {
        "axes": [{"name": "lam", "knobs": {"q_scale": {}, "k_scale": {"coef": 1}}, "values": X}]
    }
    other = {
        "axes": [{"name": "lam", "knobs": {"q_scale": {}, "k_scale": {"coef": 2}}, "values": X}]
    }
    fp = [fingerprint(load_config(c).to_dict()) for c in (plain, same, other)]
    assert fp[0] == fp[1] != fp[2]
    ds = run_sweep(POINTS, lab=LAB, quiet=True).to_xarray()
    assert ds["entropy"].dims == ("point", "drift_norm", "seed")
    assert ds["temperature"].dims == ("point",)
    assert ds["temperature"].values.tolist() == [1.0, 4.0, 16.0]
    assert ds.sel(point=1)["q_scale"].item() == 2.0


def with_(**tables):
    return {"sweep": {"seeds": 1}, "axes": [{"name": "x", "values": [1.0, 2.0, 3.0]}], **tables}


@pytest.mark.parametrize(
    "cfg, message",
    [
        (
            with_(axes=[{"name": "x", "values": [1, 2], "knobs": {"qscale": {}}}]),
            r"axes\[0\]\.knobs: unknown knob 'qscale'",
        ),
        (
            with_(axes=[{"name": "x", "values": [1, 2], "knobs": {"temperature": {"pow": 2}}}]),
            r"axes\[0\]\.knobs\.temperature\.pow: unknown field; allowed: coef, power",
        ),
        (
            with_(axes=[{"name": "x", "values": [1, 2], "knobs": {"temperature": {"coef": True}}}]),
            r"axes\[0\]\.knobs\.temperature\.coef: must be a finite number",
        ),
        (
            with_(axes=[{"name": "x", "values": [0, 1], "knobs": {"temperature": {"power": -1}}}]),
            r"axes\[0\]\.knobs\.temperature: not finite at the coordinate 0",
        ),
        (
            with_(axes=[{"name": "x", "values": [1, 2], "knobs": {"q_scale": {"coef": -1}}}]),
            r"axes\[0\]\.knobs\.q_scale",
        ),
        (
            with_(axes=[{"name": "x", "values": [1, 2, 3], "knobs": {"q_scale": [1, 2]}}]),
            r"axes\[0\]\.knobs\.q_scale: 2 values; the axis has 3 coordinates",
        ),
        (
            with_(axes=[{"name": "x", "knobs": {"q_scale": [1, 2], "temperature": [1]}}]),
            r"axes\[0\]\.knobs\.temperature: 1 values; the axis has 2",
        ),
        (
            with_(axes=[{"name": "x", "knobs": {"q_scale": "fast"}}]),
            r"axes\[0\]\.knobs\.q_scale: must be a list of values or a table",
        ),
        (
            with_(points={"q_scale": [1.0, 2.0], "temperature": [1.0]}),
            r"points: the knobs' lists differ in length \(q_scale 2, temperature 1\)",
        ),
        (with_(points={"qscale": [1.0]}), r"points\.qscale: unknown knob"),
        (with_(points={"q_scale": 1.0}), r"points\.q_scale: must be a list of values"),
        (with_(points={"name": "seed", "q_scale": [1.0]}), r"points\.name: must be"),
        (with_(points={"q_scale": [1.0, float("nan")]}), r"points\.q_scale: nan is not a finite"),
    ],
)
def test_errors_name_the_field(cfg, message):
    with pytest.raises(ConfigError, match=message):
        load_config(cfg)


def test_cli_exits_2_for_unequal_knob_lists(tmp_path, capsys):
    """The config of the issue, `knobs = {q_scale = [...], temperature = [...]}`, runs; with
    lists of unequal length it exits 2 naming the field."""
    cfg = tmp_path / "c.toml"
    text = (
        '[block]\nkind = "attention"\nd_model = 8\nn_heads = 2\nmlp = false\n'
        '[inputs]\nkind = "gaussian"\nbatch = 2\nlength = 4\n'
        '[[axes]]\nname = "x"\nknobs = {q_scale = [1.0, 2.0, 4.0], temperature = [1.0, 4.0]}\n'
    )
    cfg.write_text(text)
    assert main(["sweep", str(cfg), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "axes[0].knobs.temperature: 2 values; the axis has 3" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_a_point_set_grows(tmp_path):
    """A point list extended with new points (the old ones included, in another order) grows:
    only the new points are computed; equal to the fresh sweep."""
    out = tmp_path / "run"
    run_sweep(POINTS, lab=LAB, out=out, quiet=True)
    more = {**POINTS, "points": {"q_scale": [0.5, 1, 2, 4, 8], "temperature": [1, 1, 4, 16, 1]}}
    done = []
    grown = run_sweep(more, lab=LAB, out=out, quiet=True, on_chunk=done.append)
    assert sum(c.points for c in done) == 2 * 2 * 2  # 2 new points x 2 drifts x 2 seeds
    want = run_sweep(more, lab=LAB, quiet=True)
    for k in want.metrics:
        np.testing.assert_array_equal(grown[k], want[k], err_msg=k)
