"""The stored values' health: how many are NaN or Inf, how many lie outside their metric's
declared bounds, and where the first is (`numerics`); meta.json records it as "numerics" and a
run prints one warning line per metric on stderr (`numerics_lines`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

# a metric may pass its declared bounds by float32 rounding (simlab.testing.BOUND_TOL)
BOUND_TOL = 1e-5


def numerics(
    axes: Mapping[str, np.ndarray],
    metrics: Mapping[str, np.ndarray],
    bounds: Mapping[str, tuple[float, float]] | None = None,
    first_seed: int = 0,
) -> dict[str, dict[str, Any]]:
    """Per metric with a problem: how many stored values are NaN or Inf ("non_finite"), how
    many finite ones lie outside the metric's declared bounds (by more than BOUND_TOL:
    "out_of_bounds", with the bounds), and the first such point (axis values and the seed).
    Empty when every value is finite and inside its bounds. meta.json records it as
    "numerics"; the run prints it on stderr (`numerics_lines`)."""
    out = {}
    names = list(axes)
    for m, x in metrics.items():
        x = np.asarray(x, np.float64)
        bad = ~np.isfinite(x)
        lo, hi = (bounds or {}).get(m, (-np.inf, np.inf))
        oob = np.isfinite(x) & ((x < lo - BOUND_TOL) | (x > hi + BOUND_TOL))
        if not bad.any() and not oob.any():
            continue
        idx = np.unravel_index(int(np.flatnonzero(bad | oob)[0]), x.shape)
        point = {n: float(axes[n][i]) for n, i in zip(names, idx)}
        point["seed"] = first_seed + int(idx[len(names)])
        rec: dict[str, Any] = {"non_finite": int(bad.sum()), "first": point}
        if oob.any():
            rec.update(out_of_bounds=int(oob.sum()), bounds=[float(lo), float(hi)])
        out[m] = rec
    return out


def numerics_lines(report: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One warning line per metric of a `numerics` report."""
    lines = []
    for m, r in report.items():
        what = [f"{r['non_finite']} NaN or Inf"] if r["non_finite"] else []
        if r.get("out_of_bounds"):
            what.append(f"{r['out_of_bounds']} outside its bounds {r['bounds']}")
        where = ", ".join(f"{k}={v:g}" for k, v in r["first"].items())
        lines.append(f"simlab: warning: metric {m}: {' and '.join(what)} (first at {where})")
    return lines
