"""The numbers docs/gallery.md quotes for the mechanism, QK-norm and width experiments, read
from a data directory: seed means, +- the half-width of their 95% Student-t interval over seeds
where a number is a metric's mean at a point (simlab.engine.results.seed_ci; docs/config.md,
"Confidence intervals"):
python experiments/gallery_numbers_mechanism.py figures/data    (or figures/quick/data)"""

import sys
from pathlib import Path

import numpy as np

import simlab
from simlab.studies.check_theory.freezing_line import crossing  # first fall through a level

root = Path(sys.argv[1] if len(sys.argv) > 1 else "figures/data")


def done(name):
    return (root / name / "results.npz").exists()


def fmt(values, f="{:.3f}"):
    return " ".join(f.format(v) for v in values)


def fmt_pm(r, metric, index, f="{:.3f}"):
    """mean +- 95% CI half-width of `metric` at `index` of its seed means (every entry)."""
    mean, half = r.mean(metric)[index], r.ci_half_width(metric)[index]
    g = f.replace("+", "")  # a half-width has no sign
    return " ".join(
        f"{f.format(m)}\u00b1{g.format(h)}" for m, h in zip(np.ravel(mean), np.ravel(half))
    )


def wall(r):
    return f"wall {r.meta.get('wall_time_s', float('nan')):.1f} s"


for name in ("mechanism_attention", "mechanism_bert"):
    if not done(name):
        continue
    r = simlab.load(root / name)
    S, L = r.axes["q_shift"], r.axes["lambda"]
    h, w = r.mean("attn_entropy"), r.mean("out_cos_within")
    print(f"== {name} ({wall(r)}); q_shift {S[0]:.3g}..{S[-1]:.3g}, lambda {L[0]:.3g}..{L[-1]:.3g}")
    for j, lam in enumerate(L):
        c = crossing(S, h[:, j], 0.5)
        if np.isfinite(c):
            print(
                f"  lambda {lam:8.3g}: entropy 0.5 at q_shift {c:9.3g}  (x lambda {c * lam:9.3g})"
            )
    right = (h < 0.5) & (L[None, :] <= 100)
    print(f"  out_cos_within where entropy < 0.5 and lambda <= 100: min {w[right].min():.4f}")
    print(f"  out_cos_within over the map: min {w.min():.4f}")
    print(
        f"  corner q_shift {S[0]:.3g}, lambda {L[-1]:.3g}: entropy "
        f"{fmt_pm(r, 'attn_entropy', (0, -1))}, out_cos_within "
        f"{fmt_pm(r, 'out_cos_within', (0, -1))}"
    )
    if "out_cos" in r.metrics:
        print(
            f"  out_cos over the map: {r.mean('out_cos').min():.4f}..{r.mean('out_cos').max():.4f}"
        )

if done("mechanism_kshift"):
    r = simlab.load(root / "mechanism_kshift")
    e = r["attn_entropy"]  # (q_shift, k_shift, seeds)
    print(f"== mechanism_kshift ({wall(r)}); grid {e.shape}")
    print(f"  max |entropy change| along k_shift (every seed): {np.max(np.abs(e - e[:, :1])):.3g}")
    print(f"  entropy along q_shift (k_shift = min): {fmt_pm(r, 'attn_entropy', (slice(None), 0))}")

if done("mechanism_drift") and done("mechanism_kshift"):
    d, k = simlab.load(root / "mechanism_drift"), simlab.load(root / "mechanism_kshift")
    xq, hq = k.mean("q_mean_norm")[:, 0], k.mean("attn_entropy")[:, 0]
    xd, hd = d.mean("q_mean_norm"), d.mean("attn_entropy")
    inside = (xd >= xq.min()) & (xd <= xq.max())
    pred = np.interp(np.log(xd[inside]), np.log(xq), hq)
    print(f"== mechanism_drift ({wall(d)})")
    print(f"  drift sweep |mean q'|: {fmt(xd, '{:.3g}')}")
    print(f"  drift sweep entropy:   {fmt_pm(d, 'attn_entropy', slice(None))}")
    print(f"  q_shift curve at the same |mean q'| (log-interpolated): {fmt(pred)}")
    print(
        f"  max |drift - q_shift| entropy at equal |mean q'| over {int(inside.sum())} drifts: "
        f"{np.max(np.abs(hd[inside] - pred)):.3f}"
    )

for name in ("qknorm_off", "qknorm_on"):
    if not done(name):
        continue
    r = simlab.load(root / name)
    N, T = r.axes["drift_norm"], r.axes["temperature"]
    h = r.mean("attn_entropy")
    print(f"== {name} ({wall(r)}); N {fmt(N, '{:.2g}')}")
    col0, col1 = (slice(None), 0), (slice(None), -1)
    print(f"  entropy at temperature {T[0]:.2g}: {fmt_pm(r, 'attn_entropy', col0)}")
    print(f"  entropy at temperature {T[-1]:.2g}: {fmt_pm(r, 'attn_entropy', col1)}")
    print(f"  out_cos: {fmt_pm(r, 'out_cos', col0)}")
    print(f"  attn_cos at temperature {T[0]:.2g}: {fmt_pm(r, 'attn_cos', col0)}")
    if name == "qknorm_off":  # sharper with N: entropy falls through 0.5 as temperature drops
        for i, n in enumerate(N):
            c = crossing(T[::-1], h[i, ::-1], 0.5)
            if np.isfinite(c):
                print(f"  N {n:8.3g}: entropy 0.5 at temperature {c:9.3g}  (/ N: {c / n:.3g})")
    else:  # more uniform with N: entropy rises through 0.5 as N grows, at fixed temperature
        for j, t in enumerate(T):
            c = crossing(N, 1.0 - h[:, j], 0.5)
            if np.isfinite(c):
                print(f"  temperature {t:8.3g}: entropy 0.5 at N {c:9.3g}  (x T: {c * t:.3g})")
if done("qknorm_off") and done("qknorm_on"):
    a, b = simlab.load(root / "qknorm_off"), simlab.load(root / "qknorm_on")
    print(
        "  max |out_cos off - on| over the map: "
        f"{np.max(np.abs(a.mean('out_cos') - b.mean('out_cos'))):.4f}"
    )

if (root / "width").exists():
    print("== width (lambda = 1)")
    runs = [p for p in (root / "width").iterdir() if (p / "results.npz").exists()]
    for run in sorted(runs, key=lambda p: (int(p.name[1:].split("-")[0]), p.name)):
        r = simlab.load(run)
        N = r.axes["drift_norm"]
        g, gh = r.mean("out_cos_gain"), r.ci_half_width("out_cos_gain")
        i = int(np.argmax(g))
        print(
            f"  {run.name:14s} ({wall(r)}) gain max {g[i]:+.4f}\u00b1{gh[i]:.4f} at N {N[i]:.2g}; "
            f"at N {N[0]:.2g}: {g[0]:+.4f}\u00b1{gh[0]:.4f}; |Attn|/|x| at N {N[0]:.2g}: "
            f"{r.mean('attn_residual_ratio')[0]:.4f}, "
            f"at N {N[-1]:.2g}: {r.mean('attn_residual_ratio')[-1]:.4f}; attn_cos "
            f"{r.mean('attn_cos')[0]:.3f}..{r.mean('attn_cos')[-1]:.3f}; seed std of gain "
            f"<= {r.std('out_cos_gain').max():.4f}"
        )
        print(f"      gain: {fmt_pm(r, 'out_cos_gain', slice(None), '{:+.4f}')}")
    print(f"  N: {fmt(N, '{:.2g}')}")
