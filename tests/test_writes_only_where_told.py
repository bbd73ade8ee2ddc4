"""Every command writes only where it is told: each command of the README and docs run at tiny
sizes (reproduce shrunk with --set: 3 x 3 points, one seed) from the checkout's root, with an
explicit output folder, leaves `git status` (and the content of every file it lists) exactly as
it was. CI runs it on a clean clone."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from simlab import cli

ROOT = Path(__file__).resolve().parents[1]


def checkout_state() -> tuple[str, dict[str, str]]:
    """git status of the checkout (untracked files too) and a sha256 of each file it lists."""
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    hashes = {}
    for line in status.splitlines():
        path = ROOT / line[3:].strip().strip('"')
        if path.is_file():
            hashes[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return status, hashes


@pytest.mark.slow
def test_every_command_writes_only_under_its_output_folder(tmp_path, monkeypatch):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    monkeypatch.chdir(ROOT)
    before = checkout_state()
    sweep = tmp_path / "sweep"
    commands = [
        ["sweep", "experiments/quickstart.toml", "--out", str(sweep), "--quiet"]
        + ["--set", "inputs.batch=2", "--set", "inputs.length=8", "--set", "block.d_model=16"],
        ["info", str(sweep)],
        ["merge", str(sweep)],
        ["plot", str(sweep), "--x", "drift_norm", "--y", "lambda", "--metric", "out_cos"]
        + ["--out", str(tmp_path / "p.png")],
        ["export", str(sweep), "--to", str(tmp_path / "s.nc")],
        ["reproduce", "--quick", "--only", "paper", "--out", str(tmp_path / "figs"), "--quiet"]
        + [f"--set={k}" for k in ("sweep.seeds=1", "inputs.batch=2", "inputs.length=8")]
        + [f"--set={k}" for k in ("block.d_model=16", "axes.0.num=3", "axes.1.num=3")],
        ["check-theory", "--quick", "--claims", "uniform_gain"]
        + ["--figures-dir", str(tmp_path / "theory")],
        ["train-dynamics", "--quick", "--corpus", "markov", "--steps", "4", "--seeds", "1"]
        + ["--out", str(tmp_path / "td"), "--quiet"],
        ["bench", "--quick", "--only", "W1", "--out-dir", str(tmp_path / "bench")]
        + ["--torch-device", "none", "--in-process"],
    ]
    for argv in commands:
        assert cli.main(argv) == 0, argv
        assert checkout_state() == before, f"`simlab {' '.join(argv)}` changed the checkout"
    # what they wrote is where they were told
    assert (tmp_path / "theory" / "theory_uniform_gain.png").is_file()
    assert list((tmp_path / "td" / "figures").glob("*.png"))  # train-dynamics: OUT/figures
    assert list((tmp_path / "figs").glob("paper_*.png"))
    assert list((tmp_path / "bench").glob("*.json"))
