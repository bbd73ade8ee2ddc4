"""What a sweep directory holds (`simlab info DIR`) — the summary of its results (axes, metrics
with shapes and ranges, sizes, seeds), the confidence intervals of the seed means, the per-seed
covariates, versions and timings, or for an unfinished sweep the chunks done and missing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from simlab.engine import results
from simlab.errors import ResultsError


def _fmt_pm(mean: float, half: float) -> str:
    return f"{mean:.4g} \u00b1 {half:.2g}"


def intervals(res: results.Results, level: float = 0.95) -> list[str]:
    """Lines on the seed means' confidence intervals (Student t, results.seed_ci): per metric
    the median and the largest half-width over the grid (and layers); per covariate its mean
    +- half-width per layer (the first two and the last of a deep stack)."""
    n = res.n_seeds
    if n < 2:
        return [f"  confidence intervals: need 2 seeds or more (this sweep has {n})"]
    pct = f"{100 * level:g}%"
    lines = [
        f"  {pct} CI of the seed mean (Student t, {n} seeds): half-width median / max over the grid"
    ]
    for k in res.metrics:
        h = res.ci_half_width(k, level)
        h = h[np.isfinite(h)]
        if h.size:
            lines.append(f"    {k}: {np.median(h):.3g} / {h.max():.3g}")
    for k, x in res.covariates.items():
        lo, hi = results.seed_ci(x, 0, level)
        mean, half = np.mean(x, axis=0), 0.5 * (hi - lo)
        if mean.ndim == 0:
            per = _fmt_pm(float(mean), float(half))
        else:  # per layer (the first index of any further axis)
            mean, half = mean.reshape(len(mean), -1)[:, 0], half.reshape(len(half), -1)[:, 0]
            shown = list(range(len(mean))) if len(mean) <= 4 else [0, 1, len(mean) - 1]
            per = ", ".join(f"layer {i} {_fmt_pm(mean[i], half[i])}" for i in shown)
        lines.append(f"  covariate {k} (seed mean \u00b1 {pct} CI): {per}")
    return lines


def describe(out: Path, with_config: bool = False, level: float = 0.95) -> str:
    """The text `simlab info` prints."""
    out = Path(out)
    if (out / "results.npz").exists() and (out / "meta.json").exists():
        res = results.load(out)
        m = res.meta
        lines = [res.summary(), *intervals(res, level)]
        v = m.get("versions", {})
        lines.append("  versions: " + ", ".join(f"{k} {x}" for k, x in v.items()))
        t = [
            f"{k.replace('_time_s', '')} {m[k]:.3g} s"
            for k in ("compile_time_s", "compute_time_s", "wall_time_s")
            if m.get(k) is not None
        ]
        if t:
            lines.append("  time: " + ", ".join(t))
        if m.get("chunks_computed") is not None:
            lines.append(
                f"  chunks: {m.get('chunks_computed')} computed, {m.get('chunks_reused')} "
                f"reused, rejected {m.get('chunks_rejected') or 'none'}"
            )
        config = m.get("config")
    elif (out / "sweep.json").exists():
        sj = results.read_json(out / "sweep.json", "sweep.json of a sweep directory")
        config = sj.get("config", {})
        sw = config.get("sweep", {})
        n_points = 1
        for a in config.get("axes", []):
            n_points *= len(a.get("values") or []) or int(a.get("num") or 1)
        mb = int(sw.get("micro_batch") or 1)
        n_mb = -(-n_points // mb)
        done = set()
        for p in (out / "chunks").glob("seed*_mb*-*.npz"):
            seed, rng = p.stem[4:].split("_mb")
            a, b = map(int, rng.split("-"))
            done |= {(int(seed), m) for m in range(a, b)}
        total = n_mb * int(sw.get("seeds") or 1)
        lines = [
            f"unfinished sweep ({out}): {len(done)} of {total} work units (micro-batches x "
            f"seeds) in chunk files, {total - len(done)} missing; "
            f"`simlab merge {out}` computes the rest"
        ]
    else:
        raise ResultsError(
            f"{out}: not a sweep directory (no results.npz, meta.json or sweep.json)"
        )
    if with_config and config is not None:
        lines.append(json.dumps(config, indent=2))
    return "\n".join(lines)
