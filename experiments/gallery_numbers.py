"""The numbers docs/gallery.md quotes for experiment 1, read from a data directory:
python experiments/gallery_numbers.py figures/data/paper    (or figures/quick/data/paper)"""

import sys

import numpy as np

import simlab
from simlab import theory

d = sys.argv[1] if len(sys.argv) > 1 else "figures/data/paper"
r = simlab.load(d)
print(r)
N, L = r.axes["drift_norm"], r.axes["lambda"]
m = {k: r.mean(k) for k in r.metrics}
il = int(np.argmin(abs(np.log(L))))
print("lambda =", L[il])
for k in ("input_cos", "out_cos", "attn_cos", "attn_cos_within", "attn_entropy"):
    print(f"{k:16s}", " ".join(f"{v:.3f}" for v in m[k][:, il]))
print("N:", " ".join(f"{v:.3g}" for v in N))
gap = m["out_cos"] - m["input_cos"]
print(
    f"out_cos - input_cos: min {gap.min():+.4f} max {gap.max():+.4f}; at lambda=1: "
    + " ".join(f"{v:+.4f}" for v in gap[:, il])
)
cfg = r.meta["config"]
pred = theory.paper_iso_entropy_lambda_finite(
    N,
    length=cfg["inputs"]["length"],
    d_model=cfg["block"]["d_model"],
    n_heads=cfg["block"]["n_heads"],
)
ratios = []
for i, n in enumerate(N):
    h = m["attn_entropy"][i]
    j = np.nonzero((h[:-1] >= 0.5) & (h[1:] < 0.5))[0]
    if len(j):
        j = int(j[0])
        t = (h[j] - 0.5) / (h[j] - h[j + 1])
        lam = float(np.exp(np.log(L[j]) + t * (np.log(L[j + 1]) - np.log(L[j]))))
        ratios.append(lam / pred[i])
        print(f"N={n:9.3g} lambda_0.5 sim {lam:8.4g} pred {pred[i]:8.4g} ratio {lam / pred[i]:.3f}")
print(
    f"freezing line: sim/pred in [{min(ratios):.3f}, {max(ratios):.3f}] over {len(ratios)} drifts"
)
# regions at small N, large lambda (token-specific sharp) and large N (shared sharp)
i0, iN = 0, len(N) - 1
print(
    f"small N={N[i0]:.3g}, lambda={L[-1]:.3g}: entropy {m['attn_entropy'][i0, -1]:.3f} "
    f"attn_cos {m['attn_cos'][i0, -1]:.3f} attn_cos_within {m['attn_cos_within'][i0, -1]:.3f}"
)
print(
    f"large N={N[iN]:.3g}, lambda={L[-1]:.3g}: entropy {m['attn_entropy'][iN, -1]:.3f} "
    f"attn_cos {m['attn_cos'][iN, -1]:.3f}"
)
print(
    f"lower-left N={N[i0]:.3g}, lambda={L[0]:.3g}: entropy {m['attn_entropy'][i0, 0]:.3f} "
    f"attn_cos_within {m['attn_cos_within'][i0, 0]:.3f}"
)
print(
    "wall",
    r.meta.get("wall_time_s"),
    "compute",
    r.meta.get("compute_time_s"),
    "pts/s",
    r.meta.get("points_per_second"),
)
