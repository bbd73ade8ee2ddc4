"""docs/gallery.md (section 6) and docs/theory.md carry the blocks that
experiments/gallery_numbers_width.py prints from the committed width data, character for
character (the closed form against the simulation's interval per width, and claim 10's scores on
the width experiment's seed stream), and the prose's inside/outside reading is what the
intervals say."""

from pathlib import Path

import numpy as np

import simlab
from simlab import theory
from simlab.engine.results import seed_ci

from conftest import doc_block, experiment_script

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "figures" / "data"


def test_docs_carry_the_width_blocks():
    got = experiment_script("gallery_numbers_width").main(DATA)
    gallery = (ROOT / "docs" / "gallery.md").read_text()
    theory_md = (ROOT / "docs" / "theory.md").read_text()
    assert doc_block(gallery, "width-closed-form") == got["width-closed-form"]
    assert doc_block(theory_md, "width-ratio") == got["width-ratio"]
    assert doc_block(theory_md, "claim10-width") == got["claim10-width"]
    # the block sits in the width section
    assert gallery.index("## 6. Width") < gallery.index("<!-- width-closed-form:begin")
    assert gallery.index("<!-- width-closed-form:end") < gallery.index("## 7.")


def test_closed_form_verdicts_from_the_intervals():
    """What the prose of both pages says, recomputed from the data: the closed form lies below
    the simulated interval at d 256 and inside it at d 512, 768 and 1024."""
    for d, want in ((256, False), (512, True), (768, True), (1024, True)):
        g = simlab.load(DATA / "width" / f"d{d}-bert")["out_cos_gain"][0]
        lo, hi = seed_ci(np.asarray(g, float), -1)
        cf = float(theory.mlp_mean_gain(d))
        assert (lo <= cf <= hi) == want, d
        if not want:
            assert cf < lo
