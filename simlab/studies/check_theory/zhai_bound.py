"""Claim 4: Zhai et al., the attention entropy lower bound from the spectral norm of the logits.

Prediction: simlab.theory.zhai_entropy_lower_bound (every row entropy of softmax(L) is at
least h_T(sqrt(T / (T - 1)) ||L||_2)) and Zhai et al.'s stated form zhai_stated_bound, in terms
of the weights and the inputs.  Simulation: a property test over n_configs random heads (sizes
and knobs drawn per configuration: random_entropy_configs): the smallest row entropy in
float32, ||L||_2 and the factor norms in float64.  Criterion (the claim's own): no
configuration below either bound by more than the float32 rounding allowance
(entropy_tolerance); the verdict also counts the configurations where the bound says something
(strictly between 1% and 99% of ln T).
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
from simlab.studies.check_theory.reference import correlated_tokens


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
    factors of Zhai et al.'s statement (theory.zhai_stated_bound); E indexes the D + 1 columns
    of X~."""
    n_tok = knobs.get("n_tok", T)
    n_model = knobs.get("n_model", d_model)
    n_head = knobs.get("n_head", d_head)
    m_D = (jnp.arange(d_model) < n_model).astype(jnp.float32)
    m_K = (jnp.arange(d_head) < n_head).astype(jnp.float32)
    m_T = (jnp.arange(T) < n_tok).astype(jnp.float32)
    kx, kb, kq, kk, ku, kv = jax.random.split(key, 6)

    def unit(k, m):
        u = jax.random.normal(k, m.shape) * m
        return u / jnp.linalg.norm(u)

    x_TD = correlated_tokens(kx, T, d_model, knobs["input_corr"], knobs["sigma"])
    x_TD = (x_TD + knobs["drift_norm"] * unit(kb, m_D)) * m_D
    wq_DK = jax.random.normal(kq, (d_model, d_head)) * m_K / jnp.sqrt(n_model)
    wk_DK = jax.random.normal(kk, (d_model, d_head)) * m_K / jnp.sqrt(n_model)
    q_TK = knobs["q_scale"] * jnp.einsum("td,dk->tk", x_TD, wq_DK) + knobs["q_shift"] * unit(
        ku, m_K
    )
    k_TK = knobs["k_scale"] * jnp.einsum("td,dk->tk", x_TD, wk_DK) + knobs["k_shift"] * unit(
        kv, m_K
    )
    c = jnp.sqrt(n_head) * knobs["temperature"]
    logits_TS = jnp.einsum("tk,sk->ts", q_TK, k_TK) / c
    x1_TE = jnp.concatenate([x_TD, jnp.ones((T, 1))], axis=1) * m_T[:, None]
    wq_EK = jnp.concatenate([knobs["q_scale"] * wq_DK, knobs["q_shift"] * unit(ku, m_K)[None]])
    wk_EK = jnp.concatenate([knobs["k_scale"] * wk_DK, knobs["k_shift"] * unit(kv, m_K)[None]])
    return logits_TS * m_T[:, None] * m_T[None, :], x1_TE, wq_EK @ wk_EK.T / c


@partial(jax.jit, static_argnames=("T", "d_model", "d_head"))
def sim_head_logits(keys, knobs, *, T: int, d_model: int, d_head: int):
    """A batch of configurations (vmap over keys and knob arrays, sizes traced through
    knobs n_tok / n_model / n_head up to the static padded sizes): logit matrices (B, T, T) and
    the factors X~ (B, T, D+1), W~ (B, D+1, D+1) of head_logits."""
    return jax.vmap(lambda k, kn: head_logits(k, kn, T=T, d_model=d_model, d_head=d_head))(
        keys, knobs
    )


@jax.jit
def min_row_entropy(L_BTS, n_tok_B):
    """Smallest row entropy over the first n_tok rows of each stored logit matrix (softmax over
    its first n_tok columns), (B,).  Kept in its own jit on purpose: fused with the computation
    of huge logits (|l| ~ 1e9), XLA recomputed the logits with a different rounding for the max
    and for the exponent, and exp(l - max) overflowed (NaN)."""
    T = L_BTS.shape[-1]
    valid_BT = jnp.arange(T)[None, :] < n_tok_B[:, None]
    lp = jax.nn.log_softmax(jnp.where(valid_BT[:, None, :], L_BTS, -jnp.inf), axis=-1)
    h_BT = -jnp.sum(jnp.where(valid_BT[:, None, :], jnp.exp(lp) * lp, 0.0), axis=-1)
    return jnp.min(jnp.where(valid_BT, h_BT, jnp.inf), axis=-1)


def spectral_norms(L_BTS, n_tok_B) -> np.ndarray:
    """Largest singular value of the leading n_tok x n_tok block of each matrix, in float64, as
    sqrt of the top eigenvalue of the Gram matrix L^T L: all eigenvalues by LAPACK (syevd) up
    to T = 64, and for larger T Lanczos (ARPACK) iterated to machine precision (tol = 0),
    falling back to LAPACK if it does not converge.  Relative error ~ 1e-13, far below the
    entropy tolerance; a loosely converged iterative estimate could undershoot and fake a
    violation of the bound."""
    from scipy.sparse.linalg import ArpackError, ArpackNoConvergence, eigsh

    L = np.asarray(L_BTS, dtype=np.float64)
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


def simulate_configs(cfg, seed: int, batch: int = 256) -> dict[str, np.ndarray]:
    """Simulate every configuration: the config arrays plus min_entropy (the smallest row
    entropy, float32 softmax), spec_norm (||L||_2), w_norm (||W~||_2) and xx_norm
    (||X~ X~^T||_2), the norms in float64."""
    rng = np.random.default_rng(seed)
    key = jax.random.PRNGKey(seed)
    c = random_entropy_configs(cfg, rng)
    n = c["T"].size
    h, sn, wn, xn = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    D, K = int(max(cfg["d_model"])), int(max(cfg["d_head"]))
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
            L, x1, w = sim_head_logits(keys, kn, T=int(tp), d_model=D, d_head=K)
            hb = np.asarray(min_row_entropy(L, kn["n_tok"]), float)
            h[idx] = hb[: idx.size]
            sn[idx] = spectral_norms(L[: idx.size], c["T"][idx])
            wn[idx], xn[idx] = factor_norms(x1[: idx.size], w[: idx.size])
    out = dict(c)
    out.update(min_entropy=h, spec_norm=sn, w_norm=wn, xx_norm=xn)
    return out


def add_bounds(r: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The simulated configurations with the predictions beside them: bound (the ||L||_2
    form), slack = min_entropy - bound, and Zhai et al.'s stated form: stated_bound,
    stated_slack."""
    out = dict(r)
    out["bound"] = theory.zhai_entropy_lower_bound(r["spec_norm"], r["T"])
    out["slack"] = r["min_entropy"] - out["bound"]
    out["stated_bound"] = theory.zhai_stated_bound(r["w_norm"], r["xx_norm"], r["T"])
    out["stated_slack"] = r["min_entropy"] - out["stated_bound"]
    return out


def simulate(cfg) -> dict:
    return simulate_configs(cfg, cfg["seed"])


def compare(cfg, data) -> Comparison:
    r = add_bounds({k: np.asarray(v) for k, v in data.items()})
    tol = entropy_tolerance(r["T"])
    n = r["T"].size
    finite = np.isfinite(r["min_entropy"]) & np.isfinite(r["bound"])
    lnT = np.log(r["T"])
    # where the bound says something (strictly between 1% and 99% of ln T), how close does the
    # measured entropy come: 0 = attains the bound, 1 = sits at the maximum ln T
    mid = finite & (r["bound"] > 0.01 * lnT) & (r["bound"] < 0.99 * lnT)
    closeness = r["slack"][mid] / (lnT[mid] - r["bound"][mid])
    nviol = int((r["slack"] < -tol).sum()) + int((~finite).sum())
    # the stated form (||W~||_2 ||X~ X~^T||_2 >= ||L||_2): weaker, so it must hold too
    s_viol = int((r["stated_slack"] < -tol).sum()) + int((~np.isfinite(r["stated_bound"])).sum())
    s_mid = finite & (r["stated_bound"] > 0.01 * lnT) & (r["stated_bound"] < 0.99 * lnT)
    loose = (r["w_norm"] * r["xx_norm"])[finite] / np.maximum(r["spec_norm"][finite], 1e-300)
    return Comparison(
        sizes=f"{n} configs T={min(cfg['T'])}..{max(cfg['T'])}",
        predicted="min_i H_i - bound >= 0",
        simulated=f"min slack {np.min(r['slack']):.1e}",
        error=f"{nviol} + {s_viol} violations",
        shrinks="n/a (bound)",
        details=[
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
        ],
        scores={
            "n": n,
            "violations": nviol,
            "stated_violations": s_viol,
            "informative": int(mid.sum()),
            "stated_informative": int(s_mid.sum()),
        },
        data={k: np.asarray(v).tolist() for k, v in r.items()},
    )


def verdict(cfg, comparison: Comparison) -> str:
    """The claim's own rule: "holds" when no configuration violates either form, with how
    many configurations it informs (a bound that holds says little where it is ~0 or ~ln T);
    else "VIOLATED"."""
    s = comparison.scores
    if s["violations"] + s["stated_violations"] == 0:
        return (
            f"holds; informative for {s['informative']} of {s['n']} "
            f"(stated form: {s['stated_informative']})"
        )
    return f"VIOLATED ({s['violations']} ||L||_2 form, {s['stated_violations']} stated form)"


def figure(res: ClaimResult, path: Path):
    from matplotlib.figure import Figure

    # deferred: matplotlib (heavy), loaded only when a figure is drawn
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


# registered by check_theory/__init__.py, in the table's order
CLAIM = Claim(
    "zhai_bound",
    "attention entropy >= h_T(sqrt(T/(T-1)) ||L||_2)",
    simulate,
    compare,
    verdict,
    figure,
)
