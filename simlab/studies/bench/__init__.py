"""`simlab bench`: the sweep engine against the peers a researcher would otherwise use.

Modules: workloads (what is measured, targets), workers (one measurement per process),
peers (P1-P5 against PyTorch; torch_loop, the PyTorch peer), loops (W1-W4 against the JAX
per-point loop, and memory), trained (M1; counterfactual and hf_hooks: simlab and the HF hooks
peer on a trained layer), trained_decoder (M2; decoder and hf_decoder: the decoder study's
sweep in simlab and with HF hooks), flops (traced FLOP counts), report (tables), refine (the
refinement benchmark). This module runs them (`run_bench`).

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
  M2      the decoder study's counterfactual sweep (experiments/smollm2_counterfactual.py) on
          SmolLM2-135M (--quick: the tiny Llama GGUF fixture): simlab (decoder: the study's own
          programs) against HF transformers' GGUF load with forward hooks, a hooked whole-model
          forward per point (hf_decoder), as M1 otherwise (trained_decoder);
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
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from simlab.errors import ConfigError
from simlab.studies.bench.flops import dot_flops, flop_counts, traced_flops
from simlab.studies.bench.loops import run_stages, run_workload
from simlab.studies.bench.peers import run_peer
from simlab.studies.bench.report import format_table
from simlab.studies.bench.trained import hooks_missing, hooks_source, run_hooks
from simlab.studies.bench.trained_decoder import run_decoder
from simlab.studies.bench.workers import _cpu_seconds, _foreign_cpu, machine_info, run_worker
from simlab.studies.bench.workloads import (
    CACHED_COMPILE_S,
    DECODERS,
    HOOKS,
    PEERS,
    QUICK,
    ROOT,
    TARGETS,
    WORKLOADS,
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
    "run_workload",
    "run_stages",
    "run_peer",
    "run_hooks",
    "run_decoder",
    "hooks_source",
    "hooks_missing",
    "default_out_dir",
    "ROOT",
]


def default_out_dir() -> Path:
    """benchmarks/results of the checkout simlab runs from, else of the current directory."""
    base = ROOT if (ROOT / "benchmarks").is_dir() else Path.cwd()
    return base / "benchmarks" / "results"


def _command_line() -> str:
    """How this run was started: `python -m benchmarks.sweep ...` (or another script of
    benchmarks/, benchmarks.m2) or `simlab bench ...`."""
    prog = Path(sys.argv[0])
    head = f"python -m benchmarks.{prog.stem}" if prog.parent.name == "benchmarks" else prog.name
    return " ".join([head] + sys.argv[1:])


def _has_torch() -> bool:
    return importlib.util.find_spec("torch") is not None


def _has_hf() -> bool:
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
    names = selected(only, quick, log)
    for flag, value in (("--repeats", repeats), ("--rounds", rounds)):
        if value is not None and value < 1:
            raise ConfigError(f"bench {flag}: {value} must be >= 1")
    torch_device = peer_device(torch_device, names, log)
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
    rounds = rounds or (1 if quick else 3)
    for n in names:
        gflops = peak["gflops"]
        if n in HOOKS:
            peer = hooks_peer(n, torch_device, log)
            run = run_decoder if n in DECODERS else run_hooks
            w = run(n, quick, isolate, log, peer, rounds, repeats, gflops)
        elif n in PEERS:
            w = run_peer(n, quick, gflops, isolate, log, torch_device, rounds)
        else:
            w = run_workload(n, quick, gflops, isolate, loop_points, repeats, log, n in stages)
        report["workloads"].append(w)
    report["load_average"] = {"before": before, "after": os.getloadavg()}
    report["wall_s"] = time.perf_counter() - t0
    report["foreign_cpu"] = _foreign_cpu(cpu0, _cpu_seconds(), report["wall_s"])
    return report, write_report(report, out_dir, tag, quick)


def selected(only, quick: bool, log=print) -> list[str]:
    """The workloads to run: `only` (each checked; a hooks workload whose model is absent
    refused) or every one (a hooks workload whose model is absent left out, said)."""
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
    return names


def peer_device(torch_device: str | None, names: list[str], log=print) -> str | None:
    """The PyTorch peer's device, or None (said) when a P workload runs and torch is absent."""
    if torch_device is not None and any(n in PEERS for n in names) and not _has_torch():
        log(
            "bench: PyTorch is not installed, so the P workloads run without their PyTorch "
            "peer (engine timings only). For the comparison: pip install -e '.[bench]' "
            "(CPU wheels: pip install torch --index-url https://download.pytorch.org/whl/cpu)"
        )
        return None
    return torch_device


def hooks_peer(name: str, torch_device: str | None, log=print) -> bool:
    """Whether a hooks workload runs its HF hooks peer (saying why not when torch or
    transformers is missing, or for a GGUF model (M2) accelerate, which transformers' GGUF load
    requires)."""
    has = _has_hf() and (name not in DECODERS or importlib.util.find_spec("accelerate") is not None)
    if torch_device is not None and not has:
        gguf = name in DECODERS
        what = "torch, transformers or accelerate" if gguf else "torch or transformers"
        log(
            f"bench: {what} is not installed, so {name} runs without its HF hooks peer "
            f"(simlab timings only): pip install -e '.[bench]'{' accelerate' * gguf}"
        )
    return torch_device is not None and has


def write_report(report: dict[str, Any], out_dir, tag: str | None, quick: bool) -> Path | None:
    """The report as JSON in `out_dir` (None: not written), named by the tag (default: the
    backend), --quick and the time."""
    if out_dir is None:
        return None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    label = tag or report["machine"]["backend"]
    path = out / f"{label}{'-quick' if quick else ''}-{stamp}.json"
    path.write_text(json.dumps(report, indent=2, default=float))
    return path
