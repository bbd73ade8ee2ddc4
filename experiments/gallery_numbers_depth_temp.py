"""The numbers docs/gallery.md quotes for temp_corr and the depth stacks, from a data root:
seed means, +- the half-width of their 95% Student-t interval over seeds where a number is a
metric's mean at a point (simlab.engine.results.seed_ci; docs/config.md, "Confidence
intervals"):
python experiments/gallery_numbers_depth_temp.py figures/data    (or figures/quick/data)"""

import sys

import numpy as np

import simlab
from simlab import theory

base = sys.argv[1] if len(sys.argv) > 1 else "figures/data"
try:
    r = simlab.load(f"{base}/temp_corr")
    print(r.axes.keys())
    names = list(r.axes)
    print(names, {k: (v[0], v[-1], len(v)) for k, v in r.axes.items()})
    T = r.meta["config"]["inputs"]["length"]
    h = r.mean("attn_entropy")
    c = r.mean("out_cos_within")
    ch = r.ci_half_width("out_cos_within")
    ax_p, ax_t = names
    tv, pv = r.axes[ax_t], r.axes[ax_p]
    inv = 1 / tv
    for pi in [0, len(pv) // 2, int(0.9 * len(pv))]:
        p = pv[pi]
        hh = h[pi, :]
        order = np.argsort(inv)
        x, y = inv[order], hh[order]
        j = np.nonzero((y[:-1] >= 0.5) & (y[1:] < 0.5))[0]
        cross = (
            float(
                np.exp(
                    np.interp(0.5, [y[j[0] + 1], y[j[0]]], [np.log(x[j[0] + 1]), np.log(x[j[0]])])
                )
            )
            if len(j)
            else float("nan")
        )
        pred = float(theory.gg_inverse_temperature_c(T, p))
        # the level-0.5 line at finite T: s_half where the finite-T softmax entropy is 0.5
        # (theory.gaussian_softmax_entropy), as a fraction of the freezing threshold s_c
        lo, hi = 0.1, float(theory.rem_critical_std(T)) * 2
        for _ in range(40):
            mid = 0.5 * (lo + hi)
            above = theory.gaussian_softmax_entropy(mid, T, rows=2048) > 0.5
            lo, hi = (mid, hi) if above else (lo, mid)
        half = pred * 0.5 * (lo + hi) / float(theory.rem_critical_std(T))
        il, ih = np.argmin(abs(inv - 0.1)), np.argmin(abs(inv - 100))
        print(
            f"p={p:.3f}: 1/T at entropy 0.5 sim {cross:.3g} REM boundary {pred:.3g}; "
            f"out_cos_within at 1/temp 0.1: {c[pi, il]:.3f}\u00b1{ch[pi, il]:.3f}, "
            f"at 100: {c[pi, ih]:.3f}\u00b1{ch[pi, ih]:.3f}"
        )
        print(f"   finite-T entropy-0.5 line: 1/T = {half:.3g} (sim/pred {cross / half:.3f})")
except Exception as e:
    print("temp_corr", e)
for kind in ("post_ln", "pre_ln", "attention"):
    try:
        r = simlab.load(f"{base}/depth_{kind}")
        t = r.axes["temperature"]
        oc, ae = r.mean("out_cos"), r.mean("attn_entropy")
        och, aeh = r.ci_half_width("out_cos"), r.ci_half_width("attn_entropy")
        for i, tt in enumerate(t):
            print(
                f"depth {kind} temp {tt:g}: out_cos L1 {oc[i, 0]:.3f}\u00b1{och[i, 0]:.3f} "
                f"L12 {oc[i, -1]:.3f}\u00b1{och[i, -1]:.3f}; entropy L1 {ae[i, 0]:.3f}"
                f"\u00b1{aeh[i, 0]:.3f} L12 {ae[i, -1]:.3f}\u00b1{aeh[i, -1]:.3f}"
            )
        print("   wall", round(r.meta["wall_time_s"], 1))
    except Exception as e:
        print(kind, e)
