"""What the claims share: where a claim's config comes from, the computed verdict and the
formatting of the table's cells and of the figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from simlab.engine.tomlio import read_config_toml
from simlab.errors import ConfigError
from simlab.studies.check_theory.claim import Claim, lookup


def load_config(
    claim: Claim | str,
    profile: str,
    config_dir: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
) -> dict:
    """Sizes and criterion of one claim: the [profile] table ("full" or "quick") of its TOML
    (Claim.config_path: <config_dir>/theory_<claim>.toml by default, config_dir defaulting to
    the experiments/ folder), the one source of check-theory's sizes, then `overrides` (keys
    of that table only)."""

    claim = lookup(claim)
    path = claim.config_path(config_dir)
    cfg = dict(read_config_toml(path).get(profile, {}))
    if not cfg:
        raise ConfigError(f"{path}: no [{profile}] table")
    unknown = set(overrides or {}) - set(cfg)
    if unknown:
        raise ConfigError(
            f"{claim.name} overrides: unknown keys {sorted(unknown)}; allowed: {sorted(cfg)}"
        )
    cfg.update(overrides or {})
    return cfg


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


def index_16x_smaller(log2_sizes) -> int:
    """Index of the size 16x smaller than the largest (log2 - 4) on a path of log2 sizes, or of
    the smallest size when there is none that small: the size the shrink is measured from."""
    small = [i for i, e in enumerate(log2_sizes) if e <= log2_sizes[-1] - 4]
    return small[-1] if small else 0


def per_size(log2_sizes, values) -> str:
    """One detail cell: "2^6:0.123 2^8:0.045 ..." (3 decimals)."""
    return " ".join(f"2^{e}:{v:.3f}" for e, v in zip(log2_sizes, values))


def fmt(v, nd=3) -> str:
    """Values joined by "/", nd decimals: "0.750/0.000/0.000"."""
    return "/".join(f"{float(a):.{nd}f}" for a in np.atleast_1d(v))


def ratio_ticks(ax, ticks=(0.25, 0.5, 1.0, 2.0, 4.0)):
    """Plain tick labels on a log x axis of ratios."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    lo, hi = ax.get_xlim()
    t = [v for v in ticks if lo <= v <= hi]
    ax.xaxis.set_major_locator(FixedLocator(t))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticklabels([f"{v:g}" for v in t])
