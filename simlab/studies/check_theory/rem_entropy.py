"""Claim 1: the entropy of a softmax of T i.i.d. Gaussian logits (random energy model).

Predictions: at finite T, simlab.theory.rem_entropy_finite (the Poissonized REM's mean entropy
in nats, every x, no free parameter); as T -> infinity, rem_normalized_entropy (H / ln T ->
1 - x^2 below x = s / sqrt(2 ln T) = 1, 0 above; Derrida 1981) and in the frozen phase
rem_frozen_entropy (H -> psi(1) - psi(1 - 1/x)). Simulation: for each T of the TOML's path,
`rows` rows of T i.i.d. N(0, 1) logits scaled by x sqrt(2 ln T) for every x of the grid (common
random numbers across x). Criterion (experiments/theory_rem_entropy.toml): the finite-T
prediction, in nats, at the largest T: max over x of |H_sim - H_pred| beyond 3 standard errors
of the simulated mean, common.verdict_from. The limit laws are reported beside it: their error
falls only like O(1) / ln T (like (ln T)^(-1/2) at the kink), measured and shown.
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from simlab import theory
from simlab.studies.check_theory.claim import Claim, ClaimResult, Comparison
from simlab.studies.check_theory.common import (
    fmt,
    index_16x_smaller,
    per_size,
    shrink_cell,
    verdict_from,
)
from simlab.studies.check_theory.reference import row_entropy


@partial(jax.jit, static_argnames=("T", "rows"))
def sim_rem_entropy(key, x_G, *, T: int, rows: int):
    """rows x T i.i.d. N(0, 1) logits g; for each x of x_G, softmax(x s_c g) with
    s_c = sqrt(2 ln T); returns (mean, std) over rows of the row entropy, each (G,)."""
    g_RT = jax.random.normal(key, (rows, T))
    s_c = math.sqrt(2.0 * math.log(T))

    def one(x):
        h_R = row_entropy(x * s_c * g_RT)
        return h_R.mean(), h_R.std()

    return jax.lax.map(one, x_G)


def simulate(cfg) -> dict:
    """Per T = 2^log2_T: the mean and std over rows of the row entropy (nats) on the x grid."""
    key = jax.random.PRNGKey(cfg["seed"])
    x_G = np.linspace(0.0, cfg["x_max"], cfg["x_points"])
    Ts = [2**e for e in cfg["log2_T"]]
    out = {"x": x_G.tolist(), "T": Ts, "rows": {}, "mean": {}, "std": {}}
    for T in Ts:
        rows = max(cfg["min_rows"], cfg["row_budget"] // T)
        m, s = sim_rem_entropy(jax.random.fold_in(key, T), jnp.asarray(x_G), T=T, rows=rows)
        out["rows"][str(T)] = rows
        out["mean"][str(T)] = np.asarray(m, float).tolist()
        out["std"][str(T)] = np.asarray(s, float).tolist()
    return out


def compare(cfg, data) -> Comparison:
    x_G = np.asarray(data["x"], float)
    Ts = data["T"]
    h_inf = theory.rem_normalized_entropy(x_G)
    off = np.abs(x_G - 1.0) >= 0.25
    curves, sup_err, off_err, frozen = {}, [], [], []
    for T in Ts:
        m = np.asarray(data["mean"][str(T)], float)
        h = m / math.log(T)
        se = np.asarray(data["std"][str(T)], float) / math.log(T)
        curves[T] = (h, se / math.sqrt(data["rows"][str(T)]))
        err = np.abs(h - h_inf)
        sup_err.append(err.max())
        off_err.append(err[off].max())
        frozen.append(float(m[-1]))
    sup_err, off_err = np.array(sup_err), np.array(off_err)
    log2_T = cfg["log2_T"]
    i_small = index_16x_smaller(log2_T)
    probe = np.array([0.5, 1.0, 1.5])
    # the rate at the kink x = 1: |H/lnT - limit| against ln T on log-log axes
    i1 = int(np.argmin(np.abs(x_G - 1.0)))
    e1 = np.array([abs(curves[T][0][i1] - h_inf[i1]) for T in Ts])
    lnT = np.log(np.array(Ts, float))
    rate = float(np.polyfit(np.log(lnT), np.log(np.maximum(e1, 1e-12)), 1)[0])
    x_frozen = x_G[-1]
    # the finite-T prediction (nats) and its error beyond 3 standard errors of the mean
    finite, fin_err = {}, []
    for T in Ts:
        pred = np.array([theory.rem_entropy_finite(x * math.sqrt(2 * math.log(T)), T) for x in x_G])
        m = np.asarray(data["mean"][str(T)], float)
        se = np.asarray(data["std"][str(T)], float) / math.sqrt(data["rows"][str(T)])
        finite[T] = pred
        fin_err.append(float(np.max(np.maximum(np.abs(m - pred) - 3 * se, 0.0))))
    fin_err = np.array(fin_err)
    big = math.log(Ts[-1])
    return Comparison(
        sizes=f"T=2^{log2_T[0]}..2^{log2_T[-1]}",
        predicted="H@x=.5/1/1.5 (finite T): " + fmt(np.interp(probe, x_G, finite[Ts[-1]]), 2),
        simulated=fmt(np.interp(probe, x_G, curves[Ts[-1]][0] * big), 2),
        error=f"{fin_err[-1]:.3f} nats (2^{log2_T[i_small]}: {fin_err[i_small]:.3f})",
        shrinks=shrink_cell(fin_err[-1], fin_err[i_small], cfg["min_shrink"]),
        details=[
            (
                "finite-T prediction: max_x |H_sim - H_pred| beyond 3 s.e. (nats) per T",
                per_size(log2_T, fin_err),
            ),
            (
                f"rate at x = 1: |H/lnT - limit| ~ (ln T)^{rate:.2f} (measured)",
                per_size(log2_T, e1),
            ),
            ("sup_x |H/lnT - limit| per T", per_size(log2_T, sup_err)),
            ("same, |x-1| >= 0.25", per_size(log2_T, off_err)),
            (
                f"frozen H at x={x_frozen:g} (limit psi(1)-psi(1-1/x)="
                f"{float(theory.rem_frozen_entropy(x_frozen)):.3f})",
                per_size(log2_T, frozen),
            ),
        ],
        # the criterion: the finite-T prediction, every x (the kink included)
        scores={"errors": fin_err, "i_small": i_small, "limit_off_kink": off_err},
        data=dict(
            x=x_G.tolist(),
            T=Ts,
            h={str(T): curves[T][0].tolist() for T in Ts},
            h_se={str(T): curves[T][1].tolist() for T in Ts},
            sup_err=sup_err.tolist(),
            off_err=off_err.tolist(),
            frozen=frozen,
            finite={str(T): (finite[T] / math.log(T)).tolist() for T in Ts},
            fin_err=fin_err.tolist(),
        ),
    )


def verdict(cfg, comparison: Comparison):
    v, rule = verdict_from(comparison.scores["errors"], comparison.scores["i_small"], cfg)
    return v, ("criterion (finite-T prediction, nats)", rule)


def figure(res: ClaimResult, path: Path):
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    # deferred: matplotlib (heavy), loaded only when a figure is drawn
    from simlab import plot

    d = res.data
    x = np.array(d["x"])
    fig = Figure(figsize=(11, 4.4), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    series = {
        f"T=2^{int(math.log2(T))}": (np.array(d["h"][str(T)]), 2 * np.array(d["h_se"][str(T)]))
        for T in d["T"]
    }
    xs = np.linspace(0, x.max(), 400)
    finite = [
        (x, np.array(d["finite"][str(T)]), f"finite T, 2^{int(math.log2(T))}") for T in d["T"]
    ]
    plot.curves(
        x,
        series,
        x_label="x = s / sqrt(2 ln T)  (s: logit std)",
        y_label="row entropy / ln T  (mean, +-2 s.e.)",
        x_log=False,
        theory=[(xs, theory.rem_normalized_entropy(xs), "T->inf: 1 - x^2, then 0")]
        + [finite[0], finite[-1]],
        title="Claim 1: softmax of T i.i.d. Gaussian logits (REM)",
        ax=ax1,
        styles={  # one colour per T along a sequential map (the cycle repeats after 10)
            k: {"color": colormaps["viridis"](0.9 * i / max(1, len(series) - 1))}
            for i, k in enumerate(series)
        },
    )
    log2T = np.log2(d["T"])
    plot.curves(
        log2T,
        {
            "limit law, sup over x": (np.array(d["sup_err"]), None),
            "limit law, |x-1| >= 0.25": (np.array(d["off_err"]), None),
            "finite-T prediction (nats / ln T; floor 1e-4 = 0 beyond 3 s.e.)": (
                np.maximum(np.array(d["fin_err"]) / np.log(d["T"]), 1e-4),
                None,
            ),
        },
        x_label="log2 T",
        y_label="error in H / ln T",
        x_log=False,
        y_log=True,
        theory=[(log2T, 1.0 / np.log(d["T"]), "1 / ln T (reference)")],
        title="error against T",
        ax=ax2,
    )
    plot.save_figure(fig, path)


# registered by check_theory/__init__.py, in the table's order
CLAIM = Claim(
    "rem_entropy",
    "REM entropy of softmax(i.i.d. logits)",
    simulate,
    compare,
    verdict,
    figure,
)
