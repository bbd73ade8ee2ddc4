"""`simlab sweep` through the CLI: help, a real run, and user errors (exit 2, field named,
no output files)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import simlab
from simlab.cli import COMMANDS, main

TINY = """
[block]
kind = "post_ln"
d_model = 16
n_heads = 2
depth = 2
[inputs]
batch = 2
length = 8
vocab = 50
[knobs]
temperature = {temperature}
[[axes]]
name = "drift_norm"
space = "log"
start = 0.1
stop = 10.0
num = 2
[[axes]]
name = "lambda"
knobs = ["q_scale", "k_scale"]
values = [1.0, 4.0, 16.0]
[sweep]
seeds = 2
micro_batch = 4
"""


def sweep(*args) -> int:
    """`simlab sweep ARGS...` in this process; returns the exit code."""
    return main(["sweep", *map(str, args)])


def write(tmp_path, text, name="cfg.toml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_help():
    r = subprocess.run([sys.executable, "-m", "simlab", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "sweep" in r.stdout
    for name in COMMANDS:
        with pytest.raises(SystemExit) as e:
            main([name, "--help"])
        assert e.value.code == 0, name


@pytest.mark.slow
def test_sweep_run_and_refuse_other_config(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        sweep(
            write(tmp_path, TINY.format(temperature=1.0)),
            "--out",
            out,
            "--quiet",
            "--chunk-size",
            4,
        )
        == 0
    )
    assert str(out) in capsys.readouterr().out
    r = simlab.load(out)
    assert list(r.axes) == ["drift_norm", "lambda"]
    assert r["out_cos"].shape == (2, 3, 2, 2)  # (*axes, seeds, layer)
    assert r.meta["dims"]["out_cos"] == ["drift_norm", "lambda", "seed", "layer"]
    files = sorted(out.rglob("*"))
    assert sweep(write(tmp_path, TINY.format(temperature=2.0), "other.toml"), "--out", out) == 2
    err = capsys.readouterr().err
    assert (
        "simlab: error:" in err and "holds a different sweep" in err and "knobs.temperature" in err
    )
    assert sorted(out.rglob("*")) == files


@pytest.mark.parametrize(
    "edit, field",
    [
        (("temperature = 1.0", "temperature = 0"), "knobs.temperature"),
        (("depth = 2", "depht = 2"), "block.depht"),
        (("seeds = 2", "seeds = 0"), "sweep.seeds"),
        (("start = 0.1", "start = 0.0"), "axes[0].start"),
        (('knobs = ["q_scale", "k_scale"]', 'knobs = ["q_scale", "kscale"]'), "axes[1].knobs"),
        (("n_heads = 2", "n_heads = 3"), "block.n_heads"),
        (("[sweep]", "[sweeps]"), "sweeps: unknown table"),
        (("micro_batch = 4", 'metrics = ["nope"]'), "sweep.metrics"),
        (("[block]", "[block"), "invalid TOML"),
    ],
)
def test_user_errors_exit_2_without_output(tmp_path, capsys, edit, field):
    text = TINY.format(temperature=1.0).replace(*edit)
    out = tmp_path / "out"
    assert sweep(write(tmp_path, text), "--out", out) == 2
    err = capsys.readouterr().err
    assert err.startswith("simlab: error:") and field in err, err
    assert not out.exists()


def test_missing_config_and_bad_arguments(tmp_path, capsys):
    out = tmp_path / "out"
    assert sweep(tmp_path / "none.toml", "--out", out) == 2
    assert "none.toml" in capsys.readouterr().err
    assert sweep("--default", write(tmp_path, TINY.format(temperature=1.0)), "--out", out) == 2
    assert "exactly one" in capsys.readouterr().err
    assert sweep("--out", out) == 2
    assert "exactly one" in capsys.readouterr().err
    assert not out.exists()
