"""Claim 2: Giorlandino & Goldt, the output cosine of one attention layer.

The simulation, the check that turns simulation + prediction into a row of the table
(`check(cfg) -> ClaimResult`), and the figure (`figure(result, path)`).
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from simlab import theory
from simlab.studies.check_theory.common import (
    ClaimResult,
    _f,
    _ratio_ticks,
    attention_stats,
    correlated_tokens,
    shrink_cell,
    verdict_from,
)


@partial(jax.jit, static_argnames=("T", "d_model", "d_head", "n_query", "chunk"))
def sim_attention_map(
    key, p, lam_G, *, T: int, d_model: int, d_head: int, n_query: int, chunk: int = 128
):
    """Claim 2.  One head on T Gaussian tokens with correlation p in d_model dimensions,
    W_Q, W_K i.i.d. N(0, 1/d_model) (unit-variance query/key coordinates, q_std = k_std = 1),
    identity values, no residual.  lam_G = q_scale k_scale / temperature (the logit std);
    logits lam q.k / sqrt(d_head).  Returns attention_stats for the first n_query queries."""
    kx, kq, kk = jax.random.split(key, 3)
    x_TD = correlated_tokens(kx, T, d_model, p)
    wq_DH = jax.random.normal(kq, (d_model, d_head)) / math.sqrt(d_model)
    wk_DH = jax.random.normal(kk, (d_model, d_head)) / math.sqrt(d_model)
    q_MH = jnp.einsum("md,dh->mh", x_TD[:n_query], wq_DH)
    k_TH = jnp.einsum("td,dh->th", x_TD, wk_DH)
    return attention_stats(q_MH, k_TH, x_TD, lam_G / math.sqrt(d_head), chunk)


def _gg_run(key, T, d_model, d_head, n_query, p, beta, seeds):
    lam = np.asarray(beta, float) * math.sqrt(math.log(T))
    out = {"mean_cos": [], "kernel_cos": [], "entropy": []}
    for s in range(seeds):
        r = sim_attention_map(
            jax.random.fold_in(key, s),
            p,
            jnp.asarray(lam),
            T=T,
            d_model=d_model,
            d_head=d_head,
            n_query=min(n_query, T),
            chunk=min(128, n_query, T),
        )
        for k in out:
            out[k].append(np.asarray(r[k], float))
    res = {k: np.mean(v, 0) for k, v in out.items()}
    # seed-to-seed standard error of the kernel cosine (the queries share one set of keys, so
    # seeds are the independent samples); 0 with one seed
    res["kernel_se"] = (
        np.std(out["kernel_cos"], 0, ddof=1) / math.sqrt(seeds)
        if seeds > 1
        else 0.0 * res["kernel_cos"]
    )
    return res


def path_d_models(log2_T, c_min: float, c_max: float) -> list[int]:
    """The size path of the convergence test: d_model = c ln T with c growing geometrically
    from c_min (smallest T) to c_max (largest), so d / ln T -> infinity along the path (the
    finite-width floor of the kernel cosine grows like ln T / d: the limit needs d >> ln T).
    Rounded up to a multiple of 4 (d_head = d_model / 4)."""
    cs = np.geomspace(c_min, c_max, len(log2_T))
    return [int(4 * math.ceil(c * e * math.log(2) / 4)) for c, e in zip(cs, log2_T)]


def check(cfg) -> ClaimResult:
    key = jax.random.PRNGKey(cfg["seed"])
    ps, ratios = list(cfg["p"]), np.array(cfg["beta_ratio"], float)
    Ts = [2**e for e in cfg["log2_T"]]
    conv = {}  # (p, T) -> stats over ratios
    for p in ps:
        beta = ratios * float(theory.gg_beta_c(p))
        for T in Ts:
            conv[(p, T)] = _gg_run(
                jax.random.fold_in(key, T),
                T,
                cfg["d_model"],
                cfg["d_head"],
                cfg["n_query"],
                p,
                beta,
                cfg["seeds"],
            )
    pred = {p: theory.gg_output_cosine(ratios * theory.gg_beta_c(p), p) for p in ps}
    away = np.abs(ratios - 1.0) >= 0.5 - 1e-9

    # the finite-(T, d) prediction (theory.gg_finite_cosine), at every simulated size: its
    # error is taken over all ratios, beta_c included
    # keys (run, T, d_model), run = "fixed" (the d_model grid), "path" or "width" (d_models)
    fin_err = {}  # max over p and all ratios of the error
    fin_excess = {}  # max over p and ratios of (error - 3 standard errors)
    fin_pred = {}  # (T, d_model, p) -> the prediction over ratios

    def finite_error(run, T, d_model, d_head, stats):
        e, x = [], []
        for p in ps:
            fin, fin_se = theory.gg_finite_cosine(
                ratios * float(theory.gg_beta_c(p)), p, T, d_model, d_head, seed=T
            )
            fin_pred[(T, d_model, p)] = fin
            err = np.abs(stats[p]["kernel_cos"] - fin)
            e.append(np.max(err))
            # 3 standard errors of the difference: the simulation's (over seeds) and the
            # prediction's own Monte Carlo error
            x.append(np.max(err - 3.0 * np.hypot(stats[p]["kernel_se"], fin_se)))
        fin_err[(run, T, d_model)] = float(max(e))
        fin_excess[(run, T, d_model)] = float(max(x))

    def kernel_error(run, key_, T, d_model):
        """max over p and the away-from-beta_c ratios of |kernel cosine - formula| at one size
        (and the finite-size prediction's error, into fin_err)."""
        worst, stats = [], {}
        for p in ps:
            beta = ratios * float(theory.gg_beta_c(p))
            st = _gg_run(
                key_, T, d_model, max(1, d_model // 4), cfg["n_query"], p, beta, cfg["seeds"]
            )
            stats[p] = st
            worst.append(np.max(np.abs(st["kernel_cos"] - pred[p])[away]))
        finite_error(run, T, d_model, max(1, d_model // 4), stats)
        return float(max(worst))

    for T in Ts:
        finite_error("fixed", T, cfg["d_model"], cfg["d_head"], {p: conv[(p, T)] for p in ps})
    # the same along the path d_model = c ln T, c from path_c_min to path_c_max
    path_d = path_d_models(cfg["log2_T"], cfg["path_c_min"], cfg["path_c_max"])
    err_path = [
        kernel_error("path", jax.random.fold_in(key, 20_000 + T), T, dm)
        for T, dm in zip(Ts, path_d)
    ]
    pred_mean = {
        p: theory.gg_mean_cosine(ratios * theory.gg_beta_c(p), p, n_samples=cfg["pd_samples"])
        for p in ps
    }

    def errs(T, which="kernel_cos", ref=pred, mask=None):
        e = [np.abs(conv[(p, T)][which] - ref[p]) for p in ps]
        e = np.stack(e)
        return float((e[:, mask] if mask is not None else e).max())

    err_away = [errs(T, mask=away) for T in Ts]
    err_ann = [errs(T, mask=ratios <= 0.5 + 1e-9) for T in Ts] if np.any(ratios <= 0.5) else None
    err_frz = [errs(T, mask=ratios >= 2.0 - 1e-9) for T in Ts] if np.any(ratios >= 2.0) else None
    err_all = [errs(T) for T in Ts]
    err_mean_pd = [errs(T, "mean_cos", pred_mean, away) for T in Ts]
    err_mean_gg = [errs(T, "mean_cos", pred, away) for T in Ts]
    small = [i for i, e in enumerate(cfg["log2_T"]) if e <= cfg["log2_T"][-1] - 4]
    i_small = small[-1] if small else 0
    # error against d_model at fixed T
    Td = 2 ** cfg["d_log2_T"]
    err_d = {
        dm: kernel_error("width", jax.random.fold_in(key, 10_000 + dm), Td, dm)
        for dm in cfg["d_models"]
    }
    # phase diagram
    Tp = 2 ** cfg["phase_log2_T"]
    p_axis = np.linspace(0.0, cfg["phase_p_max"], cfg["phase_p_points"])
    b_axis = np.geomspace(cfg["phase_beta_min"], cfg["phase_beta_max"], cfg["phase_beta_points"])
    z_kern = np.zeros((p_axis.size, b_axis.size))
    z_mean = np.zeros_like(z_kern)
    for i, p in enumerate(p_axis):
        st = _gg_run(
            jax.random.fold_in(key, 99),
            Tp,
            cfg["d_model"],
            cfg["d_head"],
            cfg["n_query"],
            float(p),
            b_axis,
            cfg["phase_seeds"],
        )
        z_kern[i], z_mean[i] = st["kernel_cos"], st["mean_cos"]
    z_pred = theory.gg_output_cosine(b_axis[None, :], p_axis[:, None])
    far = (np.abs(b_axis[None, :] / theory.gg_beta_c(p_axis)[:, None] - 1.0) >= 0.5) & (
        p_axis[:, None] >= 0.2
    )
    phase_err = float(np.max(np.abs(z_kern - z_pred)[far])) if far.any() else float("nan")
    phase_err_p0 = float(np.max(np.abs(z_kern - z_pred)[0])) if p_axis[0] == 0 else float("nan")
    # on p = 0 the d -> infinity formula is 0/0 below beta_c (cos = p / (p + (1 - p) Y) with
    # p = 0 and Y -> 0: the limits do not commute); the finite-(T, d) prediction is well defined
    phase_fin_p0 = (
        float(
            np.max(
                np.abs(
                    z_kern[0]
                    - theory.gg_finite_cosine(b_axis, 0.0, Tp, cfg["d_model"], cfg["d_head"])[0]
                )
            )
        )
        if p_axis[0] == 0
        else float("nan")
    )

    pmid = ps[len(ps) // 2]
    probe = [i for i, r in enumerate(ratios) if r in (0.5, 2.0, 4.0)] or list(range(len(ratios)))
    # the verdict along the path where the limit is claimed (d / ln T growing); the fixed-d_model
    # errors, which stall at the finite-width floor ~ ln T / d, are reported beside it
    shrinks = shrink_cell(err_path[-1], err_path[i_small], cfg["min_shrink"])
    verdict, rule = verdict_from(err_path, i_small, cfg)
    verdict += f" along d = {cfg['path_c_min']:g}..{cfg['path_c_max']:g} ln T (away from beta_c)"
    fixed_verdict, _ = verdict_from(err_away, i_small, cfg)
    # the finite-size prediction "agrees" if at every simulated (T, d) its error is within
    # finite_tol (the neglected terms) plus 3 standard errors of the difference (the
    # simulation's, seed to seed, and the prediction's Monte Carlo);
    # otherwise the sizes where it is not are named
    ftol = float(cfg["finite_tol"])
    fin_max = max(fin_err.values())
    failing = sorted({k[1:] for k, x in fin_excess.items() if x > ftol})
    if not failing:
        fin_verdict = "agrees at every size"
    elif len(failing) < len(fin_err):
        fin_verdict = "agrees except at " + ", ".join(
            f"T=2^{int(math.log2(T))} d={dm} ("
            + f"{max(e for k, e in fin_err.items() if k[1:] == (T, dm)):.3f})"
            for T, dm in failing[:3]
        )
    else:
        fin_verdict = "does not agree"
    verdict += (
        f"; finite-(T, d) correction {fin_verdict} (max err {fin_max:.3f}; tol {ftol:g} + 3 SE, "
        "all b)"
    )
    res = ClaimResult(
        claim="2 gg_attention",
        title="Giorlandino-Goldt output cosine",
        sizes=f"T=2^{cfg['log2_T'][0]}..2^{cfg['log2_T'][-1]} d={path_d[0]}..{path_d[-1]}",
        predicted=f"p={pmid} b/bc={'/'.join(f'{r:g}' for r in ratios[probe])}: "
        + _f(pred[pmid][probe]),
        simulated=_f(conv[(pmid, Ts[-1])]["kernel_cos"][probe]),
        error=f"{err_path[-1]:.3f} (2^{cfg['log2_T'][i_small]}: {err_path[i_small]:.3f})",
        shrinks=shrinks,
        verdict=verdict,
    )

    def per_T(errs_):
        return " ".join(f"2^{e}:{v:.3f}" for e, v in zip(cfg["log2_T"], errs_))

    res.details = [
        ("criterion (along the path)", rule),
        (
            f"kernel cos vs formula, |b/bc-1|>=.5, d = c ln T: d = {path_d}",
            per_T(err_path),
        ),
        (
            f"same at fixed d_model {cfg['d_model']} (verdict there: {fixed_verdict})",
            per_T(err_away),
        ),
    ]
    if err_ann:
        res.details.append(("  of which annealed b/bc<=.5", per_T(err_ann)))
    if err_frz:
        res.details.append(("  of which frozen b/bc>=2", per_T(err_frz)))
    res.details += [
        ("kernel cos vs formula, all b incl. b=bc, per T", per_T(err_all)),
        (
            f"kernel cos vs finite-(T, d) prediction (theory.gg_finite_cosine), all b, "
            f"d_model {cfg['d_model']}",
            per_T([fin_err[("fixed", T, cfg["d_model"])] for T in Ts]),
        ),
        (
            "  same along the path d = c ln T",
            per_T([fin_err[("path", T, dm)] for T, dm in zip(Ts, path_d)]),
        ),
        ("simlab anisotropy vs formula (Jensen gap), away", per_T(err_mean_gg)),
        ("simlab anisotropy vs PD-corrected limit, away", per_T(err_mean_pd)),
        (
            f"kernel cos error vs d_model at T=2^{cfg['d_log2_T']}, away",
            " ".join(f"d={k}:{v:.3f}" for k, v in err_d.items())
            + "; finite-(T, d) prediction, all b: "
            + " ".join(f"d={k}:{fin_err[('width', Td, k)]:.3f}" for k in err_d),
        ),
        (
            f"phase diagram T=2^{cfg['phase_log2_T']}: max |sim - formula|, p>=.2 and |b/bc-1|>=.5",
            f"{phase_err:.3f}",
        ),
        (
            "same on the line p = 0 (formula 0/0 below bc, 1 as the limit p -> 0; finite T: "
            "-> 0); against the finite-(T, d) prediction (1 seed)",
            f"{phase_err_p0:.3f}; {phase_fin_p0:.3f}",
        ),
    ]
    res.details += [
        (
            f"p={p} b/bc={'/'.join(f'{r:g}' for r in ratios)} T=2^{cfg['log2_T'][-1]}",
            f"pred {_f(pred[p], 2)} kern {_f(conv[(p, Ts[-1])]['kernel_cos'], 2)} "
            f"aniso {_f(conv[(p, Ts[-1])]['mean_cos'], 2)} PD {_f(pred_mean[p], 2)}",
        )
        for p in ps
    ]
    res.data = dict(
        p=ps,
        ratios=ratios.tolist(),
        T=Ts,
        kernel={f"{p}|{T}": conv[(p, T)]["kernel_cos"].tolist() for p in ps for T in Ts},
        aniso={f"{p}|{T}": conv[(p, T)]["mean_cos"].tolist() for p in ps for T in Ts},
        pred={str(p): pred[p].tolist() for p in ps},
        pred_mean={str(p): pred_mean[p].tolist() for p in ps},
        err_away=err_away,
        err_path=err_path,
        path_d=path_d,
        err_all=err_all,
        err_mean_pd=err_mean_pd,
        err_mean_gg=err_mean_gg,
        err_d={str(k): v for k, v in err_d.items()},
        err_finite={f"{run}|{T}|{dm}": v for (run, T, dm), v in fin_err.items()},
        err_finite_fixed=[fin_err[("fixed", T, cfg["d_model"])] for T in Ts],
        pred_finite={f"{p}|{T}": fin_pred[(T, cfg["d_model"], p)].tolist() for p in ps for T in Ts},
        phase_T=Tp,
        phase_p=p_axis.tolist(),
        phase_beta=b_axis.tolist(),
        phase_kernel=z_kern.tolist(),
        phase_aniso=z_mean.tolist(),
    )
    return res


def figure(res: ClaimResult, path: Path):
    from matplotlib.figure import Figure

    from simlab import plot

    d = res.data
    fig = Figure(figsize=(16, 4.6), layout="constrained")
    ax1, ax2, ax3 = fig.subplots(1, 3)
    Tp = d["phase_T"]
    pp = np.array(d["phase_p"])
    bb = np.array(d["phase_beta"])
    pfine = np.linspace(0.0, pp.max(), 200)
    bound = theory.gg_boundary_curve(Tp, p=pfine, x="beta")
    overlay = [(bound[0], bound[1], "beta_c = sqrt(2/(1-p))")]
    overlay += theory.gg_cosine_contours(Tp, levels=(0.5, 0.7, 0.9), x="beta")
    plot.phase_diagram(
        bb,
        pp,
        np.array(d["phase_kernel"]),
        x_label="beta = lambda / sqrt(ln T)  (lambda = q_scale k_scale / temperature)",
        y_label="input_corr p",
        z_label="output kernel cosine (simulated)",
        x_log=True,
        contour=np.array(d["phase_kernel"]),
        contour_levels=[0.5, 0.7, 0.9],
        contour_label="simulated iso-cosine",
        theory=overlay,
        title=f"Claim 2: one head, T=2^{int(math.log2(Tp))}",
        ax=ax1,
        vmin=0.0,
        vmax=1.0,
    )
    ratios = np.array(d["ratios"])
    p_show = d["p"][len(d["p"]) // 2]
    series = {
        f"T=2^{int(math.log2(T))}": (np.array(d["kernel"][f"{p_show}|{T}"]), None) for T in d["T"]
    }
    rf = np.linspace(ratios.min(), ratios.max(), 300)
    bc = float(theory.gg_beta_c(p_show))
    tmean = (ratios, np.array(d["pred_mean"][str(p_show)]), "simlab anisotropy limit (PD)")
    finite = [
        (
            ratios,
            np.array(d["pred_finite"][f"{p_show}|{T}"]),
            f"finite (T, d) prediction, T=2^{int(math.log2(T))}",
        )
        for T in (d["T"][0], d["T"][-1])
        if "pred_finite" in d
    ]
    plot.curves(
        ratios,
        series,
        x_label="beta / beta_c",
        y_label="output cosine",
        x_log=True,
        theory=[
            (rf, theory.gg_output_cosine(rf * bc, p_show), "formula (kernel cosine)"),
            tmean,
            *finite,
        ],
        title=f"p = {p_show}: kernel cosine vs T",
        ax=ax2,
    )
    _ratio_ticks(ax2, (0.5, 0.8, 1.0, 1.5, 2.0, 4.0))
    log2T = np.log2(d["T"])
    plot.curves(
        log2T,
        {
            **(
                {
                    f"kernel cos, |b/bc-1|>=0.5, d = {d['path_d'][0]}..{d['path_d'][-1]} "
                    "(c ln T)": (np.array(d["err_path"]), None)
                }
                if "err_path" in d
                else {}
            ),
            "kernel cos, |b/bc-1|>=0.5 (d fixed)": (np.array(d["err_away"]), None),
            "kernel cos, all b": (np.array(d["err_all"]), None),
            **(
                {
                    "kernel cos vs finite-(T, d) prediction, all b (d fixed)": (
                        np.array(d["err_finite_fixed"]),
                        None,
                    )
                }
                if "err_finite_fixed" in d
                else {}
            ),
            "anisotropy vs PD limit": (np.array(d["err_mean_pd"]), None),
        },
        x_label="log2 T",
        y_label="max |simulated - predicted|",
        x_log=False,
        y_log=True,
        title="error against T",
        ax=ax3,
    )
    plot.save_figure(fig, path)
