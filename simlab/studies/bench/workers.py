"""One measurement per fresh process: the matmul peak, the engine, the JAX per-point loop, the
PyTorch loop (`python -m simlab.studies.bench.workers SPEC`), and what the machine was doing."""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from simlab.core.lab import Lab
from simlab.engine.compile import grid_knobs
from simlab.engine.config import load_config
from simlab.engine.records import versions
from simlab.engine.sweep import run_sweep
from simlab.studies.bench import counterfactual, decoder, hf_decoder, hf_hooks, torch_loop


# ----------------------------------------------------------------------------- workers
def _rss_mb() -> float:
    """High-water mark of this process's resident memory (ru_maxrss), MiB."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / 2**20 if sys.platform == "darwin" else r / 1024


def _device_peak_mb() -> float | None:
    import jax

    stats = getattr(jax.devices()[0], "memory_stats", lambda: None)()
    return (
        None
        if not stats or "peak_bytes_in_use" not in stats
        else stats["peak_bytes_in_use"] / 2**20
    )


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
    fl = 2.0 * n**3
    return {
        "n": n,
        "repeats": repeats,
        "gflops": fl / ts[0] / 1e9,
        "gflops_median": fl / ts[len(ts) // 2] / 1e9,
    }


def worker_engine(config: dict, repeats: int) -> dict[str, Any]:
    """Time run_sweep on `config` (in memory) as a user runs it: the first run's wall includes
    validation, compilation (from the compilation cache this process was given, if it holds
    the programs), the per-seed draws, the points and the merge. With repeats > 1 the best
    compute time of the later runs is the steady state (the compiled programs are reused)."""

    out = _baseline()
    runs = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        res = run_sweep(config, quiet=True)
        m = res.meta
        runs.append(
            {
                "compute_s": m["compute_time_s"],
                "compile_s": m["compile_time_s"],
                "wall_s": time.perf_counter() - t0,
            }
        )
    timed = runs[1:] if len(runs) > 1 else runs
    best = min(timed, key=lambda r: r["compute_s"])
    out.update(
        compute_s=best["compute_s"],
        compute_s_all=[r["compute_s"] for r in timed],
        compile_s=runs[0]["compile_s"],
        wall_s=runs[0]["wall_s"],
        first_compute_s=runs[0]["compute_s"],
        layout=m["layout"],
        n_points=m["n_points"],
        seeds=m["seeds"],
        devices=m["devices"],
        matmul_precision=m["matmul_precision"],
        rss_peak_mb=_rss_mb(),
        device_peak_mb=_device_peak_mb(),
    )
    return out


def worker_warm(config: dict) -> dict[str, Any]:
    """Fill the compilation cache with the programs a sweep of `config` compiles (the seed state
    and the chunk program, whose shape follows the chunk layout, so the grid size) by computing
    one work unit (a micro-batch of the first seed) in a scratch directory: a later run of
    `config` on that cache then compiles nothing, whatever the cache held before."""
    import tempfile

    cfg = load_config(config)
    mb = cfg.sweep.micro_batch
    units = cfg.sweep.seeds * -(-cfg.n_points // mb) if mb else 1  # 1: the whole sweep
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="simlab-bench-warm-") as tmp:
        run_sweep(config, out=Path(tmp) / "sweep", worker=(0, units), quiet=True)
    return {"units": units, "wall_s": time.perf_counter() - t0}


def worker_torch(config: dict, device: str = "cpu") -> dict[str, Any]:
    """Time the PyTorch eager per-point loop (simlab.studies.bench.torch_loop) on a peer
    workload's grid."""
    import numpy as np

    axes = {
        a["name"]: np.geomspace(a["start"], a["stop"], a["num"]).tolist() for a in config["axes"]
    }
    out = torch_loop.loop(
        config["block"],
        config["inputs"],
        axes["drift_norm"],
        axes["lambda"],
        config["sweep"].get("seeds", 1),
        device=device,
    )
    out["rss_peak_mb"] = _rss_mb()
    return out


def worker_loop(config: dict, loop_points: int | None) -> dict[str, Any]:
    """Time the per-point loop (see the module docstring) on all points or an evenly spaced
    subset of `loop_points` of them per seed."""
    import jax
    import numpy as np

    out = _baseline()
    cfg = load_config(config)
    lab = Lab(cfg.block, cfg.inputs, cfg.sweep.metrics, hoist=False, factor=False, tiled=False)
    seed_state, point = jax.jit(lab.seed_state), jax.jit(lab.point)
    grid = grid_knobs(cfg)
    fixed = {k: np.float32(v) for k, v in cfg.knobs.items()}
    n = cfg.n_points
    idx = (
        np.arange(n)
        if not loop_points or loop_points >= n
        else np.unique(np.linspace(0, n - 1, loop_points).round().astype(int))
    )
    knobs = [{**fixed, **{k: v[i] for k, v in grid.items()}} for i in idx]
    t0 = time.perf_counter()
    state = seed_state(jax.random.PRNGKey(0))
    jax.block_until_ready(point(state, knobs[0]))
    out["compile_s"] = time.perf_counter() - t0
    t_seed = t_points = 0.0
    for s in range(cfg.sweep.seeds):
        t0 = time.perf_counter()
        state = jax.block_until_ready(
            seed_state(jax.random.fold_in(jax.random.PRNGKey(cfg.sweep.base_seed), s))
        )
        t1 = time.perf_counter()
        res = [point(state, kn) for kn in knobs]
        jax.block_until_ready(res)
        t_seed += t1 - t0
        t_points += time.perf_counter() - t1
    scale = n / len(idx)
    out.update(
        timed_points=int(len(idx)),
        n_points=n,
        seeds=cfg.sweep.seeds,
        measured_s=t_seed + t_points,
        seed_s=t_seed,
        total_s=t_seed + t_points * scale,
        extrapolated=bool(scale != 1),
        rss_peak_mb=_rss_mb(),
        device_peak_mb=_device_peak_mb(),
    )
    return out


def worker_counterfactual(
    source: str, layer, batch: int, length: int, windows: int, lambdas: int, repeats: int
) -> dict[str, Any]:
    """M1's simlab side (simlab.studies.bench.counterfactual.run): load, compile, steady state."""
    out = _baseline()
    out.update(counterfactual.run(source, layer, batch, length, windows, lambdas, repeats))
    out.update(rss_peak_mb=_rss_mb())
    return out


def worker_hooks(
    source: str, layer, batch: int, length: int, windows: int, lambdas: int, repeats: int
) -> dict[str, Any]:
    """M1's peer (simlab.studies.bench.hf_hooks.run) on the same window sets and lambdas."""
    folder = counterfactual.folder(source)
    cfg = json.loads((folder / "config.json").read_text())  # BERT's vocab_size and depth
    layer = cfg["num_hidden_layers"] - 1 if layer is None else layer
    wins = counterfactual.windows(cfg["vocab_size"], batch, length, windows)
    out = hf_hooks.run(folder, layer, wins, counterfactual.lambdas(lambdas), repeats=repeats)
    out.update(layer=layer, rss_peak_mb=_rss_mb())
    return out


def worker_decoder(
    source: str,
    layers,
    massive,
    batch: int,
    length: int,
    windows: int,
    repeats: int,
    count_flops: bool = True,
) -> dict[str, Any]:
    """M2's simlab side (simlab.studies.bench.decoder.run): load, compile, steady state."""
    out = _baseline()
    out.update(decoder.run(source, layers, massive, batch, length, windows, repeats, count_flops))
    out.update(rss_peak_mb=_rss_mb())
    return out


def worker_decoder_hooks(
    source: str,
    layers,
    massive,
    batch: int,
    length: int,
    windows: int,
    repeats: int,
    count_flops: bool = True,
) -> dict[str, Any]:
    """M2's peer (simlab.studies.bench.hf_decoder.run) on the same window sets and dims."""
    dims = decoder.massive_dims(massive, layers)

    def wins(vocab: int) -> list:  # the same ids as simlab's side
        return decoder.windows(vocab, batch, length, windows)

    path = decoder.gguf_path(source)
    out = hf_decoder.run(path, layers, dims, wins, repeats=repeats, count_flops=count_flops)
    out.update(rss_peak_mb=_rss_mb())
    return out


WORKERS = {
    "peak": worker_peak,
    "engine": worker_engine,
    "warm": worker_warm,
    "loop": worker_loop,
    "torch": worker_torch,
    "counterfactual": worker_counterfactual,
    "hooks": worker_hooks,
    "decoder": worker_decoder,
    "decoder_hooks": worker_decoder_hooks,
}


def _worker_main(argv) -> int:
    spec = json.loads(argv[0])
    kind = spec.pop("kind")
    result = WORKERS[kind](**spec)
    sys.stdout.write("\n@@RESULT@@" + json.dumps(result) + "\n")
    return 0


def run_worker(
    spec: dict, isolate: bool = True, timeout: float | None = None, cache_dir: str | None = None
) -> dict[str, Any]:
    """Run a worker in a fresh `python -m simlab.studies.bench --worker` process (or in-process),
    with the compilation cache in `cache_dir` ("off" for none; None: the environment's)."""
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
    cmd = [sys.executable, "-m", "simlab.studies.bench.workers", json.dumps(spec)]
    p = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, cwd=os.getcwd(), env=env
    )
    if p.returncode != 0 or "@@RESULT@@" not in p.stdout:
        raise RuntimeError(
            f"benchmark worker {spec['kind']} failed (exit {p.returncode}):\n{p.stderr[-4000:]}"
        )
    return json.loads(p.stdout.rsplit("@@RESULT@@", 1)[1])


def machine_info() -> dict[str, Any]:
    """CPU model, cores, memory, OS, versions, device, load average."""
    import jax

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
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": mem,
        "platform": platform.platform(),
        **versions("torch"),
        "backend": jax.default_backend(),
        "device": getattr(dev, "device_kind", str(dev)),
        "n_devices": jax.device_count(),
        "matmul_precision": str(jax.config.jax_default_matmul_precision),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }


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
    return {
        "machine": (user + nice + system + irq + softirq) / ticks,
        "steal": steal / ticks,
        "ours": t.user + t.system + t.children_user + t.children_system,
    }


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


if __name__ == "__main__":
    raise SystemExit(_worker_main(sys.argv[1:]))


def run_rounds(
    name: str, kinds: tuple[str, str], job, rounds: int, isolate: bool, log, peer: bool
) -> list[dict[str, Any]]:
    """`rounds` rounds of a workload, M1's and M2's alike: each round simlab's side (worker kind
    kinds[0], without a persistent compilation cache: its compile is a cold one), then the
    peer's (kinds[1]) when `peer`, each in its own process (workers.run_worker). job(r): round
    r's job. Returns [{"simlab": ..., "hooks": ... or None}] per round."""
    runs = []
    for r in range(rounds):
        tag = f"{name} round {r + 1}/{rounds}" if rounds > 1 else name
        log(f"  {tag}: simlab ...")
        lab = run_worker({"kind": kinds[0], **job(r)}, isolate, cache_dir="off")
        hooks = None
        if peer:
            log(f"  {tag}: HF hooks peer ...")
            hooks = run_worker({"kind": kinds[1], **job(r)}, isolate)
        runs.append({"simlab": lab, "hooks": hooks})
    return runs


def median_over(runs, f) -> float:
    return statistics.median(f(r) for r in runs)
