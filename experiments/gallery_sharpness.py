"""The answer across the whole sharpness range (docs/gallery.md, "The answer"), from the committed
data of experiments/decomposition_sharpness.toml (the block's own softmax, lambda = q_scale =
k_scale from 1 to 1000), decomposition_clamps.toml (shared / token / other clamps at matching
entropies; beta 0 is the uniform pattern) and decomposition_sharpness_headline.toml (16 x 512).

    python experiments/gallery_sharpness.py [figures/data] [--figure figures/answer_sharpness.png]

prints the markdown block docs/gallery.md carries (tests/studies/test_gallery_answer.py checks
it character for character) and, with --figure, draws the gain against the attention entropy.

The criterion is experiments/gallery_answer.py's (Student-t 95% intervals over the 20 seeds of
stream 4001, every difference paired by seed; verdicts re-judged by the relative rule of
experiments/gallery_geometry.py: material = 1% of the room the input leaves, 1 - input_cos, with
the float32 floor; the declared absolute DELTA = 0.005 and why it was replaced: gallery_answer.py),
read over the whole range of the knob: the effect of sharpening is the block's added
global anisotropy (out_cos_gain) at lambda 1000 minus lambda 1, per regime: small drift
(N = 0.01), a drift of the tokens' own norm (N = 0.55 ~ 0.02 sqrt(768)) and a large drift
(N = 10), at the paper's token count (16 x 512) and at 4 x 512 with the branches switched.
"""

import sys
from pathlib import Path

import numpy as np

import simlab
from simlab.engine.results import seed_ci

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gallery_answer import MATERIAL, cell, resolution, room  # noqa: E402  (the rule, one copy)

REGIMES = (("small drift", 0.01), ("N ~ ‖x‖", 0.55), ("large drift", 10.0))
CLAMPS = (("shared", "shared"), ("token", "token (self)"), ("other", "token (other)"))
CLAMPS_AND_SOFTMAX = (("softmax (lambda)", None), *((label, v) for v, label in CLAMPS))
WORDS = {
    "raises": "raises",
    "lowers": "lowers",
    "no material effect": "does not change materially",
    "unresolved": "does not resolve",
}


def _near(values, x) -> int:
    return int(np.argmin(np.abs(np.asarray(values) - x)))


def load(root: Path) -> dict:
    """The three experiments' Results."""
    return {
        "soft": simlab.load(root / "decomposition_sharpness"),
        "head": simlab.load(root / "decomposition_sharpness_headline"),
        "clamps": {v: simlab.load(root / "decomposition_clamps" / v) for v, _ in CLAMPS},
    }


def _soft(res, metric, n, lam, branch=None):
    """Per-seed metric of the softmax sweep at drift n, lambda index lam (and branch)."""
    i = _near(res.axes["drift_norm"], n)
    x = res[metric][i, lam]
    return x if branch is None else x[_near(res.axes["branch"], branch)]


def main(root: Path) -> str:
    d = load(root)
    soft, head, clamps = d["soft"], d["head"], d["clamps"]
    lams = soft.axes["lambda"]
    hl = head.axes["lambda"]
    cfg, hcfg = soft.meta["config"], head.meta["config"]
    lines = [
        f"Sizes: the block of the answer ({cfg['block']['kind']}, d_model "
        f"{cfg['block']['d_model']}, {cfg['inputs']['batch']} x {cfg['inputs']['length']} tokens; "
        f"headline {hcfg['inputs']['batch']} x {hcfg['inputs']['length']}), lambda = q_scale = "
        f"k_scale from {lams[0]:g} to {lams[-1]:g} ({len(lams)} log-spaced values), "
        f"{len(soft.axes['drift_norm'])} drifts, {soft.n_seeds} seeds (stream "
        f"{cfg['sweep']['base_seed']}); each change also as a share of the room the input "
        f"leaves (1 - input_cos), verdicts by the relative rule (material: {MATERIAL:.0%} of "
        "the room; floor: the float32 resolution of the sum; experiments/gallery_geometry.py).",
        "",
    ]
    # the range the knob covers: the entropy it moves
    ent = [
        (name, n, float(np.mean(_soft(soft, "attn_entropy", n, 0, 0))),
         float(np.mean(_soft(soft, "attn_entropy", n, -1, 0))))
        for name, n in REGIMES
    ]  # fmt: skip
    lines.append(
        "Attention entropy H / ln T from lambda 1 to lambda 1000: "
        + "; ".join(f"N = {n:g}: {a:.3f} -> {b:.3f}" for _, n, a, b in ent)
        + "."
    )
    head_size = f"{hcfg['inputs']['batch']} x {hcfg['inputs']['length']}"
    size = f"{cfg['inputs']['batch']} x {cfg['inputs']['length']}"
    lines += [
        "",
        f"**Sharper attention, by regime** (lambda {lams[-1]:g} minus lambda {lams[0]:g}, "
        "paired by seed):",
        "",
    ]
    verdicts = {}
    for name, n in REGIMES:
        h_hi = _near(hl, lams[-1])
        ih = _near(head.axes["drift_norm"], n)
        ah, bh = head["out_cos_gain"][ih, 0], head["out_cos_gain"][ih, h_hi]
        i = _near(soft.axes["drift_norm"], n)
        r_head, r_soft = room(head, "out_cos_gain", ih, 0), room(soft, "out_cos_gain", i, 0, 0)
        ab, bb = _soft(soft, "out_cos_gain", n, 0, 0), _soft(soft, "out_cos_gain", n, -1, 0)
        aa, ba = _soft(soft, "out_cos_gain", n, 0, 1), _soft(soft, "out_cos_gain", n, -1, 1)
        ch, vh = cell(bh - ah, r_head, resolution(head, ah, bh))
        cb = cell(bb - ab, r_soft, resolution(soft, ab, bb))
        ca = cell(ba - aa, r_soft, resolution(soft, aa, ba))
        verdicts[name] = vh
        lines.append(
            f"- {name} (N = {n:g}): at {head_size} sharper attention {WORDS[vh]} the global "
            f"anisotropy the block adds ({ch}, {100 * float(np.mean(bh - ah) / np.mean(ah)):+.1f}% "
            f"of its lambda-1 value; {vh}); at {size}: both branches {cb[0]} ({cb[1]}), the "
            f"attention alone {ca[0]} ({ca[1]})."
        )
    lines += [
        "",
        f"**The block's added global anisotropy along lambda** (both branches, {head_size}, "
        "seed mean ± 95% CI; H / ln T in brackets):",
        "",
        "| lambda | " + " | ".join(f"{name}, N = {n:g}" for name, n in REGIMES) + " |",
        "|---|" + "---|" * len(REGIMES),
    ]
    for j, lam in enumerate(hl):
        row = []
        for _, n in REGIMES:
            i = _near(head.axes["drift_norm"], n)
            g = cell(head["out_cos_gain"][i, j], room(head, "out_cos_gain", i, 0))[0]
            row.append(f"{g} [{np.mean(head['attn_entropy'][i, j]):.3f}]")
        lines.append(f"| {lam:.3g} | " + " | ".join(row) + " |")
    # the clamps at matching entropies, N ~ |x|
    n = REGIMES[1][1]
    betas = clamps["shared"].axes["pattern_beta"]
    lines += [
        "",
        f"**The clamps at matching entropies** (N = {n:g}, both branches, global gain minus the "
        "uniform pattern (beta 0), paired by seed):",
        "",
        "| beta | H / ln T | " + " | ".join(label for _, label in CLAMPS) + " |",
        "|---|---|" + "---|" * len(CLAMPS),
    ]
    i = _near(clamps["shared"].axes["drift_norm"], n)
    r_clamps = room(clamps["shared"], "out_cos_gain", i, 0, 0)
    for b in range(1, len(betas)):
        h = float(np.mean(clamps["shared"]["attn_entropy"][i, b, 0]))
        cells = []
        for v, _ in CLAMPS:
            a, x = clamps[v]["out_cos_gain"][i, 0, 0], clamps[v]["out_cos_gain"][i, b, 0]
            c, verdict = cell(x - a, r_clamps, resolution(clamps[v], a, x))
            cells.append(f"{c} ({verdict})")
        lines.append(f"| {betas[b]:g} | {h:.3f} | " + " | ".join(cells) + " |")
    # which clamp the sharpest softmax resembles: the clamp gain at its entropy, against it
    h_soft = float(np.mean(_soft(soft, "attn_entropy", n, -1, 0)))
    b = int(np.argmin(np.abs(clamps["shared"].mean("attn_entropy")[i, :, 0] - h_soft)))
    g_soft = _soft(soft, "out_cos_gain", n, -1, 0) - _soft(soft, "out_cos_gain", n, 0, 0)
    near = []
    for v, label in CLAMPS:
        g = clamps[v]["out_cos_gain"][i, b, 0] - clamps[v]["out_cos_gain"][i, 0, 0]
        lo, hi = seed_ci(g_soft - g, -1)
        near.append(
            (abs(float(np.mean(g_soft - g))), label, cell(g, r_clamps)[0], float(lo), float(hi))
        )
    near.sort()
    lines += [
        "",
        f"At lambda {lams[-1]:g} (H / ln T = {h_soft:.3f} at N = {n:g}) the softmax's change, "
        f"{cell(g_soft, r_clamps)[0]}, is closest to the {near[0][1]} clamp's at beta {betas[b]:g} "
        f"({near[0][2]}; softmax minus clamp [{near[0][3]:+.4f}, {near[0][4]:+.4f}]), then "
        + ", ".join(f"{lab} ({c})" for _, lab, c, _, _ in near[1:])
        + ".",
    ]
    return "\n".join(lines) + "\n"


def series(root: Path) -> dict:
    """label -> (x, mean, (lo, hi)) of the figure: per point the seed mean of H / ln T and of
    out_cos_gain, and the Student-t 95% interval of the gain's mean over the seeds
    (simlab.engine.results.seed_ci), at N ~ |x|: the softmax along lambda and the three clamps
    along beta, both branches and the attention alone."""
    d = load(root)
    soft, clamps = d["soft"], d["clamps"]
    n = REGIMES[1][1]
    out = {}
    for branch, what in ((0, "both branches"), (1, "attention alone")):
        for label, v in CLAMPS_AND_SOFTMAX:
            r = soft if v is None else clamps[v]
            i, b = _near(r.axes["drift_norm"], n), _near(r.axes["branch"], branch)
            g = r["out_cos_gain"][i, :, b]  # (points, seeds)
            x = r.mean("attn_entropy")[i, :, b]
            out[f"{label}, {what}"] = (x, g.mean(-1), seed_ci(g, -1))
    return out


def draw(root: Path):
    """The figure (a matplotlib Figure): the block's added global anisotropy against H / ln T
    at N ~ |x|, both branches (left) and the attention alone (right), each curve with its
    seeds' 95% interval of the mean shaded (`series`). The curves share their seeds, so a
    difference between two is resolved more finely than the overlap of their intervals shows
    (the paired intervals: the printed tables)."""
    from matplotlib.figure import Figure

    lines = series(root)
    n_seeds = load(root)["soft"].n_seeds
    f = Figure(figsize=(11, 4.8))
    axs = f.subplots(1, 2, sharey=True)
    f.subplots_adjust(left=0.08, right=0.80, bottom=0.12, top=0.84, wspace=0.06)
    for ax, what in zip(axs, ("both branches", "attention alone"), strict=True):
        for j, (label, _) in enumerate(CLAMPS_AND_SOFTMAX):
            x, y, (lo, hi) = lines[f"{label}, {what}"]
            big = "self" in label  # drawn larger, underneath "other", which it coincides with
            ax.fill_between(x, lo, hi, color=f"C{j}", alpha=0.15, lw=0)
            ax.plot(x, y, "-", marker="os^D"[j], color=f"C{j}", label=label, ms=9 if big else 5)
        ax.set_title(what, fontsize=10)
        ax.set_xlabel("attention entropy H / ln T (seed mean)")
        ax.grid(True, alpha=0.3)
    axs[0].set_ylabel(f"out_cos_gain (seed mean; shaded: 95% CI, {n_seeds} seeds)")
    axs[1].legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
    f.suptitle(
        f"the block's added global anisotropy at N = {REGIMES[1][1]:g}: softmax and clamps\n"
        "(token (self) and token (other) coincide: the larger triangles under the diamonds)",
        fontsize=11,
    )
    return f


def figure(root: Path, out: Path) -> Path:
    """`draw` saved to `out` (simlab.plot.save_figure)."""
    from simlab import plot

    return plot.save_figure(draw(root), out)


if __name__ == "__main__":
    args = sys.argv[1:]
    fig = None
    if "--figure" in args:
        k = args.index("--figure")
        fig = Path(args[k + 1])
        del args[k : k + 2]
    base = Path(args[0] if args else "figures/data")
    sys.stdout.write(main(base))
    if fig is not None:
        figure(base, fig)
