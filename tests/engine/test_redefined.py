"""A metric whose definition changed (simlab.core.metrics.REDEFINED: effective_rank, the
covariance's eigenvalues until fingerprint rule 1, Roy & Vetterli's singular values since): a
stored result shows the old values under the name of their meaning, and its directory computes
or grows no more units of the old name, so no array mixes two definitions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import simlab
from simlab.core import geometry
from simlab.core.metrics import REDEFINED
from simlab.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SMALL = dict(
    block={"kind": "post_ln", "d_model": 16, "n_heads": 2, "mlp": True},
    inputs={"kind": "gaussian", "batch": 2, "length": 8},
    axes=[{"name": "drift_norm", "values": [0.0, 1.0]}],
    sweep={"seeds": 2, "metrics": ["out_effective_rank", "out_cov_effective_rank"]},
)


def test_committed_rule_1_data_shows_the_old_meaning_under_its_name():
    """figures/data/answer_geometry/uniform stored out_effective_rank under rule 1 (the
    covariance's eigenvalues): it loads as out_cov_effective_rank, the values unchanged."""
    d = ROOT / "figures" / "data" / "answer_geometry" / "uniform"
    with np.load(d / "results.npz") as z:
        stored = z["out_effective_rank"]
    res = simlab.load(d)
    assert "out_effective_rank" not in res.metrics
    assert np.array_equal(res.metrics["out_cov_effective_rank"], stored)
    assert res.meta["renamed"] == {"out_effective_rank": "out_cov_effective_rank"}
    assert "out_cov_effective_rank" in res.meta["dims"]


def test_new_data_keeps_the_new_definition(tmp_path):
    """A rule-2 record keeps effective_rank (the singular values), which differs from the
    covariance's on the same tokens: exp H(sigma / sum sigma) > exp H(lambda / sum lambda)."""
    res = simlab.run_sweep(**SMALL, out=tmp_path / "new", quiet=True)
    again = simlab.load(tmp_path / "new")
    assert "renamed" not in again.meta
    er, cov = again.metrics["out_effective_rank"], again.metrics["out_cov_effective_rank"]
    assert np.array_equal(er, res.metrics["out_effective_rank"])
    assert np.all(er > cov)  # flatter weights sigma = sqrt(lambda): a larger entropy
    lam = np.array([4.0, 1.0, 0.25])
    assert geometry.cov_effective_rank(lam) < geometry.effective_rank(lam)


def test_a_directory_of_the_old_meaning_computes_no_more_of_it(tmp_path, monkeypatch):
    """With the rule of a fresh directory declared as the old meaning's, a resume that must
    compute a missing unit of the metric is refused naming it; the stored chunks stay."""
    out = tmp_path / "old"
    simlab.run_sweep(**SMALL, out=out, quiet=True)
    rule = json.loads((out / "sweep.json").read_text())["fingerprint_rule"]
    monkeypatch.setitem(REDEFINED, "out_effective_rank", ("out_cov_effective_rank", rule))
    for name in ("results.npz", "meta.json"):
        (out / name).unlink()
    chunks = sorted((out / "chunks").iterdir())
    chunks[-1].unlink()
    with pytest.raises(ConfigError, match="out_effective_rank.*old definition"):
        simlab.run_sweep(**SMALL, out=out, quiet=True)
    assert sorted((out / "chunks").iterdir()) == chunks[:-1]
    bigger = {**SMALL, "axes": [{"name": "drift_norm", "values": [0.0, 1.0, 2.0]}]}
    with pytest.raises(ConfigError, match="out_effective_rank.*old definition"):
        simlab.run_sweep(**bigger, out=out, quiet=True)
