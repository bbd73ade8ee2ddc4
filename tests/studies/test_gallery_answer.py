"""docs/gallery.md's answer is experiments/gallery_answer.py's output on the committed data
(no hand-written verdicts), the declared verdict rule does what its docstring says, and the
decomposition experiments are paired as their configs promise."""

from pathlib import Path

import numpy as np
import pytest

import simlab

from conftest import doc_block, experiment_script

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "figures" / "data"


def _script():
    return experiment_script("gallery_answer")


@pytest.mark.parametrize(
    "lo, hi, mean, want",
    [
        (0.001, 0.02, 0.01, "raises"),
        (0.0001, 0.004, 0.002, "raises, small"),
        (-0.02, -0.001, -0.01, "lowers"),
        (-0.004, -0.0001, -0.002, "lowers, small"),
        (-0.004, 0.004, 0.0, "no effect"),
        (-0.001, 0.008, 0.003, "unresolved"),
        (-0.005, 0.001, -0.002, "unresolved"),  # the rule's bounds are strict
    ],
)
def test_verdict_rule(lo, hi, mean, want):
    assert _script().verdict(lo, hi, mean) == want


def test_gallery_states_the_scripts_answer():
    got = _script().main(DATA)
    text = (ROOT / "docs" / "gallery.md").read_text()
    assert doc_block(text, "answer") == got
    assert text.index("<!-- answer:begin") < text.index("## 1.")  # the answer comes first


def test_decomposition_is_paired_by_seed():
    """decomposition_mlp's GELU sweep is decomposition's softmax sweep at the shared points
    (one seed stream), and the MLP alone does not see the pattern: bit for bit."""
    soft = simlab.load(DATA / "decomposition" / "softmax")
    bert = simlab.load(DATA / "decomposition_mlp" / "bert")
    assert soft.meta["config"]["sweep"]["base_seed"] == bert.meta["config"]["sweep"]["base_seed"]
    for m in ("input_cos", "out_cos", "out_cos_gain", "out_cos_within_gain"):
        np.testing.assert_array_equal(soft[m][:, 0], bert[m][:, 0])  # both branches
    for v in ("uniform", "shared8", "token12"):  # attention alone: the input is shared
        other = simlab.load(DATA / "decomposition" / v)
        np.testing.assert_array_equal(other["input_cos"], soft["input_cos"])
