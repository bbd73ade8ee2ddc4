"""The worked plugin of examples/plugins (simlab_sandwich), used as a user would without
installing it: named in a config's `plugins` list and with `--plugin` on the command line. (CI
also installs it, finds it through its entry point and runs its own tests: .ci/run.)"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

import simlab
from simlab.cli import main

PLUGIN_DIR = Path(__file__).resolve().parents[1] / "examples" / "plugins"


@pytest.fixture(scope="module", autouse=True)
def on_path():
    """The plugin's folder on the path; what it registered is removed afterwards."""
    from simlab import plugins
    from simlab.core.block import BLOCKS
    from simlab.core.inputs import INPUTS
    from simlab.core.knobs import KNOBS
    from simlab.core.metrics import METRICS
    from simlab.studies.check_theory import CLAIMS

    regs = (BLOCKS, INPUTS, METRICS, KNOBS, CLAIMS)
    before = [list(r) for r in regs]
    sys.path.insert(0, str(PLUGIN_DIR))
    yield
    sys.path.remove(str(PLUGIN_DIR))
    for r, names in zip(regs, before):
        for n in [n for n in r if n not in names]:
            r.unregister(n)
    sys.modules.pop("simlab_sandwich", None)
    plugins._loaded.pop("simlab_sandwich", None)


@pytest.fixture(scope="module")
def sandwich_run(tmp_path_factory):
    """`simlab sweep examples/plugins/sandwich.toml` (the plugin named in the config)."""
    out = tmp_path_factory.mktemp("sandwich") / "run"
    assert main(["sweep", str(PLUGIN_DIR / "sandwich.toml"), "--out", str(out), "--quiet"]) == 0
    return out


def test_sweep_through_the_cli(sandwich_run, tmp_path):
    res = simlab.load(sandwich_run)
    assert res.meta["config"]["block"]["kind"] == "sandwich"
    assert {s["entry"] for s in res.meta["config"]["sources"]} == {
        "sandwich",
        "uniform",
        "out_mean_ratio",
    }
    ratio = res["out_mean_ratio"]
    assert np.all((ratio >= 0) & (ratio <= 1 + 1e-6))
    # the drift makes the inputs one direction: the input cosine rises with N
    assert np.all(np.diff(res.mean("input_cos")[:, 0]) > 0)
    # a plugin's kind is a kind everywhere, e.g. through --set (validated like the file)
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[inputs]\nbatch = 2\nlength = 8\n[[axes]]\nname = "drift_norm"\nvalues = [1.0]\n'
    )
    argv = ["sweep", str(cfg), "--out", str(tmp_path / "set"), "--quiet", "--set"]
    assert (
        main(
            [
                *argv,
                "block.kind=sandwich",
                "--set",
                "block.d_model=8",
                "--set",
                "block.n_heads=2",
                "--plugin",
                "simlab_sandwich",
            ]
        )
        == 0
    )
    assert simlab.load(tmp_path / "set").meta["config"]["block"]["kind"] == "sandwich"


@pytest.mark.slow
def test_plot_and_check_theory_through_the_cli(sandwich_run, tmp_path, capsys):
    png = tmp_path / "p.png"
    argv = ["plot", str(sandwich_run), "--x", "drift_norm", "--y", "lambda"]
    argv += ["--metric", "out_mean_ratio"]
    assert main([*argv, "--out", str(png), "--plugin", "simlab_sandwich"]) == 0
    assert png.stat().st_size > 10_000
    figs = tmp_path / "figs"
    argv = ["check-theory", "--quick", "--plugin", "simlab_sandwich", "--figures-dir", str(figs)]
    assert main([*argv, "--claims", "uniform_drift_cos"]) == 0
    table = capsys.readouterr().out
    (row,) = [line for line in table.splitlines() if re.match(r"\d+ uniform_drift_cos ", line)]
    assert row.split()[-1] in ("agrees", "order"), row  # the verdict, computed
    assert (figs / "theory_uniform_drift_cos.png").stat().st_size > 10_000
