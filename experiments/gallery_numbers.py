"""The numbers docs/gallery.md quotes for experiment 1, read from a data directory: seed means
+- the half-width of their 95% Student-t interval over seeds (simlab.engine.results.seed_ci;
docs/config.md, "Confidence intervals"):
python experiments/gallery_numbers.py figures/data/paper    (or figures/quick/data/paper)"""

import sys

import numpy as np

import simlab
from simlab import theory
from simlab.engine.results import seed_ci

d = sys.argv[1] if len(sys.argv) > 1 else "figures/data/paper"
r = simlab.load(d)
print(r)
N, L = r.axes["drift_norm"], r.axes["lambda"]
m = {k: r.mean(k) for k in r.metrics}
h = {k: r.ci_half_width(k) for k in r.metrics}  # 95% CI half-widths, (drift, lambda)
print(f"+- : half-width of the 95% Student-t interval over {r.n_seeds} seeds")


def pm(k, i, j, f="{:.3f}"):
    return f"{f.format(m[k][i, j])}\u00b1{f.format(h[k][i, j])}"


il = int(np.argmin(abs(np.log(L))))
print("lambda =", L[il])
for k in ("input_cos", "out_cos", "attn_cos", "attn_cos_within", "attn_entropy"):
    print(f"{k:16s}", " ".join(pm(k, i, il) for i in range(len(N))))
print("N:", " ".join(f"{v:.3g}" for v in N))
gap = m["out_cos"] - m["input_cos"]
gap_h = r.ci_half_width(r["out_cos"] - r["input_cos"])  # paired by seed
print(
    f"out_cos - input_cos: min {gap.min():+.4f} max {gap.max():+.4f}; at lambda=1: "
    + " ".join(f"{v:+.4f}\u00b1{e:.4f}" for v, e in zip(gap[:, il], gap_h[:, il]))
)
cfg = r.meta["config"]
pred = theory.paper_iso_entropy_lambda_finite(
    N,
    length=cfg["inputs"]["length"],
    d_model=cfg["block"]["d_model"],
    n_heads=cfg["block"]["n_heads"],
)


def crossing(h_row):
    """lambda where the entropy falls through 0.5 (log-interpolated), or NaN."""
    j = np.nonzero((h_row[:-1] >= 0.5) & (h_row[1:] < 0.5))[0]
    if not len(j):
        return np.nan
    j = int(j[0])
    t = (h_row[j] - 0.5) / (h_row[j] - h_row[j + 1])
    return float(np.exp(np.log(L[j]) + t * (np.log(L[j + 1]) - np.log(L[j]))))


ratios = []
ent = r["attn_entropy"]  # (drift, lambda, seed)
for i, n in enumerate(N):
    lam = crossing(m["attn_entropy"][i])
    if np.isfinite(lam):
        per_seed = np.array([crossing(ent[i, :, s]) for s in range(r.n_seeds)]) / pred[i]
        lo, hi = seed_ci(per_seed, 0)
        ratios.append(lam / pred[i])
        print(
            f"N={n:9.3g} lambda_0.5 sim {lam:8.4g} pred {pred[i]:8.4g} ratio {lam / pred[i]:.3f}"
            f" (per seed {np.nanmean(per_seed):.3f}\u00b1{(hi - lo) / 2:.3f})"
        )
print(
    f"freezing line: sim/pred in [{min(ratios):.3f}, {max(ratios):.3f}] over {len(ratios)} drifts"
)
# regions at small N, large lambda (token-specific sharp) and large N (shared sharp)
i0, iN = 0, len(N) - 1
print(
    f"small N={N[i0]:.3g}, lambda={L[-1]:.3g}: entropy {pm('attn_entropy', i0, -1)} "
    f"attn_cos {pm('attn_cos', i0, -1)} attn_cos_within {pm('attn_cos_within', i0, -1)}"
)
print(
    f"large N={N[iN]:.3g}, lambda={L[-1]:.3g}: entropy {pm('attn_entropy', iN, -1)} "
    f"attn_cos {pm('attn_cos', iN, -1)}"
)
print(
    f"lower-left N={N[i0]:.3g}, lambda={L[0]:.3g}: entropy {pm('attn_entropy', i0, 0)} "
    f"attn_cos_within {pm('attn_cos_within', i0, 0)}"
)
print(
    "wall",
    r.meta.get("wall_time_s"),
    "compute",
    r.meta.get("compute_time_s"),
    "pts/s",
    r.meta.get("points_per_second"),
)
