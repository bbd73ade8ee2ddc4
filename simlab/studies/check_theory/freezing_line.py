"""Claim 6: the freezing line of the paper's protocol, simulated through simlab's own blocks.

Prediction (simlab.theory.paper_iso_entropy_lambda{,_finite}; docs/theory.md, "Claim 6"): for a
BERT-initialised block (W_Q, W_K ~ N(0, 0.02^2)) on drifted embeddings (std 0.02, drift N),
the logits of a query vary over the keys with variance
    s^2 = lambda^4 sigma_w^4 sigma_e^2 d (d sigma_e^2 + N^2),
so attention freezes along lambda^4 (d sigma_e^2 + N^2) = const: lambda ~ N^(-1/2) at large N.
The iso-entropy line H / ln T = level follows from the REM law (n -> infinity: s^2 =
2 (1 - level) ln T) or, at finite T and d_head, from the finite-n Gaussian softmax entropy
averaged over the chi^2_K spread of the row variances. Neither has a free parameter.

Simulation: `simlab.run_sweep` of a post-LN block (the MLP and everything after attention do
not change layer 0's attention entropy, so mlp = false) with BERT init and embedding inputs,
over drift N (a few values) x lambda (a fine log grid); lambda_sim(N) is where the seed-mean
attn_entropy crosses `level` (linear interpolation in log lambda).

Criterion (declared before the run, in experiments/theory_freezing_line.toml): "agrees" when
the finite-size prediction is within `tol` (relative, in lambda) at every N and size;
"agrees to leading order" when only the n -> infinity line is within `lead_tol`; else "does
not agree".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import simlab
from simlab import theory
from simlab.studies.check_theory.claim import Claim, ClaimResult, Comparison
from simlab.studies.check_theory.common import shrink_cell


def crossing(lam, h, level: float) -> float:
    """lambda where h (decreasing in lambda) first falls below level, log-linear; nan if never."""
    j = np.nonzero((h[:-1] >= level) & (h[1:] < level))[0]
    if not len(j):
        return float("nan")
    j = int(j[0])
    t = (h[j] - level) / (h[j] - h[j + 1])
    return float(np.exp(np.log(lam[j]) + t * (np.log(lam[j + 1]) - np.log(lam[j]))))


def sweep_size(size: dict, cfg: dict) -> dict:
    """One size through simlab.run_sweep: the lambda axis, the seed-mean attn_entropy over
    (drift N, lambda), and lambda_sim(N) where it crosses `level` (crossing, on the sweep's
    own float32 means)."""

    res = simlab.run_sweep(
        block=dict(kind="post_ln", d_model=size["d_model"], n_heads=size["n_heads"], mlp=False),
        inputs=dict(
            kind="embedding", batch=size["batch"], length=size["length"], vocab=size["vocab"]
        ),
        axes=[
            dict(name="drift_norm", values=list(cfg["drift_norm"])),
            dict(
                name="lambda",
                knobs=["q_scale", "k_scale"],
                space="log",
                start=cfg["lambda_start"],
                stop=cfg["lambda_stop"],
                num=cfg["lambda_points"],
            ),
        ],
        sweep=dict(seeds=cfg["seeds"], base_seed=cfg["seed"], metrics=["attn_entropy"]),
        out=None,
        quiet=True,
    )
    lam = res.axes["lambda"]
    h = res.mean("attn_entropy")  # (N, lambda)
    sim = np.array([crossing(lam, h[i], cfg["level"]) for i in range(len(cfg["drift_norm"]))])
    return dict(lam=lam.tolist(), h=h.tolist(), sim=sim.tolist())


def simulate(cfg) -> dict:
    """sweep_size for every size of the TOML, keyed "d<d_model>_T<length>"."""
    return {"runs": {f"d{s['d_model']}_T{s['length']}": sweep_size(s, cfg) for s in cfg["sizes"]}}


def compare(cfg, data) -> Comparison:
    """The finite-size line (theory.paper_iso_entropy_lambda_finite) and the n -> infinity
    line (paper_iso_entropy_lambda) at each size, and their largest relative errors in lambda
    over N."""
    runs, errs_f, errs_l = {}, [], []
    for s in cfg["sizes"]:
        name = f"d{s['d_model']}_T{s['length']}"
        kw = dict(length=s["length"], d_model=s["d_model"])
        finite = theory.paper_iso_entropy_lambda_finite(
            cfg["drift_norm"], cfg["level"], n_heads=s["n_heads"], **kw
        )
        limit = theory.paper_iso_entropy_lambda(cfg["drift_norm"], cfg["level"], **kw)
        runs[name] = dict(data["runs"][name], finite=finite.tolist(), limit=limit.tolist())
        sim = np.asarray(runs[name]["sim"])
        errs_f.append(float(np.max(np.abs(sim / np.asarray(runs[name]["finite"]) - 1))))
        errs_l.append(float(np.max(np.abs(sim / np.asarray(runs[name]["limit"]) - 1))))
    err_f, err_l = max(errs_f), max(errs_l)
    big = list(runs)[-1]
    n = cfg["drift_norm"]
    details = [
        (f"{k}: |lam_sim/lam_pred - 1| max over N (finite / n->inf)", f"{f:.3f} / {li:.3f}")
        for k, f, li in zip(runs, errs_f, errs_l)
    ]
    return Comparison(
        sizes=" ".join(runs),
        predicted=f"lam(N={n[0]:g}..{n[-1]:g}) "
        + "/".join(f"{x:.3g}" for x in runs[big]["finite"]),
        simulated="/".join(f"{x:.3g}" for x in runs[big]["sim"]),
        error=f"finite {err_f:.3f}, limit {err_l:.3f}",
        shrinks=shrink_cell(errs_l[-1], errs_l[0], cfg["min_shrink"]) if len(errs_l) > 1 else "n/a",
        details=details,
        criterion_at=len(details),  # the criterion row comes last
        scores={"finite": err_f, "limit": err_l},
        data=dict(
            runs=runs, drift_norm=list(n), level=cfg["level"], err_finite=errs_f, err_limit=errs_l
        ),
    )


def verdict(cfg, comparison: Comparison):
    """The claim's own rule: "agrees" when the finite-size line is within tol at every N and
    size; "agrees to leading order" when only the n -> infinity line is within lead_tol; else
    "does not agree"."""
    err_finite, err_limit = comparison.scores["finite"], comparison.scores["limit"]
    if err_finite <= cfg["tol"]:
        v = "agrees"
    elif err_limit <= cfg["lead_tol"]:
        v = "agrees to leading order"
    else:
        v = "does not agree"
    return v, (f"criterion: finite <= {cfg['tol']:g}, else limit <= {cfg['lead_tol']:g}", v)


def figure(res: ClaimResult, path: Path):
    from matplotlib.figure import Figure

    # deferred: matplotlib (heavy), loaded only when a figure is drawn
    from simlab import plot

    fig = Figure(figsize=(6.4, 4.4))
    ax = fig.add_subplot()
    n = np.asarray(res.data["drift_norm"])
    for i, (k, r) in enumerate(res.data["runs"].items()):
        c = f"C{i}"
        ax.plot(n, r["sim"], "o", color=c, label=f"simulated {k}")
        ax.plot(n, r["finite"], "-", color=c, label=f"predicted {k} (finite n, d_head)")
        ax.plot(n, r["limit"], ":", color=c, label=f"n -> inf limit {k}")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="drift N",
        ylabel=f"lambda at attn_entropy = {res.data['level']:g}",
        title=f"claim 6: freezing line, BERT init ({res.verdict})",
    )
    ax.legend(fontsize=7)
    plot.save_figure(fig, path)


# registered by check_theory/__init__.py, in the table's order
CLAIM = Claim(
    "freezing_line",
    "freezing line of the paper's (N, lambda) map",
    simulate,
    compare,
    verdict,
    figure,
)
