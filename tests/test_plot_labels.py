"""What a figure says besides its data: a plot of a sweep of trained layers names the model,
its layers and the input kind in its title; a symlog axis marks the band where it is linear;
a legend of lines that vary in colour and style has one entry per colour and per style."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

import simlab
from simlab import plot
from simlab.plot.from_results import checkpoint_label

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "tests" / "fixtures" / "checkpoints" / "llama"


def test_a_checkpoint_sweeps_title_names_the_model_the_layer_and_the_input_kind():
    res = simlab.run_sweep(
        {
            "checkpoint": {"path": str(LLAMA), "layer": 1},
            "inputs": {"kind": "tokens", "batch": 2, "length": 8, "vocab": 100},
            "axes": [{"name": "q_scale", "values": [1.0, 2.0]}],
            "sweep": {"seeds": 2, "metrics": ["out_cos"]},
        },
        quiet=True,
    )
    _, ax = plot.plot_results(res, x="q_scale", metric="out_cos")
    lines = ax.get_title().split("\n")
    assert lines[1] == "trained llama (llama), layer 1, on tokens inputs", lines
    # drawn weights: no such line
    untrained = {**res.meta, "config": {k: v for k, v in res.meta["config"].items()}}
    untrained["config"].pop("checkpoint")
    assert checkpoint_label(untrained) == ""
    # a HuggingFace cache snapshot is named by its repository; text inputs by their corpus
    cfg = {
        "checkpoint": {
            "path": "/h/.cache/huggingface/hub/models--sentence-transformers--all-MiniLM-L6-v2"
            "/snapshots/c9745ed1d9f207416be6d2e6f8de32d1f16199bf",
            "layer": 2,
            "architecture": "bert",
        },
        "block": {"depth": 3},
        "inputs": {"kind": "text", "corpus": "/data/wiki/part1.txt"},
    }
    assert checkpoint_label({"config": cfg}) == (
        "trained sentence-transformers/all-MiniLM-L6-v2 (bert), layers 2-4, on text "
        "(part1.txt) inputs"
    )


def test_a_symlog_axis_marks_its_linear_band():
    x = np.logspace(-2, 2, 5)
    _, ax = plot.curves(x, {"a": (np.array([-3e-3, 0.0, 2e-4, 5e-2, 1.0]), None)},
                        x_label="x", y_label="y", y_log="symlog")  # fmt: skip
    assert ax.get_yscale() == "symlog" and ax.yaxis.get_transform().linthresh == 1e-3
    (band,) = [p for p in ax.patches if p.get_label() != "a"]
    ys = band.get_transform().transform(band.get_path().vertices)[:, 1]
    lo, hi = ax.transData.transform([[1.0, -1e-3], [1.0, 1e-3]])[:, 1]
    np.testing.assert_allclose([ys.min(), ys.max()], [lo, hi], rtol=1e-9)
    assert [t.get_text() for t in ax.texts] == ["linear for |y| < 0.001"]
    _, ax = plot.curves(x, {"a": (x, None)}, x_label="x", y_label="y", y_log=True)
    assert not ax.patches and not ax.texts  # a log axis has no such band


def test_a_legend_of_colours_and_styles_has_one_entry_for_each():
    ax = Figure().add_subplot()
    lines, styles = {}, {}
    for i, d in enumerate(("d 64", "d 256", "d 768")):
        for ls, mlp in (("-", "BERT MLP"), (":", "mean removed")):
            label = f"{d}, {mlp}"
            lines[label], styles[label] = {"width": d, "mlp": mlp}, {"color": f"C{i}", "ls": ls}
            ax.plot([0, 1], [i, i + 1], color=f"C{i}", ls=ls, label=label)
    ax.plot([0, 1], [0, 0], "--", label="theory")
    leg = plot.factored_legend(ax, lines, styles, "width", "mlp")
    got = [t.get_text() for t in leg.get_texts()]
    assert got == ["d 64", "d 256", "d 768", "BERT MLP", "mean removed", "theory"]
    handles = leg.legend_handles
    assert [h.get_color() for h in handles[:3]] == ["C0", "C1", "C2"]
    assert [h.get_linestyle() for h in handles[3:5]] == ["-", ":"]
