"""Claim 7: signal propagation through depth, simulated through simlab's own blocks.

Prediction (simlab.theory.signal_propagation; docs/theory.md, "Claim 7"): Giorlandino & Goldt's
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

import simlab
from simlab import theory
from simlab.core.spec import BlockSpec
from simlab.studies.check_theory.claim import Claim, ClaimResult, Comparison
from simlab.studies.check_theory.common import shrink_cell, verdict_from

METRICS = ("out_cos", "out_cos_within")


def sweep_stack(kind: str, size: dict, cfg: dict) -> dict:
    """One kind of stack at one size through simlab.run_sweep: the seed means of out_cos and
    out_cos_within, (temperature, layer) each."""

    res = simlab.run_sweep(
        block=dict(
            kind=kind,
            d_model=size["d_model"],
            n_heads=size["n_heads"],
            mlp=kind != "attention",
            init="fan_in",
            depth=cfg["depth"],
        ),
        inputs=dict(kind="gaussian", batch=size["batch"], length=size["length"]),
        axes=[dict(name="temperature", values=list(cfg["temperature"]))],
        sweep=dict(seeds=cfg["seeds"], base_seed=cfg["seed"], metrics=list(METRICS)),
        out=None,
        quiet=True,
    )
    return {f"sim_{m}": res.mean(m).tolist() for m in METRICS}


def simulate(cfg) -> dict:
    """sweep_stack for every kind and size of the TOML, keyed "d<d_model>_T<length>" then by
    kind."""
    return {
        "runs": {
            f"d{s['d_model']}_T{s['length']}": {k: sweep_stack(k, s, cfg) for k in cfg["kinds"]}
            for s in cfg["sizes"]
        }
    }


def predict(kind: str, size: dict, cfg: dict) -> dict:
    """theory.signal_propagation at each temperature: pred_out_cos, pred_out_cos_within,
    (temperature, layer) each."""
    structure = BlockSpec(kind=kind).validate().structure  # the kind's preset (core.structure)
    pred = [
        theory.signal_propagation(
            structure,
            cfg["depth"],
            size["length"],
            size["batch"],
            1.0 / t,
            mlp=kind != "attention",
        )
        for t in cfg["temperature"]
    ]
    return {f"pred_{m}": [p[m].tolist() for p in pred] for m in METRICS}


def compare(cfg, data) -> Comparison:
    kinds = list(cfg["kinds"])
    runs = {}
    for s in cfg["sizes"]:
        name = f"d{s['d_model']}_T{s['length']}"
        runs[name] = {}
        for k in kinds:
            r = dict(data["runs"][name][k], **predict(k, s, cfg))
            r["err"] = float(
                max(
                    np.max(np.abs(np.asarray(r[f"sim_{m}"]) - np.asarray(r[f"pred_{m}"])))
                    for m in METRICS
                )
            )
            runs[name][k] = r
    errs = [max(r[k]["err"] for k in kinds) for r in runs.values()]
    big, L = list(runs)[-1], cfg["depth"]
    t_mid = len(cfg["temperature"]) // 2
    details = [
        (
            f"{size}: max |sim - pred| per kind (all temperatures, layers, both metrics)",
            ", ".join(f"{k} {r[k]['err']:.3f}" for k in kinds),
        )
        for size, r in runs.items()
    ]
    details += [
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
    return Comparison(
        sizes=" ".join(runs) + f" L={L}",
        predicted=f"out_cos@L{L}, temp {cfg['temperature'][t_mid]:g} "
        + "/".join(f"{runs[big][k]['pred_out_cos'][t_mid][-1]:.3f}" for k in kinds),
        simulated="/".join(f"{runs[big][k]['sim_out_cos'][t_mid][-1]:.3f}" for k in kinds)
        + f" ({'/'.join(kinds)})",
        error=f"{errs[-1]:.3f} ({list(runs)[0]}: {errs[0]:.3f})",
        shrinks=shrink_cell(errs[-1], errs[0], cfg["min_shrink"]),
        details=details,
        scores={"errors": errs},
        data=dict(runs=runs, kinds=kinds, temperature=list(cfg["temperature"]), depth=L, errs=errs),
    )


def verdict(cfg, comparison: Comparison):
    """common.verdict_from on the largest error per size, the shrink from the smallest size."""
    v, rule = verdict_from(comparison.scores["errors"], 0, cfg)
    return v, ("criterion", rule)


def figure(res: ClaimResult, path: Path):
    """Per block kind (columns) the global (top) and within-sequence (bottom) cosine per layer:
    simulated (markers) and predicted (lines), one style per temperature; where two
    temperatures give the same curve (near-uniform attention at both), the larger hollow
    marker and the dashed line of the first stay visible under the second."""
    from matplotlib.figure import Figure

    # deferred: matplotlib (heavy), loaded only when a figure is drawn
    from simlab import plot

    d = res.data
    big = list(d["runs"])[-1]
    n = len(d["kinds"])
    fig = Figure(figsize=(5.2 * n, 7.4), layout="constrained")
    axes = np.asarray(fig.subplots(2, n, squeeze=False))
    layers = np.arange(1, d["depth"] + 1)
    styles = [("o", 8, "--"), ("^", 6, "-"), ("s", 4, ":"), ("D", 3, "-.")]
    for col, k in enumerate(d["kinds"]):
        r = d["runs"][big][k]
        for row, metric in enumerate(("out_cos", "out_cos_within")):
            ax = axes[row, col]
            for i, t in enumerate(d["temperature"]):
                c = f"C{i}"
                marker, size, line = styles[i % len(styles)]
                ax.plot(
                    layers,
                    r[f"sim_{metric}"][i],
                    marker,
                    color=c,
                    ms=size,
                    mfc="none" if i == 0 else c,
                    label=f"simulated, temp {t:g}",
                )
                ax.plot(
                    layers,
                    r[f"pred_{metric}"][i],
                    line,
                    color=c,
                    lw=1.3,
                    label=f"predicted, temp {t:g}",
                )
            ax.set(xlabel="layer", ylabel=metric, ylim=(-0.02, 1.02))
            ax.set_title(f"claim 7: {k} stack, {big}: {metric}", fontsize=10)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    plot.save_figure(fig, path)


# registered by check_theory/__init__.py, in the table's order
CLAIM = Claim(
    "signal_propagation",
    "per-layer token cosines of depth stacks (Giorlandino-Goldt recursion)",
    simulate,
    compare,
    verdict,
    figure,
    label="signal_prop",
)
