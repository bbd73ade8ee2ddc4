"""R1: an adaptively refined map against the dense grid of its finest lattice (simlab.engine.
refine; `python -m benchmarks.refine`).

The refined sweep of a config with [refine] and the dense grid of the same axes at the finest
lattice's resolution (num_a = (num_a - 1) 2^levels + 1, no [refine]) are both run through
`simlab.run_sweep`; both put every point on the same coordinates, so a point they share has the
same numbers bit for bit. Reported: the points per seed of each (and per refinement level), their
ratio, and the Hausdorff distance between the two boundaries metric = level (seed mean, extracted
on each one's cells, simlab.engine.levelset.level_set) in finest cells. Targets: >= 8x fewer points,
boundaries within one finest cell everywhere.

`paper_map(levels)` is the paper's map refined (experiments/paper_refined.toml, at its [quick]
sizes unless full); `predicted_points` runs the same refinement on the closed-form entropy
field of the paper's protocol (simlab.theory.paper_entropy: the REM law, no free parameter), an
estimate of the points per seed at any size without computing a block.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import numpy as np

from simlab import theory
from simlab.engine import levelset, refine
from simlab.engine.config import load_config
from simlab.engine.sweep import run_sweep
from simlab.studies.reproduce.experiments import experiment_config

TARGETS = {"ratio": 8.0, "deviation_cells": 1.0}


def dense_config(config: dict) -> dict:
    """The dense grid of a refined config's finest lattice: the same tables, each refined axis
    with num = (num - 1) 2^levels + 1, no [refine]."""

    cfg = load_config(config)
    out = copy.deepcopy({k: v for k, v in config.items() if k != "refine"})
    for a, parsed in zip(out["axes"], cfg.axes[len(cfg.axes) - len(out["axes"]) :]):
        if parsed.name in cfg.refine.axes:
            a["num"] = (parsed.num - 1) * 2**cfg.refine.levels + 1
    return out


def paper_map(levels: int = 3, quick: bool = True) -> dict:
    """experiments/paper_refined.toml (its [quick] sizes unless quick is False) with `levels`
    refinement levels: 3 puts the boundary on the 97 x 97 lattice."""

    cfg = experiment_config("paper_refined", quick)
    cfg["refine"] = {**cfg["refine"], "levels": levels}
    return cfg


def predicted_points(config: dict) -> list[int]:
    """Points per refinement level of a paper-protocol config (post-LN or attention block with
    BERT init on embeddings, axes drift_norm and lambda = q_scale = k_scale) refined against
    the closed-form attention entropy simlab.theory.paper_entropy at its sizes."""

    cfg = load_config(config)
    lat = refine.Lattice.from_config(cfg)

    def field(idx):
        k = lat.knob_values(idx)
        return theory.paper_entropy(
            k["q_scale"],
            k["drift_norm"],
            length=cfg.inputs.length,
            d_model=cfg.block.d_model,
            embed_std=cfg.inputs.embed_std,
        )

    return refine.simulate(lat, field, cfg.refine.level, cfg.refine.rule).added


def refine_vs_dense(
    config: dict, out: str | Path | None = None, quiet: bool = True, lab=None
) -> dict[str, Any]:
    """Run the refined sweep of `config` and the dense grid of its finest lattice (into
    out/refined and out/dense when given; finished ones reload) and compare them (module
    docstring)."""

    out = None if out is None else Path(out)
    t0 = time.perf_counter()
    ref = run_sweep(config, out=None if out is None else out / "refined", quiet=quiet, lab=lab)
    t1 = time.perf_counter()
    dense = run_sweep(
        dense_config(config), out=None if out is None else out / "dense", quiet=quiet, lab=lab
    )
    t2 = time.perf_counter()
    r, idx, _ = levelset.structure(ref)
    b_ref = levelset.refined_boundary(ref)
    b_dense = levelset.grid_boundary(dense, r["metric"], r["level"], levelset.refine_selection(r))
    dev = levelset.hausdorff(b_ref.segments, b_dense.segments)
    n_ref, n_dense = len(idx), int(np.prod(r["lattice"]))
    shared = tuple(idx.T)
    same = all(
        np.array_equal(np.asarray(ref[k]), np.asarray(dense[k])[shared], equal_nan=True)
        for k in ref.metrics
    )
    res = {
        "lattice": r["lattice"],
        "levels": r["levels"],
        "seeds": ref.n_seeds,
        "refined_points": n_ref,
        "points_per_level": r["points_per_level"],
        "dense_points": n_dense,
        "ratio": n_dense / n_ref,
        "deviation_cells": dev,
        "boundary_segments": [len(b_ref.segments), len(b_dense.segments)],
        "equal_at_shared_points": bool(same),
        "wall_s": {"refined": t1 - t0, "dense": t2 - t1},
        "targets": TARGETS,
    }
    res["met"] = {
        "ratio": res["ratio"] >= TARGETS["ratio"],
        "deviation_cells": dev <= TARGETS["deviation_cells"],
    }
    return res


def format_report(res: dict[str, Any]) -> str:
    """A few lines: the point counts, the ratio, the deviation, each against its target."""
    lat = " x ".join(map(str, res["lattice"]))
    per = " + ".join(map(str, res["points_per_level"]))
    ok = {k: "met" if v else "NOT met" for k, v in res["met"].items()}
    return "\n".join(
        [
            f"R1 refined vs dense on the {lat} lattice ({res['levels']} levels, "
            f"{res['seeds']} seeds)",
            f"  refined: {res['refined_points']} points per seed ({per}), "
            f"{res['wall_s']['refined']:.1f} s",
            f"  dense:   {res['dense_points']} points per seed, {res['wall_s']['dense']:.1f} s",
            f"  ratio {res['ratio']:.1f}x fewer points (target >= {TARGETS['ratio']:g}x: "
            f"{ok['ratio']})",
            f"  boundary deviation {res['deviation_cells']:.3g} finest cells (target <= "
            f"{TARGETS['deviation_cells']:g}: {ok['deviation_cells']}); shared points "
            + ("bit-identical" if res["equal_at_shared_points"] else "DIFFER"),
        ]
    )
