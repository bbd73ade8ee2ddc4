"""One reader of config files (simlab.engine.tomlio.read_config_toml): a relative
`checkpoint.path`, `checkpoint.ids` or `inputs.corpus` is relative to the config file's folder on
every route (`simlab sweep CONFIG` with and without --set, `run_sweep(path)`, an experiment's
[quick] and [variants] tables), from the repository root and from any other directory
(docs/config.md, "Paths")."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

import simlab
from simlab import cli
from simlab.engine import sweep as sweep_module
from simlab.studies.reproduce.experiments import experiment_config, experiment_variants

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXPERIMENT = ROOT / "experiments" / "checkpoint_clamp.toml"
BERT = (ROOT / "tests" / "fixtures" / "checkpoints" / "bert").resolve()


class Loaded(Exception):
    """Raised in place of the compute: the config as validated, for the route's check."""


@pytest.fixture
def loaded(monkeypatch):
    """Replace the sweep's compute by a capture of the validated config: the bug lives in the
    reading, and six sweeps would take a minute."""

    def capture(cfg, **kwargs):
        raise Loaded(cfg)

    monkeypatch.setattr(sweep_module, "run_config", capture)


ROUTES = {
    "cli": lambda out: cli.main(["sweep", str(EXPERIMENT), "--out", out, "--quiet"]),
    "cli --set": lambda out: cli.main(
        ["sweep", str(EXPERIMENT), "--out", out, "--quiet", "--set", "axes.0.num=2"]
    ),
    "run_sweep(path)": lambda out: simlab.run_sweep(EXPERIMENT, out=out, quiet=True),
    "run_sweep(relative path)": lambda out: simlab.run_sweep(
        os.path.relpath(EXPERIMENT), out=out, quiet=True
    ),
}


@pytest.mark.parametrize("where", ["root", "elsewhere"])
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_config_file_reads_its_paths_from_its_folder(route, where, loaded, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT if where == "root" else tmp_path)
    with pytest.raises(Loaded) as e:
        ROUTES[route](str(tmp_path / "out"))
    cfg = e.value.args[0]
    assert pathlib.Path(cfg.checkpoint.path) == BERT
    hidden = json.loads((BERT / "config.json").read_text())["hidden_size"]
    assert cfg.block.d_model == hidden  # the fixture's config.json was read
    assert not (tmp_path / "out").exists()


def test_the_checkpoint_experiment_runs_from_the_root_without_set(tmp_path):
    """The first command of docs/checkpoints.md, exactly as a user types it (it exited 2)."""
    out = tmp_path / "x"
    p = subprocess.run(
        [sys.executable, "-m", "simlab", "sweep", "experiments/checkpoint_clamp.toml"]
        + ["--out", str(out), "--quiet"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    assert (out / "results.npz").is_file()


def test_quick_and_variant_tables_read_their_paths_from_the_file(tmp_path, monkeypatch):
    """An experiment's [quick] and [variants] tables are part of the file: their relative
    paths are the file's too (the reproduce route)."""
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "e.toml").write_text(
        '[inputs]\nkind = "text"\ncorpus = "a.txt"\n'
        '[quick.inputs]\ncorpus = "q.txt"\n'
        '[variants]\ntext = [{name = "v", inputs = {corpus = "v.txt"}}, '
        '{name = "s", inputs = {corpus = "stdlib"}}]\n'
        "[[figures]]\n"
    )
    monkeypatch.chdir(ROOT)
    d = tmp_path / "exp"
    assert experiment_config("e", quick=False, directory=d)["inputs"]["corpus"] == str(d / "a.txt")
    assert experiment_config("e", quick=True, directory=d)["inputs"]["corpus"] == str(d / "q.txt")
    variants = experiment_variants("e", quick=False, directory=d)
    assert [v.tables["inputs"]["corpus"] for v in variants] == [str(d / "v.txt"), "stdlib"]


def test_one_reader_of_config_files():
    """No entry reads a config file but through read_config_toml: `read_toml` (the raw TOML
    read) is called by simlab.engine.tomlio alone (every entry's route: the sweep CLI and
    run_sweep, reproduce, check-theory, train-dynamics)."""
    import ast

    callers = []
    for path in sorted((ROOT / "simlab").rglob("*.py")):
        if path.name == "tomlio.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            name = getattr(node, "name", None) or getattr(node, "id", None)
            name = name or getattr(node, "attr", None)
            if name == "read_toml":
                callers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert callers == []
