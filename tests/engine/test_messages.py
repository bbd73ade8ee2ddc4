"""Messages a new user met that did not say what they set or what to do: `simlab info` on a
sweep being computed, a derived field in "differs in", an unwritable --out (the README's
promise table and the code agree: exit 2 at the start, 1 during a run), `res.sel` with a value
that is not a number, `run_sweep(axes={...})`."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import simlab
from simlab.cli import main
from simlab.engine import claims, store
from simlab.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "figures" / "quick" / "data" / "paper"
TINY = (
    '[block]\nkind = "attention"\nd_model = 8\nn_heads = 2\nmlp = false\n'
    '[inputs]\nkind = "gaussian"\nbatch = 2\nlength = 4\n'
    '[[axes]]\nname = "drift_norm"\nvalues = [0.1, 1.0, 10.0]\n[sweep]\nseeds = 2\n'
)


@pytest.fixture
def cfg(tmp_path) -> Path:
    p = tmp_path / "tiny.toml"
    p.write_text(TINY)
    return p


def test_info_on_a_sweep_being_computed_says_so(cfg, tmp_path, capsys):
    """A live writer (a claim of a running process on this host) makes `simlab info` say the
    sweep is in progress, not advise `simlab merge`; once that writer is gone, it advises it."""
    run = tmp_path / "run"
    assert main(["sweep", str(cfg), "--out", str(run), "--quiet", "--worker", "0/2"]) == 0
    capsys.readouterr()
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (run / "claims").mkdir(exist_ok=True)
        claim = run / "claims" / f"seed1_mb0-1.{claims.HOST}.{writer.pid}.claim"
        claim.write_text("0\n")
        assert main(["info", str(run)]) == 0
        out = capsys.readouterr().out
        assert "1 missing; in progress: 1 writer computing now" in out, out
        assert f"{claims.HOST} pid {writer.pid}" in out and "simlab merge" in out
        assert f"`simlab merge {run}`" not in out  # not advised, only explained
    finally:
        writer.kill()
        writer.wait()
    assert main(["info", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"1 missing; `simlab merge {run}` computes the rest" in out and "in progress" not in out


def test_a_derived_field_that_differs_is_explained(cfg, tmp_path, capsys):
    """sweep.micro_batch, chosen from the sizes when not set, is named with both values and
    why; alone, with how to match; sweep.dtype likewise."""
    run = tmp_path / "run"
    assert main(["sweep", str(cfg), "--out", str(run), "--quiet"]) == 0
    held = simlab.load(run).meta["config"]["sweep"]["micro_batch"]
    assert main(["sweep", str(cfg), "--out", str(run), "--set", "inputs.length=2000"]) == 2
    err = capsys.readouterr().err
    assert "differs in: inputs.length, sweep.micro_batch (" in err
    here = int(re.search(r"sweep.micro_batch \(\d+ there, (\d+) here", err)[1])
    assert here != held and f"({held} there, {here} here: chosen from the sizes" in err
    assert "to match" not in err  # another field differs too: matching one would not do
    old = {"sweep": {"micro_batch": 8, "dtype": "float64"}}
    new = {"sweep": {"micro_batch": 4, "dtype": "float32"}}
    (one,) = store.explain_diff(old, new, ["sweep.micro_batch"])
    assert one == (
        "sweep.micro_batch (8 there, 4 here: chosen from the sizes when the config does not set "
        "it; set sweep.micro_batch = 8 to match)"
    )
    (one,) = store.explain_diff(old, new, ["sweep.dtype"])
    assert one == (
        "sweep.dtype (float64 there, float32 here: the precision of the process; run with "
        "JAX_ENABLE_X64=1 to match)"
    )
    assert store.explain_diff(old, new, ["block.d_model"]) == ["block.d_model"]


def test_the_readme_and_the_code_agree_on_unwritable_places(cfg, tmp_path, capsys, monkeypatch):
    """README's promise row: an --out unwritable at the start exits 2 (a user error, nothing
    written), a write that fails during the run exits 1; the code does both."""
    readme = (ROOT / "README.md").read_text()
    (row,) = [r for r in readme.splitlines() if r.startswith("| a full disk")]
    assert "during a run: exit 1" in row
    assert "when the command starts is a user error: exit 2" in row
    locked = tmp_path / "locked"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr(
        store.os, "access", lambda p, mode: False if str(p) == str(locked) else real(p, mode)
    )
    assert main(["sweep", str(cfg), "--out", str(locked / "run"), "--quiet"]) == 2
    assert "is not writable by this user" in capsys.readouterr().err
    assert list(locked.iterdir()) == []
    monkeypatch.undo()

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    assert main(["sweep", str(cfg), "--out", str(tmp_path / "run"), "--quiet"]) == 1
    assert "cannot be written" in capsys.readouterr().err


def test_sel_with_a_value_that_is_not_a_number_names_the_axis_and_its_range():
    res = simlab.load(PAPER)
    c = res.axes["drift_norm"]
    with pytest.raises(ConfigError) as e:
        res.sel(drift_norm="x")
    assert str(e.value) == (
        f"sel: drift_norm='x' must be a number or a list of numbers (on its {len(c)} values "
        f"{c.min():.4g} .. {c.max():.4g}, e.g. sel(drift_norm={c[0]:.4g}))"
    )
    with pytest.raises(ValueError, match=r"sel: seed=\['a'\] must be a number"):
        res.sel(seed=["a"])  # a ConfigError is a ValueError, as before
    assert res.sel(drift_norm=[1, 10])["out_cos"].shape[0] == 2  # numbers still select


def test_run_sweep_axes_as_one_table_says_to_give_a_list():
    with pytest.raises(ConfigError) as e:
        simlab.run_sweep(axes={"name": "drift_norm", "values": [1.0]}, quiet=True)
    assert str(e.value) == (
        "axes: must be a list of axis tables, one per axis, got one table (keys name, values); "
        "write axes=[{...}]"
    )
