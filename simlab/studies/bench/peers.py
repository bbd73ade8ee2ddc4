"""P1-P5 of `simlab bench`: the sweep engine against a plain PyTorch eager per-point loop
(simlab.studies.bench.torch_loop; the optional `bench` extra) on drift N x lambda grids of the
paper's protocol. Per round, each in its own process: the engine on an empty compilation cache
("cold": what a first run pays), the PyTorch loop, the engine again on the cache it filled
("warm": every later run); the medians over rounds are reported, every round kept."""

from __future__ import annotations

import statistics
import tempfile
from typing import Any

from simlab.studies.bench.flops import flop_counts
from simlab.studies.bench.report import _gf
from simlab.studies.bench.workers import median_over, run_worker
from simlab.studies.bench.workloads import CACHED_COMPILE_S, PEERS, TARGETS, peer_config


def run_peer(
    name: str,
    quick: bool,
    peak: float,
    isolate: bool,
    log=print,
    torch_device: str | None = "cpu",
    rounds: int = 1,
) -> dict[str, Any]:
    """A PyTorch-peer workload, `rounds` times (`peer_round`). The table reports the median
    round's walls and steady per-point times, the JSON every round (a process's speed varies
    from one process to the next: docs/performance.md, "Findings cited in the code");
    torch_device None: no PyTorch."""
    cfg = peer_config(name, quick)
    fl = flop_counts(cfg)
    runs = [peer_round(name, cfg, isolate, log, torch_device, r, rounds) for r in range(rounds)]
    out = engine_summary(name, cfg, fl, runs, peak)
    if torch_device is not None:
        add_torch(out, runs, torch_device)
    return out


def peer_round(name, cfg, isolate, log, torch_device, r: int, rounds: int) -> dict[str, Any]:
    """One round: engine cold (an empty compilation cache), the PyTorch loop (unless
    torch_device is None), engine warm (the cache the cold run filled)."""
    with tempfile.TemporaryDirectory(prefix="simlab-bench-cache-") as cache:
        tag = f"{name} round {r + 1}/{rounds}" if rounds > 1 else name
        log(f"  {tag}: engine, empty compilation cache ...")
        cold = run_worker({"kind": "engine", "config": cfg, "repeats": 2}, isolate, cache_dir=cache)
        peer = None
        if torch_device is not None:
            log(f"  {tag}: PyTorch loop ...")
            peer = run_worker({"kind": "torch", "config": cfg, "device": torch_device}, isolate)
        log(f"  {tag}: engine, warm compilation cache ...")
        warm = run_worker({"kind": "engine", "config": cfg, "repeats": 1}, isolate, cache_dir=cache)
    return {"engine_cold": cold, "engine_warm": warm, "torch": peer}


def engine_summary(name: str, cfg: dict, fl: dict, runs: list, peak: float) -> dict[str, Any]:
    """The engine's side over the rounds: median walls and compile times cold and warm, steady
    ms per point, executed GFLOP/s and its share of the peak, the cached-compile target."""
    first = runs[0]["engine_cold"]
    n, seeds = first["n_points"], first["seeds"]
    evals = n * seeds
    flops = fl["engine_per_point"] * evals + fl["engine_per_seed"] * seeds
    compute_s = median_over(runs, lambda r: r["engine_cold"]["compute_s"])
    out = {
        "name": name,
        "title": PEERS[name]["title"],
        "config": cfg,
        "points": n,
        "seeds": seeds,
        "flops": fl,
        "rounds": runs,
        "engine_cold": {
            "wall_s": median_over(runs, lambda r: r["engine_cold"]["wall_s"]),
            "compile_s": median_over(runs, lambda r: r["engine_cold"]["compile_s"]),
            "compute_s": compute_s,
        },
        "engine_warm": {
            "wall_s": median_over(runs, lambda r: r["engine_warm"]["wall_s"]),
            "compile_s": median_over(runs, lambda r: r["engine_warm"]["compile_s"]),
        },
        "engine_ms_per_point": 1e3 * compute_s / evals,
        "engine_gflops": _gf(flops) / compute_s,
        "torch": None,
    }
    out["peak_fraction"] = out["engine_gflops"] / peak
    out["target"] = {
        "ratio": TARGETS.get(name, {}).get("ratio"),
        "cached_compile_s": CACHED_COMPILE_S,
    }
    out["met"] = {"cached_compile_s": out["engine_warm"]["compile_s"] <= CACHED_COMPILE_S}
    return out


def add_torch(out: dict[str, Any], runs: list, torch_device: str) -> None:
    """The PyTorch loop's side (in place): its medians, the ratios PyTorch wall / engine wall
    cold and warm (median and range over rounds), the steady ratio, the ratio targets met."""
    out["torch"] = {
        "total_s": median_over(runs, lambda r: r["torch"]["total_s"]),
        "ms_per_point": median_over(runs, lambda r: r["torch"]["ms_per_point"]),
        "torch": runs[0]["torch"]["torch"],
        "device": torch_device,
        "threads": runs[0]["torch"]["threads"],
        "n_points": out["points"],
    }
    cold = [r["torch"]["total_s"] / r["engine_cold"]["wall_s"] for r in runs]
    warm = [r["torch"]["total_s"] / r["engine_warm"]["wall_s"] for r in runs]
    out["ratio_cold"] = statistics.median(cold)
    out["ratio_warm"] = statistics.median(warm)
    out["ratio_range"] = {"cold": [min(cold), max(cold)], "warm": [min(warm), max(warm)]}
    out["steady_ratio"] = out["torch"]["ms_per_point"] / out["engine_ms_per_point"]
    target = out["target"]["ratio"]
    if target is not None:
        out["met"].update(
            ratio_cold=out["ratio_cold"] >= target, ratio_warm=out["ratio_warm"] >= target
        )
