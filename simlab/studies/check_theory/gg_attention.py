"""Claim 2: Giorlandino & Goldt, the output cosine of one attention layer.

Prediction: simlab.theory.gg_output_cosine (the kernel cosine E[o_i . o_k] / E|o|^2 as T and
d -> infinity), gg_finite_cosine (at finite T and d) and gg_mean_cosine (simlab's anisotropy
in the limit).  Simulation (sim_attention_map): one head with W_Q, W_K ~ N(0, 1/d_model),
identity values, on T Gaussian tokens with input_corr p, at beta / beta_c of the TOML: along T
at fixed d_model, along the size path d_model = c ln T (path_d_models), against d_model at one
T, and on a beta x p grid.  Criterion (experiments/theory_gg_attention.toml): the kernel
cosine against the limit away from beta_c (|beta/beta_c - 1| >= 0.5) along the path,
common.verdict_from; the finite-(T, d) prediction within finite_tol + 3 standard errors at
every simulated size, all beta.
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
    ratio_ticks,
    shrink_cell,
    verdict_from,
)
from simlab.studies.check_theory.reference import attention_stats, correlated_tokens


@partial(jax.jit, static_argnames=("T", "d_model", "d_head", "n_query", "chunk"))
def sim_attention_map(
    key, p, lam_G, *, T: int, d_model: int, d_head: int, n_query: int, chunk: int = 128
):
    """One head on T Gaussian tokens with correlation p in d_model dimensions,
    W_Q, W_K i.i.d. N(0, 1/d_model) (unit-variance query/key coordinates, q_std = k_std = 1),
    identity values, no residual.  lam_G = q_scale k_scale / temperature (the logit std);
    logits lam q.k / sqrt(d_head).  Returns attention_stats for the first n_query queries."""
    kx, kq, kk = jax.random.split(key, 3)
    x_ND = correlated_tokens(kx, T, d_model, p)
    wq_DK = jax.random.normal(kq, (d_model, d_head)) / math.sqrt(d_model)
    wk_DK = jax.random.normal(kk, (d_model, d_head)) / math.sqrt(d_model)
    q_MK = jnp.einsum("md,dk->mk", x_ND[:n_query], wq_DK)
    k_NK = jnp.einsum("nd,dk->nk", x_ND, wk_DK)
    return attention_stats(q_MK, k_NK, x_ND, lam_G / math.sqrt(d_head), chunk)


def _gg_run(key, T, d_model, d_head, n_query, p, beta, seeds):
    """Seed means of attention_stats over the beta grid, and the seed-to-seed standard error
    of the kernel cosine (kernel_se: the queries share one set of keys, so seeds are the
    independent samples; 0 with one seed)."""
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


def _betas(cfg, p) -> np.ndarray:
    return np.array(cfg["beta_ratio"], float) * float(theory.gg_beta_c(p))


def simulate(cfg) -> dict:
    """The seed-mean statistics (mean_cos, kernel_cos, entropy, kernel_se over beta_ratio) of
    the runs along T at fixed d_model ("conv", keys "p|T"), along the size path ("path",
    "p|T|d_model"), against d_model at T = 2^d_log2_T ("width", "p|d_model"), and the
    beta x p phase diagram ("phase")."""
    key = jax.random.PRNGKey(cfg["seed"])
    Ts = [2**e for e in cfg["log2_T"]]
    path_d = path_d_models(cfg["log2_T"], cfg["path_c_min"], cfg["path_c_max"])
    Td = 2 ** cfg["d_log2_T"]
    out = {"conv": {}, "path": {}, "width": {}, "path_d": path_d}
    for p in cfg["p"]:
        for T in Ts:
            out["conv"][f"{p}|{T}"] = _run(cfg, key, T, p, T, cfg["d_model"], cfg["d_head"])
        # the size path d_model = c ln T, c from path_c_min to path_c_max (d_head = d_model / 4)
        for T, dm in zip(Ts, path_d):
            out["path"][f"{p}|{T}|{dm}"] = _run(cfg, key, 20_000 + T, p, T, dm, max(1, dm // 4))
        # against d_model at fixed T
        for dm in cfg["d_models"]:
            out["width"][f"{p}|{dm}"] = _run(cfg, key, 10_000 + dm, p, Td, dm, max(1, dm // 4))
    out["phase"] = _simulate_phase(cfg, key)
    return out


def _run(cfg, key, fold: int, p, T: int, d_model: int, d_head: int) -> dict:
    """_gg_run over the TOML's beta ratios at one size, key fold_in(key, fold), as lists."""
    run = _gg_run(
        jax.random.fold_in(key, fold),
        T,
        d_model,
        d_head,
        cfg["n_query"],
        p,
        _betas(cfg, p),
        cfg["seeds"],
    )
    return {k: np.asarray(v).tolist() for k, v in run.items()}


def _simulate_phase(cfg, key) -> dict:
    """The kernel cosine and the anisotropy on the beta x p grid at T = 2^phase_log2_T."""
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
    return dict(
        T=Tp, p=p_axis.tolist(), beta=b_axis.tolist(), kernel=z_kern.tolist(), aniso=z_mean.tolist()
    )


def _finite_errors(cfg, sizes) -> tuple[dict, dict, dict]:
    """The finite-(T, d) prediction (theory.gg_finite_cosine) against the simulated kernel
    cosine at every simulated size, over all ratios (beta_c included).  sizes: (run, T,
    d_model, d_head, stats per p), run = "fixed" (the d_model grid), "path" or "width".
    Returns, keyed by (run, T, d_model), the largest error over p and ratios, the largest
    error less 3 standard errors of the difference (the simulation's, seed to seed, and the
    prediction's own Monte Carlo error), and the prediction keyed by (T, d_model, p)."""
    err, excess, pred = {}, {}, {}
    for run, T, d_model, d_head, stats in sizes:
        e, x = [], []
        for p in cfg["p"]:
            fin, fin_se = theory.gg_finite_cosine(_betas(cfg, p), p, T, d_model, d_head, seed=T)
            pred[(T, d_model, p)] = fin
            diff = np.abs(stats[p]["kernel_cos"] - fin)
            e.append(np.max(diff))
            x.append(np.max(diff - 3.0 * np.hypot(stats[p]["kernel_se"], fin_se)))
        err[(run, T, d_model)] = float(max(e))
        excess[(run, T, d_model)] = float(max(x))
    return err, excess, pred


def _phase_errors(cfg, phase) -> tuple[float, float, float]:
    """On the phase diagram: the largest |kernel cosine - formula| for p >= 0.2 and
    |b/bc - 1| >= 0.5; on the line p = 0, against the formula and against the finite-(T, d)
    prediction (there the d -> infinity formula is 0/0 below beta_c: cos = p / (p + (1 - p) Y)
    with p = 0 and Y -> 0, the limits do not commute)."""
    p_axis, b_axis = np.asarray(phase["p"], float), np.asarray(phase["beta"], float)
    z_kern = np.asarray(phase["kernel"], float)
    z_pred = theory.gg_output_cosine(b_axis[None, :], p_axis[:, None])
    far = (np.abs(b_axis[None, :] / theory.gg_beta_c(p_axis)[:, None] - 1.0) >= 0.5) & (
        p_axis[:, None] >= 0.2
    )
    err = float(np.max(np.abs(z_kern - z_pred)[far])) if far.any() else float("nan")
    if p_axis[0] != 0:
        return err, float("nan"), float("nan")
    fin = theory.gg_finite_cosine(b_axis, 0.0, phase["T"], cfg["d_model"], cfg["d_head"])[0]
    return err, float(np.max(np.abs(z_kern - z_pred)[0])), float(np.max(np.abs(z_kern[0] - fin)))


def _arrays(stats: dict) -> dict:
    return {k: np.asarray(v, float) for k, v in stats.items()}


def compare(cfg, data) -> Comparison:
    ps, ratios = list(cfg["p"]), np.array(cfg["beta_ratio"], float)
    log2_T = cfg["log2_T"]
    Ts = [2**e for e in log2_T]
    conv = {(p, T): _arrays(data["conv"][f"{p}|{T}"]) for p in ps for T in Ts}
    path_d, Td = data["path_d"], 2 ** cfg["d_log2_T"]
    sizes = [("fixed", T, cfg["d_model"], cfg["d_head"], {p: conv[(p, T)] for p in ps}) for T in Ts]
    sizes += [
        ("path", T, dm, max(1, dm // 4), {p: _arrays(data["path"][f"{p}|{T}|{dm}"]) for p in ps})
        for T, dm in zip(Ts, path_d)
    ]
    sizes += [
        ("width", Td, dm, max(1, dm // 4), {p: _arrays(data["width"][f"{p}|{dm}"]) for p in ps})
        for dm in cfg["d_models"]
    ]
    fin_err, fin_excess, fin_pred = _finite_errors(cfg, sizes)
    pred = {p: theory.gg_output_cosine(ratios * theory.gg_beta_c(p), p) for p in ps}
    away = np.abs(ratios - 1.0) >= 0.5 - 1e-9

    def kernel_error(stats):
        """max over p and the away-from-beta_c ratios of |kernel cosine - formula|"""
        return float(max(np.max(np.abs(stats[p]["kernel_cos"] - pred[p])[away]) for p in ps))

    err_path = [kernel_error(s[4]) for s in sizes if s[0] == "path"]
    err_d = {s[2]: kernel_error(s[4]) for s in sizes if s[0] == "width"}
    pred_mean = {
        p: theory.gg_mean_cosine(ratios * theory.gg_beta_c(p), p, n_samples=cfg["pd_samples"])
        for p in ps
    }

    def errs(T, which="kernel_cos", ref=pred, mask=None):
        e = np.stack([np.abs(conv[(p, T)][which] - ref[p]) for p in ps])
        return float((e[:, mask] if mask is not None else e).max())

    err = {
        "away": [errs(T, mask=away) for T in Ts],
        "ann": [errs(T, mask=ratios <= 0.5 + 1e-9) for T in Ts] if np.any(ratios <= 0.5) else None,
        "frz": [errs(T, mask=ratios >= 2.0 - 1e-9) for T in Ts] if np.any(ratios >= 2.0) else None,
        "all": [errs(T) for T in Ts],
        "mean_pd": [errs(T, "mean_cos", pred_mean, away) for T in Ts],
        "mean_gg": [errs(T, "mean_cos", pred, away) for T in Ts],
        "path": err_path,
        "d": err_d,
        "phase": _phase_errors(cfg, data["phase"]),
    }
    i_small = index_16x_smaller(log2_T)
    pmid = ps[len(ps) // 2]
    probe = [i for i, r in enumerate(ratios) if r in (0.5, 2.0, 4.0)] or list(range(len(ratios)))
    big = Ts[-1]
    # the verdict is taken along the path where the limit is claimed (d / ln T growing); the
    # fixed-d_model errors, which stall at the finite-width floor ~ ln T / d, are a detail row
    return Comparison(
        sizes=f"T=2^{log2_T[0]}..2^{log2_T[-1]} d={path_d[0]}..{path_d[-1]}",
        predicted=f"p={pmid} b/bc={'/'.join(f'{r:g}' for r in ratios[probe])}: "
        + fmt(pred[pmid][probe]),
        simulated=fmt(conv[(pmid, big)]["kernel_cos"][probe]),
        error=f"{err_path[-1]:.3f} (2^{log2_T[i_small]}: {err_path[i_small]:.3f})",
        shrinks=shrink_cell(err_path[-1], err_path[i_small], cfg["min_shrink"]),
        details=_details(cfg, err, fin_err, i_small, path_d)
        + [
            (
                f"p={p} b/bc={'/'.join(f'{r:g}' for r in ratios)} T=2^{log2_T[-1]}",
                f"pred {fmt(pred[p], 2)} kern {fmt(conv[(p, big)]['kernel_cos'], 2)} "
                f"aniso {fmt(conv[(p, big)]['mean_cos'], 2)} PD {fmt(pred_mean[p], 2)}",
            )
            for p in ps
        ],
        scores={
            "errors": err_path,
            "i_small": i_small,
            "finite_err": fin_err,
            "finite_excess": fin_excess,
        },
        data=_figure_data(cfg, data, conv, pred, pred_mean, err, fin_err, fin_pred),
    )


def _details(cfg, err, fin_err, i_small, path_d) -> list[tuple[str, str]]:
    log2_T, Ts = cfg["log2_T"], [2**e for e in cfg["log2_T"]]
    Td = 2 ** cfg["d_log2_T"]
    fixed_verdict, _ = verdict_from(err["away"], i_small, cfg)
    phase_err, phase_err_p0, phase_fin_p0 = err["phase"]
    rows = [
        (
            f"kernel cos vs formula, |b/bc-1|>=.5, d = c ln T: d = {path_d}",
            per_size(log2_T, err["path"]),
        ),
        (
            f"same at fixed d_model {cfg['d_model']} (verdict there: {fixed_verdict})",
            per_size(log2_T, err["away"]),
        ),
    ]
    if err["ann"]:
        rows.append(("  of which annealed b/bc<=.5", per_size(log2_T, err["ann"])))
    if err["frz"]:
        rows.append(("  of which frozen b/bc>=2", per_size(log2_T, err["frz"])))
    return rows + [
        ("kernel cos vs formula, all b incl. b=bc, per T", per_size(log2_T, err["all"])),
        (
            f"kernel cos vs finite-(T, d) prediction (theory.gg_finite_cosine), all b, "
            f"d_model {cfg['d_model']}",
            per_size(log2_T, [fin_err[("fixed", T, cfg["d_model"])] for T in Ts]),
        ),
        (
            "  same along the path d = c ln T",
            per_size(log2_T, [fin_err[("path", T, dm)] for T, dm in zip(Ts, path_d)]),
        ),
        ("simlab anisotropy vs formula (Jensen gap), away", per_size(log2_T, err["mean_gg"])),
        ("simlab anisotropy vs PD-corrected limit, away", per_size(log2_T, err["mean_pd"])),
        (
            f"kernel cos error vs d_model at T=2^{cfg['d_log2_T']}, away",
            " ".join(f"d={k}:{v:.3f}" for k, v in err["d"].items())
            + "; finite-(T, d) prediction, all b: "
            + " ".join(f"d={k}:{fin_err[('width', Td, k)]:.3f}" for k in err["d"]),
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


def _figure_data(cfg, data, conv, pred, pred_mean, err, fin_err, fin_pred) -> dict:
    ps, Ts = list(cfg["p"]), [2**e for e in cfg["log2_T"]]
    phase = data["phase"]
    return dict(
        p=ps,
        ratios=np.array(cfg["beta_ratio"], float).tolist(),
        T=Ts,
        kernel={f"{p}|{T}": conv[(p, T)]["kernel_cos"].tolist() for p in ps for T in Ts},
        aniso={f"{p}|{T}": conv[(p, T)]["mean_cos"].tolist() for p in ps for T in Ts},
        pred={str(p): pred[p].tolist() for p in ps},
        pred_mean={str(p): pred_mean[p].tolist() for p in ps},
        err_away=err["away"],
        err_path=err["path"],
        path_d=data["path_d"],
        err_all=err["all"],
        err_mean_pd=err["mean_pd"],
        err_mean_gg=err["mean_gg"],
        err_d={str(k): v for k, v in err["d"].items()},
        err_finite={f"{run}|{T}|{dm}": v for (run, T, dm), v in fin_err.items()},
        err_finite_fixed=[fin_err[("fixed", T, cfg["d_model"])] for T in Ts],
        pred_finite={f"{p}|{T}": fin_pred[(T, cfg["d_model"], p)].tolist() for p in ps for T in Ts},
        phase_T=phase["T"],
        phase_p=phase["p"],
        phase_beta=phase["beta"],
        phase_kernel=phase["kernel"],
        phase_aniso=phase["aniso"],
    )


def verdict(cfg, comparison: Comparison):
    """common.verdict_from along the path; then the finite-(T, d) prediction: "agrees at every
    size" if at every simulated (T, d) its error is within finite_tol (the neglected terms)
    plus 3 standard errors of the difference, else the sizes where it is not are named."""
    s = comparison.scores
    v, rule = verdict_from(s["errors"], s["i_small"], cfg)
    v += f" along d = {cfg['path_c_min']:g}..{cfg['path_c_max']:g} ln T (away from beta_c)"
    ftol = float(cfg["finite_tol"])
    fin_err = s["finite_err"]
    failing = sorted({k[1:] for k, x in s["finite_excess"].items() if x > ftol})
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
    v += (
        f"; finite-(T, d) correction {fin_verdict} (max err {max(fin_err.values()):.3f}; "
        f"tol {ftol:g} + 3 SE, all b)"
    )
    return v, ("criterion (along the path)", rule)


def figure(res: ClaimResult, path: Path):
    from matplotlib.figure import Figure

    # deferred: matplotlib (heavy), loaded only when a figure is drawn
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
    ratio_ticks(ax2, (0.5, 0.8, 1.0, 1.5, 2.0, 4.0))
    log2T = np.log2(d["T"])
    plot.curves(
        log2T,
        {
            f"kernel cos, |b/bc-1|>=0.5, d = {d['path_d'][0]}..{d['path_d'][-1]} (c ln T)": (
                np.array(d["err_path"]),
                None,
            ),
            "kernel cos, |b/bc-1|>=0.5 (d fixed)": (np.array(d["err_away"]), None),
            "kernel cos, all b": (np.array(d["err_all"]), None),
            "kernel cos vs finite-(T, d) prediction, all b (d fixed)": (
                np.array(d["err_finite_fixed"]),
                None,
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


# registered by check_theory/__init__.py, in the table's order
CLAIM = Claim(
    "gg_attention",
    "Giorlandino-Goldt output cosine",
    simulate,
    compare,
    verdict,
    figure,
)
