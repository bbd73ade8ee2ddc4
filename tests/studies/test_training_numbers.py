"""docs/training.md carries the tables experiments/training_numbers.py prints from the committed
summary of the full run (figures/data/train-dynamics/summary.json), character for character:
every number in them is recomputable, none hand-copied; and the summary's overall verdicts are
the ones report.overall computes from its corpora again."""

import json
from pathlib import Path

from simlab.studies.train_dynamics import report

from conftest import doc_block, experiment_script

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = ROOT / "figures" / "data" / "train-dynamics" / "summary.json"


def _script():
    return experiment_script("training_numbers")


def test_training_doc_carries_the_scripts_tables():
    got = _script().main(SUMMARY)
    text = (ROOT / "docs" / "training.md").read_text()
    for name in ("losses", "layers"):
        assert doc_block(text, name) == got[name], name


def test_overall_verdict_recomputes_from_the_corpora():
    summary = json.loads(SUMMARY.read_text())
    corpora = {n: s for n, s in summary.items() if isinstance(s, dict) and "corpus" in s}
    assert len(corpora) >= 7
    assert report.overall(corpora) == summary["overall"]
