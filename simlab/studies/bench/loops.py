"""W1-W4 of `simlab bench`: the sweep engine against the JAX per-point loop (jit(Lab(plain).point)
called once per point, weights drawn once per seed; W1-W3), with the metric stages left out one
by one (`run_stages`), and the engine's peak memory on grids of 1e3 and 1e5 points (W4,
`run_memory`)."""

from __future__ import annotations

import json
import tempfile
from typing import Any

from simlab.studies.bench.flops import flop_counts
from simlab.studies.bench.report import _gf
from simlab.studies.bench.workers import run_worker
from simlab.studies.bench.workloads import (
    QUICK,
    STAGE_AXES,
    STAGES,
    TARGETS,
    WORKLOADS,
    workload_configs,
)


def run_workload(
    name: str,
    quick: bool,
    peak: float,
    isolate: bool,
    loop_points: int | None,
    repeats: int | None,
    log=print,
    stages: bool = False,
) -> dict[str, Any]:
    """Engine and loop (W1-W3) or the two grids (W4) of one workload, with derived numbers."""
    reps = repeats if repeats is not None else (2 if quick else WORKLOADS[name]["repeats"])
    if name == "W4":
        return run_memory(name, quick, isolate, reps, log)
    cfg = workload_configs(name, quick)[""]
    if loop_points is None:
        full = WORKLOADS[name]["loop_points"]
        loop_points = QUICK.get(name, {}).get("loop_points", full) if quick else full
    fl = flop_counts(cfg)
    log(f"  {name}: engine ...")
    e = run_worker({"kind": "engine", "config": cfg, "repeats": reps}, isolate)
    log(f"  {name}: per-point loop ...")
    lo = run_worker({"kind": "loop", "config": cfg, "loop_points": loop_points}, isolate)
    out = compare(name, cfg, fl, e, lo, peak)
    if stages:
        out["stages"] = run_stages(name, cfg, isolate, log)
    return out


def compare(name: str, cfg: dict, fl: dict, e: dict, lo: dict, peak: float) -> dict[str, Any]:
    """The engine's run `e` against the loop's `lo`: points per second, the speed-up, the
    executed GFLOP/s of each (FLOPs `fl` of flop_counts) and their share of the peak, the
    targets met."""
    n, seeds = e["n_points"], e["seeds"]
    evals = n * seeds
    engine_flops = fl["engine_per_point"] * evals + fl["engine_per_seed"] * seeds
    loop_flops = fl["plain_per_point"] * evals + fl["plain_per_seed"] * seeds
    out = {
        "name": name,
        "title": WORKLOADS[name]["title"],
        "config": cfg,
        "points": n,
        "seeds": seeds,
        "flops": fl,
        "engine": e,
        "loop": lo,
        "points_per_s": evals / e["compute_s"],
        "loop_points_per_s": evals / lo["total_s"],
        "speedup": lo["total_s"] / e["compute_s"],
        "engine_gflops": _gf(engine_flops) / e["compute_s"],
        "loop_gflops": _gf(loop_flops) / lo["total_s"],
        "flop_ratio_plain_over_engine": loop_flops / engine_flops if engine_flops else None,
    }
    out["peak_fraction"] = out["engine_gflops"] / peak
    out["loop_peak_fraction"] = out["loop_gflops"] / peak
    out["target"] = TARGETS[name]
    out["met"] = {k: out[k] >= v for k, v in TARGETS[name].items()}
    return out


def run_memory(name: str, quick: bool, isolate: bool, reps: int, log=print) -> dict[str, Any]:
    """W4: the engine's peak memory on its two grids and their ratio. Both grids are measured
    on a warm cache of their own: a cold compile leaves the compiler's heap in the peak RSS, and
    the two grids compile different chunk programs, so whatever the user's cache held decided
    the ratio (docs/performance.md, W4)."""
    grids = {}
    with tempfile.TemporaryDirectory(prefix="simlab-bench-cache-") as cache:
        for label, cfg in workload_configs(name, quick).items():
            log(f"  {name} grid {label}: compiling into an empty cache ...")
            run_worker({"kind": "warm", "config": cfg}, isolate, cache_dir=cache)
            log(f"  {name} grid {label}: engine, warm cache ...")
            e = run_worker(
                {"kind": "engine", "config": cfg, "repeats": reps}, isolate, cache_dir=cache
            )
            grids[label] = {
                "points": e["n_points"],
                "engine": e,
                "points_per_s": e["n_points"] * e["seeds"] / e["compute_s"],
            }
    small, large = (g["engine"] for g in grids.values())
    # host RSS on CPU; on an accelerator its own peak (memory_stats), the host RSS aside
    mem = "device_peak_mb" if small["device_peak_mb"] and large["device_peak_mb"] else "rss_peak_mb"
    ratio = large[mem] / small[mem]
    net = [g["rss_peak_mb"] - g["rss_base_mb"] for g in (small, large)]
    return {
        "name": name,
        "title": WORKLOADS[name]["title"],
        "grids": grids,
        "memory_ratio": ratio,
        "memory": mem,
        "memory_ratio_net": net[1] / net[0] if net[0] > 0 else None,
        "target": TARGETS[name],
        "met": {"memory_ratio": ratio <= TARGETS[name]["memory_ratio"]},
    }


def run_stages(name: str, cfg: dict, isolate: bool, log=print) -> dict[str, Any]:
    """Engine and loop seconds per point with metric subsets left out (STAGES); paper-size
    workloads on the STAGE_AXES grid (8 points), W1 on its own grid with one seed."""
    out = {}
    for label, metrics in STAGES.items():
        c = json.loads(json.dumps(cfg))
        c["sweep"] = {**c["sweep"], "metrics": metrics}
        if name != "W1":
            c["axes"] = STAGE_AXES
        else:
            c["sweep"]["seeds"] = 1
        log(f"  {name} stage '{label}' ...")
        e = run_worker({"kind": "engine", "config": c, "repeats": 2}, isolate)
        lo = run_worker({"kind": "loop", "config": c, "loop_points": None}, isolate)
        evals = e["n_points"] * e["seeds"]
        out[label] = {
            "points": evals,
            "engine_s_per_point": e["compute_s"] / evals,
            "loop_s_per_point": lo["total_s"] / evals,
            "speedup": lo["total_s"] / e["compute_s"],
            "flops": flop_counts(c),
        }
    return out
