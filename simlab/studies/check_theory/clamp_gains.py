"""Claim 11, clamp_gains: the attention branch's gain under each clamped pattern at equal beta,
against the drift (simlab.theory.gains.CLAMP_COS; docs/theory.md, "Claim 11").

Block kind "attention" (h = x + Attn(x): no LayerNorm, so nothing of O(1/d) is left out), no
MLP, BERT init, embedding-table tokens plus a drift N u_b. Every pattern of cfg["patterns"]
("uniform", "shared", "token", "other") runs through `simlab.run_sweep` on the grid
pattern_beta x drift_norm (uniform: drift_norm only) with the same seeds, so every pattern sees
the same weights and tokens and the differences between patterns are paired by seed. Per seed
the prediction takes the seed's covariates (simlab.core.lab.Lab.covariates: g = 1 + 2 drift_vo_dot
+ drift_vo, k_iso = vo_iso, tau = vo_trace) and its simulated input cosine rho0 (input_cos for
the global gain, input_cos_within for the within-sequence one).

Error at one size: for the global gain out_cos - input_cos and the within-sequence gain
out_cos_within - input_cos_within, the largest |seed mean of (simulated - predicted)| over the
patterns and the grid, relative to the largest |predicted| seed mean of that gain over the
patterns and the grid; the larger of the two. Criterion (experiments/theory_clamp_gains.toml):
common.verdict_from. Reported beside it: each pattern's error, the correlation over seeds of
simulated and predicted gains at each pattern's largest predicted gain, the paired differences
clamp minus uniform at the largest beta, and "token minus other" (the tau terms alone).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import simlab
from simlab.studies.check_theory.claim import Claim, ClaimResult, Comparison
from simlab.studies.check_theory.common import shrink_cell, verdict_from
from simlab.theory import gains

BLOCK = dict(kind="attention", init="bert", mlp=False)
INPUTS = dict(kind="embedding", vocab=30522, embed_std=0.02)
METRICS = ("input_cos", "out_cos", "input_cos_within", "out_cos_within")
GAINS = (("global", "input_cos", "out_cos"), ("within", "input_cos_within", "out_cos_within"))
INIT_STD = 0.02


def _size_name(size: dict) -> str:
    return f"d{size['block']['d_model']}"


def _run(cfg: dict, size: dict, pattern: str) -> dict:
    """One pattern at one size: metric -> (beta, drift, seeds) (uniform: one beta row), and the
    seeds' covariates (layer 0)."""

    drift = dict(name="drift_norm", values=list(cfg["drift_norm"]))
    beta = dict(name="pattern_beta", values=list(cfg["pattern_beta"]))
    axes = [drift] if pattern == "uniform" else [beta, drift]
    res = simlab.run_sweep(
        block={**BLOCK, **size["block"], "pattern": pattern},
        inputs={**INPUTS, **cfg["inputs"]},
        axes=axes,
        sweep=dict(seeds=cfg["seeds"], base_seed=cfg["seed"], metrics=list(METRICS)),
        out=None,
        quiet=True,
    )
    shape = (-1, len(drift["values"]), cfg["seeds"])
    return {
        "metrics": {m: np.asarray(res[m]).reshape(shape).tolist() for m in METRICS},
        "cov": {k: np.asarray(v)[:, 0].tolist() for k, v in res.covariates.items()},
    }


def simulate(cfg) -> dict:
    runs = {}
    for size in cfg["sizes"]:
        per = {p: _run(cfg, size, p) for p in cfg["patterns"]}
        cov = next(iter(per.values()))["cov"]  # the same seeds, the same weights
        runs[_size_name(size)] = {
            "patterns": {p: r["metrics"] for p, r in per.items()},
            "cov": cov,
        }
    return {"runs": runs, "beta": list(cfg["pattern_beta"]), "drift": list(cfg["drift_norm"])}


def predict(cfg, run, size, pattern: str, kind: str, expected: bool = False) -> np.ndarray:
    """(beta, drift, seeds) predicted gain of one pattern, per seed from its covariates and
    simulated input cosine; expected=True: the covariates replaced by their expectations at
    BERT init (E k = E k_iso = D^2 sigma_w^4, E beta_vo = E tau = 0)."""
    _, cos_in, _ = next(g for g in GAINS if g[0] == kind)
    rho0 = np.asarray(run["patterns"][pattern][cos_in], float)
    beta = np.asarray([0.0] if pattern == "uniform" else cfg["pattern_beta"], float)
    beta = beta[:, None, None]
    if expected:
        k = float(size["block"]["d_model"]) ** 2 * INIT_STD**4
        g, k_iso, tau = 1.0 + k, k, 0.0
    else:
        cov = {n: np.asarray(run["cov"][n], float) for n in ("drift_vo", "drift_vo_dot")}
        g = 1.0 + 2.0 * cov["drift_vo_dot"] + cov["drift_vo"]
        k_iso = np.asarray(run["cov"]["vo_iso"], float)
        tau = np.asarray(run["cov"]["vo_trace"], float)
    b, t = cfg["inputs"]["batch"], cfg["inputs"]["length"]
    return gains.clamp_gain(pattern, rho0, g, k_iso, beta, t, b, tau, within=kind == "within")


def simulated(run, pattern: str, kind: str) -> np.ndarray:
    _, cos_in, cos_out = next(g for g in GAINS if g[0] == kind)
    m = run["patterns"][pattern]
    return np.asarray(m[cos_out], float) - np.asarray(m[cos_in], float)


def _half(x) -> float:
    """2 standard errors of the mean over seeds."""
    x = np.ravel(x)
    return 2.0 * float(np.std(x, ddof=1)) / np.sqrt(x.size) if x.size > 1 else float("nan")


def _corr(a, b) -> float:
    a, b = np.ravel(a), np.ravel(b)
    if a.size < 3 or np.std(a) == 0 or np.std(b) == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def _size_errors(cfg, run, size):
    """{kind: (error, error with expectations, {pattern: error})} at one size."""
    out = {}
    for kind, _, _ in GAINS:
        sims = {p: simulated(run, p, kind) for p in cfg["patterns"]}
        preds = {p: predict(cfg, run, size, p, kind) for p in cfg["patterns"]}
        means = {p: predict(cfg, run, size, p, kind, expected=True) for p in cfg["patterns"]}
        scale = max(max(float(np.max(np.abs(v.mean(-1)))) for v in preds.values()), 1e-12)
        per = {p: float(np.max(np.abs((sims[p] - preds[p]).mean(-1)))) / scale for p in sims}
        per_mean = max(float(np.max(np.abs((sims[p] - means[p]).mean(-1)))) for p in sims)
        out[kind] = (max(per.values()), per_mean / scale, per)
    return out


def compare(cfg, data) -> Comparison:
    keys = list(data["runs"])
    errs, details, curves = [], [], {}
    beta, drift = data["beta"], data["drift"]
    for key, size in zip(keys, cfg["sizes"]):
        run = data["runs"][key]
        e = _size_errors(cfg, run, size)
        errs.append(max(e[k][0] for k in e))
        for kind in e:
            details.append(
                (
                    f"{key}: {kind} gain, max |sim - pred| / max |pred| (seeds' own weights)",
                    f"{e[kind][0]:.4f} (expectations {e[kind][1]:.4f}; "
                    + " ".join(f"{p} {v:.3f}" for p, v in e[kind][2].items())
                    + ")",
                )
            )
        corr = []
        for p in cfg["patterns"]:
            sim, pred = simulated(run, p, "global"), predict(cfg, run, size, p, "global")
            i = np.unravel_index(np.argmax(np.abs(pred.mean(-1))), pred.shape[:-1])
            corr.append(f"{p} {_corr(sim[i], pred[i]):.3f}")
        details.append((f"{key}: correlation over seeds at each pattern's peak", " ".join(corr)))
        curves[key] = {
            p: {
                kind: dict(
                    sim=simulated(run, p, kind).tolist(),
                    pred=predict(cfg, run, size, p, kind).tolist(),
                )
                for kind, _, _ in GAINS
            }
            for p in cfg["patterns"]
        }
    big, size = keys[-1], cfg["sizes"][-1]
    run = data["runs"][big]
    details += _paired_rows(cfg, run, size, big)
    n, pats = cfg["seeds"], cfg["patterns"]
    peak = {}
    for p in pats:
        sim, pred = simulated(run, p, "global"), predict(cfg, run, size, p, "global")
        peak[p] = (sim[-1].mean(-1), pred[-1])  # the largest beta (uniform: its one row)
    j = int(np.argmax(np.abs(peak[pats[0]][1].mean(-1))))  # the first pattern's peak drift
    tokens = f"{cfg['inputs']['batch']} x {cfg['inputs']['length']}"
    details.append((f"seeds, tokens: {n}, {tokens}", ""))
    return Comparison(
        sizes=" ".join(keys),
        predicted=f"N={drift[j]:g} b={beta[-1]:g} "
        + "/".join(f"{float(peak[p][1][j].mean()):.4f}" for p in pats),
        simulated="/".join(f"{float(peak[p][0][j]):.4f}" for p in pats) + f" ({'/'.join(pats)})",
        error=f"{errs[-1]:.3f} of the peak ({keys[0]}: {errs[0]:.3f})",
        shrinks=shrink_cell(errs[-1], errs[0], cfg["min_shrink"]) if len(keys) > 1 else "n/a",
        details=details,
        scores={"errors": errs},
        data={"curves": curves, "beta": beta, "drift": drift, "patterns": list(pats)},
    )


def _paired_rows(cfg, run, size, key) -> list[tuple[str, str]]:
    """Clamp minus uniform at the largest beta, and token minus other (the tau terms), per seed:
    seed mean of the simulated (+- 2 standard errors) and predicted differences at the drift of
    the largest predicted |difference|, and their correlation over seeds."""
    rows = []
    pats = cfg["patterns"]

    def diff(a, b, kind):
        sa, sb = simulated(run, a, kind), simulated(run, b, kind)
        pa, pb = predict(cfg, run, size, a, kind), predict(cfg, run, size, b, kind)
        return sa[-1] - sb[-1], pa[-1] - pb[-1]  # (drift, seeds) at the largest beta

    pairs = [(p, "uniform") for p in pats if p != "uniform" and "uniform" in pats]
    if "token" in pats and "other" in pats:
        pairs.append(("token", "other"))
    for a, b in pairs:
        for kind, _, _ in GAINS:
            s, p = diff(a, b, kind)
            j = int(np.argmax(np.abs(p.mean(-1))))
            rows.append(
                (
                    f"{key}: {a} - {b}, {kind}, beta {cfg['pattern_beta'][-1]:g}, "
                    f"N {cfg['drift_norm'][j]:g}: sim (+-2 s.e.) / pred, r over seeds",
                    f"{s[j].mean():+.5f} +- {_half(s[j]):.5f} / {p[j].mean():+.5f}, "
                    f"r {_corr(s[j], p[j]):.3f}",
                )
            )
    return rows


def verdict(cfg, comparison: Comparison):
    v, rule = verdict_from(comparison.scores["errors"], 0, cfg)
    return v, ("criterion (relative to the peak)", rule)


def figure(res: ClaimResult, path: Path) -> None:
    from matplotlib.figure import Figure

    # deferred: matplotlib (heavy), loaded only when a figure is drawn
    from simlab import plot

    d = res.data
    key = list(d["curves"])[-1]
    curves = d["curves"][key]
    x = np.asarray(d["drift"], float)
    fig = Figure(figsize=(2 * plot.FIGSIZE[0], plot.FIGSIZE[1]), layout="constrained")
    for a, (kind, _, _) in enumerate(GAINS):
        ax = fig.add_subplot(1, 2, a + 1)
        for i, p in enumerate(d["patterns"]):
            sim = np.asarray(curves[p][kind]["sim"])[-1]
            pred = np.asarray(curves[p][kind]["pred"])[-1]
            n = sim.shape[-1]
            half = 2.0 * sim.std(axis=-1, ddof=1) / np.sqrt(n) if n > 1 else 0 * x
            mark = "os^xvD"[i % 6]  # token and other coincide: told apart by the marker
            ax.errorbar(x, sim.mean(-1), yerr=half, fmt=mark, ms=5, color=f"C{i}", label=p)
            ax.plot(x, pred.mean(-1), "-", color=f"C{i}")
        ax.axhline(0.0, color="0.6", lw=0.8)
        ax.set(
            xlabel="drift_norm N",
            ylabel=f"{kind} gain",
            title=f"{key}, beta {d['beta'][-1]:g}: {res.verdict}",
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, title="simulated (+-2 s.e.); lines: predicted", title_fontsize=7)
    plot.save_figure(fig, path)


CLAIM = Claim(
    "clamp_gains",
    "clamped patterns at equal beta: the drift passes identically, the private part grows",
    simulate,
    compare,
    verdict,
    figure,
)
