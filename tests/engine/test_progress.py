"""What a sweep says before and while it computes: one line per setup phase with its time
(weights, corpus, compile) before the progress bar, and a bar whose ETA counts only computing
time (simlab.engine.plain.eta_s, SweepBar): not the compile, not the reused points."""

from __future__ import annotations

import io
import pathlib
import re

import pytest
from tqdm.std import tqdm

import simlab
from simlab.engine.plain import SweepBar, eta_s

ROOT = pathlib.Path(__file__).resolve().parents[2]
BERT = ROOT / "tests" / "fixtures" / "checkpoints" / "bert"
SETUP = re.compile(r"^setup: (\w+) (\d+\.\d\d) s(?: \((.*)\))?$")


def test_setup_phases_are_timed_in_order_before_the_bar(tmp_path, capsys):
    pytest.importorskip("tokenizers")
    (tmp_path / "c.txt").write_text("the drift is a vector that every token shares . " * 20)
    res = simlab.run_sweep(
        {
            "checkpoint": {"path": str(BERT), "layer": 1},
            "inputs": {"kind": "text", "batch": 2, "length": 9, "corpus": str(tmp_path / "c.txt")},
            "axes": [{"name": "q_scale", "values": [0.5, 1.0]}],
            "sweep": {"metrics": ["out_cos"]},
        },
        out=tmp_path / "run",
    )
    err = capsys.readouterr().err
    lines = err.replace("\r", "\n").splitlines()
    setup = [(i, SETUP.match(ln)) for i, ln in enumerate(lines) if ln.startswith("setup:")]
    assert all(m for _, m in setup), lines
    assert [m[1] for _, m in setup] == ["weights", "corpus", "compile"]
    assert setup[0][1][3] == f"{BERT}, layer 1" and setup[1][1][3] == str(tmp_path / "c.txt")
    bar = [i for i, ln in enumerate(lines) if ln.startswith("sweep:")]
    assert bar and max(i for i, _ in setup) < min(bar), lines
    # the compile line's time is the one meta.json records
    assert float(setup[2][1][2]) == pytest.approx(res.meta["compile_time_s"], abs=0.006)


def test_quiet_says_nothing(tmp_path, capsys):
    simlab.run_sweep(
        {"checkpoint": {"path": str(BERT), "layer": 1}, "inputs": {"kind": "tokens",
         "vocab": 50, "batch": 2, "length": 8}, "axes": [{"name": "q_scale", "values": [1.0]}]},
        quiet=True,
    )  # fmt: skip
    assert capsys.readouterr().err == ""


def test_eta_excludes_the_compile():
    # 20 points done in 10 s of which 8 s compiled: 0.1 s a point, 40 left -> 4 s
    assert eta_s(20, 40, 10.0, 8.0) == pytest.approx(4.0)
    assert eta_s(20, 40, 10.0) == pytest.approx(20.0)  # nothing excluded
    assert eta_s(0, 40, 10.0, 8.0) is None  # no rate before the first point
    assert eta_s(20, 40, 8.0, 8.0) is None
    assert eta_s(20, 0, 10.0, 8.0) == 0.0


def test_the_bar_rates_only_the_points_it_computed_over_the_time_it_computed():
    """100 points, 50 reused (the bar's initial), 20 computed in 10 s of which a compile took
    8 s: 10 points a second, so the 30 left take 3 s (tqdm alone would say 70 points in 10 s)."""
    bar = SweepBar(total=100, initial=50, file=io.StringIO(), mininterval=0, unit="pt")
    bar.update(20)
    bar.start_t -= 10.0
    bar.excluded_s = lambda: 8.0
    d = bar.format_dict
    assert d["rate"] == pytest.approx(10.0, rel=1e-3)
    assert "<00:03" in tqdm.format_meter(**d)
    bar.close()
