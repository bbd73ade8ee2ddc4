"""Sweeps made of parts: a sweep that grows, and an adaptively refined one (docs/design.md,
"Growing and refining"; docs/config.md, "Growing a sweep").

A point is identified by every knob's value in the knob dtype (`point_keys`); a (point, seed)
pair's numbers depend on nothing else (the block, inputs, metrics, micro-batch and base seed
being the same), so a pair computed once is reused wherever it is needed.

Parts. A part is an ordinary sweep of a point set (one axis "point" of per-knob value lists) x
a seed range (sweep.first_seed, sweep.seeds), with its own directory OUT/parts/<k>/ (sweep.json,
chunks/, results.npz, meta.json: resumed, split over workers and merged like any sweep), its
units fixed by its config alone. A composite directory holds:
  OUT/sweep.json   {"fingerprint", "config": the sweep it holds now (the target), "parts": [the
                   part names, in creation order], "history": [one entry per target: time,
                   fingerprint, what changed, the parts it added, the pairs computed and reused]}
  OUT/parts/<k>/   the parts
  OUT/results.npz, meta.json   the target, assembled from the parts (`gather`)

Growing. Running a config on a directory that holds another sweep grows it when every field but
the axes, the fixed knobs, the seeds and [refine] is the same, the new seed range contains the
old one and every point of the old target's domain (its grid, or its finest lattice) lies in the
new one's (each knob within a relative 1e-6); anything else is refused, naming the fields that
differ. An ordinary directory becomes part 0 on its first growth (its files move to
OUT/parts/0/). The new target's pairs that no part holds are grouped by their missing seed range
into new parts (points in the target's order), planned once under the directory's lock and
recorded in sweep.json, so every writer computes the same units.

Refining. A [refine] target runs level by level (simlab.engine.refine): the pairs of each level's
points are planned and computed like a grid's, then the level's values decide the next level's
points. Every level needs the whole previous one: a --worker computes its share of a level,
then the rest of it with the other writers (claims), and goes on; under jax.distributed each
process does the same.

Arithmetic. Parts use the target's micro-batch; their chunks hold at least as many micro-batches
per device as the target's layout would, up to 2 (`chunk_floor`), so a part's numbers are those
the whole sweep run at once would give (a pair's numbers do not depend on the other points of
its micro-batch or on a chunk's length once a chunk holds >= 2 micro-batches per device).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import sys
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import jax
import numpy as np

from simlab.engine import claims, records, refine, results
from simlab.engine.config import SweepConfig, config_diff, load_config
from simlab.engine.covariates import covariate_dims, seed_covariates
from simlab.engine.parts import Pool, seed_range
from simlab.engine.plain import Job, check_redefined, choose_layout, report_numerics
from simlab.engine.records import PARTS
from simlab.engine.schedule import wait_for_results
from simlab.engine.store import check_out_dir, explain_diff
from simlab.errors import ConfigError

log = logging.getLogger(__name__)

# What may change when a sweep grows (the rest of the config must be the same).
GROWS = ("axes", "knobs", "refine", "sweep.seeds", "sweep.first_seed")
# Relative distance within which an old coordinate counts as contained in the new domain.
CONTAIN_RTOL = 1e-6


def domain(cfg: SweepConfig) -> dict[str, np.ndarray]:
    """Every knob (swept and fixed) at every point a config may compute: its grid, or the finest
    lattice of its [refine]."""
    if cfg.refine is None:
        vals, n = cfg.point_values(), cfg.n_points
    else:
        lat = refine.Lattice.from_config(cfg)
        shape = lat.shape
        idx = np.stack(np.unravel_index(np.arange(int(np.prod(shape))), shape), axis=1)
        vals, n = lat.knob_values(idx), len(idx)
    out = {k: np.full(n, v, np.float64) for k, v in cfg.knobs.items()}
    out.update(vals)
    return out


def _rows(cols: list[np.ndarray]) -> list[bytes]:
    """Each row of the columns (float64) as bytes: exact identity of a point."""
    arr = np.ascontiguousarray(np.stack(cols, axis=1))
    return arr.view(np.dtype((np.void, arr.itemsize * len(cols)))).ravel().tolist()


def first_outside(old: dict[str, np.ndarray], new: dict[str, np.ndarray]) -> int | None:
    """Index of the first point of `old` with no point of `new` equal to it within a relative
    CONTAIN_RTOL on every knob; None when `new` contains them all. Each old value is snapped
    to the nearest value the knob takes in `new` (NaN when none is that close), then the
    snapped point looked up exactly."""
    if set(old) != set(new):
        return 0
    names = sorted(old)
    snapped = []
    for k in names:
        u, v = np.unique(new[k]), np.asarray(old[k], np.float64)
        hi = np.clip(np.searchsorted(u, v), 0, len(u) - 1)
        lo = np.clip(hi - 1, 0, len(u) - 1)
        best = np.where(np.abs(u[hi] - v) <= np.abs(u[lo] - v), u[hi], u[lo])
        close = np.abs(best - v) <= CONTAIN_RTOL * np.maximum(np.abs(best), np.abs(v))
        snapped.append(np.where(close, best, np.nan))
    have = set(_rows([np.asarray(new[k], np.float64) for k in names]))
    for i, key in enumerate(_rows(snapped)):
        if key not in have:
            return i
    return None


def growth_refusal(out: Path, old: dict[str, Any], new: dict[str, Any], cfg: SweepConfig):
    """None when the target `new` (resolved config) grows the sweep `old` holds; else the
    ConfigError refusing it, naming the fields that differ (and why)."""
    diff = config_diff(old, new)
    named = explain_diff(old, new, diff)
    head = f"{out}: holds a different sweep (differs in: {', '.join(named) or 'config'})"
    tail = "use another --out directory or delete it"
    fixed = [d for d in diff if not d.startswith(GROWS)]
    if fixed:
        return ConfigError(f"{head}; {tail}")
    try:
        old_cfg = load_config(old, read_weights=False)
    except ConfigError as e:
        return ConfigError(f"{head}; its config cannot be read ({e}); {tail}")
    a, b = seed_range(old_cfg), seed_range(cfg)
    if a.start < b.start or a.stop > b.stop:
        return ConfigError(
            f"{head}; it holds seeds {a.start}..{a.stop - 1}, which this config does not: a sweep "
            f"grows, it never drops what it holds; {tail}"
        )
    old_dom, new_dom = domain(old_cfg), domain(cfg)
    i = first_outside(old_dom, new_dom)
    if i is not None:
        where = ", ".join(f"{k}={old_dom[k][i]:.6g}" for k in _culprits(old_dom, new_dom, i))
        return ConfigError(
            f"{head}; the point {where} that it holds is not in this config: a grown sweep keeps "
            f"every point it has (wider or finer axes, more values, more seeds); {tail}"
        )
    return None


def _culprits(old: dict[str, np.ndarray], new: dict[str, np.ndarray], i: int) -> list[str]:
    """The knobs of old point i whose value the new domain never takes (else every knob that
    varies in either domain): what a refusal names."""
    far = [
        k
        for k in sorted(old)
        if k in new
        and not np.any(
            np.abs(new[k] - old[k][i]) <= CONTAIN_RTOL * np.maximum(np.abs(new[k]), abs(old[k][i]))
        )
    ]
    varying = [k for k in sorted(old) if np.ptp(old[k]) > 0 or (k in new and np.ptp(new[k]) > 0)]
    return far or varying or sorted(old)


# ---------------------------------------------------------------------------- the directory
def composite_state(job: Job) -> dict | None:
    """None when the job is an ordinary sweep (or a new directory); else, for a run of parts
    (the config refines, or `job.out` holds parts, or another sweep that this config grows),
    the sweep.json it holds ({} when none). Refuses, before any lock or file is taken, a
    directory holding other files or another sweep that this config does not grow."""
    cfg, out = job.cfg, job.out
    cur = None
    if out is not None and (out / "sweep.json").is_file():
        cur = records.read_sweep(out / "sweep.json")
        if not records.is_sweep_record(cur):
            check_out_dir(out, job.resolved, job.fp)  # refuses it, naming the file
            return None if cfg.refine is None else {}
    if cur is None or (PARTS not in cur and cur["fingerprint"] == job.fp):
        if cfg.refine is None:
            return None
        if out is not None and cur is None:
            check_out_dir(out, job.resolved, job.fp)  # refuses a directory of other files
        return cur or {}
    if cur["fingerprint"] != job.fp:
        refusal = growth_refusal(out, cur["config"], job.resolved, cfg)
        if refusal is not None:
            raise refusal
    return cur


def _describe_target(cfg: SweepConfig) -> str:
    shape = " x ".join(map(str, cfg.shape))
    what = f"{shape} grid" if cfg.refine is None else f"{shape} grid refined {cfg.refine.levels}x"
    return f"{what}, {cfg.sweep.seeds} seed{'s' * (cfg.sweep.seeds != 1)}"


def _adopt(out: Path, cur: dict, coord) -> dict:
    """Make an ordinary sweep directory's files part 0 (OUT/parts/0/); the history entry of the
    sweep it held. Restartable: sweep.json is copied first, then each file moved."""
    if coord.held():
        raise ConfigError(
            f"{out}: other writers are computing the sweep it holds; grow it when they have "
            "finished"
        )
    p0 = out / PARTS / "0"
    p0.mkdir(parents=True, exist_ok=True)
    if not (p0 / "sweep.json").exists():
        records.write_json(p0 / "sweep.json", cur)
    for name in ("chunks", "rejected", "results.npz", "meta.json"):
        if (out / name).exists():
            os.replace(out / name, p0 / name)
    meta = p0 / "meta.json"
    when = (meta if meta.exists() else p0 / "sweep.json").stat().st_mtime
    cfg = load_config(cur["config"], read_weights=False)
    return records.history_entry(
        cur["fingerprint"],
        "created",
        _describe_target(cfg),
        time=datetime.datetime.fromtimestamp(when, datetime.UTC).isoformat(timespec="seconds"),
        parts=["0"],
        pairs_computed=cfg.n_points * cfg.sweep.seeds,
    )


def open_composite(job: Job, seen: dict) -> dict:
    """Make `job.out` a composite directory whose target is this config (under its lock):
    create it, adopt an ordinary sweep as part 0, or retarget a composite one (its assembled
    results removed: they are the parts'). `seen`: the sweep.json `composite_state` judged; a
    different one found under the lock (another writer changed it) is judged again. Returns
    sweep.json's content."""
    out, fp = job.out, job.fp
    coord = claims.Coordinator(out)
    with coord.lock():
        coord.clean()
        sj = out / "sweep.json"
        cur = records.read_sweep(sj) if sj.exists() else None
        if cur is not None and cur.get("fingerprint") == fp and PARTS in cur:
            return cur
        if cur is None:
            check_out_dir(out, job.resolved, fp)  # refuses a directory holding other files
        elif cur.get("fingerprint") not in (fp, seen.get("fingerprint")):
            refusal = growth_refusal(out, cur.get("config", {}), job.resolved, job.cfg)
            if refusal is not None:
                raise refusal
            check_redefined(job.names, records.record_rule(sj, cur), out)
        if cur is None:
            parts, history = [], []
        elif PARTS in cur:
            parts, history = list(cur[PARTS]), list(cur.get("history", []))
            for name in records.RESULT_FILES:
                (out / name).unlink(missing_ok=True)
        else:
            parts, history = ["0"], [_adopt(out, cur, coord)]
        change = "created" if cur is None else config_diff(cur.get("config", {}), job.resolved)
        history.append(records.history_entry(fp, change, _describe_target(job.cfg)))
        state = records.sweep_record(fp, job.resolved, job.rule, parts=parts, history=history)
        records.write_json(sj, state)
        return state


# ---------------------------------------------------------------------------- running
def chunk_floor(job: Job) -> int:
    """Micro-batches per device each part's chunks hold at least: the count the target's own
    layout has per device (a refinement's: the dense grid of its finest lattice's), up to 2
    (the module docstring)."""
    cfg = job.cfg
    n = cfg.n_points if cfg.refine is None else int(np.prod(refine.Lattice.from_config(cfg).shape))
    n_dev = len(job.devices)
    layout, _ = choose_layout(cfg, job.lab, job.names, n_dev, n_points=n)
    return min(2, layout.chunk_mb // n_dev)


def run(job: Job, seen: dict) -> results.Results | None:
    """Run a grown or refined sweep (module docstring); the assembled Results (None for a
    --worker, which leaves the merge to a plain run or `simlab merge`). seen: what
    `composite_state` returned."""
    cfg, out, quiet = job.cfg, job.out, job.quiet
    if cfg.refine is not None and cfg.refine.metric not in job.names:
        raise ConfigError(
            f"refine.metric: {cfg.refine.metric!r} is not among the sweep's metrics; "
            f"allowed: {', '.join(job.names)}"
        )
    state = None
    if out is not None:
        finished = _finished(out, job.fp)
        if finished is not None:
            return finished
        state = open_composite(job, seen)
    distributed = out is not None and jax.process_count() > 1 and job.worker is None
    if distributed:
        quiet = quiet or jax.process_index() != 0
    pool = Pool(dataclasses.replace(job, quiet=quiet), chunk_floor(job))
    if state is not None:
        pool.sync(state[PARTS])
    seeds = seed_range(cfg)
    if cfg.refine is None:
        values = cfg.point_values()
        parts = pool.plan(cfg, values, seeds)
        if not pool.run(parts, job.worker, barrier=False):
            return None
        refined = None
    else:
        values, refined = _refine(cfg, pool, seeds, job.worker)
        if refined is None:
            return None
    if distributed and jax.process_index() != 0:
        return wait_for_results(out)
    return _assemble(job, pool, values, refined)


def _finished(out: Path, fp: str) -> results.Results | None:
    """The directory's results when it holds this sweep, finished (read only: no lock)."""
    sj = out / "sweep.json"
    if not sj.is_file() or not records.is_finished(out):
        return None
    if records.read_sweep(sj).get("fingerprint") != fp:
        return None
    res = results.load(out)
    return res if res.meta.get("fingerprint") == fp else None


def _warn_level_outside(got, metric: str, level: float) -> None:
    """On stderr, as `simlab plot --levels` warns: a refine.level outside the coarse grid's
    values of its metric has no boundary to refine (every cell stays unsplit)."""
    finite = np.asarray(got, np.float64)[np.isfinite(got)]
    if finite.size and not finite.min() <= level <= finite.max():
        print(
            f"simlab: warning: refine.level {level:g} is outside the range of {metric} on the "
            f"coarse grid ({finite.min():.4g}..{finite.max():.4g}): no boundary to refine",
            file=sys.stderr,
        )


def _at_selection(got, r, lab):
    """The refined metric's values (P, Z, *dims) at refine.select (each further dimension at
    its index; one not named at its last): (P, Z). The names are the lab's
    (records.metric_dims); one selected that the metric does not have is a ConfigError."""
    names = records.metric_dims(["point"], {r.metric: got}, lab)[r.metric][2:]
    wrong = [k for k, _ in r.select if k not in names]
    if wrong:
        have = ", ".join(names) or "none"
        raise ConfigError(
            f"refine.select: {', '.join(wrong)} is not a dimension of {r.metric} (its "
            f"dimensions after the points and seeds: {have})"
        )
    try:
        return results.take_dims(got, names, dict(r.select), r.metric)[0]
    except ConfigError as e:
        raise ConfigError(f"refine.select: {e}") from None


def _refine(cfg, pool: Pool, seeds: range, worker):
    """The levels of a refinement, each planned and computed in full; (the points' knob
    values, the finished refine.State), or (None, None) for a worker done with its shares."""
    r = cfg.refine
    lat = refine.Lattice.from_config(cfg)
    st = refine.State.start(lat)
    while True:
        values = lat.knob_values(st.points)
        parts = pool.plan(cfg, values, seeds)
        if not pool.run(parts, worker, barrier=not st.done):
            return None, None
        if st.done:
            return values, st
        got = pool.gather(cfg.knobs, values, seeds, (r.metric,))[r.metric]
        got = _at_selection(got, r, pool.job.lab)
        if st.level == 0:
            _warn_level_outside(got, r.metric, r.level)
        st = st.advance(got, r.level, r.rule)
        log.info("refine: level %d adds %d points", st.level, st.added[-1])


def _assemble(job: Job, pool: Pool, values, refined) -> results.Results:
    """Gather the target's pairs from the parts, record the history, add the seeds'
    covariates (simlab.engine.covariates), save (with a directory)."""
    cfg, out_dir, fp, names = job.cfg, job.out, job.fp, job.names
    seeds = seed_range(cfg)
    flat = pool.gather(cfg.knobs, values, seeds, names)
    if refined is None:
        metrics = {
            k: np.ascontiguousarray(x.reshape(cfg.shape + x.shape[1:])) for k, x in flat.items()
        }
        axes = OrderedDict((a.name, np.asarray(a.values, np.float64)) for a in cfg.axes)
        described = [a.describe() for a in cfg.axes]
    else:
        metrics = flat
        n = len(refined.points)
        axes = OrderedDict(point=np.arange(n, dtype=np.float64))
        described = [
            {
                "name": "point",
                "knobs": sorted(values),
                "space": "index",
                "values": axes["point"].tolist(),
                "knob_values": {k: np.asarray(v).tolist() for k, v in sorted(values.items())},
            }
        ]
    n_points = len(next(iter(axes.values()))) if refined is not None else cfg.n_points
    history, current = [], True
    if out_dir is not None:
        coord = claims.Coordinator(out_dir)
        with coord.lock():
            sj = out_dir / "sweep.json"
            state = records.read_sweep(sj)
            current = state.get("fingerprint") == fp  # else another writer grew it meanwhile
            if current:
                records.finish_history(state, n_points, len(seeds))
                records.write_json(sj, state)
            history = state["history"]
    pieces = [
        {
            "name": p.name,
            "fingerprint": p.res.meta.get("fingerprint") if p.res is not None else None,
            "points": p.cfg.n_points,
            "first_seed": p.seeds.start,
            "seeds": len(p.seeds),
        }
        for p in pool.parts
    ]
    st = cfg.sweep
    cov = seed_covariates(job.lab, st.base_seed, len(seeds), st.matmul_precision, None, seeds.start)
    extra: dict = {"parts": pieces, "history": history}
    if refined is not None:
        extra["refine"] = refined.describe(cfg.refine)
    report = report_numerics(job.lab, axes, metrics, seeds.start)
    meta = records.meta_record(
        config=job.resolved,
        fp=fp,
        axes=described,
        dims=records.metric_dims(axes, metrics, job.lab),
        devices=[str(d) for d in job.devices],
        n_points=n_points,
        seeds=seeds,
        account=pool.account,
        wall_time_s=time.perf_counter() - job.t0,
        n_processes=jax.process_count(),
        covariate_dims=covariate_dims(cov, job.lab) if cov else None,
        numerics_report=report,
        rule=job.rule,
        machines=records.part_machines(
            [p.res.meta for p in pool.parts if p.res is not None], out_dir or "this sweep"
        ),
        **extra,
    )
    if out_dir is None or not current:
        return results.Results(axes, metrics, meta, covariates=cov)
    saved = results.save(out_dir, axes, metrics, meta, cov)
    claims.Coordinator(out_dir).tidy()
    return saved
