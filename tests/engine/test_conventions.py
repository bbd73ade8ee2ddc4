"""Conventions a new user meets first: `simlab.__version__`, what the package says it is, the
names `reproduce --only` takes, the README sections other files cite, and the netCDF export's
per-variable attributes (CF: long_name, description, units) beside its global JSON ones."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

import simlab
from simlab.cli import main

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "figures" / "quick" / "data" / "paper"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_version_is_the_package_metadata(capsys):
    assert simlab.__version__ == importlib.metadata.version("simlab") == PYPROJECT["version"]
    assert "__version__" in dir(simlab)
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"simlab {PYPROJECT['version']}"


def test_the_package_says_it_reads_trained_checkpoints_too():
    top = subprocess.run(
        [sys.executable, "-m", "simlab", "--help"], capture_output=True, text=True, timeout=60
    ).stdout
    top = " ".join(top.split())  # argparse wraps the description
    for where, text in [
        ("pyproject description", PYPROJECT["description"]),
        ("simlab --help", top),
        ("simlab.__doc__", " ".join(simlab.__doc__.split()[:30])),
    ]:
        assert "trained checkpoints" in text and "untrained Transformer blocks" not in text, where


def test_reproduce_only_lists_its_names(capsys):
    from simlab.studies.reproduce.experiments import experiment_files, experiment_groups

    files = experiment_files()
    groups = experiment_groups(files)
    with pytest.raises(SystemExit):
        main(["reproduce", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    listed = re.search(r"experiments: (.*?); configs: (.*?) --out", text)
    assert listed, text
    assert listed[1].split(", ") == list(groups)
    assert listed[2].split(", ") == list(files)
    assert main(["reproduce", "--quick", "--only", "no_such_experiment"]) == 2
    err = capsys.readouterr().err
    assert "'no_such_experiment'" in err and all(g in err for g in groups)


def test_constraints_cites_readme_sections_that_exist():
    header = [
        line for line in (ROOT / "constraints.txt").read_text().splitlines() if line[:1] == "#"
    ]
    cited = re.findall(r'README,? "([^"]+)"', " ".join(header))
    headings = {
        m[1] for m in re.finditer(r"^#+ (.+)$", (ROOT / "README.md").read_text(), re.MULTILINE)
    }
    assert cited and all(any(h.startswith(c) for h in headings) for c in cited), cited


def test_netcdf_export_has_per_variable_attributes_and_round_trips(tmp_path, capsys):
    xr = pytest.importorskip("xarray")
    from simlab.core.knobs import KNOBS
    from simlab.core.metrics import METRICS

    res = simlab.load(PAPER)
    nc = tmp_path / "paper.nc"
    assert main(["export", str(PAPER), "--to", str(nc)]) == 0
    with xr.open_dataset(nc, engine="scipy") as f:
        ds = f.load()
    for k in res.metrics:
        a = ds[k].attrs
        assert a["long_name"] == k and a["description"] == METRICS[k].doc
        lo, hi = METRICS[k].bounds
        assert (a.get("units") == "1") == (np.isfinite(lo) and np.isfinite(hi)), k
    assert ds["out_cos"].attrs["units"] == "1" and "units" not in ds["q_mean_norm"].attrs
    lam = ds["lambda"].attrs
    assert lam["long_name"] == "axis lambda (knobs q_scale, k_scale)"
    assert lam["description"] == (
        f"q_scale: {KNOBS['q_scale'].meaning}; k_scale: {KNOBS['k_scale'].meaning}"
    )
    assert ds["drift_norm"].attrs["description"] == f"drift_norm: {KNOBS['drift_norm'].meaning}"
    assert "sweep.base_seed" in ds["seed"].attrs["description"]
    back = simlab.from_xarray(ds)  # the global attributes still carry the round trip
    assert back.meta == res.meta and list(back.axes) == list(res.axes)
    for k in res.metrics:
        np.testing.assert_array_equal(back.metrics[k], res.metrics[k])
