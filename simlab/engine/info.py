"""What a sweep directory holds (`simlab info DIR`) — the summary of its results (axes, metrics
with shapes and ranges, sizes, seeds), the confidence intervals of the seed means, the per-seed
covariates, versions and timings, or for an unfinished sweep the chunks done and missing."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simlab.engine import claims, records, results
from simlab.engine.config import to_toml
from simlab.errors import ResultsError


def _points(config: dict) -> int:
    """Points of a config's grid: the product over its axes of their values, num or lists."""
    n = 1
    for a in config.get("axes", []):
        knobs = a.get("knobs") if isinstance(a.get("knobs"), dict) else {}
        lists = [len(v) for v in knobs.values() if isinstance(v, list)]
        if lists and not a.get("values") and not a.get("num"):
            n *= lists[0]
        else:
            n *= len(a.get("values") or []) or int(a.get("num") or 1)
    return n


def _units(out: Path, config: dict) -> tuple[int, int]:
    """(work units in chunk files, work units of the sweep) of a sweep directory."""
    sw = config.get("sweep", {})
    mb = int(sw.get("micro_batch") or 1)
    n_mb = -(-_points(config) // mb)
    done = set()
    for p in (out / "chunks").glob("seed*_mb*-*.npz"):
        seed, rng = p.stem[4:].split("_mb")
        a, b = map(int, rng.split("-"))
        done |= {(int(seed), m) for m in range(a, b)}
    return len(done), n_mb * int(sw.get("seeds") or 1)


def history_lines(history: list) -> list[str]:
    """A grown or refined sweep's history, one line per target it has held: when, what changed,
    the target, the (point, seed) pairs computed (in which parts) and reused."""
    if not history:
        return []
    lines = ["  history:"]
    for h in history:
        change = h.get("change")
        what = change if isinstance(change, str) else "grown (" + ", ".join(change or []) + ")"
        parts = ", ".join(h.get("parts") or []) or "none"
        reused = f", {h['pairs_reused']} reused" if h.get("pairs_reused") is not None else ""
        lines.append(
            f"    {h.get('time')}  {what}: {h.get('target')}; {h.get('pairs_computed')} pairs "
            f"computed (parts {parts}){reused}"
        )
    return lines


def missing_part_lines(out: Path, parts: list) -> list[str]:
    """A warning per part of a grown or refined sweep whose folder is gone: results.npz still
    holds its pairs, but growing the sweep again recomputes them (they are not reused)."""
    lines = []
    for p in parts:
        name = p.get("name") if isinstance(p, dict) else p
        if name is not None and not (out / "parts" / str(name) / "sweep.json").is_file():
            lines.append(
                f"  warning: part {name} ({out / 'parts' / str(name)}) is missing: results.npz "
                "still holds its pairs, but growing this sweep again recomputes them"
            )
    return lines


def refined_line(r: dict) -> str:
    """One line on a refinement: metric = level, levels, lattice, points added per level."""
    lattice = " x ".join(map(str, r.get("lattice", [])))
    per = " + ".join(map(str, r.get("points_per_level", [])))
    return (
        f"  refined: {r.get('metric')} = {r.get('level'):g} ({r.get('rule')} of the seeds), "
        f"{r.get('levels')} levels, finest lattice {lattice}; points per level {per}"
    )


def _fmt_pm(mean: float, half: float) -> str:
    return f"{mean:.4g} \u00b1 {half:.2g}"


def intervals(res: results.Results, level: float = 0.95) -> list[str]:
    """Lines on the seed means' confidence intervals (Student t, results.seed_ci): per metric
    the median and the largest half-width over the grid (and its further dimensions); per covariate
    its mean +- half-width along its first further dimension (the first two and the last of a
    long one, e.g. a deep stack's layers)."""
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
        else:  # along its first further dimension (the first index of any other)
            dim = res.covariate_dims(k)[1]
            mean, half = mean.reshape(len(mean), -1)[:, 0], half.reshape(len(half), -1)[:, 0]
            shown = list(range(len(mean))) if len(mean) <= 4 else [0, 1, len(mean) - 1]
            per = ", ".join(f"{dim} {i} {_fmt_pm(mean[i], half[i])}" for i in shown)
        lines.append(f"  covariate {k} (seed mean \u00b1 {pct} CI): {per}")
    return lines


def running(out: Path) -> list[str]:
    """The writers computing in `out` now ("host pid N"): those holding a live claim
    (simlab.engine.claims; a writer between two chunks or still compiling holds none)."""
    coord = claims.Coordinator(out)
    live = {
        (h, pid) for p, (*_, h, pid) in coord.claims().items() if not claims.is_stale(p, h, pid)
    }
    return [f"{h} pid {pid}" for h, pid in sorted(live)]


def _what_next(out: Path, merge_does: str) -> str:
    """`simlab merge` advice for a sweep no one computes; for a running one, that it runs."""
    now = running(out)
    if not now:
        return f"`simlab merge {out}` {merge_does}"
    return (
        f"in progress: {len(now)} writer{'s' * (len(now) > 1)} computing now ({', '.join(now)}); "
        "it merges when done (`simlab info` again to follow it; `simlab merge` is for a "
        "sweep no one is computing)"
    )


def describe(out: Path, with_config: bool = False, level: float = 0.95) -> str:
    """The text `simlab info` prints."""
    out = Path(out)
    if records.is_finished(out):
        res = results.load(out)
        if (out / "sweep.json").is_file():
            records.read_sweep(out / "sweep.json")  # an edited record is refused, never shown
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
        if isinstance(m.get("refine"), dict):
            lines.append(refined_line(m["refine"]))
        lines += history_lines(m.get("history") or [])
        lines += missing_part_lines(out, m.get("parts") or [])
        config = m.get("config")
    elif (out / "sweep.json").exists() and "parts" in (
        sj := records.read_sweep(out / "sweep.json")
    ):
        config = sj.get("config", {})
        lines = [f"unfinished grown or refined sweep ({out}), by part:"]
        for name in sj["parts"]:
            part = out / "parts" / name
            psj = records.read_sweep(part / "sweep.json")
            sw = psj.get("config", {}).get("sweep", {})
            first, n = int(sw.get("first_seed") or 0), int(sw.get("seeds") or 1)
            points = _points(psj.get("config", {}))
            head = f"  {name}: {points} points x seeds {first}..{first + n - 1}"
            if records.is_finished(part):
                lines.append(f"{head}, finished")
            else:
                done, total = _units(part, psj.get("config", {}))
                lines.append(f"{head}, {done} of {total} work units")
        lines.append(f"  {_what_next(out, 'computes the rest')}")
        lines += history_lines(sj.get("history") or [])
    elif (out / "sweep.json").exists():
        sj = records.read_sweep(out / "sweep.json")
        config = sj.get("config", {})
        done, total = _units(out, config)
        gone = [n for n in records.RESULT_FILES if not (out / n).exists()]
        if done == total:  # every chunk is there: only the merge is left
            rest = f"nothing left to compute; {_what_next(out, 'rebuilds ' + ' and '.join(gone))}"
        else:
            rest = f"{total - done} missing; {_what_next(out, 'computes the rest')}"
        lines = [
            f"unfinished sweep ({out}): {done} of {total} work units (micro-batches x "
            f"seeds) in chunk files, {rest}"
        ]
    else:
        raise ResultsError(
            f"{out}: not a sweep directory (no results.npz, meta.json or sweep.json)"
        )
    if with_config and config is not None:
        lines += ["", "# the resolved config (TOML: `simlab sweep` reads it back)", to_toml(config)]
    return "\n".join(lines)
