"""Claim 3: Chen et al., critical attention scaling beta = gamma ln n.

Prediction: simlab.theory.chen_output_cosine (the n -> infinity limit: 1, 4 rho / (1 + 3 rho),
rho below, at and above gamma_c = 1 / (1 - rho)) and chen_output_cosine_finite (exact at
finite n under the paper's Assumption 1).  Simulation, for each rho and n of the TOML: the
exact simplex of Assumption 1 (sim_simplex), unit Gaussian tokens with input_corr rho
(sim_long_context) and the same Gaussian model through simlab.run_sweep with identity weights
(sweep_gaussian).  Criterion (experiments/theory_chen_scaling.toml): the simplex output cosine
against the limit at gamma / gamma_c = 0.5, 1, 2 at the largest n, common.verdict_from.
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from simlab import theory
from simlab.engine.sweep import run_sweep
from simlab.studies.check_theory.claim import Claim, ClaimResult, Comparison
from simlab.studies.check_theory.common import (
    fmt,
    index_16x_smaller,
    per_size,
    ratio_ticks,
    shrink_cell,
    verdict_from,
)
from simlab.studies.check_theory.reference import (
    attention_stats,
    correlated_tokens,
    mean_pairwise_cosine,
)


@partial(jax.jit, static_argnames=("n", "d", "n_query", "chunk"))
def sim_long_context(key, rho, beta_G, *, n: int, d: int, n_query: int, chunk: int = 128):
    """n Gaussian tokens with correlation rho in d dimensions, normalised to the sphere
    (y_i = x_i / |x_i|), identity Q = K = V, logits beta <y_i, y_j>, no residual.
    Returns (attention_stats for the first n_query queries, input mean pairwise cosine of
    those queries)."""
    x_ND = correlated_tokens(key, n, d, rho)
    y_ND = x_ND / jnp.linalg.norm(x_ND, axis=-1, keepdims=True)
    return attention_stats(y_ND[:n_query], y_ND, y_ND, beta_G, chunk), mean_pairwise_cosine(
        y_ND[:n_query]
    )


@partial(jax.jit, static_argnames=("n", "n_query", "chunk"))
def sim_simplex(rho, beta_G, *, n: int, n_query: int, chunk: int = 128):
    """The paper's Assumption 1, realised exactly: unit tokens
    y_i = sqrt(rho) c + sqrt(1 - rho) e_i with orthonormal (c, e_1, ..., e_n), so
    <y_i, y_j> = rho (i != j); identity Q = K = V; logits beta <y_i, y_j>.  Vectors are kept in
    these n + 1 coordinates (a d = n + 1 embedding would be n^2 floats): the output of query i
    is o_i = sqrt(rho) (sum_j A_ij) c + sqrt(1 - rho) sum_j A_ij e_j.  Queries 0..n_query-1,
    chunk rows at a time (lax.map); returns their mean pairwise cosine, (G,)."""
    C = min(chunk, n_query)
    if n_query % C:
        raise ValueError(f"n_query {n_query} must be a multiple of chunk {C}")
    idx_JC = jnp.arange(n_query).reshape(n_query // C, C)
    keys_N = jnp.arange(n)

    def per_beta(b):
        def per_chunk(i_C):
            gram_CN = rho + (1.0 - rho) * (keys_N[None, :] == i_C[:, None])
            a_CN = jax.nn.softmax(b * gram_CN, axis=-1)
            oc_C = jnp.sqrt(rho) * a_CN.sum(-1)
            oe_CN = jnp.sqrt(1.0 - rho) * a_CN
            nrm_C = jnp.sqrt(oc_C**2 + jnp.sum(oe_CN**2, -1))
            return jnp.sum(oc_C / nrm_C), jnp.sum(oe_CN / nrm_C[:, None], 0)

        sc_J, se_JN = jax.lax.map(per_chunk, idx_JC)
        su2 = jnp.sum(sc_J) ** 2 + jnp.sum(jnp.sum(se_JN, 0) ** 2)
        return (su2 - n_query) / (n_query * (n_query - 1))

    return jax.lax.map(per_beta, beta_G)


def sweep_gaussian(rho: float, n: int, ratios, *, d: int, seeds: int, seed: int):
    """The Gaussian-token model through simlab's own engine: simlab.run_sweep of an
    attention-only block with qk_weights = "identity" (Q = K = V = O = I, one head),
    unit-normalised Gaussian tokens (inputs.normalize) with input_corr rho, one sequence of n
    tokens, no residual, and the temperature axis that makes simlab's logit
    y_i . y_j / (sqrt(d) temperature) equal beta <y_i, y_j> for beta = gamma ln n.  Every
    query of the sequence counts (the direct simulation above uses the first n_query).
    Returns the seed means of (out_cos_within, input_cos_within) over the gamma / gamma_c
    grid."""

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


def gamma_ratios(cfg) -> np.ndarray:
    """gamma / gamma_c: a geometric grid plus the probes 0.5, 1, 2, rounded (geomspace's
    0.4999999... and the probe's 0.5 are one point)."""
    grid = np.geomspace(cfg["gamma_ratio_min"], cfg["gamma_ratio_max"], cfg["gamma_points"])
    return np.unique(np.round(np.concatenate([grid, [0.5, 1.0, 2.0]]), 9))


def simulate(cfg) -> dict:
    """Per rho and n (keys "rho|n"): the simplex output cosine over the gamma ratios, the
    Gaussian tokens' seed-mean output cosine and each seed's realised input cosine, and, for
    n <= 2^sweep_log2_n_max, the same model through simlab.run_sweep (its output cosine and
    input cosine)."""
    key = jax.random.PRNGKey(cfg["seed"])
    ratios = gamma_ratios(cfg)
    ns = [2**e for e in cfg["log2_n"]]
    out = {"ratios": ratios.tolist(), "simplex": {}, "gauss": {}, "input_cos": {}, "sweep": {}}
    for rho in cfg["rho"]:
        gamma = ratios * float(theory.chen_gamma_c(rho))
        for n in ns:
            beta = jnp.asarray(gamma * math.log(n))
            mq = min(cfg["simplex_n_query"], n)
            out["simplex"][f"{rho}|{n}"] = np.asarray(
                sim_simplex(rho, beta, n=n, n_query=mq, chunk=min(cfg["chunk"], mq)), float
            ).tolist()
            acc, ic = [], []
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
            out["gauss"][f"{rho}|{n}"] = np.mean(acc, 0).tolist()
            out["input_cos"][f"{rho}|{n}"] = ic
    for n in ns:
        if n <= 2 ** cfg["sweep_log2_n_max"]:
            for rho in cfg["rho"]:
                cos, c_in = sweep_gaussian(
                    rho, n, ratios, d=cfg["d"], seeds=cfg["seeds"], seed=cfg["seed"]
                )
                out["sweep"][f"{rho}|{n}"] = {"out_cos": cos.tolist(), "input_cos": c_in}
    return out


def compare(cfg, data) -> Comparison:
    rhos, log2_n = list(cfg["rho"]), cfg["log2_n"]
    ns = [2**e for e in log2_n]
    ratios = np.asarray(data["ratios"], float)
    probe = np.array([np.argmin(np.abs(ratios - r)) for r in (0.5, 1.0, 2.0)])

    def gc(rho):
        return ratios * theory.chen_gamma_c(rho)

    simplex = {(r, n): np.asarray(data["simplex"][f"{r}|{n}"], float) for r in rhos for n in ns}
    gauss = {(r, n): np.asarray(data["gauss"][f"{r}|{n}"], float) for r in rhos for n in ns}
    ic = {(r, n): data["input_cos"][f"{r}|{n}"] for r in rhos for n in ns}
    lim = {r: theory.chen_output_cosine(gc(r), r) for r in rhos}
    fin = {(r, n): theory.chen_output_cosine_finite(gc(r), r, n) for r in rhos for n in ns}
    # the finite-n formula at each draw's realised input cosine (same beta), seed mean
    fin_meas = {
        (r, n): np.mean(
            [
                theory.chen_output_cosine_finite(ratios * float(theory.chen_gamma_c(r)), c, n)
                for c in ic[(r, n)]
            ],
            0,
        )
        for r in rhos
        for n in ns
    }

    def maxerr(a, b, idx=slice(None)):
        return [
            max(
                float(np.max(np.abs(a[(r, n)][idx] - (b[(r, n)] if (r, n) in b else b[r])[idx])))
                for r in rhos
            )
            for n in ns
        ]

    err = {
        "simplex": maxerr(simplex, lim, probe),
        "simplex_fin": maxerr(simplex, fin),
        "gauss": maxerr(gauss, lim, probe),
        "gauss_fin": maxerr(gauss, fin),
        "gauss_meas": maxerr(gauss, fin_meas),
        **_sweep_errors(cfg, data, gauss),
    }
    e = err["simplex"]
    i_small = index_16x_smaller(log2_n)
    rmid = rhos[len(rhos) // 2]
    return Comparison(
        sizes=f"n=2^{log2_n[0]}..2^{log2_n[-1]} (simplex)",
        predicted=f"rho={rmid} g/gc=.5/1/2: " + fmt(lim[rmid][probe]),
        simulated=fmt(simplex[(rmid, ns[-1])][probe]),
        error=f"{e[-1]:.3f} (2^{log2_n[i_small]}: {e[i_small]:.3f})",
        shrinks=shrink_cell(e[-1], e[i_small], cfg["min_shrink"]),
        details=_details(cfg, err)
        + [
            (
                f"rho={r} n=2^{log2_n[-1]} g/gc=.5/1/2",
                f"limit {fmt(lim[r][probe])} simplex {fmt(simplex[(r, ns[-1])][probe])} "
                f"gauss {fmt(gauss[(r, ns[-1])][probe])} "
                f"(input cos {float(np.mean(ic[(r, ns[-1])])):.3f})",
            )
            for r in rhos
        ],
        scores={"errors": e, "i_small": i_small},
        data=dict(
            rho=rhos,
            ratios=ratios.tolist(),
            n=ns,
            d=cfg["d"],
            simplex={f"{r}|{n}": simplex[(r, n)].tolist() for r in rhos for n in ns},
            gauss={f"{r}|{n}": gauss[(r, n)].tolist() for r in rhos for n in ns},
            fin={f"{r}|{n}": fin[(r, n)].tolist() for r in rhos for n in ns},
            err=e,
            err_simplex_fin=err["simplex_fin"],
            err_gauss=err["gauss"],
            err_gauss_fin=err["gauss_fin"],
            err_gauss_meas=err["gauss_meas"],
            sweep_n=err["sweep_n"],
            swept={k: v["out_cos"] for k, v in data["sweep"].items()},
            err_sweep=err["sweep"],
        ),
    )


def _sweep_errors(cfg, data, gauss) -> dict:
    """Per n run through simlab.run_sweep: the largest error over rho against the finite-n
    formula at its realised input cosine, and against the direct simulation."""
    ratios = np.asarray(data["ratios"], float)
    sweep_ns = [2**e for e in cfg["log2_n"] if 2**e <= 2 ** cfg["sweep_log2_n_max"]]
    e_fin, e_sim = [], []
    for n in sweep_ns:
        ef, es = 0.0, 0.0
        for rho in cfg["rho"]:
            run = data["sweep"][f"{rho}|{n}"]
            out = np.asarray(run["out_cos"], float)
            gamma = ratios * float(theory.chen_gamma_c(rho))
            finite = theory.chen_output_cosine_finite(gamma, run["input_cos"], n)
            ef = max(ef, float(np.max(np.abs(out - finite))))
            es = max(es, float(np.max(np.abs(out - gauss[(rho, n)]))))
        e_fin.append(ef)
        e_sim.append(es)
    return {"sweep_n": sweep_ns, "sweep": e_fin, "sweep_vs_sim": e_sim}


def _details(cfg, err) -> list[tuple[str, str]]:
    log2_n, d = cfg["log2_n"], cfg["d"]

    def per_sweep_n(values):
        return " ".join(f"2^{int(math.log2(n))}:{v:.3f}" for n, v in zip(err["sweep_n"], values))

    return [
        ("simplex sim vs limit at g/gc=.5/1/2, per n", per_size(log2_n, err["simplex"])),
        ("simplex sim vs exact finite-n formula (all g)", per_size(log2_n, err["simplex_fin"])),
        (f"Gaussian tokens d={d} vs limit at g/gc=.5/1/2", per_size(log2_n, err["gauss"])),
        (f"Gaussian tokens d={d} vs finite-n formula (all g)", per_size(log2_n, err["gauss_fin"])),
        ("  same, formula at the realised input cosine", per_size(log2_n, err["gauss_meas"])),
        (
            "simlab.run_sweep (identity block, unit tokens, all queries) vs finite-n formula "
            "at the realised input cosine",
            per_sweep_n(err["sweep"]),
        ),
        (
            "  run_sweep vs the direct simulation (other draws, first n_query queries)",
            per_sweep_n(err["sweep_vs_sim"]),
        ),
    ]


def verdict(cfg, comparison: Comparison):
    v, rule = verdict_from(comparison.scores["errors"], comparison.scores["i_small"], cfg)
    return v, ("criterion", rule)


def figure(res: ClaimResult, path: Path):
    from matplotlib.figure import Figure

    # deferred: matplotlib (heavy), loaded only when a figure is drawn
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
        ratio_ticks(ax)
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


# registered by check_theory/__init__.py, in the table's order
CLAIM = Claim(
    "chen_scaling",
    "critical attention scaling beta = gamma ln n",
    simulate,
    compare,
    verdict,
    figure,
)
