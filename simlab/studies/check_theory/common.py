"""What the claims share: the result row, where sizes come from, jnp building blocks and
formatting helpers."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from simlab.errors import ConfigError


@dataclasses.dataclass
class ClaimResult:
    """One row of the table, detail rows, and everything the figure and --json need."""

    claim: str
    title: str
    sizes: str
    predicted: str
    simulated: str
    error: str
    shrinks: str
    verdict: str
    details: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    data: dict[str, Any] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0


def load_config(
    claim: str,
    profile: str,
    config_dir: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
) -> dict:
    """Sizes for one claim: the [profile] table ("full" or "quick") of
    <config_dir>/theory_<claim>.toml (default: the experiments/ folder), the one source of
    check-theory's sizes, then `overrides` (keys of that table only)."""
    from simlab.engine.config import experiments_dir, read_toml

    path = (
        Path(config_dir if config_dir is not None else experiments_dir()) / f"theory_{claim}.toml"
    )
    cfg = dict(read_toml(path).get(profile, {}))
    if not cfg:
        raise ConfigError(f"{path}: no [{profile}] table")
    unknown = set(overrides or {}) - set(cfg)
    if unknown:
        raise ConfigError(
            f"{claim} overrides: unknown keys {sorted(unknown)}; allowed: {sorted(cfg)}"
        )
    cfg.update(overrides or {})
    return cfg


def correlated_tokens(key, n: int, d: int, p, sigma=1.0):
    """x_i = sigma (sqrt(p) z_0 + sqrt(1 - p) z_i), z ~ N(0, I_d): (n, d) and the pieces."""
    k0, k1 = jax.random.split(key)
    z0_D = jax.random.normal(k0, (d,))
    z_ND = jax.random.normal(k1, (n, d))
    return sigma * (jnp.sqrt(p) * z0_D + jnp.sqrt(1.0 - p) * z_ND)


def _cos_sums(o_MD):
    """Sums from which mean pairwise cosine and kernel cosine follow exactly (zero vectors
    contribute u = 0)."""
    nrm = jnp.linalg.norm(o_MD, axis=-1, keepdims=True)
    u_MD = jnp.where(nrm > 0, o_MD / jnp.where(nrm > 0, nrm, 1.0), 0.0)
    return {
        "su": u_MD.sum(0),
        "suu": jnp.sum(u_MD * u_MD),
        "so": o_MD.sum(0),
        "soo": jnp.sum(o_MD * o_MD),
    }


def _finish_cos(s, n: int):
    pairs = float(n) * (n - 1)  # float: n (n - 1) overflows int32 from n = 46342
    mean_cos = (jnp.sum(s["su"] ** 2) - s["suu"]) / pairs
    kernel_cos = ((jnp.sum(s["so"] ** 2) - s["soo"]) / pairs) / (s["soo"] / n)
    return mean_cos, kernel_cos


def mean_pairwise_cosine(x_ND):
    """simlab's anisotropy: (|sum u|^2 - sum |u|^2) / (n (n - 1))."""
    return _finish_cos(_cos_sums(x_ND), x_ND.shape[0])[0]


def attention_stats(q_MH, k_NH, v_ND, scale_G, chunk: int):
    """For each logit multiplier s in scale_G: rows softmax(s q_m . k_n) over n, outputs
    o_m = sum_n A_mn v_n.  Returns dict of (G,) arrays: mean_cos (simlab anisotropy of the M
    outputs), kernel_cos (E[o_i . o_k] / E|o|^2 over distinct pairs) and entropy (mean row
    entropy, nats).  Queries go in chunks of `chunk` rows (lax.map), so memory is chunk x N."""
    M, H = q_MH.shape
    C = min(chunk, M)
    if M % C:
        raise ValueError(f"n_query {M} must be a multiple of chunk {C}")
    q_KCH = q_MH.reshape(M // C, C, H)

    def per_scale(s):
        def per_chunk(q_CH):
            logits_CN = s * jnp.einsum("ch,nh->cn", q_CH, k_NH)
            lp_CN = jax.nn.log_softmax(logits_CN, axis=-1)
            a_CN = jnp.exp(lp_CN)
            ent = -jnp.sum(a_CN * lp_CN)
            o_CD = jnp.einsum("cn,nd->cd", a_CN, v_ND)
            return dict(_cos_sums(o_CD), ent=ent)

        parts = jax.lax.map(per_chunk, q_KCH)
        tot = jax.tree.map(lambda a: a.sum(0), parts)
        mean_cos, kernel_cos = _finish_cos(tot, M)
        return {"mean_cos": mean_cos, "kernel_cos": kernel_cos, "entropy": tot["ent"] / M}

    return jax.lax.map(per_scale, scale_G)


def _ratio_ticks(ax, ticks=(0.25, 0.5, 1.0, 2.0, 4.0)):
    """Plain tick labels on a log x axis of ratios."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    lo, hi = ax.get_xlim()
    t = [v for v in ticks if lo <= v <= hi]
    ax.xaxis.set_major_locator(FixedLocator(t))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticklabels([f"{v:g}" for v in t])


def _f(v, nd=3) -> str:
    return "/".join(f"{float(a):.{nd}f}" for a in np.atleast_1d(v))


def criterion(cfg) -> tuple[float, float, float]:
    """(tol, lead_tol, min_shrink) of a claim's config table: declared in the TOML, with the
    sizes, before a run (no default: a missing one is an error)."""
    missing = [k for k in ("tol", "lead_tol", "min_shrink") if k not in cfg]
    if missing:
        raise ConfigError(f"check-theory: the claim's table lacks the criterion fields {missing}")
    return float(cfg["tol"]), float(cfg["lead_tol"]), float(cfg["min_shrink"])


def verdict_from(errs, i_small: int, cfg) -> tuple[str, str]:
    """The verdict computed from the errors along the size path (last = largest size) against
    the declared criterion: "agrees" if the largest size's error <= tol; "agrees to leading
    order" if it is <= lead_tol and shrank by >= min_shrink from the size 16x smaller;
    otherwise "does not agree". Also the criterion as a detail line."""
    tol, lead, shrink = criterion(cfg)
    e, e0 = float(errs[-1]), float(errs[i_small])
    ratio = e0 / e if e > 0 else float("inf")
    if e <= tol:
        v = "agrees"
    elif e <= lead and ratio >= shrink:
        v = "agrees to leading order"
    else:
        v = "does not agree"
    rule = (
        f"error {e:.3f} at the largest size: <= {tol:g} agrees; <= {lead:g} with shrink >= "
        f"{shrink:g} (measured {ratio:.2f}) leading order"
    )
    return v, rule


def shrink_cell(large: float, small: float, min_shrink: float) -> str:
    """The table's "shrinks" cell: 'yes' if the error fell by at least min_shrink (the claim's
    declared factor) from the smaller size to the larger, else 'no'; with the factor measured,
    e.g. 'no (x1.08)'."""
    ratio = small / large if large > 0 else float("inf")
    return f"{'yes' if ratio >= min_shrink else 'no'} (x{ratio:.2f})"
