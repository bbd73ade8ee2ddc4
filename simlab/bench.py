"""`simlab bench`: the sweep engine against the machine's matmul peak and a per-point loop.

One run, on the current machine (docs/performance.md):
  peak   float32 matmul GFLOP/s of a large jitted matmul (best of several calls);
  per workload (WORKLOADS), each side in a fresh subprocess (so peak memory is separable):
    engine  simlab.run_sweep(config, out=None, quiet=True): grid points per second from its
            compute_time_s (the chunk function's compile is excluded and reported apart; the
            seed_state function is compiled before the run), peak RSS of the process;
    loop    the loop a researcher writes without the engine: per seed, draw the weights and
            inputs once (jit(Lab(hoist=False).seed_state)), then call
            jit(Lab(hoist=False, factor=False).point) once per grid point with that point's
            knobs (no vmap, no hoisting, no factoring; every call does the full block forward
            and the metrics). Calls are dispatched back to back and synchronised once per seed
            (the fastest such loop). For the paper-size workloads it is timed on an evenly
            spaced subset of the points and extrapolated linearly (marked "~" in the table);
  FLOPs   counted analytically from the shapes (`flop_counts`): the dot_general FLOPs
          (2 m n k) of the path the engine runs (factored / hoisted / plain) per point, the
          hoisted per-seed FLOPs, and the plain path's per point (what the loop executes).
          Executed GFLOP/s = engine FLOPs / engine time, as a fraction of the matmul peak.
Workloads W1-W3 compare speed-ups and FLOP rates with TARGETS; W4 runs W1's block on grids of
1e3 and 1e5 points and compares their peak memory.

The JSON written under benchmarks/results/ holds every number of the table plus the machine,
the versions, the load average before and after, and the command line.
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

# Targets of the performance issue (ratios measured in the same run).
TARGETS = {"W1": {"speedup": 3.0}, "W2": {"speedup": 5.0},
           "W3": {"speedup": 1.3, "peak_fraction": 0.60}, "W4": {"memory_ratio": 1.3}}

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
def _dot(*dims) -> int:
    """FLOPs of a dot_general: 2 * (product of batch, free and contracted sizes)."""
    return 2 * math.prod(int(d) for d in dims)


def metric_flops(names, b: int, t: int, d: int, h: int, lanczos_steps: int) -> int:
    """dot_general FLOPs of simlab.metrics.layer_metrics for one layer (B, T, D, H heads)."""
    f = 0
    if "attn_entropy" in names:                          # einsum bhts,bhts->bht
        f += _dot(b, h, t, t)
    if "stable_rank" in names:
        n, m = min(t, d), max(t, d)
        f += _dot(b, n, n, m)                            # Gram matrix
        if n > lanczos_steps:                            # Lanczos: g v, two reorth. passes
            f += b * lanczos_steps * (_dot(n, n) + 2 * (_dot(lanczos_steps, n) * 2))
    return f


NEEDS_OUTPUT = {"attn_cos", "attn_cos_within", "out_cos", "out_cos_within", "stable_rank"}


def flop_counts(block, inputs, metrics=None) -> dict[str, Any]:
    """Analytic dot_general FLOPs of a Lab from its specs (dicts or spec objects).

    Returns {"path", "engine_per_point", "engine_per_seed", "plain_per_point",
    "plain_per_seed", "parts"}: the engine's path is "factored" (layer-0 logits from per-seed
    matrices), "hoisted" (layer-0 projections per seed) or "plain"; "parts" breaks the
    per-point counts down. Counted from the shapes alone (tests/test_bench.py checks them
    against the dot_general equations of the traced program).
    """
    from simlab import metrics as M
    from simlab.lab import Lab
    from simlab.spec import BlockSpec, InputSpec
    blk = block if isinstance(block, BlockSpec) else BlockSpec(**block)
    inp = inputs if isinstance(inputs, InputSpec) else InputSpec(**inputs)
    lab = Lab(blk, inp, metrics)
    names = lab.metric_names
    b, t, d, h = inp.batch, inp.length, blk.d_model, blk.n_heads
    f_mlp = d * blk.mlp_ratio
    proj = 3 * _dot(b, t, d, d)
    logits = _dot(b, h, t, t, d // h)
    av = _dot(b, h, t, t, d // h)
    wo = _dot(b, t, d, d)
    mlp = 2 * _dot(b, t, d, f_mlp) if blk.mlp else 0
    met = metric_flops(names, b, t, d, h, M.LANCZOS_STEPS)
    layer = proj + logits + av + wo + mlp + met
    path = "factored" if lab.factor else "hoisted" if lab.hoist else "plain"
    first = {"factored": av + wo + mlp + met, "hoisted": logits + av + wo + mlp + met,
             "plain": layer}[path]
    # Depth 1: V, A V, W_O and the MLP are dead code (traced, removed by XLA) when no requested
    # metric reads the attention output or the block output. (Deeper stacks are counted whole:
    # the last layer runs inside a scan.)
    dead = blk.depth == 1 and not set(names) & NEEDS_OUTPUT
    plain = blk.depth * layer - (av + wo + mlp + proj // 3 if dead else 0)
    engine = first + (blk.depth - 1) * layer - (av + wo + mlp if dead else 0) \
        - (proj // 3 if dead and path == "plain" else 0)
    # per seed: the input draw (anisotropic inputs rotate), then the hoisted projections of
    # each input component c (shape (Bc, Tc, D)) and, when factored, S_c = Q_c K_v^T and the
    # bias / shift rows b_Q K_v^T, u_q K_v^T.
    comps = {"embedding": {"x": (b, t), "u_b": (1, 1)}, "student_t": {"x": (b, t), "u_b": (1, 1)},
             "anisotropic": {"x": (b, t), "u_b": (1, 1)},
             "gaussian": {"z0": (b, 1), "z": (b, t), "u_b": (1, 1)}}[inp.kind]
    draw = _dot(b, t, d, d) if inp.kind == "anisotropic" else 0
    seed = draw
    if lab.hoist:
        seed += sum(3 * _dot(bc, tc, d, d) for bc, tc in comps.values())
    if lab.factor:
        seed += sum(_dot(b, tc, t, d) for _, tc in comps.values()) + 2 * _dot(b, t, d)
    return {"path": path, "engine_per_point": engine,
            "engine_per_seed": seed, "plain_per_point": plain, "plain_per_seed": draw,
            "parts": {"projections": proj, "logits": logits, "attn_v": av, "w_o": wo,
                      "mlp": mlp, "metrics": met, "depth": blk.depth}}


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
    """Time run_sweep on `config` (in memory). The first run also compiles; with repeats > 1
    the best compute time of the later runs is reported (the compiled chunk is reused)."""
    import jax
    from simlab.config import load_config
    from simlab.lab import Lab
    from simlab.sweep import jitted, local_mesh, run_sweep
    out = _baseline()
    cfg = load_config(config)
    lab = Lab(cfg.block, cfg.inputs, cfg.sweep.metrics)
    names = tuple(cfg.sweep.metrics or lab.metric_names)
    t0 = time.perf_counter()
    seed_state = jitted(lab, names, local_mesh())[0]            # the engine's own cache
    jax.block_until_ready(seed_state(jax.random.PRNGKey(0)))
    out["seed_state_compile_s"] = time.perf_counter() - t0
    runs = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        res = run_sweep(cfg, lab=lab, quiet=True)
        m = res.meta
        runs.append({"compute_s": m["compute_time_s"], "compile_s": m["compile_time_s"],
                     "wall_s": time.perf_counter() - t0})
    timed = runs[1:] if len(runs) > 1 else runs
    best = min(timed, key=lambda r: r["compute_s"])
    out.update(compute_s=best["compute_s"], compute_s_all=[r["compute_s"] for r in timed],
               compile_s=runs[0]["compile_s"], first_wall_s=runs[0]["wall_s"],
               layout=m["layout"], n_points=cfg.n_points, seeds=cfg.sweep.seeds,
               devices=m["devices"], rss_peak_mb=_rss_mb(), device_peak_mb=_device_peak_mb())
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
    lab = Lab(cfg.block, cfg.inputs, cfg.sweep.metrics, hoist=False, factor=False)
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
    fn = {"peak": worker_peak, "engine": worker_engine, "loop": worker_loop}[kind]
    result = fn(**spec)
    sys.stdout.write("\n@@RESULT@@" + json.dumps(result) + "\n")
    return 0


def run_worker(spec: dict, isolate: bool = True, timeout: float | None = None) -> dict[str, Any]:
    """Run a worker in a fresh `python -m simlab.bench --worker` process (or in-process)."""
    if not isolate:
        spec = dict(spec)
        kind = spec.pop("kind")
        return {"peak": worker_peak, "engine": worker_engine, "loop": worker_loop}[kind](**spec)
    cmd = [sys.executable, "-m", "simlab.bench", "--worker", json.dumps(spec)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=os.getcwd())
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
    fl = flop_counts(cfg["block"], cfg["inputs"], cfg["sweep"].get("metrics"))
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
                      "flops": flop_counts(c["block"], c["inputs"], metrics)}
    return out


def _fmt(x, spec=".3g"):
    return "-" if x is None else format(x, spec)


def format_table(report: dict[str, Any]) -> str:
    """The run as a Markdown table (also printed)."""
    peak = report["peak"]["gflops"]
    lines = [f"matmul peak (float32, {report['peak']['n']}^3, jitted): {peak:.1f} GFLOP/s "
             f"(median {report['peak']['gflops_median']:.1f})", "",
             "| workload | points x seeds | engine pts/s | engine s (compile s) | GFLOP/pt engine / plain"
             " | GFLOP/seed hoisted | executed GFLOP/s (% peak) | loop s | speed-up (target) | "
             "peak RSS MiB engine / loop |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for w in report["workloads"]:
        if w["name"] == "W4":
            continue
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
                 f" on {report['machine']['cores']} cores")
    return "\n".join(lines)


def _command_line() -> str:
    """How this run was started: `python -m benchmarks.sweep ...` or `simlab bench ...`."""
    prog = Path(sys.argv[0])
    head = "python -m benchmarks.sweep" if prog.parent.name == "benchmarks" else \
        "python -m simlab.bench" if prog.name == "bench.py" else prog.name
    return " ".join([head] + sys.argv[1:])


def run_bench(only=None, quick: bool = False, isolate: bool = True, out_dir=None,
              loop_points: int | None = None, repeats: int | None = None, peak_n: int | None = None,
              tag: str | None = None, log=print, stages=()) -> tuple[dict[str, Any], Path | None]:
    """Run the benchmark; returns (report, path of the JSON written or None)."""
    names = list(WORKLOADS) if not only else list(only)
    for n in names:
        if n not in WORKLOADS:
            from simlab.spec import ConfigError
            raise ConfigError(f"bench --only: unknown workload {n!r}; allowed: {', '.join(WORKLOADS)}")
    t0 = time.perf_counter()
    before = os.getloadavg()
    log("bench: matmul peak ...")
    pn = peak_n or (512 if quick else 2048)
    peak = run_worker({"kind": "peak", "n": pn, "repeats": 5 if quick else 10}, isolate)
    report: dict[str, Any] = {"machine": machine_info(), "peak": peak, "quick": quick,
                              "command": _command_line(),
                              "date": datetime.datetime.now().isoformat(timespec="seconds"),
                              "workloads": []}
    for n in names:
        report["workloads"].append(run_workload(n, quick, peak["gflops"], isolate, loop_points,
                                                repeats, log, n in stages))
    report["load_average"] = {"before": before, "after": os.getloadavg()}
    report["wall_s"] = time.perf_counter() - t0
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
                        help=f"comma-separated workloads (default all: {','.join(WORKLOADS)})")
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
    parser.add_argument("--in-process", action="store_true",
                        help="run every measurement in this process (peak memory then not separable)")


def cli_main(args) -> int:
    """Run the benchmark, print the table, write the JSON."""
    only = None if args.only is None else [s.strip() for s in args.only.split(",") if s.strip()]
    stages = () if not args.stages else [s.strip() for s in args.stages.split(",") if s.strip()]
    report, path = run_bench(only, args.quick, not args.in_process,
                             None if args.no_json else (args.out_dir or default_out_dir()), args.loop_points,
                             args.repeats, args.peak_n, args.tag, stages=stages)
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
