"""Everyday use: `simlab --version`, `simlab info`, a concise Results repr, xarray and netCDF
round trips, `--set` overrides, the default --out, and the notebook docs/explore.py run as a
script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import simlab
from simlab.cli import main
from simlab.engine.config import load_config
from simlab.engine.tomlio import apply_overrides
from simlab.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "figures" / "quick" / "data" / "paper"
TINY = """
[block]
kind = "attention"
d_model = 8
n_heads = 2
mlp = false
[inputs]
kind = "gaussian"
batch = 2
length = 4
[[axes]]
name = "drift_norm"
space = "log"
start = 0.1
stop = 10.0
num = 3
[sweep]
seeds = 2
"""


def cfg_file(tmp_path, text=TINY, name="tiny.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    from importlib.metadata import version

    assert capsys.readouterr().out.strip() == f"simlab {version('simlab')}"


def test_repr_is_short_and_true():
    res = simlab.load(PAPER)
    text = repr(res)
    lines = text.splitlines()
    assert len(text) < 2000 and len(lines) == 6 + len(res.metrics)
    assert str(PAPER) in lines[0] and "d_model 64" in text and "seeds: 2" in text
    assert "axis drift_norm: 13 values, 0.01 .. 1e+05 (log)" in text
    for k, x in res.metrics.items():
        line = next(l for l in lines if l.strip().startswith(f"{k}:"))
        assert "13 x 13 x 2 (drift_norm, lambda, seed)" in line
        assert f"{x.min():.4g} .. {x.max():.4g}" in line
    html = res._repr_html_()
    assert html.startswith("<pre>") and html.endswith("</pre>") and "simlab Results" in html


def test_info_finished_and_unfinished(tmp_path, capsys):
    assert main(["info", str(PAPER)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("simlab Results") and "versions: " in out and "jax" in out
    assert "chunks: " in out
    # the seed means' confidence intervals: Student t over the 2 seeds, per metric
    assert "95% CI of the seed mean (Student t, 2 seeds)" in out
    res = simlab.load(PAPER)
    h = res.ci_half_width("out_cos")
    assert f"    out_cos: {np.median(h):.3g} / {h.max():.3g}" in out
    assert main(["info", str(PAPER), "--level", "0.5"]) == 0
    assert "50% CI of the seed mean" in capsys.readouterr().out
    cfg, run = cfg_file(tmp_path), tmp_path / "run"
    assert main(["sweep", str(cfg), "--out", str(run), "--quiet", "--worker", "0/2"]) == 0
    capsys.readouterr()
    assert main(["info", str(run)]) == 0
    out = capsys.readouterr().out
    assert "unfinished sweep" in out and "1 of 2 work units" in out and "1 missing" in out
    assert main(["info", str(tmp_path / "nowhere")]) == 2
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("not a sweep")
    assert main(["info", str(foreign)]) == 2
    assert "not a sweep directory" in capsys.readouterr().err


def test_xarray_round_trip_and_netcdf(tmp_path, capsys):
    xr = pytest.importorskip("xarray")
    res = simlab.load(PAPER)
    ds = res.to_xarray()
    assert list(ds.data_vars) == list(res.metrics)
    assert ds["out_cos"].dims == ("drift_norm", "lambda", "seed")
    np.testing.assert_array_equal(ds["drift_norm"].values, res.axes["drift_norm"])
    assert json.loads(ds.attrs["simlab_meta"])["config"] == res.meta["config"]
    back = simlab.from_xarray(ds)
    assert list(back.axes) == list(res.axes) and back.meta == res.meta
    for k in res.metrics:
        np.testing.assert_array_equal(back.metrics[k], res.metrics[k])
    sel = res.sel(drift_norm=1.0)["out_cos"]
    i = int(np.argmin(abs(np.log(res.axes["drift_norm"]))))
    np.testing.assert_array_equal(sel.values, res.metrics["out_cos"][i])
    np.testing.assert_array_equal(ds.mean("seed")["out_cos"].values, res.mean("out_cos"))
    nc = tmp_path / "paper.nc"
    assert main(["export", str(PAPER), "--to", str(nc)]) == 0
    assert "wrote" in capsys.readouterr().out
    with xr.open_dataset(nc, engine="scipy") as f:
        again = simlab.from_xarray(f.load())
    assert again.meta == res.meta
    for k in res.metrics:
        np.testing.assert_array_equal(again.metrics[k], res.metrics[k])
    for k in res.axes:
        np.testing.assert_array_equal(again.axes[k], res.axes[k])
    assert main(["export", str(PAPER), "--to", str(tmp_path / "x.txt")]) == 2


def test_core_works_without_xarray(tmp_path):
    """With xarray unimportable, loading and the repr work; to_xarray names the extra."""
    code = (
        "import sys; sys.modules['xarray'] = None\n"
        "import simlab\n"
        f"r = simlab.load({str(PAPER)!r}); assert 'seeds: 2' in repr(r)\n"
        "try:\n    r.to_xarray()\nexcept ImportError as e:\n    print('IMPORT', e)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "IMPORT this needs xarray" in p.stdout and "simlab[xarray]" in p.stdout


@pytest.mark.slow
def test_set_overrides_are_validated_and_recorded(tmp_path, capsys):
    cfg, run = cfg_file(tmp_path), tmp_path / "run"
    argv = [
        "sweep",
        str(cfg),
        "--out",
        str(run),
        "--quiet",
        "--set",
        "block.d_model=16",
        "--set",
        "axes.0.num=4",
        "--set",
        "knobs.temperature=0.5",
        "--set",
        "sweep.seeds=1",
    ]
    assert main(argv) == 0
    resolved = json.loads((run / "sweep.json").read_text())["config"]
    assert resolved["block"]["d_model"] == 16 and resolved["axes"][0]["num"] == 4
    assert resolved["knobs"]["temperature"] == 0.5 and resolved["sweep"]["seeds"] == 1
    res = simlab.load(run)
    assert res.metrics["out_cos"].shape == (4, 1)
    capsys.readouterr()
    # validated like the file: a bad value names the field, nothing written
    bad = tmp_path / "bad"
    assert main(["sweep", str(cfg), "--out", str(bad), "--set", "block.n_heads=3"]) == 2
    assert "block.n_heads: 3 must divide d_model=8" in capsys.readouterr().err
    assert main(["sweep", str(cfg), "--out", str(bad), "--set", "axes.5.num=3"]) == 2
    assert "index in 0..0" in capsys.readouterr().err
    assert main(["sweep", str(cfg), "--out", str(bad), "--set", "nonsense"]) == 2
    for kv, field in (
        ("inputs.length=1", "inputs.length: 1 is outside the allowed range"),
        ("knobs.temperature=-1", "knobs.temperature: -1 is outside the allowed range"),
        ("sweep.seeds=0", "sweep.seeds: 0 is outside the allowed range"),
        ("axes.0.space=cubic", "axes[0].space: 'cubic' is not one of"),
    ):
        capsys.readouterr()
        assert main(["sweep", str(cfg), "--out", str(bad), "--set", kv]) == 2, kv
        assert field in capsys.readouterr().err, kv
    assert not bad.exists()
    # the same overrides from Python
    tables = apply_overrides(
        {"axes": [{"name": "q_scale", "values": [1.0]}]},
        ["axes.0.values=[1.0, 2.0]", 'block.kind="pre_ln"'],
    )
    cfg2 = load_config(tables)
    assert cfg2.axes[0].values == (1.0, 2.0) and cfg2.block.kind == "pre_ln"
    with pytest.raises(ConfigError, match="block.bogus: unknown field"):
        load_config(apply_overrides({"axes": tables["axes"]}, ["block.bogus=1"]))


@pytest.mark.slow
def test_reproduce_with_set(tmp_path, capsys):
    out = tmp_path / "figs"
    argv = [
        "reproduce",
        "--quick",
        "--only",
        "temp_corr",
        "--out",
        str(out),
        "--quiet",
        "--set",
        "inputs.length=16",
        "--set",
        "sweep.seeds=1",
    ]
    assert main(argv) == 0
    res = simlab.load(out / "data" / "temp_corr")
    assert res.meta["config"]["inputs"]["length"] == 16 and res.n_seeds == 1


@pytest.mark.slow
def test_default_out(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = cfg_file(tmp_path)
    assert main(["sweep", str(cfg), "--quiet"]) == 0
    assert "output directory: runs/tiny" in capsys.readouterr().out
    assert simlab.load(tmp_path / "runs" / "tiny").metrics["out_cos"].shape == (3, 2)


def test_notebook_runs_as_a_script(tmp_path):
    pytest.importorskip("xarray")
    env = dict(os.environ, MPLBACKEND="Agg")
    p = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "explore.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert "simlab Results" in p.stdout and "largest |out_cos - input_cos|" in p.stdout
    for f in ("explore_entropy.png", "explore_cut.png"):
        assert (tmp_path / "runs" / "explore" / f).stat().st_size > 10_000
