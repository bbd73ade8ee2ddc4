"""Claim 3: Chen et al., critical attention scaling beta = gamma ln n.

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
    mean_pairwise_cosine,
    shrink_cell,
    verdict_from,
)


@partial(jax.jit, static_argnames=("n", "d", "n_query", "chunk"))
def sim_long_context(key, rho, beta_G, *, n: int, d: int, n_query: int, chunk: int = 128):
    """Claim 3.  n Gaussian tokens with correlation rho in d dimensions, normalised to the
    sphere (y_i = x_i / |x_i|), identity Q = K = V, logits beta <y_i, y_j>, no residual.
    Returns (attention_stats for the first n_query queries, input mean pairwise cosine of
    those queries)."""
    x_ND = correlated_tokens(key, n, d, rho)
    y_ND = x_ND / jnp.linalg.norm(x_ND, axis=-1, keepdims=True)
    return attention_stats(y_ND[:n_query], y_ND, y_ND, beta_G, chunk), mean_pairwise_cosine(
        y_ND[:n_query]
    )


@partial(jax.jit, static_argnames=("n", "n_query", "chunk"))
def sim_simplex(rho, beta_G, *, n: int, n_query: int, chunk: int = 128):
    """Claim 3 under the paper's Assumption 1, realised exactly: unit tokens
    y_i = sqrt(rho) c + sqrt(1 - rho) e_i with orthonormal (c, e_1, ..., e_n), so
    <y_i, y_j> = rho (i != j); identity Q = K = V; logits beta <y_i, y_j>.  Vectors are kept in
    these n + 1 coordinates (a d = n + 1 embedding would be n^2 floats): the output of query i
    is o_i = sqrt(rho) (sum_j A_ij) c + sqrt(1 - rho) sum_j A_ij e_j.  Queries 0..n_query-1,
    chunk rows at a time (lax.map); returns their mean pairwise cosine, (G,)."""
    C = min(chunk, n_query)
    if n_query % C:
        raise ValueError(f"n_query {n_query} must be a multiple of chunk {C}")
    idx_KC = jnp.arange(n_query).reshape(n_query // C, C)
    keys_N = jnp.arange(n)

    def per_beta(b):
        def per_chunk(i_C):
            gram_CN = rho + (1.0 - rho) * (keys_N[None, :] == i_C[:, None])
            a_CN = jax.nn.softmax(b * gram_CN, axis=-1)
            oc_C = jnp.sqrt(rho) * a_CN.sum(-1)
            oe_CN = jnp.sqrt(1.0 - rho) * a_CN
            nrm_C = jnp.sqrt(oc_C**2 + jnp.sum(oe_CN**2, -1))
            return jnp.sum(oc_C / nrm_C), jnp.sum(oe_CN / nrm_C[:, None], 0)

        sc_K, se_KN = jax.lax.map(per_chunk, idx_KC)
        su2 = jnp.sum(sc_K) ** 2 + jnp.sum(jnp.sum(se_KN, 0) ** 2)
        return (su2 - n_query) / (n_query * (n_query - 1))

    return jax.lax.map(per_beta, beta_G)


def sweep_gaussian(rho: float, n: int, ratios, *, d: int, seeds: int, seed: int):
    """Claim 3 through simlab's own engine: simlab.run_sweep of an attention-only block with
    qk_weights = "identity" (Q = K = V = O = I, one head), unit-normalised Gaussian tokens
    (inputs.normalize) with input_corr rho, one sequence of n tokens, no residual, and the
    temperature axis that makes simlab's logit y_i . y_j / (sqrt(d) temperature) equal
    beta <y_i, y_j> for beta = gamma ln n. Every query of the sequence counts (the direct
    simulation above uses the first n_query). Returns the seed means of (out_cos_within,
    input_cos_within) over the gamma / gamma_c grid."""
    from simlab.engine.sweep import run_sweep

    beta = np.asarray(ratios) * float(theory.chen_gamma_c(rho)) * math.log(n)
    cfg = {
        "block": {
            "kind": "attention",
            "d_model": d,
            "n_heads": 1,
            "mlp": False,
            "qk_weights": "identity",
        },
        "inputs": {"kind": "gaussian", "batch": 1, "length": n, "normalize": True},
        "knobs": {"attn_residual": 0.0, "input_corr": float(rho)},
        "axes": [{"name": "temperature", "values": (1.0 / (beta * math.sqrt(d))).tolist()}],
        "sweep": {
            "seeds": seeds,
            "base_seed": seed,
            "metrics": ["out_cos_within", "input_cos_within"],
        },
    }
    res = run_sweep(cfg, out=None, quiet=True)
    return res.mean("out_cos_within"), float(np.mean(res.mean("input_cos_within")))


def check(cfg) -> ClaimResult:
    key = jax.random.PRNGKey(cfg["seed"])
    rhos = list(cfg["rho"])
    ratios = np.unique(  # rounded: geomspace's 0.4999999... and the probe's 0.5 are one point
        np.round(
            np.concatenate(
                [
                    np.geomspace(
                        cfg["gamma_ratio_min"], cfg["gamma_ratio_max"], cfg["gamma_points"]
                    ),
                    [0.5, 1.0, 2.0],
                ]
            ),
            9,
        )
    )
    probe = np.array([np.argmin(np.abs(ratios - r)) for r in (0.5, 1.0, 2.0)])
    ns = [2**e for e in cfg["log2_n"]]
    simplex, gauss, inp, fin_meas = {}, {}, {}, {}
    for rho in rhos:
        gamma = ratios * float(theory.chen_gamma_c(rho))
        for n in ns:
            beta = jnp.asarray(gamma * math.log(n))
            mq = min(cfg["simplex_n_query"], n)
            simplex[(rho, n)] = np.asarray(
                sim_simplex(rho, beta, n=n, n_query=mq, chunk=min(cfg["chunk"], mq)), float
            )
            acc, ic, fm = [], [], []
            for s in range(cfg["seeds"]):
                st, c_in = sim_long_context(
                    jax.random.fold_in(jax.random.fold_in(key, n), s),
                    rho,
                    beta,
                    n=n,
                    d=cfg["d"],
                    n_query=min(cfg["n_query"], n),
                    chunk=min(cfg["chunk"], cfg["n_query"], n),
                )
                acc.append(np.asarray(st["mean_cos"], float))
                ic.append(float(c_in))
                # the finite-n formula at this draw's realised input cosine (same beta)
                fm.append(theory.chen_output_cosine_finite(gamma, float(c_in), n))
            gauss[(rho, n)] = np.mean(acc, 0)
            inp[(rho, n)] = float(np.mean(ic))
            fin_meas[(rho, n)] = np.mean(fm, 0)
    # the same Gaussian-token model through simlab.run_sweep (every query), for n up to 2^max
    sweep_ns = [n for n in ns if n <= 2 ** cfg["sweep_log2_n_max"]]
    swept, swept_err, swept_vs_sim = {}, [], []
    for n in sweep_ns:
        e_fin, e_sim = 0.0, 0.0
        for rho in rhos:
            out, c_in = sweep_gaussian(
                rho, n, ratios, d=cfg["d"], seeds=cfg["seeds"], seed=cfg["seed"]
            )
            swept[(rho, n)] = out
            gamma = ratios * float(theory.chen_gamma_c(rho))
            e_fin = max(
                e_fin, float(np.max(np.abs(out - theory.chen_output_cosine_finite(gamma, c_in, n))))
            )
            e_sim = max(e_sim, float(np.max(np.abs(out - gauss[(rho, n)]))))
        swept_err.append(e_fin)
        swept_vs_sim.append(e_sim)
    lim = {rho: theory.chen_output_cosine(ratios * theory.chen_gamma_c(rho), rho) for rho in rhos}
    fin = {
        (rho, n): theory.chen_output_cosine_finite(ratios * theory.chen_gamma_c(rho), rho, n)
        for rho in rhos
        for n in ns
    }

    def maxerr(a, b, idx=slice(None)):
        return [
            max(
                float(
                    np.max(
                        np.abs(
                            a[(r, n)][idx]
                            - (b[(r, n)] if isinstance(b, dict) and (r, n) in b else b[r])[idx]
                        )
                    )
                )
                for r in rhos
            )
            for n in ns
        ]

    err = maxerr(simplex, lim, probe)
    err_simplex_fin = maxerr(simplex, fin)
    err_gauss = maxerr(gauss, lim, probe)
    err_gauss_fin = maxerr(gauss, fin)
    err_gauss_meas = maxerr(gauss, fin_meas)
    small = [i for i, e in enumerate(cfg["log2_n"]) if e <= cfg["log2_n"][-1] - 4]
    i_small = small[-1] if small else 0
    rmid = rhos[len(rhos) // 2]
    shrinks = shrink_cell(err[-1], err[i_small], cfg["min_shrink"])
    verdict, rule = verdict_from(err, i_small, cfg)

    def per_n(e_):
        return " ".join(f"2^{e}:{v:.3f}" for e, v in zip(cfg["log2_n"], e_))

    res = ClaimResult(
        claim="3 chen_scaling",
        title="critical attention scaling beta = gamma ln n",
        sizes=f"n=2^{cfg['log2_n'][0]}..2^{cfg['log2_n'][-1]} (simplex)",
        predicted=f"rho={rmid} g/gc=.5/1/2: " + _f(lim[rmid][probe]),
        simulated=_f(simplex[(rmid, ns[-1])][probe]),
        error=f"{err[-1]:.3f} (2^{cfg['log2_n'][i_small]}: {err[i_small]:.3f})",
        shrinks=shrinks,
        verdict=verdict,
    )
    res.details = [
        ("criterion", rule),
        ("simplex sim vs limit at g/gc=.5/1/2, per n", per_n(err)),
        ("simplex sim vs exact finite-n formula (all g)", per_n(err_simplex_fin)),
        (f"Gaussian tokens d={cfg['d']} vs limit at g/gc=.5/1/2", per_n(err_gauss)),
        (f"Gaussian tokens d={cfg['d']} vs finite-n formula (all g)", per_n(err_gauss_fin)),
        ("  same, formula at the realised input cosine", per_n(err_gauss_meas)),
        (
            "simlab.run_sweep (identity block, unit tokens, all queries) vs finite-n formula "
            "at the realised input cosine",
            " ".join(f"2^{int(math.log2(n))}:{v:.3f}" for n, v in zip(sweep_ns, swept_err)),
        ),
        (
            "  run_sweep vs the direct simulation (other draws, first n_query queries)",
            " ".join(f"2^{int(math.log2(n))}:{v:.3f}" for n, v in zip(sweep_ns, swept_vs_sim)),
        ),
    ] + [
        (
            f"rho={r} n=2^{cfg['log2_n'][-1]} g/gc=.5/1/2",
            f"limit {_f(lim[r][probe])} simplex {_f(simplex[(r, ns[-1])][probe])} "
            f"gauss {_f(gauss[(r, ns[-1])][probe])} (input cos {inp[(r, ns[-1])]:.3f})",
        )
        for r in rhos
    ]
    res.data = dict(
        rho=rhos,
        ratios=ratios.tolist(),
        n=ns,
        d=cfg["d"],
        simplex={f"{r}|{n}": simplex[(r, n)].tolist() for r in rhos for n in ns},
        gauss={f"{r}|{n}": gauss[(r, n)].tolist() for r in rhos for n in ns},
        fin={f"{r}|{n}": fin[(r, n)].tolist() for r in rhos for n in ns},
        err=err,
        err_simplex_fin=err_simplex_fin,
        err_gauss=err_gauss,
        err_gauss_fin=err_gauss_fin,
        err_gauss_meas=err_gauss_meas,
        sweep_n=sweep_ns,
        swept={f"{r}|{n}": swept[(r, n)].tolist() for r in rhos for n in sweep_ns},
        err_sweep=swept_err,
    )
    return res


def figure(res: ClaimResult, path: Path):
    from matplotlib.figure import Figure

    from simlab import plot

    d = res.data
    fig = Figure(figsize=(16, 4.6), layout="constrained")
    ax1, ax2, ax3 = fig.subplots(1, 3)
    ratios = np.array(d["ratios"])
    rho = d["rho"][len(d["rho"]) // 2]
    gc = float(theory.chen_gamma_c(rho))
    lo, hi = ratios.min(), ratios.max()
    xl = np.concatenate([np.geomspace(lo, 1.0, 100)[:-1], [np.nan], np.geomspace(1.0, hi, 100)[1:]])
    overlay = [
        (xl, theory.chen_output_cosine(xl * gc, rho), "limit n -> inf"),
        (np.array([1.0]), np.array([4 * rho / (1 + 3 * rho)]), "limit at gamma_c"),
    ]
    for ax, kind, name in (
        (ax1, "simplex", "exact simplex (Assumption 1)"),
        (ax2, "gauss", f"Gaussian tokens, d = {d['d']}"),
    ):
        series = {
            f"n=2^{int(math.log2(n))}": (np.array(d[kind][f"{rho}|{n}"]), None) for n in d["n"]
        }
        plot.curves(
            ratios,
            series,
            x_label="gamma / gamma_c   (beta = gamma ln n, gamma_c = 1/(1-rho))",
            y_label="output anisotropy (mean pairwise cosine)",
            x_log=True,
            theory=overlay,
            title=f"Claim 3, rho = {rho}: {name}",
            ax=ax,
        )
        star = [ln for ln in ax.lines if ln.get_label() == "limit at gamma_c"]
        for ln in star:
            ln.set(marker="*", ms=13, ls="none")
        ax.legend(fontsize=8)
        _ratio_ticks(ax)
    log2n = np.log2(d["n"])
    errs = {
        "simplex vs limit (g/gc = .5, 1, 2)": (np.array(d["err"]), None),
        f"Gaussian d={d['d']} vs limit": (np.array(d["err_gauss"]), None),
        f"Gaussian d={d['d']} vs finite-n simplex": (np.array(d["err_gauss_fin"]), None),
    }
    if "err_gauss_meas" in d:
        errs["  same, at the realised input cosine"] = (np.array(d["err_gauss_meas"]), None)
    if d.get("sweep_n"):
        full = np.full(len(d["n"]), np.nan)
        full[[d["n"].index(n) for n in d["sweep_n"]]] = d["err_sweep"]
        errs["simlab.run_sweep vs finite-n, realised cosine"] = (full, None)
    plot.curves(
        log2n,
        errs,
        x_label="log2 n",
        y_label="max |difference| over rho",
        x_log=False,
        y_log=True,
        title="error against n",
        ax=ax3,
    )
    plot.save_figure(fig, path)
