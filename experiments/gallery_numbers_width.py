"""The numbers docs/gallery.md quotes for the width experiment (section 6), from a data root:
seed means +- the half-width of their 95% Student-t interval over the seeds
(simlab.engine.results.seed_ci), the closed form at N -> 0 (theory.mlp_mean_gain) and claim 10's
mean-field curve with each seed's own weight statistics (the overlay of the figure):
python experiments/gallery_numbers_width.py figures/data    (or figures/quick/data)"""

import sys

import numpy as np

import simlab
from simlab import theory
from simlab.engine.results import seed_ci
from simlab.studies.reproduce.overlays import mean_field_per_seed


def ci(x) -> str:
    lo, hi = seed_ci(np.asarray(x), -1)
    return f"{float(np.mean(x)):+.5f} +- {float(hi - lo) / 2:.5f}"


base = sys.argv[1] if len(sys.argv) > 1 else "figures/data"
root = f"{base}/width"
widths = sorted(
    {p.split("-")[0] for p in (d.name for d in __import__("pathlib").Path(root).iterdir())},
    key=lambda s: int(s[1:]),
)
for w in widths:
    bert, cent = simlab.load(f"{root}/{w}-bert"), simlab.load(f"{root}/{w}-centered")
    n = bert.axes["drift_norm"]
    d = bert.meta["config"]["block"]["d_model"]
    gb, gc = bert["out_cos_gain"], cent["out_cos_gain"]  # (N, seeds)
    peak = int(np.argmax(gb.mean(-1)))
    own, expect = mean_field_per_seed(bert), mean_field_per_seed(bert, own_weights=False)
    mf = own.mean(-1)
    print(
        f"d {d} ({bert.n_seeds} seeds, {bert.meta['config']['inputs']['batch']} x "
        f"{bert.meta['config']['inputs']['length']} tokens)"
    )
    print(
        f"  N = {n[0]:g}: BERT MLP {ci(gb[0])}, mean removed {ci(gc[0])}, "
        f"paired difference {ci(gb[0] - gc[0])}; closed form "
        f"{float(theory.mlp_mean_gain(d)):.5f}, mean field {mf[0]:.5f}"
    )
    print(
        f"  peak at N = {n[peak]:.3g}: BERT MLP {ci(gb[peak])}, mean removed {ci(gc[peak])}, "
        f"mean field {mf[peak]:.5f} (sim / mean field {gb[peak].mean() / mf[peak]:.2f})"
    )
    # per seed at N -> 0, where the gain is the MLP's mean output: each seed's own |1^T W_2|^2
    # (and the other statistics) against their expectations
    r = np.corrcoef(gb[0], own[0])[0, 1]
    rel_own = np.abs(gb[0] - own[0]) / own[0].mean()
    rel_exp = np.abs(gb[0] - expect[0]) / expect[0].mean()
    print(
        f"  per seed at N = {n[0]:g}: r(sim, own-weights prediction) = {r:+.3f}; median / max "
        f"|sim - pred| / mean pred: own weights {np.median(rel_own):.3f} / {rel_own.max():.3f}, "
        f"expectations {np.median(rel_exp):.3f} / {rel_exp.max():.3f}"
    )
    err = np.abs(gb.mean(-1) - mf)
    print(
        f"  mean field: max |sim - pred| over N {err.max():.5f} "
        f"({err.max() / max(abs(mf).max(), 1e-12):.2f} of its peak)"
    )
    r = bert["attn_residual_ratio"].mean(-1)
    print(
        f"  |Attn(x)| / |x| at N = {n[0]:g} / {n[peak]:.3g} / {n[-1]:g}: "
        f"{r[0]:.4f} / {r[peak]:.4f} / {r[-1]:.3f}; attn_cos at N = {n[0]:g}: "
        f"{bert['attn_cos'].mean(-1)[0]:.2f}; attn_entropy min over N "
        f"{bert['attn_entropy'].mean(-1).min():.4f}"
    )
