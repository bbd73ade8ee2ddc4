"""Claims 8-10: the anisotropy a BERT-init block adds, branch by branch (simlab.theory.gains).

  8 uniform_gain     the attention branch under uniform attention (block.pattern = "uniform",
                     no MLP), drift N: gain rho0 (1 - rho0) (g - 1) / (1 + rho0 (g - 1)),
                     g = 1 + 2 beta + k from each seed's weights;
  9 shared_gain      a shared clamped pattern at N = 0 against its sharpness beta: within-
                     sequence gain p^2 k_iso / (1 + p^2 k_iso), global gain that times
                     (T - 1) / (B T - 1), p the pattern's weight on its target;
 10 mean_field_gain  the whole block (its own softmax at lambda = 1, GELU MLP) against N: the
                     mean-field curve (attention branch + MLP mean output) of theory.gains.
Simulation: `simlab.run_sweep` of the paper's protocol (BERT init, embedding-table tokens) at
each size of the TOML's path, many seeds; the per-seed covariates
(simlab.core.lab.Lab.covariates: k = drift_vo, beta = drift_vo_dot, k_iso = vo_iso,
|1^T W_2|^2 = F mlp_shared, gamma = mlp_drift_dot, tau = mlp_trace) enter each seed's
prediction. Error: the largest |seed mean of (simulated - predicted)| over the grid, relative
to the largest |predicted| (so sizes with smaller gains compare); criterion
(experiments/theory_<claim>.toml): common.verdict_from. Reported beside it: the same with the
seeds' weights replaced by their expectations (what the seeds' own statistics explain), and
the correlation over seeds of simulated and predicted gains where the gain is largest.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import simlab
from simlab.studies.check_theory.claim import Claim, ClaimResult, Comparison
from simlab.studies.check_theory.common import shrink_cell, verdict_from
from simlab.theory import gains

BASE = dict(
    block=dict(kind="post_ln", init="bert"),
    inputs=dict(kind="embedding", vocab=30522, embed_std=0.02),
)


def _run(cfg: dict, size: dict, block: dict, axis: dict, metrics: list[str]) -> dict:
    """One size: per-seed arrays (axis, seeds) of the metrics and per-seed covariates (layer 0)."""

    res = simlab.run_sweep(
        block={**BASE["block"], **block, **size["block"]},
        inputs={**BASE["inputs"], **cfg["inputs"]},
        axes=[axis],
        sweep=dict(seeds=cfg["seeds"], base_seed=cfg["seed"], metrics=metrics),
        out=None,
        quiet=True,
    )
    return {
        "x": res.axes[axis["name"]].tolist(),
        **{m: res[m].tolist() for m in metrics},
        "cov": {k: np.asarray(v)[:, 0].tolist() for k, v in res.covariates.items()},
    }


def _size_name(size: dict) -> str:
    return f"d{size['block']['d_model']}"


def _compare(cfg, data, predict, label: str, metric: str) -> Comparison:
    """Seed-mean error of the per-seed prediction (and of the expectation) along the grid."""
    keys = list(data["runs"])
    errs, errs_mean, corr, curves = [], [], [], {}
    for key, size in zip(keys, cfg["sizes"]):
        run = data["runs"][key]
        sim = np.asarray(run[metric], float)  # (points, seeds)
        pred, pred_mean = predict(run, size)
        scale = max(float(np.max(np.abs(pred.mean(1)))), 1e-12)
        errs.append(float(np.max(np.abs(sim.mean(1) - pred.mean(1)))) / scale)
        errs_mean.append(float(np.max(np.abs(sim.mean(1) - pred_mean))) / scale)
        i = int(np.argmax(np.abs(pred.mean(1))))
        c = np.corrcoef(sim[i], pred[i])[0, 1] if np.std(pred[i]) > 0 else float("nan")
        corr.append(float(c))
        curves[key] = dict(
            x=run["x"], sim=sim.tolist(), pred=pred.tolist(), mean=pred_mean.tolist()
        )
    big = keys[-1]
    sim_b, pred_b = np.asarray(curves[big]["sim"]), np.asarray(curves[big]["pred"])
    i = int(np.argmax(np.abs(pred_b.mean(1))))
    n = sim_b.shape[1]
    half = 2.0 * sim_b[i].std(ddof=1) / np.sqrt(n) if n > 1 else float("nan")
    return Comparison(
        sizes=" ".join(keys),
        predicted=f"{label} {pred_b[i].mean():.4f}",
        simulated=f"{sim_b[i].mean():.4f} +- {half:.4f}",
        error=f"{errs[-1]:.3f} of the peak ({keys[0]}: {errs[0]:.3f})",
        shrinks=shrink_cell(errs[-1], errs[0], cfg["min_shrink"]) if len(keys) > 1 else "n/a",
        details=[
            (f"{k}: max |sim - pred| / max |pred| (seeds' own weights)", f"{e:.4f}")
            for k, e in zip(keys, errs)
        ]
        + [
            (f"{k}: the same with the weights' expectations", f"{e:.4f}")
            for k, e in zip(keys, errs_mean)
        ]
        + [
            (f"{k}: correlation over seeds, sim vs pred, at the peak", f"{c:.3f}")
            for k, c in zip(keys, corr)
        ]
        + [(f"seeds, tokens: {n}, {cfg['inputs']['batch']} x {cfg['inputs']['length']}", "")],
        scores={"errors": errs},
        data={"curves": curves, "metric": metric, "x_name": data["x_name"], "label": label},
    )


def _verdict(cfg, comparison: Comparison):
    v, rule = verdict_from(comparison.scores["errors"], 0, cfg)
    return v, ("criterion (relative to the peak)", rule)


def _figure(res: ClaimResult, path: Path) -> None:
    from matplotlib.figure import Figure

    # deferred: matplotlib (heavy), loaded only when a figure is drawn
    from simlab import plot

    d = res.data
    fig = Figure(figsize=plot.FIGSIZE, layout="constrained")
    ax = fig.add_subplot()
    for i, (key, c) in enumerate(d["curves"].items()):
        x, sim, pred = np.asarray(c["x"]), np.asarray(c["sim"]), np.asarray(c["pred"])
        n = sim.shape[1]
        half = 2.0 * sim.std(axis=1, ddof=1) / np.sqrt(n)
        ax.errorbar(
            x,
            sim.mean(1),
            yerr=half,
            fmt="o",
            ms=4,
            color=f"C{i}",
            label=f"simulated {key} ({n} seeds, +-2 s.e.)",
        )
        ax.plot(x, pred.mean(1), "-", color=f"C{i}", label=f"predicted {key}, seeds' weights")
        ax.plot(x, c["mean"], ":", color=f"C{i}", label=f"predicted {key}, expected weights")
    if np.all(np.asarray(next(iter(d["curves"].values()))["x"]) > 0):
        ax.set_xscale("log")
    ax.set(xlabel=d["x_name"], ylabel=d["metric"], title=f"{res.claim}: {res.verdict}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    plot.save_figure(fig, path)


# ------------------------------------------------------------------------------ claim 8
def simulate_uniform(cfg) -> dict:
    axis = dict(name="drift_norm", values=list(cfg["drift_norm"]))
    block = dict(mlp=False, pattern="uniform")
    runs = {
        _size_name(s): _run(cfg, s, block, axis, ["input_cos", "out_cos"]) for s in cfg["sizes"]
    }
    return {"runs": runs, "x_name": "drift_norm"}


def _predict_uniform(run, size):
    rho0 = np.asarray(run["input_cos"], float)
    k, b = np.asarray(run["cov"]["drift_vo"]), np.asarray(run["cov"]["drift_vo_dot"])
    pred = gains.drift_gain_uniform(rho0, 1.0 + 2.0 * b + k)
    g_mean = gains.expected_drift_gain_factor(size["block"]["d_model"])
    return pred, gains.drift_gain_uniform(rho0.mean(1), g_mean)


def compare_uniform(cfg, data) -> Comparison:
    for run in data["runs"].values():
        run["gain"] = (np.asarray(run["out_cos"]) - np.asarray(run["input_cos"])).tolist()
    return _compare(cfg, data, _predict_uniform, "rho0(1-rho0)(g-1)/(1+rho0(g-1)) =", "gain")


# ------------------------------------------------------------------------------ claim 9
def simulate_shared(cfg) -> dict:
    axis = dict(name="pattern_beta", values=list(cfg["pattern_beta"]))
    block = dict(mlp=False, pattern="shared")
    metrics = ["out_cos_within_gain", "out_cos_gain"]
    runs = {_size_name(s): _run(cfg, s, block, axis, metrics) for s in cfg["sizes"]}
    return {"runs": runs, "x_name": "pattern_beta"}


def _predict_shared(run, size, cfg):
    p = gains.shared_weight(np.asarray(run["x"])[:, None], cfg["inputs"]["length"])
    k = np.asarray(run["cov"]["vo_iso"])[None, :]
    d = size["block"]["d_model"]
    return gains.shared_within_gain(k, p), gains.shared_within_gain(d**2 * 0.02**4, p[:, 0])


def compare_shared(cfg, data) -> Comparison:
    comp = _compare(
        cfg,
        data,
        lambda run, size: _predict_shared(run, size, cfg),
        "p^2 k_iso / (1 + p^2 k_iso) =",
        "out_cos_within_gain",
    )
    # the global gain: that times the share of within-sequence pairs
    b, t = cfg["inputs"]["batch"], cfg["inputs"]["length"]
    for key, run in data["runs"].items():
        size = next(s for s in cfg["sizes"] if _size_name(s) == key)
        within, _ = _predict_shared(run, size, cfg)
        glob = within * (t - 1.0) / (b * t - 1.0)
        err = float(np.max(np.abs(np.asarray(run["out_cos_gain"]).mean(1) - glob.mean(1))))
        comp.details.append((f"{key}: global gain, max |sim - pred| (absolute)", f"{err:.5f}"))
    return comp


# ------------------------------------------------------------------------------ claim 10
def simulate_mean_field(cfg) -> dict:
    axis = dict(name="drift_norm", values=list(cfg["drift_norm"]))
    runs = {
        _size_name(s): _run(cfg, s, dict(mlp=True), axis, ["input_cos", "out_cos"])
        for s in cfg["sizes"]
    }
    return {"runs": runs, "x_name": "drift_norm"}


def _predict_mean_field(run, size):
    d, ratio = size["block"]["d_model"], 4
    rho0 = np.asarray(run["input_cos"], float)
    k, b = np.asarray(run["cov"]["drift_vo"]), np.asarray(run["cov"]["drift_vo_dot"])
    cov = {
        n: np.asarray(run["cov"][n])[None, :] for n in ("mlp_shared", "mlp_drift_dot", "mlp_trace")
    }
    pred = gains.mean_field_gain(
        rho0,
        1.0 + 2.0 * b + k,
        d,
        ratio,
        0.02,
        ratio * d * cov["mlp_shared"],
        cov["mlp_drift_dot"],
        cov["mlp_trace"],
    )
    mean = gains.mean_field_gain(rho0.mean(1), gains.expected_drift_gain_factor(d), d, ratio)
    return pred, mean


def compare_mean_field(cfg, data) -> Comparison:
    for run in data["runs"].values():
        run["gain"] = (np.asarray(run["out_cos"]) - np.asarray(run["input_cos"])).tolist()
    return _compare(cfg, data, _predict_mean_field, "mean field:", "gain")


CLAIMS = (
    Claim(
        "uniform_gain",
        "attention branch under uniform attention: the drift's gain",
        simulate_uniform,
        compare_uniform,
        _verdict,
        _figure,
    ),
    Claim(
        "shared_gain",
        "a shared sharp pattern: within-sequence gain p^2 k / (1 + p^2 k)",
        simulate_shared,
        compare_shared,
        _verdict,
        _figure,
    ),
    Claim(
        "mean_field_gain",
        "the block's gain against N: attention branch + MLP mean output (mean field)",
        simulate_mean_field,
        compare_mean_field,
        _verdict,
        _figure,
        label="mean_field",
    ),
)
