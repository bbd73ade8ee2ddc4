"""`simlab bench`: the sweep engine against the peers a researcher would otherwise use.

One run, on the current machine (docs/performance.md), every measurement in a fresh subprocess:
  peak    float32 GFLOP/s of a large jitted matmul (best of several calls);
  P1-P5   the engine against a plain PyTorch eager per-point loop (simlab.bench_torch; needs the
          optional `bench` extra), on drift N x joint q/k scale lambda grids of the paper's
          protocol. Per workload, in this order: the engine with an empty compilation cache
          ("cold": what a first run pays), the PyTorch loop, the engine again on the cache it
          filled ("warm": every later run). Walls include compilation and the per-seed draws,
          not the Python imports; the ratio is PyTorch wall / engine wall;
  W1-W3   the engine against the JAX per-point loop (jit(Lab(plain).point) called once per
          point, weights drawn once per seed; for the paper-size workloads timed on an evenly
          spaced subset of the points and extrapolated, "~" in the table);
  W4      the engine's peak memory on grids of 1e3 and 1e5 points (flatness);
  FLOPs   dot_general FLOPs counted from the traced programs (`traced_flops`: the jaxpr of
          lab.point after dead-code elimination, loop bodies times their trip count), per point
          and per seed; executed GFLOP/s = FLOPs / steady-state compute time, also as a fraction
          of the peak.
The JSON written under benchmarks/results/ holds every number of the tables plus the machine,
the versions, the load average before and after (a ratio against PyTorch is only valid on a
quiet machine: its thread pool slows by up to 25x when the cores are shared), and the command.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# Targets (ratios measured in the same run). P*: PyTorch wall / engine wall; W3: the share of
# the matmul peak the paper-size BERT block executes in steady state; W4: peak memory of the
# 1e5-point grid over the 1e3-point grid; "cached compile": seconds a warm-cache sweep compiles.
TARGETS = {"P1": {"ratio": 4.0}, "P2": {"ratio": 3.0}, "P3": {"ratio": 2.0}, "P4": {"ratio": 4.0},
           "P5": {}, "W1": {"speedup": 3.0}, "W2": {"speedup": 5.0},
           "W3": {"speedup": 1.3, "peak_fraction": 0.60}, "W4": {"memory_ratio": 1.3}}
CACHED_COMPILE_S = 0.3

_W1_BLOCK = {"kind": "attention", "d_model": 64, "n_heads": 4, "mlp": False}
_W1_INPUTS = {"kind": "embedding", "batch": 4, "length": 64}
_BERT = {"kind": "post_ln", "d_model": 768, "n_heads": 12, "mlp": True}
_ATTN = {"kind": "attention", "d_model": 768, "n_heads": 12, "mlp": False}
_PAPER_INPUTS = {"kind": "embedding", "batch": 16, "length": 512}


def _log_axis(name, start, stop, num):
    return {"name": name, "space": "log", "start": start, "stop": stop, "num": num}


_DRIFT8 = {"name": "drift_norm", "values": [0.0, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0]}
_PAPER_GRID = [_DRIFT8, _log_axis("q_scale", 0.25, 16.0, 8)]

# name -> description, config tables, loop subset (None: every point), W4 grid sizes.
WORKLOADS: dict[str, dict[str, Any]] = {
    "W1": {"title": "small attention-only (d 64, 4 heads, 4x64 tokens, 32x32 q_scale x "
                    "temperature, 4 seeds)",
           "config": {"block": _W1_BLOCK, "inputs": _W1_INPUTS,
                      "axes": [_log_axis("q_scale", 0.1, 10.0, 32),
                               _log_axis("temperature", 0.1, 10.0, 32)],
                      "sweep": {"seeds": 4, "micro_batch": 32}},
           "loop_points": None, "repeats": 3},
    "W2": {"title": "paper-size attention-only (d 768, 12 heads, 16x512 tokens, 8x8 "
                    "drift_norm x q_scale, 1 seed)",
           "config": {"block": _ATTN, "inputs": _PAPER_INPUTS, "axes": _PAPER_GRID,
                      "sweep": {"seeds": 1, "micro_batch": 1}},
           "loop_points": 8, "repeats": 1},
    "W3": {"title": "paper-size BERT block (post-LN + MLP, same inputs and grid)",
           "config": {"block": _BERT, "inputs": _PAPER_INPUTS, "axes": _PAPER_GRID,
                      "sweep": {"seeds": 1, "micro_batch": 1}},
           "loop_points": 8, "repeats": 1},
    "W4": {"title": "memory: W1's block on grids of 1e3 and 1e5 points (1 seed)",
           "config": {"block": _W1_BLOCK, "inputs": _W1_INPUTS, "axes": None,
                      "sweep": {"seeds": 1, "micro_batch": 32}},
           "grids": {"1e3": (40, 25), "1e5": (400, 250)}, "repeats": 1},
}

# Engine vs the PyTorch loop: the paper's protocol (BERT init, embedding lookup + drift N, joint
# q/k scale lambda), metrics input/attn/out cos (+ within), attn_entropy, attn_max.
PEER_METRICS = ["input_cos", "input_cos_within", "attn_cos", "attn_cos_within", "out_cos",
                "out_cos_within", "attn_entropy", "attn_max"]
_D256 = {"d_model": 256, "n_heads": 4}
_T256 = {"kind": "embedding", "batch": 8, "length": 256}
PEERS: dict[str, dict[str, Any]] = {
    "P1": {"title": "attention-only, d 256, 4 heads, 8 x 256 tokens, 16 x 16 grid",
           "block": {"kind": "attention", **_D256, "mlp": False}, "inputs": _T256, "n": 16},
    "P2": {"title": "BERT post-LN, d 256, 4 heads, 8 x 256 tokens, 12 x 12 grid",
           "block": {"kind": "post_ln", **_D256}, "inputs": _T256, "n": 12},
    "P3": {"title": "BERT post-LN at paper size (d 768, 12 heads, 16 x 512), 4 x 4 grid",
           "block": _BERT, "inputs": _PAPER_INPUTS, "n": 4},
    "P4": {"title": "attention-only at paper size, 4 x 4 grid",
           "block": _ATTN, "inputs": _PAPER_INPUTS, "n": 4},
    "P5": {"title": "attention-only, d 256, 8 x 256 tokens, 8 x 8 grid (small grid)",
           "block": {"kind": "attention", **_D256, "mlp": False}, "inputs": _T256, "n": 8},
}
PEER_QUICK = {"block": {"d_model": 32, "n_heads": 2}, "inputs": {"batch": 2, "length": 16,
                                                                  "vocab": 300}, "n": 2}


def peer_config(name: str, quick: bool = False) -> dict[str, Any]:
    """The sweep config of a PyTorch-peer workload: drift_norm 1e-2..1e5 x lambda 0.1..1e3 (log)."""
    w = PEERS[name]
    q = PEER_QUICK if quick else {}
    n = q.get("n", w["n"])
    return {"block": {**w["block"], **q.get("block", {})},
            "inputs": {**w["inputs"], **q.get("inputs", {})},
            "axes": [_log_axis("drift_norm", 1e-2, 1e5, n),
                     {"name": "lambda", "knobs": ["q_scale", "k_scale"], "space": "log",
                      "start": 0.1, "stop": 1e3, "num": n}],
            "sweep": {"seeds": 1, "metrics": PEER_METRICS}}


# --quick: the same structure at sizes that run in seconds (smoke run and tests). The
# paper-size stand-ins keep T > 64 so that the stable rank takes the Lanczos path.
QUICK: dict[str, dict[str, Any]] = {
    "W1": {"axes": [_log_axis("q_scale", 0.1, 10.0, 4), _log_axis("temperature", 0.1, 10.0, 4)],
           "sweep": {"seeds": 2, "micro_batch": 8}},
    "W2": {"block": {**_ATTN, "d_model": 96, "n_heads": 4},
           "inputs": {"kind": "embedding", "batch": 2, "length": 80, "vocab": 1000},
           "axes": [{"name": "drift_norm", "values": [0.0, 1.0]}, _log_axis("q_scale", 0.5, 2.0, 2)],
           "loop_points": 2},
    "W3": {"block": {**_BERT, "d_model": 96, "n_heads": 4},
           "inputs": {"kind": "embedding", "batch": 2, "length": 80, "vocab": 1000},
           "axes": [{"name": "drift_norm", "values": [0.0, 1.0]}, _log_axis("q_scale", 0.5, 2.0, 2)],
           "loop_points": 2},
    "W4": {"grids": {"1e2": (10, 10), "1e3": (40, 25)}},
}

# --stages: the same block with a metric subset left out, engine and loop per point
# (W2/W3 on STAGE_POINTS points), to see which stage limits the speed-up.
STAGES: dict[str, list[str] | None] = {
    "all metrics": None,
    "without stable_rank": ["input_cos", "input_cos_within", "attn_cos", "attn_cos_within", "out_cos",
                            "out_cos_within", "attn_entropy", "attn_max", "q_mean_norm",
                            "k_mean_norm", "qk_mean_cos"],
    "attention only (entropy, max)": ["attn_entropy", "attn_max"],
}
STAGE_AXES = [{"name": "drift_norm", "values": [0.0, 0.5]}, _log_axis("q_scale", 0.25, 16.0, 4)]

ROOT = Path(__file__).resolve().parent.parent


def default_out_dir() -> Path:
    """benchmarks/results of the checkout simlab runs from, else of the current directory."""
    base = ROOT if (ROOT / "benchmarks").is_dir() else Path.cwd()
    return base / "benchmarks" / "results"


# ----------------------------------------------------------------------------- FLOP counts
def dot_flops(jaxpr) -> int:
    """2 * batch * contracted * free sizes of every dot_general of a jaxpr, recursing into
    sub-jaxprs; a scan body (lax.map, fori_loop with static bounds) counts `length` times. A
    while loop holding a dot_general is an error (its trip count is not static)."""
    total = 0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
            ls, rs = eqn.invars[0].aval.shape, eqn.invars[1].aval.shape
            free_l = [n for i, n in enumerate(ls) if i not in lc and i not in lb]
            free_r = [n for i, n in enumerate(rs) if i not in rc and i not in rb]
            total += 2 * math.prod(ls[i] for i in lb) * math.prod(ls[i] for i in lc) \
                * math.prod(free_l) * math.prod(free_r)
            continue
        subs = []
        for v in eqn.params.values():
            for x in (v if isinstance(v, (tuple, list)) else (v,)):
                j = getattr(x, "jaxpr", x)
                if hasattr(j, "eqns"):
                    subs.append(j)
        inner = sum(dot_flops(j) for j in subs)
        if name == "scan":
            inner *= eqn.params["length"]
        elif name == "while" and inner:
            raise ValueError("dot_general inside a while loop of unknown trip count")
        total += inner
    return total


def traced_flops(lab) -> tuple[int, int]:
    """(per point, per seed) dot_general FLOPs of lab.point and lab.seed_state, after dead-code
    elimination (what XLA runs), from the traced programs."""
    import jax
    from jax._src.interpreters import partial_eval as pe
    from simlab.lab import knob_arrays
    key = jax.random.PRNGKey(0)
    state = jax.eval_shape(lab.seed_state, key)
    point = jax.make_jaxpr(lab.point)(state, knob_arrays({})).jaxpr
    point, _ = pe.dce_jaxpr(point, [True] * len(point.outvars))
    seed = jax.make_jaxpr(lab.seed_state)(key).jaxpr
    return dot_flops(point), dot_flops(seed)


def flop_counts(config: dict) -> dict[str, Any]:
    """Traced FLOPs of a workload's engine Lab and of the plain Lab the per-point loops run:
    {"path", "engine_per_point", "engine_per_seed", "plain_per_point", "plain_per_seed"}."""
    from simlab.config import load_config
    from simlab.lab import Lab
    cfg = load_config({**config, "axes": config.get("axes") or [_log_axis("q_scale", 1, 2, 2)]})
    engine = Lab(cfg.block, cfg.inputs, cfg.sweep.metrics)
    plain = Lab(cfg.block, cfg.inputs, cfg.sweep.metrics, hoist=False, factor=False, tiled=False)
    (ep, es), (pp, ps) = traced_flops(engine), traced_flops(plain)
    path = "factored" if engine.factor else "hoisted" if engine.hoist else "tiled"
    return {"path": path, "engine_per_point": ep, "engine_per_seed": es,
            "plain_per_point": pp, "plain_per_seed": ps}


# ----------------------------------------------------------------------------- workers
def _rss_mb() -> float:
    """High-water mark of this process's resident memory (ru_maxrss), MiB."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / 2**20 if sys.platform == "darwin" else r / 1024


def _device_peak_mb() -> float | None:
    import jax
    stats = getattr(jax.devices()[0], "memory_stats", lambda: None)()
    return None if not stats or "peak_bytes_in_use" not in stats else stats["peak_bytes_in_use"] / 2**20


def _baseline() -> dict[str, float]:
    """Import jax, initialise the backend, run one tiny op: the RSS a process starts from."""
    import jax
    import jax.numpy as jnp
    jax.block_until_ready(jnp.ones(8) + 1)
    return {"rss_base_mb": _rss_mb()}


def worker_peak(n: int, repeats: int) -> dict[str, Any]:
    """float32 GFLOP/s of a jitted n x n x n matmul: best and median of `repeats` calls."""
    import jax
    import jax.numpy as jnp
    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.float32)
    f = jax.jit(jnp.matmul)
    jax.block_until_ready(f(a, b))
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(f(a, b))
        ts.append(time.perf_counter() - t0)
    ts.sort()
    fl = 2.0 * n ** 3
    return {"n": n, "repeats": repeats, "gflops": fl / ts[0] / 1e9,
            "gflops_median": fl / ts[len(ts) // 2] / 1e9}


def worker_engine(config: dict, repeats: int) -> dict[str, Any]:
    """Time run_sweep on `config` (in memory) as a user runs it: the first run's wall includes
    validation, compilation (from the compilation cache this process was given, if it holds
    the programs), the per-seed draws, the points and the merge. With repeats > 1 the best
    compute time of the later runs is the steady state (the compiled programs are reused)."""
    from simlab.sweep import run_sweep
    out = _baseline()
    runs = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        res = run_sweep(config, quiet=True)
        m = res.meta
        runs.append({"compute_s": m["compute_time_s"], "compile_s": m["compile_time_s"],
                     "wall_s": time.perf_counter() - t0})
    timed = runs[1:] if len(runs) > 1 else runs
    best = min(timed, key=lambda r: r["compute_s"])
    out.update(compute_s=best["compute_s"], compute_s_all=[r["compute_s"] for r in timed],
               compile_s=runs[0]["compile_s"], wall_s=runs[0]["wall_s"],
               first_compute_s=runs[0]["compute_s"], layout=m["layout"],
               n_points=m["n_points"], seeds=m["seeds"], devices=m["devices"],
               matmul_precision=m["matmul_precision"], rss_peak_mb=_rss_mb(),
               device_peak_mb=_device_peak_mb())
    return out


def worker_torch(config: dict, device: str = "cpu") -> dict[str, Any]:
    """Time the PyTorch eager per-point loop (simlab.bench_torch) on a peer workload's grid."""
    from simlab import bench_torch
    import numpy as np
    axes = {a["name"]: np.geomspace(a["start"], a["stop"], a["num"]).tolist() for a in config["axes"]}
    out = bench_torch.loop(config["block"], config["inputs"], axes["drift_norm"], axes["lambda"],
                           config["sweep"].get("seeds", 1), device=device)
    out["rss_peak_mb"] = _rss_mb()
    return out


def worker_loop(config: dict, loop_points: int | None) -> dict[str, Any]:
    """Time the per-point loop (see the module docstring) on all points or an evenly spaced
    subset of `loop_points` of them per seed."""
    import jax
    import numpy as np
    from simlab.config import load_config
    from simlab.lab import Lab
    from simlab.sweep import grid_knobs
    out = _baseline()
    cfg = load_config(config)
    lab = Lab(cfg.block, cfg.inputs, cfg.sweep.metrics, hoist=False, factor=False, tiled=False)
    seed_state, point = jax.jit(lab.seed_state), jax.jit(lab.point)
    grid = grid_knobs(cfg)
    fixed = {k: np.float32(v) for k, v in cfg.knobs.items()}
    n = cfg.n_points
    idx = np.arange(n) if not loop_points or loop_points >= n else \
        np.unique(np.linspace(0, n - 1, loop_points).round().astype(int))
    knobs = [{**fixed, **{k: v[i] for k, v in grid.items()}} for i in idx]
    t0 = time.perf_counter()
    state = seed_state(jax.random.PRNGKey(0))
    jax.block_until_ready(point(state, knobs[0]))
    out["compile_s"] = time.perf_counter() - t0
    t_seed = t_points = 0.0
    for s in range(cfg.sweep.seeds):
        t0 = time.perf_counter()
        state = jax.block_until_ready(
            seed_state(jax.random.fold_in(jax.random.PRNGKey(cfg.sweep.base_seed), s)))
        t1 = time.perf_counter()
        res = [point(state, kn) for kn in knobs]
        jax.block_until_ready(res)
        t_seed += t1 - t0
        t_points += time.perf_counter() - t1
    scale = n / len(idx)
    out.update(timed_points=int(len(idx)), n_points=n, seeds=cfg.sweep.seeds,
               measured_s=t_seed + t_points, seed_s=t_seed,
               total_s=t_seed + t_points * scale, extrapolated=bool(scale != 1),
               rss_peak_mb=_rss_mb(), device_peak_mb=_device_peak_mb())
    return out


def _worker_main(argv) -> int:
    spec = json.loads(argv[0])
    kind = spec.pop("kind")
    result = WORKERS[kind](**spec)
    sys.stdout.write("\n@@RESULT@@" + json.dumps(result) + "\n")
    return 0


WORKERS = {"peak": worker_peak, "engine": worker_engine, "loop": worker_loop, "torch": worker_torch}


def run_worker(spec: dict, isolate: bool = True, timeout: float | None = None,
               cache_dir: str | None = None) -> dict[str, Any]:
    """Run a worker in a fresh `python -m simlab.bench --worker` process (or in-process), with
    the compilation cache in `cache_dir` ("off" for none; None: the environment's)."""
    env = dict(os.environ)
    if cache_dir is not None:
        env["SIMLAB_COMPILE_CACHE"] = cache_dir
    if not isolate:
        spec = dict(spec)
        kind = spec.pop("kind")
        old = os.environ.get("SIMLAB_COMPILE_CACHE")
        try:
            if cache_dir is not None:
                os.environ["SIMLAB_COMPILE_CACHE"] = cache_dir
            return WORKERS[kind](**spec)
        finally:
            if old is None:
                os.environ.pop("SIMLAB_COMPILE_CACHE", None)
            else:
                os.environ["SIMLAB_COMPILE_CACHE"] = old
    cmd = [sys.executable, "-m", "simlab.bench", "--worker", json.dumps(spec)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=os.getcwd(), env=env)
    if p.returncode != 0 or "@@RESULT@@" not in p.stdout:
        raise RuntimeError(f"benchmark worker {spec['kind']} failed (exit {p.returncode}):\n"
                           f"{p.stderr[-4000:]}")
    return json.loads(p.stdout.rsplit("@@RESULT@@", 1)[1])


# ----------------------------------------------------------------------------- workloads
def workload_configs(name: str, quick: bool = False) -> dict[str, dict]:
    """Sweep config tables of a workload: {"": config}, or {grid label: config} for W4."""
    w = WORKLOADS[name]
    q = QUICK[name] if quick else {}
    cfg = json.loads(json.dumps(w["config"]))
    for k in ("block", "inputs", "axes"):
        if k in q:
            cfg[k] = q[k]
    cfg["sweep"] = {**cfg["sweep"], **q.get("sweep", {})}
    if name != "W4":
        return {"": cfg}
    out = {}
    for label, (nq, nt) in q.get("grids", w["grids"]).items():
        out[label] = {**cfg, "axes": [_log_axis("q_scale", 0.1, 10.0, nq),
                                      _log_axis("temperature", 0.1, 10.0, nt)]}
    return out


def machine_info() -> dict[str, Any]:
    """CPU model, cores, memory, OS, versions, device, load average."""
    import jax
    import jaxlib
    import numpy as np
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        pass
    dev = jax.devices()[0]
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": mem,
            "platform": platform.platform(), "python": platform.python_version(),
            "jax": jax.__version__, "jaxlib": jaxlib.__version__, "numpy": np.__version__,
            "backend": jax.default_backend(), "device": getattr(dev, "device_kind", str(dev)),
            "n_devices": jax.device_count(),
            "matmul_precision": str(jax.config.jax_default_matmul_precision),
            "xla_flags": os.environ.get("XLA_FLAGS", "")}


def _gf(x: float) -> float:
    return x / 1e9


def run_workload(name: str, quick: bool, peak: float, isolate: bool, loop_points: int | None,
                 repeats: int | None, log=print, stages: bool = False) -> dict[str, Any]:
    """Engine and loop (W1-W3) or the two grids (W4) of one workload, with derived numbers."""
    w = WORKLOADS[name]
    cfgs = workload_configs(name, quick)
    reps = repeats if repeats is not None else (2 if quick else w["repeats"])
    if name == "W4":
        grids = {}
        for label, cfg in cfgs.items():
            log(f"  {name} grid {label}: engine ...")
            e = run_worker({"kind": "engine", "config": cfg, "repeats": reps}, isolate)
            grids[label] = {"points": e["n_points"], "engine": e,
                            "points_per_s": e["n_points"] * e["seeds"] / e["compute_s"]}
        small, large = list(grids.values())
        # host RSS on CPU; on an accelerator its own peak (memory_stats), the host RSS aside
        on_device = all(g["engine"]["device_peak_mb"] for g in (small, large))
        mem = "device_peak_mb" if on_device else "rss_peak_mb"
        ratio = large["engine"][mem] / small["engine"][mem]
        net = [g["engine"]["rss_peak_mb"] - g["engine"]["rss_base_mb"] for g in (small, large)]
        return {"name": name, "title": w["title"], "grids": grids, "memory_ratio": ratio,
                "memory": mem, "memory_ratio_net": net[1] / net[0] if net[0] > 0 else None,
                "target": TARGETS[name], "met": {"memory_ratio": ratio <= TARGETS[name]["memory_ratio"]}}
    cfg = cfgs[""]
    lp = loop_points if loop_points is not None else (QUICK.get(name, {}).get("loop_points", w["loop_points"])
                                                      if quick else w["loop_points"])
    fl = flop_counts(cfg)
    log(f"  {name}: engine ...")
    e = run_worker({"kind": "engine", "config": cfg, "repeats": reps}, isolate)
    log(f"  {name}: per-point loop ...")
    lo = run_worker({"kind": "loop", "config": cfg, "loop_points": lp}, isolate)
    n, seeds = e["n_points"], e["seeds"]
    evals = n * seeds
    engine_flops = fl["engine_per_point"] * evals + fl["engine_per_seed"] * seeds
    loop_flops = fl["plain_per_point"] * evals + fl["plain_per_seed"] * seeds
    out = {"name": name, "title": w["title"], "config": cfg, "points": n, "seeds": seeds,
           "flops": fl, "engine": e, "loop": lo,
           "points_per_s": evals / e["compute_s"],
           "loop_points_per_s": evals / lo["total_s"],
           "speedup": lo["total_s"] / e["compute_s"],
           "engine_gflops": _gf(engine_flops) / e["compute_s"],
           "loop_gflops": _gf(loop_flops) / lo["total_s"],
           "flop_ratio_plain_over_engine": loop_flops / engine_flops if engine_flops else None}
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
        out[label] = {"points": evals, "engine_s_per_point": e["compute_s"] / evals,
                      "loop_s_per_point": lo["total_s"] / evals,
                      "speedup": lo["total_s"] / e["compute_s"],
                      "flops": flop_counts(c)}
    return out


def run_peer(name: str, quick: bool, peak: float, isolate: bool, log=print,
             torch_device: str | None = "cpu", rounds: int = 1) -> dict[str, Any]:
    """A PyTorch-peer workload, `rounds` times: engine cold (an empty compilation cache),
    PyTorch loop, engine warm (the cache the cold run filled), each in its own process. On this
    2-core VM one process's speed differed from the next by up to 40% (both ways, for the
    engine and for PyTorch alike), so the table reports the median round's walls and steady
    per-point times, and the JSON every round; torch_device None: no PyTorch."""
    import statistics
    import tempfile
    cfg = peer_config(name, quick)
    fl = flop_counts(cfg)
    runs = []
    for r in range(rounds):
        with tempfile.TemporaryDirectory(prefix="simlab-bench-cache-") as cache:
            tag = f"{name} round {r + 1}/{rounds}" if rounds > 1 else name
            log(f"  {tag}: engine, empty compilation cache ...")
            cold = run_worker({"kind": "engine", "config": cfg, "repeats": 2}, isolate,
                              cache_dir=cache)
            peer = None
            if torch_device is not None:
                log(f"  {tag}: PyTorch loop ...")
                peer = run_worker({"kind": "torch", "config": cfg, "device": torch_device}, isolate)
            log(f"  {tag}: engine, warm compilation cache ...")
            warm = run_worker({"kind": "engine", "config": cfg, "repeats": 1}, isolate,
                              cache_dir=cache)
        runs.append({"engine_cold": cold, "engine_warm": warm, "torch": peer})

    def med(f):
        return statistics.median(f(r) for r in runs)
    first = runs[0]["engine_cold"]
    n, seeds = first["n_points"], first["seeds"]
    evals = n * seeds
    flops = fl["engine_per_point"] * evals + fl["engine_per_seed"] * seeds
    compute_s = med(lambda r: r["engine_cold"]["compute_s"])
    out = {"name": name, "title": PEERS[name]["title"], "config": cfg, "points": n, "seeds": seeds,
           "flops": fl, "rounds": runs,
           "engine_cold": {"wall_s": med(lambda r: r["engine_cold"]["wall_s"]),
                           "compile_s": med(lambda r: r["engine_cold"]["compile_s"]),
                           "compute_s": compute_s},
           "engine_warm": {"wall_s": med(lambda r: r["engine_warm"]["wall_s"]),
                           "compile_s": med(lambda r: r["engine_warm"]["compile_s"])},
           "engine_ms_per_point": 1e3 * compute_s / evals,
           "engine_gflops": _gf(flops) / compute_s, "torch": None}
    out["peak_fraction"] = out["engine_gflops"] / peak
    target = TARGETS.get(name, {}).get("ratio")
    out["target"] = {"ratio": target, "cached_compile_s": CACHED_COMPILE_S}
    out["met"] = {"cached_compile_s": out["engine_warm"]["compile_s"] <= CACHED_COMPILE_S}
    if torch_device is not None:
        out["torch"] = {"total_s": med(lambda r: r["torch"]["total_s"]),
                        "ms_per_point": med(lambda r: r["torch"]["ms_per_point"]),
                        "torch": runs[0]["torch"]["torch"], "device": torch_device,
                        "threads": runs[0]["torch"]["threads"], "n_points": n}
        ratios = [(r["torch"]["total_s"] / r["engine_cold"]["wall_s"],
                   r["torch"]["total_s"] / r["engine_warm"]["wall_s"]) for r in runs]
        out["ratio_cold"] = statistics.median(c for c, _ in ratios)
        out["ratio_warm"] = statistics.median(w for _, w in ratios)
        out["ratio_range"] = {"cold": [min(c for c, _ in ratios), max(c for c, _ in ratios)],
                              "warm": [min(w for _, w in ratios), max(w for _, w in ratios)]}
        out["steady_ratio"] = out["torch"]["ms_per_point"] / out["engine_ms_per_point"]
        if target is not None:
            out["met"].update(ratio_cold=out["ratio_cold"] >= target,
                              ratio_warm=out["ratio_warm"] >= target)
    return out


def _fmt(x, spec=".3g"):
    return "-" if x is None else format(x, spec)


def format_table(report: dict[str, Any]) -> str:
    """The run as a Markdown table (also printed)."""
    peak = report["peak"]["gflops"]
    lines = [f"matmul peak (float32, {report['peak']['n']}^3, jitted): {peak:.1f} GFLOP/s "
             f"(median {report['peak']['gflops_median']:.1f})", ""]
    peers = [w for w in report["workloads"] if w["name"] in PEERS]
    if peers:
        lines += ["| workload | points | PyTorch loop s (ms/pt) | engine wall s cold / warm "
                  "(compile s cold / warm) | ratio cold / warm (target) [range over rounds] | "
                  "engine ms/pt steady | "
                  "executed GFLOP/s (% peak) |", "|---|---|---|---|---|---|---|"]
        for w in peers:
            c, wm, t = w["engine_cold"], w["engine_warm"], w["torch"]
            tgt = w["target"]["ratio"]
            if t is None:
                peer, ratio = "-", "-"
            else:
                peer = f"{t['total_s']:.3g} ({t['ms_per_point']:.3g})"
                ratio = f"{w['ratio_cold']:.2f}x / {w['ratio_warm']:.2f}x"
                if len(w.get("rounds", ())) > 1:
                    rc, rw = w["ratio_range"]["cold"], w["ratio_range"]["warm"]
                    ratio += f" [{rc[0]:.2f}-{rc[1]:.2f} / {rw[0]:.2f}-{rw[1]:.2f}]"
                if tgt is not None:
                    ratio += f" (>= {tgt:g}x: {'met' if w['met']['ratio_cold'] else 'NOT met'} / " \
                             f"{'met' if w['met']['ratio_warm'] else 'NOT met'})"
            lines.append(f"| {w['name']} {w['title']} | {w['points']} | {peer} | "
                         f"{c['wall_s']:.3g} / {wm['wall_s']:.3g} ({c['compile_s']:.2f} / "
                         f"{wm['compile_s']:.2f}) | {ratio} | {w['engine_ms_per_point']:.3g} | "
                         f"{w['engine_gflops']:.3g} ({100 * w['peak_fraction']:.0f}%) |")
        cached = max(w["engine_warm"]["compile_s"] for w in peers)
        lines += ["", f"cached compile (warm cache, slowest workload): {cached:.2f} s (target <= "
                      f"{CACHED_COMPILE_S:g} s: {'met' if cached <= CACHED_COMPILE_S else 'NOT met'})",
                  ""]
    loops = [w for w in report["workloads"] if w["name"] in ("W1", "W2", "W3")]
    if loops:
        lines += ["| workload | points x seeds | engine pts/s | engine s (compile s) | GFLOP/pt "
                  "engine / plain | GFLOP/seed hoisted | executed GFLOP/s (% peak) | JAX loop s | "
                  "speed-up (target) | peak RSS MiB engine / loop |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
    for w in loops:
        e, lo, fl = w["engine"], w["loop"], w["flops"]
        loop_s = ("~" if lo["extrapolated"] else "") + f"{lo['total_s']:.3g}"
        if lo["extrapolated"]:
            loop_s += f" ({lo['timed_points']}/{w['points']} pts)"
        tgt = w["target"]["speedup"]
        met = "met" if w["met"]["speedup"] else "NOT met"
        frac = f"{w['engine_gflops']:.3g} ({100 * w['peak_fraction']:.0f}%"
        if "peak_fraction" in w["target"]:
            frac += f"; target {100 * w['target']['peak_fraction']:.0f}%: " + \
                ("met" if w["met"]["peak_fraction"] else "NOT met")
        frac += ")"
        lines.append(
            f"| {w['name']} ({fl['path']}) | {w['points']} x {w['seeds']} | {w['points_per_s']:.4g} | "
            f"{e['compute_s']:.3g} ({e['compile_s']:.2g}) | "
            f"{_gf(fl['engine_per_point']):.3g} / {_gf(fl['plain_per_point']):.3g} | "
            f"{_gf(fl['engine_per_seed']):.3g} | {frac} | {loop_s} | "
            f"{w['speedup']:.2f}x (>= {tgt:g}x: {met}) | "
            f"{e['rss_peak_mb']:.0f} / {lo['rss_peak_mb']:.0f} |")
    for w in report["workloads"]:
        if w["name"] != "W4":
            continue
        lines += ["", "| W4 grid | points | engine pts/s | chunk points | peak RSS MiB (base) |",
                  "|---|---|---|---|---|"]
        for label, g in w["grids"].items():
            e = g["engine"]
            lines.append(f"| {label} | {g['points']} | {g['points_per_s']:.4g} | "
                         f"{e['layout']['chunk_points']} | {e['rss_peak_mb']:.0f} "
                         f"({e['rss_base_mb']:.0f}) |")
        tgt = w["target"]["memory_ratio"]
        lines.append(f"\nW4 peak-memory ratio ({w['memory']}, largest / smallest grid): {w['memory_ratio']:.3f} "
                     f"(target <= {tgt:g}: {'met' if w['met']['memory_ratio'] else 'NOT met'}); "
                     f"above the jax-initialised baseline: {_fmt(w['memory_ratio_net'])}")
    staged = [w for w in report["workloads"] if w.get("stages")]
    if staged:
        lines += ["", "| stages (metric subsets) | points | engine ms/pt | loop ms/pt | speed-up | "
                      "GFLOP/pt engine / plain |", "|---|---|---|---|---|---|"]
        for w in staged:
            for label, st in w["stages"].items():
                lines.append(f"| {w['name']}: {label} | {st['points']} | {1e3 * st['engine_s_per_point']:.3g} | "
                             f"{1e3 * st['loop_s_per_point']:.3g} | {st['speedup']:.2f}x | "
                             f"{_gf(st['flops']['engine_per_point']):.3g} / "
                             f"{_gf(st['flops']['plain_per_point']):.3g} |")
    la = report["load_average"]
    lines.append(f"\nload average (1 min) before / after: {la['before'][0]:.2f} / {la['after'][0]:.2f}"
                 f" on {report['machine']['cores']} cores (the benchmark's own load included)")
    fc = report.get("foreign_cpu")
    if fc:
        lines.append(f"CPU used by other processes during the run: {fc['cpu_s']:.1f} s "
                     f"({100 * fc['share']:.1f}% of {report['machine']['cores']} cores x "
                     f"{report['wall_s']:.0f} s); hypervisor steal {fc['steal_s']:.1f} s")
    return "\n".join(lines)


def _cpu_seconds() -> dict[str, float] | None:
    """CPU seconds the whole machine has been busy (/proc/stat) and those of this process and
    its finished children (os.times)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        ticks = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    t = os.times()
    return {"machine": (user + nice + system + irq + softirq) / ticks, "steal": steal / ticks,
            "ours": t.user + t.system + t.children_user + t.children_system}


def _foreign_cpu(a, b, wall: float) -> dict[str, float] | None:
    """CPU seconds used during the run by processes other than the benchmark, and as a share of
    the machine's capacity (cores x wall): the honest "was the machine quiet" number, which the
    load average (raised by the benchmark itself) is not. steal: time the hypervisor gave to
    other guests."""
    if a is None or b is None:
        return None
    foreign = max(0.0, (b["machine"] - a["machine"]) - (b["ours"] - a["ours"]))
    cores = os.cpu_count() or 1
    return {"cpu_s": foreign, "share": foreign / (cores * wall), "steal_s": b["steal"] - a["steal"]}


def _command_line() -> str:
    """How this run was started: `python -m benchmarks.sweep ...` or `simlab bench ...`."""
    prog = Path(sys.argv[0])
    head = "python -m benchmarks.sweep" if prog.parent.name == "benchmarks" else \
        "python -m simlab.bench" if prog.name == "bench.py" else prog.name
    return " ".join([head] + sys.argv[1:])


def run_bench(only=None, quick: bool = False, isolate: bool = True, out_dir=None,
              loop_points: int | None = None, repeats: int | None = None, peak_n: int | None = None,
              tag: str | None = None, log=print, stages=(),
              torch_device: str | None = "cpu",
              rounds: int | None = None) -> tuple[dict[str, Any], Path | None]:
    """Run the benchmark; returns (report, path of the JSON written or None)."""
    known = list(PEERS) + list(WORKLOADS)
    names = known if not only else list(only)
    for n in names:
        if n not in known:
            from simlab.spec import ConfigError
            raise ConfigError(f"bench --only: unknown workload {n!r}; allowed: {', '.join(known)}")
    for flag, value in (("--repeats", repeats), ("--rounds", rounds)):
        if value is not None and value < 1:
            from simlab.spec import ConfigError
            raise ConfigError(f"bench {flag}: {value} must be >= 1")
    t0 = time.perf_counter()
    before = os.getloadavg()
    cpu0 = _cpu_seconds()
    log("bench: matmul peak ...")
    pn = peak_n or (512 if quick else 2048)
    peak = run_worker({"kind": "peak", "n": pn, "repeats": 5 if quick else 10}, isolate)
    report: dict[str, Any] = {"machine": machine_info(), "peak": peak, "quick": quick,
                              "command": _command_line(),
                              "date": datetime.datetime.now().isoformat(timespec="seconds"),
                              "workloads": []}
    for n in names:
        if n in PEERS:
            report["workloads"].append(run_peer(n, quick, peak["gflops"], isolate, log,
                                                torch_device, rounds or (1 if quick else 3)))
        else:
            report["workloads"].append(run_workload(n, quick, peak["gflops"], isolate, loop_points,
                                                    repeats, log, n in stages))
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


# ----------------------------------------------------------------------------- CLI
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`simlab bench` / `python -m benchmarks.sweep` arguments."""
    parser.add_argument("--quick", action="store_true",
                        help="small sizes (seconds; a smoke run, used by the tests)")
    parser.add_argument("--only", default=None,
                        help=f"comma-separated workloads (default all: {','.join(list(PEERS) + list(WORKLOADS))})")
    parser.add_argument("--out-dir", default=None,
                        help="where the JSON goes (default: benchmarks/results of the checkout)")
    parser.add_argument("--no-json", action="store_true", help="print the table only")
    parser.add_argument("--loop-points", type=int, default=None,
                        help="time the per-point loop on this many points per seed and extrapolate "
                             "(0: all; default: all for W1, 8 for W2/W3)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="engine runs per workload (the first compiles; best of the rest)")
    parser.add_argument("--peak-n", type=int, default=None, help="matmul size for the peak (default 2048)")
    parser.add_argument("--tag", default=None, help="file name prefix of the JSON (default: backend)")
    parser.add_argument("--stages", default=None,
                        help="comma-separated workloads (of W1-W3) to also time with metric subsets "
                             "left out (engine and loop per point; a few minutes)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds of engine cold / PyTorch / engine warm per P workload; the "
                             "table shows medians (default 3, 1 with --quick)")
    parser.add_argument("--torch-device", default="cpu",
                        help="device of the PyTorch peer loop (P1-P5): cpu or cuda; 'none' skips it")
    parser.add_argument("--in-process", action="store_true",
                        help="run every measurement in this process (peak memory then not separable)")


def cli_main(args) -> int:
    """Run the benchmark, print the table, write the JSON."""
    only = None if args.only is None else [s.strip() for s in args.only.split(",") if s.strip()]
    stages = () if not args.stages else [s.strip() for s in args.stages.split(",") if s.strip()]
    report, path = run_bench(only, args.quick, not args.in_process,
                             None if args.no_json else (args.out_dir or default_out_dir()), args.loop_points,
                             args.repeats, args.peak_n, args.tag, stages=stages,
                             torch_device=None if args.torch_device == "none" else args.torch_device,
                             rounds=args.rounds)
    print()
    print(format_table(report))
    if path is not None:
        print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        raise SystemExit(_worker_main(sys.argv[2:]))
    p = argparse.ArgumentParser(prog="python -m simlab.bench")
    add_arguments(p)
    raise SystemExit(cli_main(p.parse_args()))
