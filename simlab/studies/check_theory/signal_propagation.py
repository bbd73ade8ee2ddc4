"""Claim 7: signal propagation through depth, simulated through simlab's own blocks.

Prediction (simlab.theory.signal_propagation; docs/theory.md, claim 7): Giorlandino & Goldt's
layer-to-layer recursion of the tokens' order parameters (squared norm, overlap within a
sequence, overlap across sequences), ported to simlab's post-LN, pre-LN and attention-only
wiring with its GELU MLP and finite-T softmax overlaps, gives the per-layer out_cos and
out_cos_within of a stack at init, with no free parameter.

Simulation: `simlab.run_sweep` of depth stacks (init = "fan_in", unit Gaussian tokens, no
drift) over the temperatures of the TOML, for each size of the TOML's size path.

Criterion (declared in experiments/theory_signal_propagation.toml): the largest |simulated -
predicted| over kinds, temperatures, layers and both metrics, at the largest size, against
tol / lead_tol with the shrink from the smallest size (common.verdict_from).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simlab import theory
from simlab.studies.check_theory.common import ClaimResult, shrink_cell, verdict_from

METRICS = ("out_cos", "out_cos_within")


def simulate(kind: str, size: dict, cfg: dict) -> dict:
    import simlab

    mlp = kind != "attention"
    res = simlab.run_sweep(
        block=dict(
            kind=kind,
            d_model=size["d_model"],
            n_heads=size["n_heads"],
            mlp=mlp,
            init="fan_in",
            depth=cfg["depth"],
        ),
        inputs=dict(kind="gaussian", batch=size["batch"], length=size["length"]),
        axes=[dict(name="temperature", values=list(cfg["temperature"]))],
        sweep=dict(seeds=cfg["seeds"], base_seed=cfg["seed"], metrics=list(METRICS)),
        out=None,
        quiet=True,
    )
    out = {}
    for m in METRICS:
        out[f"sim_{m}"] = res.mean(m).tolist()  # (temperature, layer)
    pred = [
        theory.signal_propagation(
            kind, cfg["depth"], size["length"], size["batch"], 1.0 / t, mlp=mlp
        )
        for t in cfg["temperature"]
    ]
    for m in METRICS:
        out[f"pred_{m}"] = [p[m].tolist() for p in pred]
    out["err"] = float(
        max(
            np.max(np.abs(np.asarray(out[f"sim_{m}"]) - np.asarray(out[f"pred_{m}"])))
            for m in METRICS
        )
    )
    return out


def check(cfg) -> ClaimResult:
    kinds = list(cfg["kinds"])
    runs = {}
    for s in cfg["sizes"]:
        key = f"d{s['d_model']}_T{s['length']}"
        runs[key] = {k: simulate(k, s, cfg) for k in kinds}
    errs = [max(r[k]["err"] for k in kinds) for r in runs.values()]
    verdict, rule = verdict_from(errs, 0, cfg)
    big = list(runs)[-1]
    L = cfg["depth"]
    t_mid = len(cfg["temperature"]) // 2
    res = ClaimResult(
        claim="7 signal_prop",
        title="per-layer token cosines of depth stacks (Giorlandino-Goldt recursion)",
        sizes=" ".join(runs) + f" L={L}",
        predicted=f"out_cos@L{L}, temp {cfg['temperature'][t_mid]:g} "
        + "/".join(f"{runs[big][k]['pred_out_cos'][t_mid][-1]:.3f}" for k in kinds),
        simulated="/".join(f"{runs[big][k]['sim_out_cos'][t_mid][-1]:.3f}" for k in kinds)
        + f" ({'/'.join(kinds)})",
        error=f"{errs[-1]:.3f} ({list(runs)[0]}: {errs[0]:.3f})",
        shrinks=shrink_cell(errs[-1], errs[0], cfg["min_shrink"]),
        verdict=verdict,
    )
    res.details = [("criterion", rule)] + [
        (
            f"{size}: max |sim - pred| per kind (all temperatures, layers, both metrics)",
            ", ".join(f"{k} {r[k]['err']:.3f}" for k in kinds),
        )
        for size, r in runs.items()
    ]
    res.details += [
        (
            f"{big} {k}, temp {t:g}: |sim - pred| per layer (out_cos)",
            " ".join(
                f"{abs(a - b):.3f}"
                for a, b in zip(runs[big][k]["sim_out_cos"][i], runs[big][k]["pred_out_cos"][i])
            ),
        )
        for k in kinds
        for i, t in enumerate(cfg["temperature"])
    ]
    res.data = dict(
        runs=runs, kinds=kinds, temperature=list(cfg["temperature"]), depth=L, errs=errs
    )
    return res


def figure(res: ClaimResult, path: Path):
    from matplotlib.figure import Figure

    from simlab import plot

    d = res.data
    big = list(d["runs"])[-1]
    fig = Figure(figsize=(5.2 * len(d["kinds"]), 4.4), layout="constrained")
    axes = fig.subplots(1, len(d["kinds"]))
    layers = np.arange(1, d["depth"] + 1)
    for ax, k in zip(np.atleast_1d(axes), d["kinds"]):
        r = d["runs"][big][k]
        for i, t in enumerate(d["temperature"]):
            c = f"C{i}"
            ax.plot(layers, r["sim_out_cos"][i], "o", color=c, ms=4, label=f"simulated, temp {t:g}")
            ax.plot(
                layers, r["pred_out_cos"][i], "-", color=c, lw=1.4, label=f"predicted, temp {t:g}"
            )
            ax.plot(layers, r["sim_out_cos_within"][i], "s", color=c, ms=3, mfc="none")
            ax.plot(layers, r["pred_out_cos_within"][i], ":", color=c, lw=1.2)
        ax.set(
            xlabel="layer", ylabel="out_cos (o, -) and out_cos_within (s, :)", ylim=(-0.02, 1.02)
        )
        ax.set_title(f"claim 7: {k} stack, {big}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    plot.save_figure(fig, path)
