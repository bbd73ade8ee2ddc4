"""Tests of simlab.plot: cell edges against an oracle, log detection, what the heatmap and the
curves actually draw, the saved PNG, plot_results on a synthetic sweep, and the CLI."""

from __future__ import annotations

import argparse
import math
from collections import OrderedDict

import matplotlib.image as mpimg
import numpy as np
import pytest

from simlab import plot
from simlab.cli import plot as plot_cli
from simlab.engine import results
from simlab.errors import ConfigError


# ------------------------------------------------------------------ cell edges / log detection
def _edges_oracle_log(c):
    """Geometric means of neighbours; ends mirrored about the end points in log space."""
    c = [float(v) for v in c]
    mids = [math.sqrt(a * b) for a, b in zip(c[:-1], c[1:])]
    return [c[0] * math.sqrt(c[0] / c[1])] + mids + [c[-1] * math.sqrt(c[-1] / c[-2])]


def _edges_oracle_lin(c):
    c = [float(v) for v in c]
    mids = [(a + b) / 2 for a, b in zip(c[:-1], c[1:])]
    return [c[0] - (c[1] - c[0]) / 2] + mids + [c[-1] + (c[-1] - c[-2]) / 2]


@pytest.mark.parametrize("c", [[0.1, 1.0, 10.0, 100.0], [0.5, 0.7, 2.0, 3.0, 11.0], [2.0, 3.0]])
def test_cell_edges_log_matches_oracle(c):
    np.testing.assert_allclose(plot.cell_edges(c, True), _edges_oracle_log(c), rtol=1e-12)


@pytest.mark.parametrize("c", [[0.0, 0.25, 0.5, 1.0], [-3.0, 1.0, 2.0], [5.0, 6.0]])
def test_cell_edges_lin_matches_oracle(c):
    np.testing.assert_allclose(
        plot.cell_edges(c, False), _edges_oracle_lin(c), rtol=1e-12, atol=1e-15
    )


def test_cell_edges_single_point_has_positive_width_around_it():
    lo, hi = plot.cell_edges([3.0], True)
    assert lo < 3.0 < hi and math.isclose(math.sqrt(lo * hi), 3.0) and math.isclose(hi / lo, 10.0)
    lo, hi = plot.cell_edges([3.0], False)
    assert (lo, hi) == (1.5, 4.5)
    lo, hi = plot.cell_edges([0.0], False)
    assert (lo, hi) == (-0.5, 0.5)


def test_cell_edges_rejects_nonpositive_log_axis():
    with pytest.raises(ValueError, match="positive"):
        plot.cell_edges([0.0, 1.0], True)


def test_log_detection():
    assert plot.is_log_spaced(np.geomspace(0.01, 100, 9))
    assert plot.is_log_spaced([0.1, 0.3, 1, 3, 10])
    assert not plot.is_log_spaced(np.linspace(0.1, 10, 9))
    assert not plot.is_log_spaced(np.linspace(0.0, 1.0, 5))  # contains 0
    assert not plot.is_log_spaced([1.0])


def test_phase_diagram_auto_scales_and_draws_z():
    x = np.geomspace(0.1, 10, 5)
    y = np.linspace(0, 1, 4)
    z = np.arange(20.0).reshape(4, 5) ** 1.5
    fig, ax = plot.phase_diagram(x, y, z, x_label="q_scale", y_label="p", z_label="cos sim")
    assert ax.get_xscale() == "log" and ax.get_yscale() == "linear"
    (mesh,) = ax.collections
    np.testing.assert_array_equal(np.asarray(mesh.get_array()).reshape(z.shape), z)
    np.testing.assert_allclose(mesh.get_coordinates()[0, :, 0], _edges_oracle_log(x))
    np.testing.assert_allclose(mesh.get_coordinates()[:, 0, 1], _edges_oracle_lin(y))
    assert mesh.colorbar.ax.get_ylabel() == "cos sim"
    assert ax.get_xlabel() == "q_scale" and ax.get_ylabel() == "p"
    # explicit choice beats auto-detection
    _, ax2 = plot.phase_diagram(
        x, y, z, x_label="a", y_label="b", z_label="c", x_log=False, y_log=False
    )
    assert ax2.get_xscale() == "linear"


def test_phase_diagram_sorts_unsorted_coordinates_with_z():
    x, y = np.array([3.0, 1.0, 2.0]), np.array([1.0, 0.0])
    z = np.array([[13.0, 11.0, 12.0], [3.0, 1.0, 2.0]])
    _, ax = plot.phase_diagram(x, y, z, x_label="x", y_label="y", z_label="z")
    got = np.asarray(ax.collections[0].get_array()).reshape(2, 3)
    np.testing.assert_array_equal(got, [[1.0, 2.0, 3.0], [11.0, 12.0, 13.0]])


def test_phase_diagram_contour_theory_and_shape_check():
    x, y = np.linspace(0, 1, 6), np.linspace(0, 2, 5)
    X, Y = np.meshgrid(x, y)
    z, c = X + Y, X * Y
    theory = [(np.linspace(-5, 5, 50), np.linspace(-5, 5, 50) ** 2, "y = x^2")]
    _, ax = plot.phase_diagram(
        x,
        y,
        z,
        x_label="x",
        y_label="y",
        z_label="z",
        contour=c,
        contour_levels=[0.5, 1.0],
        contour_label="x*y",
        theory=theory,
    )
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["x*y", "y = x^2"]
    assert len(ax.texts) >= 2  # clabel texts
    assert {float(t.get_text()) for t in ax.texts} <= {0.5, 1.0}
    # theory did not widen the axes: limits stay the outer cell edges
    np.testing.assert_allclose(ax.get_xlim(), (-0.1, 1.1))
    np.testing.assert_allclose(ax.get_ylim(), (-0.25, 2.25))
    with pytest.raises(ValueError, match="shape"):
        plot.phase_diagram(x, y, z.T, x_label="x", y_label="y", z_label="z")


def test_curves_bands():
    x = np.array([1.0, 2.0, 3.0])
    m, s = np.array([1.0, 2.0, 4.0]), np.array([0.1, 0.2, 0.3])
    lo, hi = m - 1, m + 2
    _, ax = plot.curves(
        x, {"std": (m, s), "lohi": (m, (lo, hi)), "none": (m, None)}, x_label="x", y_label="y"
    )
    assert len(ax.collections) == 2  # two bands, none for "none"
    for poly, (elo, ehi) in zip(ax.collections, [(m - s, m + s), (lo, hi)]):
        v = poly.get_paths()[0].vertices
        for xi, a, b in zip(x, elo, ehi):
            ys = v[np.isclose(v[:, 0], xi), 1]
            assert np.isclose(ys.min(), a) and np.isclose(ys.max(), b)
    assert [line.get_label() for line in ax.get_lines()] == ["std", "lohi", "none"]
    assert ax.get_xscale() == "linear"


# ------------------------------------------------------------------ saving
def test_save_figure_150_dpi_atomic(tmp_path):
    fig, _ = plot.phase_diagram(
        [1.0, 2.0], [1.0, 2.0], np.eye(2), x_label="a", y_label="b", z_label="c"
    )
    out = tmp_path / "sub" / "fig.png"
    plot.save_figure(fig, out)
    img = mpimg.imread(out)
    assert img.shape[:2] == (round(4.8 * 150), round(6.4 * 150))
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["fig.png"]
    pil = pytest.importorskip("PIL.Image")
    with pil.open(out) as im:
        assert np.allclose(im.info["dpi"], (150, 150), atol=0.05)  # stored as pixels/metre


def test_save_figure_leaves_nothing_on_error(tmp_path):
    class Broken:
        canvas = None

        def savefig(self, *a, **k):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        plot.save_figure(Broken(), tmp_path / "x.png")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ plot_results
@pytest.fixture
def sweep(tmp_path):
    """Axes a (log, 4), b (lin, 3), c (2 values), d (single value); 5 seeds; metric "m" and a
    per-layer metric "ml" with 3 layers."""
    rng = np.random.default_rng(0)
    axes = OrderedDict(
        a=np.geomspace(0.1, 10, 4),
        b=np.linspace(0, 1, 3),
        c=np.array([0.0, 2.0]),
        d=np.array([7.0]),
    )
    metrics = {"m": rng.normal(size=(4, 3, 2, 1, 5)), "ml": rng.normal(size=(4, 3, 2, 1, 5, 3))}
    metrics["mh"] = rng.normal(size=(4, 3, 2, 1, 5, 3, 2))  # (layer, head)
    meta = {
        "dims": {
            "m": ["a", "b", "c", "d", "seed"],
            "ml": ["a", "b", "c", "d", "seed", "layer"],
            "mh": ["a", "b", "c", "d", "seed", "layer", "head"],
        },
        "axes": [
            {"name": "a", "knobs": ["q_scale", "k_scale"], "space": "log", "values": None},
            {"name": "b", "knobs": ["b"], "space": "lin"},
            {"name": "c", "knobs": ["c"], "space": "values"},
            {"name": "d", "knobs": ["d"], "space": "values"},
        ],
        "config": {
            "block": {"kind": "pre_ln", "d_model": 64, "n_heads": 4},
            "inputs": {"batch": 2, "length": 32},
        },
    }
    d = tmp_path / "run"
    results.save(d, axes, metrics, meta)
    return results.load(d), d


def test_plot_results_2d_mean_and_title(sweep):
    res, _ = sweep
    fig, ax = plot.plot_results(res, x="a", y="b", metric="m", select={"c": 1.9})
    want = res.metrics["m"][:, :, 1, 0, :].mean(axis=-1).T  # (len(b), len(a))
    got = np.asarray(ax.collections[0].get_array()).reshape(want.shape)
    np.testing.assert_allclose(got, want)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "linear"
    t = ax.get_title()
    for s in ("m", "5 seeds", "pre_ln", "d=64", "H=4", "2\u00d732", "c=2"):
        assert s in t, (s, t)
    assert ax.get_xlabel() == "a (q_scale = k_scale)"
    # swapping axes transposes
    _, ax2 = plot.plot_results(res, x="b", y="a", metric="m", select={"c": 0})
    np.testing.assert_allclose(
        np.asarray(ax2.collections[0].get_array()).reshape(4, 3),
        res.metrics["m"][:, :, 0, 0, :].mean(axis=-1),
    )


def test_plot_results_selects_any_further_dimension(sweep):
    """A metric's further dimensions (meta.json's dims: here layer and head) are selected by
    name like any other (default: the last index), in plot_results and `simlab plot --select`;
    `--layer` is sugar for --select layer=I; a dimension no metric has, or an index out of
    range, is an error naming it."""
    res, d = sweep
    for sel, (li, hi) in (({}, (2, 1)), ({"head": 0}, (2, 0)), ({"head": 0, "layer": -3}, (0, 0))):
        _, ax = plot.plot_results(res, x="a", y="b", metric="mh", select={"c": 0, **sel})
        want = res.metrics["mh"][:, :, 0, 0, :, li, hi].mean(axis=-1).T
        np.testing.assert_allclose(np.asarray(ax.collections[0].get_array()).reshape(3, 4), want)
        assert f"(layer {li}, head {hi})" in ax.collections[0].colorbar.ax.get_ylabel()
    _, ax = plot.plot_results(res, x="a", y="b", metric="mh", layer=1, select={"c": 0, "head": 0})
    assert "(layer 1, head 0)" in ax.collections[0].colorbar.ax.get_ylabel()
    np.testing.assert_array_equal(
        res.select("mh", c=2.0, d=7, layer=1, head=-1), res.metrics["mh"][:, :, 1, 0, :, 1, 1]
    )
    with pytest.raises(ConfigError, match="head 2 out of range"):
        plot.plot_results(res, x="a", y="b", metric="mh", select={"c": 0, "head": 2})
    with pytest.raises(ConfigError, match="axis 'head' not in this sweep.*dimensions: layer"):
        plot.plot_results(res, x="a", y="b", metric="ml", select={"c": 0, "head": 1})
    argv = (d, "--x", "a", "--y", "b", "--metric", "mh", "--select", "c=0", "--select", "head=1")
    assert plot_cli.cli_main(_args(*argv)) == 0
    assert (d / "mh_a_b_c0_head1.png").exists()


def test_plot_results_layer(sweep):
    res, _ = sweep
    for layer, li in ((None, 2), (0, 0), (-2, 1)):
        _, ax = plot.plot_results(res, x="a", y="b", metric="ml", layer=layer, select={"c": 0})
        want = res.metrics["ml"][:, :, 0, 0, :, li].mean(axis=-1).T
        np.testing.assert_allclose(
            np.asarray(ax.collections[0].get_array()).reshape(want.shape), want
        )
        assert f"layer {li}" in ax.collections[0].colorbar.ax.get_ylabel()
    with pytest.raises(ConfigError, match="layer 3"):
        plot.plot_results(res, x="a", y="b", metric="ml", layer=3, select={"c": 0})
    with pytest.raises(ConfigError, match="no layer axis"):
        plot.plot_results(res, x="a", y="b", metric="m", layer=0, select={"c": 0})


def _band_edges(ax, xs):
    v = ax.collections[0].get_paths()[0].vertices
    return [(v[np.isclose(v[:, 0], xi), 1].min(), v[np.isclose(v[:, 0], xi), 1].max()) for xi in xs]


def test_plot_results_1d_band_is_mean_pm_std(sweep):
    res, _ = sweep
    _, ax = plot.plot_results(res, x="a", metric="m", select={"b": 0.5, "c": 0}, band="std")
    seeds = res.metrics["m"][:, 1, 0, 0, :]
    mean, std = seeds.mean(-1), seeds.std(-1, ddof=1)
    (line,) = ax.get_lines()
    np.testing.assert_allclose(line.get_ydata(), mean)
    np.testing.assert_allclose(_band_edges(ax, res.axes["a"]), np.stack([mean - std, mean + std]).T)
    assert "1 std, 5 seeds" in line.get_label()


def test_plot_results_1d_band_ci_sem_none(sweep):
    """The default band is the 95% Student-t interval of the seed mean, t_{0.975, 4} s / sqrt(5)
    around it (5 seeds), labelled so; "sem" is s / sqrt(5); "none" draws no band."""
    res, _ = sweep
    seeds = res.metrics["m"][:, 1, 0, 0, :]
    mean, s = seeds.mean(-1), seeds.std(-1, ddof=1) / np.sqrt(5)
    _, ax = plot.plot_results(res, x="a", metric="m", select={"b": 0.5, "c": 0})
    half = 2.7764451051977987 * s
    np.testing.assert_allclose(
        _band_edges(ax, res.axes["a"]), np.stack([mean - half, mean + half]).T
    )
    assert "95% CI, t, 5 seeds" in ax.get_lines()[0].get_label()
    _, ax = plot.plot_results(res, x="a", metric="m", select={"b": 0.5, "c": 0}, band="sem")
    np.testing.assert_allclose(_band_edges(ax, res.axes["a"]), np.stack([mean - s, mean + s]).T)
    _, ax = plot.plot_results(res, x="a", metric="m", select={"b": 0.5, "c": 0}, band="none")
    assert len(ax.collections) == 0
    with pytest.raises(ConfigError, match="band 'wide'"):
        plot.plot_results(res, x="a", metric="m", select={"b": 0.5, "c": 0}, band="wide")


def test_plot_results_errors_name_the_axis(sweep):
    res, _ = sweep
    with pytest.raises(ConfigError, match="'c'"):  # extra axis not fixed
        plot.plot_results(res, x="a", y="b", metric="m")
    with pytest.raises(ConfigError, match="'zz'.*a, b, c, d"):
        plot.plot_results(res, x="a", y="b", metric="m", select={"zz": 1, "c": 0})
    with pytest.raises(ConfigError, match="'b'"):
        plot.plot_results(res, x="a", y="b", metric="m", select={"b": 1, "c": 0})
    with pytest.raises(ConfigError, match="'q'.*a, b, c, d"):
        plot.plot_results(res, x="q", y="b", metric="m", select={"c": 0})
    with pytest.raises(ConfigError, match="'nope'.*m, mh, ml"):
        plot.plot_results(res, x="a", y="b", metric="nope", select={"c": 0})


# ------------------------------------------------------------------ CLI
def _args(*argv):
    p = argparse.ArgumentParser()
    plot_cli.add_arguments(p)
    return p.parse_args([str(a) for a in argv])


def test_cli_writes_default_path(sweep, capsys):
    _, d = sweep
    assert (
        plot_cli.cli_main(
            _args(
                d,
                "--x",
                "a",
                "--y",
                "b",
                "--metric",
                "m",
                "--select",
                "c=2",
                "--contour",
                "m",
                "--levels",
                "0,0.5",
            )
        )
        == 0
    )
    out = d / "m_a_b_c2.png"  # the cut is in the default name: cuts do not overwrite each other
    assert mpimg.imread(out).shape[:2] == (720, 960)
    assert (
        plot_cli.cli_main(
            _args(
                d,
                "--x",
                "b",
                "--metric",
                "ml",
                "--layer",
                "1",
                "--select",
                "a=1",
                "--select",
                "c=0",
            )
        )
        == 0
    )
    assert (d / "ml_b_a1_c0.png").exists()
    argv = [d, "--x", "a", "--metric", "m", "--select", "b=0.5", "--select", "c=0", "--out"]
    for band in ("ci", "std", "sem", "none"):
        assert plot_cli.cli_main(_args(*argv, d / f"{band}.png", "--band", band)) == 0
    assert plot_cli.cli_main(_args(*argv, d / "ci90.png", "--level", "0.9")) == 0
    sizes = {p: (d / f"{p}.png").stat().st_size for p in ("ci", "std", "none", "ci90")}
    assert len(set(sizes.values())) == 4  # four different figures
    with pytest.raises(ConfigError, match="--level 1.5"):
        plot_cli.cli_main(_args(*argv, d / "bad.png", "--level", "1.5"))


@pytest.mark.parametrize(
    "extra, match",
    [
        (["--select", "c"], "AXIS=VALUE"),
        (["--select", "c=abc"], "not a number"),
        (["--select", "zz=1"], "'zz'"),
        ([], "'c'"),
        (["--select", "c=0", "--levels", "1,x", "--contour", "m"], "--levels"),
    ],
)
def test_cli_user_errors_leave_no_file(sweep, extra, match):
    _, d = sweep
    before = sorted(p.name for p in d.iterdir())
    with pytest.raises(ConfigError, match=match):
        plot_cli.cli_main(
            _args(d, "--x", "a", "--y", "b", "--metric", "m", "--out", d / "f.png", *extra)
        )
    assert sorted(p.name for p in d.iterdir()) == before


# ------------------------------------------------------------------------------ CLI promises
def test_cli_suffix_picks_the_format_and_several_metrics_each_get_a_file(sweep, capsys):
    _, d = sweep
    argv = [d, "--x", "a", "--y", "b", "--select", "c=2", "--metric", "m", "--metric", "ml"]
    assert plot_cli.cli_main(_args(*argv, "--out", d / "fig.pdf")) == 0
    for name in ("fig_m.pdf", "fig_ml.pdf"):
        assert (d / name).read_bytes()[:5] == b"%PDF-", name  # a PDF, not PNG bytes
    assert plot_cli.cli_main(_args(*argv[:-2], "--out", d / "fig.svg")) == 0
    assert b"<svg" in (d / "fig.svg").read_bytes()[:2000]
    with pytest.raises(ConfigError, match=r"--out: .*fig.jpg must end in .png, .pdf, .svg"):
        plot_cli.cli_main(_args(*argv, "--out", d / "fig.jpg"))


def test_cli_default_names_carry_the_cut_and_are_safe(sweep, tmp_path):
    res, d = sweep
    for c in ("0", "2"):  # two cuts: two files, neither overwrites the other
        assert (
            plot_cli.cli_main(
                _args(d, "--x", "a", "--y", "b", "--metric", "m", "--select", f"c={c}")
            )
            == 0
        )
    assert (d / "m_a_b_c0.png").exists() and (d / "m_a_b_c2.png").exists()
    res.metrics["m/s"] = res.metrics["m"]
    results.save(tmp_path / "slash", res.axes, res.metrics, res.meta)
    s = tmp_path / "slash"
    assert (
        plot_cli.cli_main(_args(s, "--x", "a", "--y", "b", "--metric", "m/s", "--select", "c=0"))
        == 0
    )
    assert (s / "m_s_a_b_c0.png").exists() and not (s / "m").exists()


def test_cli_select_beyond_the_axis_is_refused_and_a_snap_is_said(sweep, capsys):
    _, d = sweep
    with pytest.raises(ConfigError, match=r"select: c=1000 is outside the axis's range \[0, 2\]"):
        plot_cli.cli_main(_args(d, "--x", "a", "--y", "b", "--metric", "m", "--select", "c=1000"))
    assert (
        plot_cli.cli_main(_args(d, "--x", "a", "--y", "b", "--metric", "m", "--select", "c=1.7"))
        == 0
    )
    assert "--select c=1.7: the nearest coordinate 2 is used" in capsys.readouterr().err


def test_tiny_colour_range_is_said_and_vmin_vmax_fix_it(tmp_path):
    axes = OrderedDict(a=np.geomspace(0.1, 10, 4), b=np.linspace(0, 1, 3))
    z = -0.000446 + 8e-6 * np.random.default_rng(0).random((4, 3, 2))  # rounding-level spread
    meta = {"axes": [{"name": "a", "space": "log"}, {"name": "b", "space": "lin"}]}
    res = results.save(tmp_path / "r", axes, {"out_cos": z}, meta)
    fig, ax = plot.plot_results(res, x="a", y="b", metric="out_cos")
    width = np.ptp(z.mean(axis=-1))  # of the seed means drawn
    assert f"colour range only {width:.2g} wide" in ax.get_title()
    fig, ax = plot.plot_results(res, x="a", y="b", metric="out_cos", vmin=-1, vmax=1)
    assert "colour range" not in ax.get_title()
    assert ax.collections[0].get_clim() == (-1, 1)


def test_levels_outside_the_data_say_so(sweep, capsys):
    _, d = sweep
    argv = [d, "--x", "a", "--y", "b", "--metric", "m", "--select", "c=0", "--contour", "m"]
    assert plot_cli.cli_main(_args(*argv, "--levels", "100")) == 0
    assert (
        "simlab: warning: contour levels 100 are outside the range of m" in capsys.readouterr().err
    )
