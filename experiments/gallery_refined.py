"""Experiment 1 refined at the paper's size (docs/gallery.md, "1b. Experiment 1, refined"): the
points and wall time of experiments/paper_refined.toml's committed run against a dense grid of
the same resolution (its finest lattice) and against experiment 1's 25 x 25 grid
(figures/data/paper), both read from their meta.json.

    python experiments/gallery_refined.py [figures/data]

tests/studies/test_gallery_answer.py checks that docs/gallery.md carries this output.
"""

import sys
from pathlib import Path

import numpy as np

import simlab
from simlab.engine import levelset


def main(root: Path) -> str:
    ref = simlab.load(root / "paper_refined")
    paper = simlab.load(root / "paper")
    r = ref.meta["refine"]
    lattice = [int(n) for n in r["lattice"]]
    dense = int(np.prod(lattice))
    points, seeds = ref.meta["n_points"], ref.meta["seeds"]
    wall, compute = ref.meta["wall_time_s"], ref.meta["compute_time_s"]
    per = compute / (points * seeds)
    paper_points = paper.meta["n_points"]
    shape = " x ".join(str(len(v)) for v in paper.axes.values())
    b = levelset.refined_boundary(ref)
    coarse = " x ".join(str(a["num"]) for a in ref.meta["config"]["axes"])
    wider = (lattice[0] - 1) / (len(next(iter(paper.axes.values()))) - 1)
    return (
        f"Refined to the {' x '.join(map(str, lattice))} lattice of {' x '.join(r['axes'])} "
        f"(a {coarse} coarse grid and {r['levels']} levels, at attn_entropy = {r['level']:g} in "
        f"the seed mean): {points} points per seed x {seeds} seeds (points added per level: "
        f"{', '.join(str(n) for n in r['points_per_level'])}), against {dense} for the dense "
        f"grid of the same resolution ({points / dense:.1%} of it) and {paper_points} for "
        f"experiment 1's {shape} grid, whose cells are {wider:g}x wider along each axis. Wall "
        f"time {wall:.0f} s ({compute:.0f} s computing, "
        f"{per:.2f} s per point and seed); at that rate the dense grid would take "
        f"{per * dense * seeds / 3600:.1f} h. The boundary: {len(b.segments)} segments on the "
        "leaves.\n"
    )


if __name__ == "__main__":
    sys.stdout.write(main(Path(sys.argv[1] if len(sys.argv) > 1 else "figures/data")))
