"""Claim 4: Zhai et al., the attention entropy lower bound from the spectral norm of the logits.

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
from simlab.studies.check_theory.common import ClaimResult, correlated_tokens


def head_logits(key, knobs, *, T: int, d_model: int, d_head: int):
    """simlab's logits for one head and one sequence, (T, T): tokens sigma (sqrt(p) z_0 +
    sqrt(1-p) z_i) + drift_norm u_b, W_Q, W_K ~ N(0, 1/d_model), q' = q_scale q + q_shift u_q,
    k' = k_scale k + k_shift u_k, logits q'.k' / (sqrt(d_head) temperature).  knobs: dict of
    scalars sigma, input_corr, drift_norm, q_shift, k_shift, q_scale, k_scale, temperature.
    Sizes may also be traced (padded) through knobs "n_tok", "n_model", "n_head" (<= the static
    sizes): padded coordinates are zero, and padded rows and columns of L are zero.

    Returns (L (T, T), X~ (T, D+1), W~ (D+1, D+1)) with L = X~ W~ X~^T exactly: X~ = [X, 1]
    (the tokens and a constant column that carries the shifts), W~ = W~_Q W~_K^T /
    (sqrt(d_head) temperature), W~_Q = [q_scale W_Q; q_shift u_q^T], W~_K likewise: the
    factors of Zhai et al.'s statement (theory.zhai_stated_bound)."""
    n_tok = knobs.get("n_tok", T)
    n_model = knobs.get("n_model", d_model)
    n_head = knobs.get("n_head", d_head)
    m_D = (jnp.arange(d_model) < n_model).astype(jnp.float32)
    m_H = (jnp.arange(d_head) < n_head).astype(jnp.float32)
    m_T = (jnp.arange(T) < n_tok).astype(jnp.float32)
    kx, kb, kq, kk, ku, kv = jax.random.split(key, 6)

    def unit(k, m):
        u = jax.random.normal(k, m.shape) * m
        return u / jnp.linalg.norm(u)

    x_TD = correlated_tokens(kx, T, d_model, knobs["input_corr"], knobs["sigma"])
    x_TD = (x_TD + knobs["drift_norm"] * unit(kb, m_D)) * m_D
    wq_DH = jax.random.normal(kq, (d_model, d_head)) * m_H / jnp.sqrt(n_model)
    wk_DH = jax.random.normal(kk, (d_model, d_head)) * m_H / jnp.sqrt(n_model)
    q_TH = knobs["q_scale"] * jnp.einsum("td,dh->th", x_TD, wq_DH) + knobs["q_shift"] * unit(
        ku, m_H
    )
    k_TH = knobs["k_scale"] * jnp.einsum("td,dh->th", x_TD, wk_DH) + knobs["k_shift"] * unit(
        kv, m_H
    )
    c = jnp.sqrt(n_head) * knobs["temperature"]
    logits_TS = jnp.einsum("th,sh->ts", q_TH, k_TH) / c
    x1_TE = jnp.concatenate([x_TD, jnp.ones((T, 1))], axis=1) * m_T[:, None]
    wq_EH = jnp.concatenate([knobs["q_scale"] * wq_DH, knobs["q_shift"] * unit(ku, m_H)[None]])
    wk_EH = jnp.concatenate([knobs["k_scale"] * wk_DH, knobs["k_shift"] * unit(kv, m_H)[None]])
    return logits_TS * m_T[:, None] * m_T[None, :], x1_TE, wq_EH @ wk_EH.T / c


def row_entropy(logits_TS):
    """Entropy (nats) of each softmax row; exact zeros for one-hot rows."""
    lp = jax.nn.log_softmax(logits_TS, axis=-1)
    return -jnp.sum(jnp.exp(lp) * lp, axis=-1)


@partial(jax.jit, static_argnames=("T", "d_model", "d_head"))
def sim_head_logits(keys, knobs, *, T: int, d_model: int, d_head: int):
    """Claim 4, a batch of configurations (vmap over keys and knob arrays, sizes traced through
    knobs n_tok / n_model / n_head up to the static padded sizes): logit matrices (B, T, T) and
    the factors X~ (B, T, D+1), W~ (B, D+1, D+1) of head_logits."""
    return jax.vmap(lambda k, kn: head_logits(k, kn, T=T, d_model=d_model, d_head=d_head))(
        keys, knobs
    )


@jax.jit
def min_row_entropy(L_BTT, n_tok_B):
    """Smallest row entropy over the first n_tok rows of each stored logit matrix (softmax over
    its first n_tok columns), (B,).  Kept in its own jit on purpose: fused with the computation
    of huge logits (|l| ~ 1e9), XLA recomputed the logits with a different rounding for the max
    and for the exponent, and exp(l - max) overflowed (NaN)."""
    T = L_BTT.shape[-1]
    valid_BT = jnp.arange(T)[None, :] < n_tok_B[:, None]
    lp = jax.nn.log_softmax(jnp.where(valid_BT[:, None, :], L_BTT, -jnp.inf), axis=-1)
    h_BT = -jnp.sum(jnp.where(valid_BT[:, None, :], jnp.exp(lp) * lp, 0.0), axis=-1)
    return jnp.min(jnp.where(valid_BT, h_BT, jnp.inf), axis=-1)


def spectral_norms(L_BTT, n_tok_B) -> np.ndarray:
    """Largest singular value of the leading n_tok x n_tok block of each matrix, in float64, as
    sqrt of the top eigenvalue of the Gram matrix L^T L: all eigenvalues by LAPACK (syevd) up
    to T = 64, and for larger T Lanczos (ARPACK) iterated to machine precision (tol = 0),
    falling back to LAPACK if it does not converge.  Relative error ~ 1e-13, far below the
    entropy tolerance; a loosely converged iterative estimate could undershoot and fake a
    violation of the bound."""
    from scipy.sparse.linalg import ArpackError, ArpackNoConvergence, eigsh

    L = np.asarray(L_BTT, dtype=np.float64)
    n_tok_B = np.asarray(n_tok_B)
    out = np.zeros(len(n_tok_B))
    for t in np.unique(n_tok_B):
        idx = np.where(n_tok_B == t)[0]
        blk = L[idx, :t, :t]
        gram = np.matmul(blk.transpose(0, 2, 1), blk)
        if t <= 64:
            top = np.linalg.eigvalsh(gram)[:, -1]
        else:
            top = np.empty(len(idx))
            for j, g in enumerate(gram):
                try:
                    top[j] = eigsh(g, k=1, which="LA", tol=0, return_eigenvectors=False)[0]
                except (ArpackNoConvergence, ArpackError):
                    top[j] = np.linalg.eigvalsh(g)[-1]
        out[idx] = np.sqrt(np.maximum(top, 0.0))
    return out


# float32 rounding allowance for a measured entropy: the log-softmax and the T-term sum each
# carry a relative error of a few float32 ulps; 64 ulps of (1 + ln T) covers it with margin.
F32_ULP = float(np.finfo(np.float32).eps)


def entropy_tolerance(T) -> np.ndarray:
    return 64 * F32_ULP * (1.0 + np.log(np.asarray(T, float)))


# padded sequence lengths: configurations are grouped by the first of these >= their T, so
# that one compiled function serves every size of a group
T_PAD_LADDER = (64, 512, 4096)


def random_entropy_configs(cfg, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """n_configs random heads as flat arrays.  Sizes: T, d_model, d_head drawn independently
    per configuration from the lists.  Knobs: q_scale, k_scale, temperature log-uniform over
    10^[-s, s]; input sigma 10^[-1, 1]; input_corr uniform [0, 1) (a fifth exactly 0, a tenth
    0.999); drift_norm and the shifts 0 with probability 0.3 / 0.5, else 10^[-s, s]."""
    s, n = cfg["scale_log10"], cfg["n_configs"]

    def lu(lo, hi):
        return 10.0 ** rng.uniform(lo, hi, n)

    def maybe(prob):
        return np.where(rng.uniform(0, 1, n) < prob, 0.0, lu(-s, s))

    u = rng.uniform(0, 1, n)
    corr = np.where(u < 0.2, 0.0, np.where(u > 0.9, 0.999, rng.uniform(0, 1, n)))
    return dict(
        T=rng.choice(cfg["T"], n),
        d_model=rng.choice(cfg["d_model"], n),
        d_head=rng.choice(cfg["d_head"], n),
        q_scale=lu(-s, s),
        k_scale=lu(-s, s),
        temperature=lu(-s, s),
        sigma=lu(-1, 1),
        input_corr=corr,
        drift_norm=maybe(0.3),
        q_shift=maybe(0.5),
        k_shift=maybe(0.5),
    )


def factor_norms(x1_BTE, w_BEE) -> tuple[np.ndarray, np.ndarray]:
    """(||W~||_2, ||X~ X~^T||_2 = ||X~||_2^2) per configuration, in float64 (LAPACK)."""
    x = np.asarray(x1_BTE, np.float64)
    w = np.asarray(w_BEE, np.float64)
    xx = np.linalg.eigvalsh(np.matmul(x.transpose(0, 2, 1), x))[:, -1]
    return np.linalg.norm(w, ord=2, axis=(1, 2)), np.maximum(xx, 0.0)


def run_entropy_configs(cfg, seed: int, batch: int = 256):
    """Simulate every configuration; returns the config arrays plus min_entropy, spec_norm,
    bound and slack (= min_entropy - bound), and Zhai et al.'s stated form: w_norm, xx_norm,
    stated_bound, stated_slack."""
    rng = np.random.default_rng(seed)
    key = jax.random.PRNGKey(seed)
    c = random_entropy_configs(cfg, rng)
    n = c["T"].size
    h, sn, wn, xn = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    D, H = int(max(cfg["d_model"])), int(max(cfg["d_head"]))
    t_pad = np.array([next(p for p in T_PAD_LADDER if p >= t) for t in c["T"]])
    knob_names = (
        "q_scale",
        "k_scale",
        "temperature",
        "sigma",
        "input_corr",
        "drift_norm",
        "q_shift",
        "k_shift",
    )
    for tp in np.unique(t_pad):
        idx_all = np.where(t_pad == tp)[0]
        bsz = max(1, min(batch, (2**24) // int(tp) ** 2))
        for lo in range(0, idx_all.size, bsz):
            idx = idx_all[lo : lo + bsz]
            pad = bsz - idx.size  # fixed batch shape: one compilation
            sel = np.concatenate([idx, np.full(pad, idx[0])])
            kn = {k: jnp.asarray(c[k][sel], jnp.float32) for k in knob_names}
            kn["n_tok"] = jnp.asarray(c["T"][sel], jnp.int32)
            kn["n_model"] = jnp.asarray(c["d_model"][sel], jnp.float32)
            kn["n_head"] = jnp.asarray(c["d_head"][sel], jnp.float32)
            keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.asarray(sel))
            L, x1, w = sim_head_logits(keys, kn, T=int(tp), d_model=D, d_head=H)
            hb = np.asarray(min_row_entropy(L, kn["n_tok"]), float)
            h[idx] = hb[: idx.size]
            sn[idx] = spectral_norms(L[: idx.size], c["T"][idx])
            wn[idx], xn[idx] = factor_norms(x1[: idx.size], w[: idx.size])
    out = dict(c)
    out.update(min_entropy=h, spec_norm=sn, bound=theory.zhai_entropy_lower_bound(sn, c["T"]))
    out["slack"] = out["min_entropy"] - out["bound"]
    out.update(w_norm=wn, xx_norm=xn, stated_bound=theory.zhai_stated_bound(wn, xn, c["T"]))
    out["stated_slack"] = out["min_entropy"] - out["stated_bound"]
    return out


def check(cfg) -> ClaimResult:
    r = run_entropy_configs(cfg, cfg["seed"])
    tol = entropy_tolerance(r["T"])
    viol = r["slack"] < -tol
    n = r["T"].size
    finite = np.isfinite(r["min_entropy"]) & np.isfinite(r["bound"])
    lnT = np.log(r["T"])
    # where the bound says something (strictly between 1% and 99% of ln T), how close does the
    # measured entropy come: 0 = attains the bound, 1 = sits at the maximum ln T
    mid = finite & (r["bound"] > 0.01 * lnT) & (r["bound"] < 0.99 * lnT)
    closeness = r["slack"][mid] / (lnT[mid] - r["bound"][mid])
    nviol = int(viol.sum()) + int((~finite).sum())
    # the stated form (||W~||_2 ||X~ X~^T||_2 >= ||L||_2): weaker, so it must hold too
    s_viol = int((r["stated_slack"] < -tol).sum()) + int((~np.isfinite(r["stated_bound"])).sum())
    s_mid = finite & (r["stated_bound"] > 0.01 * lnT) & (r["stated_bound"] < 0.99 * lnT)
    loose = (r["w_norm"] * r["xx_norm"])[finite] / np.maximum(r["spec_norm"][finite], 1e-300)
    # a bound that holds says little where it is ~0 or ~ln T: how many configs it informs
    verdict = (
        f"holds; informative for {int(mid.sum())} of {n} (stated form: {int(s_mid.sum())})"
        if nviol + s_viol == 0
        else f"VIOLATED ({nviol} ||L||_2 form, {s_viol} stated form)"
    )
    res = ClaimResult(
        claim="4 zhai_bound",
        title="attention entropy >= h_T(sqrt(T/(T-1)) ||L||_2)",
        sizes=f"{n} configs T={min(cfg['T'])}..{max(cfg['T'])}",
        predicted="min_i H_i - bound >= 0",
        simulated=f"min slack {np.min(r['slack']):.1e}",
        error=f"{nviol} + {s_viol} violations",
        shrinks="n/a (bound)",
        verdict=verdict,
    )
    res.details = [
        ("configurations / violations (tol 64 ulp (1+lnT))", f"{n} / {nviol}"),
        ("configs with 0.01 lnT < bound < 0.99 lnT", f"{int(mid.sum())}"),
        (
            "among those, min and median (H-bound)/(lnT-bound)",
            f"{closeness.min():.3f} / {np.median(closeness):.3f}" if mid.any() else "n/a",
        ),
        (
            "configs with bound < 0.01 lnT / > 0.99 lnT",
            f"{int((finite & (r['bound'] <= 0.01 * lnT)).sum())} / "
            f"{int((finite & (r['bound'] >= 0.99 * lnT)).sum())}",
        ),
        (
            "stated form h_T(sqrt(T/(T-1)) ||W~||_2 ||X~X~^T||_2): violations / informative",
            f"{s_viol} / {int(s_mid.sum())}",
        ),
        (
            "||W~||_2 ||X~X~^T||_2 / ||L||_2: median / max (>= 1)",
            f"{np.median(loose):.3g} / {np.max(loose):.3g} (min {np.min(loose):.6f})",
        ),
    ]
    res.data = {k: np.asarray(v).tolist() for k, v in r.items()}
    return res


def figure(res: ClaimResult, path: Path):
    from matplotlib.figure import Figure

    from simlab import plot

    d = {k: np.array(v) for k, v in res.data.items()}
    fig = Figure(figsize=(11, 4.6), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    lnT = np.log(d["T"])
    sc = ax1.scatter(
        d["bound"] / lnT,
        d["min_entropy"] / lnT,
        c=np.log2(d["T"]),
        s=7,
        cmap="viridis",
        alpha=0.7,
        label="random configurations",
    )
    fig.colorbar(sc, ax=ax1, label="log2 T")
    # the extremal logit matrices L = e_i a^T attain the bound
    g = np.linspace(0, 1, 50)
    ax1.scatter(
        d["stated_bound"] / lnT,
        d["min_entropy"] / lnT,
        s=5,
        marker="x",
        color="0.55",
        alpha=0.5,
        label="stated form ||W~|| ||X~X~^T|| (Zhai et al.)",
    )
    ax1.plot(g, g, "k--", lw=1.2, label="measured = bound (attained by L = e_i a^T)")
    ax1.set_xlabel("bound / ln T")
    ax1.set_ylabel("min row entropy / ln T")
    ax1.set_title(f"Claim 4: {d['T'].size} random heads, no point below the diagonal", fontsize=10)
    ax1.legend(fontsize=8)
    s = np.geomspace(1e-3, 1e3, 300)
    overlay = [
        (s, theory.zhai_entropy_lower_bound(s, T) / math.log(T), f"bound, T={T}")
        for T in sorted(set(d["T"].astype(int).tolist()))[:: max(1, len(set(d["T"])) // 4)]
    ]
    ax2.scatter(
        d["spec_norm"], d["min_entropy"] / lnT, s=5, c=np.log2(d["T"]), cmap="viridis", alpha=0.5
    )
    plot._overlay_theory(ax2, overlay, dict(lw=1.6, ls="--"))
    ax2.set_xscale("log")
    ax2.set_xlim(1e-3, 1e3)
    ax2.set_ylim(-0.05, 1.05)
    ax2.set_xlabel("spectral norm ||L||_2 of the logit matrix")
    ax2.set_ylabel("min row entropy / ln T")
    ax2.set_title("entropy against ||L||_2 with the bound per T", fontsize=10)
    ax2.legend(fontsize=8)
    plot.save_figure(fig, path)
