"""The verdicts and figures of the MiniLM counterfactual study (docs/gallery.md, "On a trained
model"; docs/checkpoints.md, "A real trained model"), from the data
experiments/minilm_counterfactual.py committed under figures/data/minilm_counterfactual (the
protocol and the rule: that script's docstring).

    python experiments/minilm_verdicts.py [figures/data]            # prints the markdown block
    python experiments/minilm_verdicts.py --write [figures/data]    # rewrites the docs' blocks
    python experiments/minilm_verdicts.py --figures [figures/data] [figures]   # draws the PNGs

A setting is one corpus and one pool (the first 2 or all 8 windows of a seed: n = 256 or 1024
tokens, d = 384). Effects: a minus b per seed (paired), the seed mean +- the 95% Student-t
half-width; the verdict by experiments/gallery_geometry.py's rule. The covariance measures are
printed over their isotropic Gaussian reference at the setting's own n and d
(simlab.core.finite_sample.isotropic_reference; 1 = what an isotropic sample of that size
reads), so a number is read against its own reference and never compared across n. The summary
states a verdict only where all four settings give it, and names the layers where they do not
with each setting's verdict. tests/test_docs.py checks that the docs carry the printed block
character for character.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gallery_geometry import floor, verdict, verdicts_cli  # noqa: E402  (the declared rule, one copy)
from minilm_counterfactual import (  # noqa: E402
    COSINES,
    COVARIANCE,
    MEASURES,
    NAMES,
    OUT,
    POOLS,
    READS,
)

from simlab.engine.results import seed_ci  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "docs" / "gallery.md", ROOT / "docs" / "checkpoints.md")
BLOCK = "minilm-counterfactual"
MARK = "(python experiments/minilm_verdicts.py --write figures/data; do not edit by hand)"
LABELS = {
    "out_cos": "global cos",
    "out_cos_between": "between-sequence cos",
    "out_cos_within_pooled": "within-sequence cos",
    "out_participation_ratio": "PR / iso",
    "out_isoscore": "IsoScore / iso",
    "out_pc1_share": "top share / iso",
    "out_effective_rank": "eff. rank / iso",
}
REFERENCE = {  # simlab.core.finite_sample's name of each covariance measure
    "out_participation_ratio": "participation_ratio",
    "out_isoscore": "isoscore",
    "out_pc1_share": "pc1_share",
    "out_effective_rank": "effective_rank",
}
# (label, a, b, the reference condition of a covariance measure's scale): a minus b
EFFECTS = (
    ("trained - uniform", "lambda 1", "uniform", "uniform"),
    ("trained - token", "lambda 1", "token at lambda 1", "token at lambda 1"),
    ("sharpening", "lambda 100", "lambda 1", "lambda 1"),
    ("attention branch", "lambda 1", "attn_gain 0", "lambda 1"),
    ("MLP branch", "lambda 1", "mlp_gain 0", "lambda 1"),
)
LAST_EFFECTS = ()  # read at the last layer: none (the amended protocol)
POOL_LAST = POOLS[0]  # the pool the last layer is read on
SHORT = {"raises": "r", "lowers": "l", "no material effect": "n", "unresolved": "u"}


def load(root: Path) -> tuple[dict, dict]:
    """(meta, arrays) of the committed data."""
    d = root / OUT
    return json.loads((d / "meta.json").read_text()), dict(np.load(d / "results.npz"))


def reference(measure: str, n: int, d: int) -> float:
    """A measure's isotropic Gaussian reference at n tokens, d dims (1 for the cosines)."""
    from simlab.core import finite_sample

    if measure not in REFERENCE:
        return 1.0
    return float(finite_sample.isotropic_reference(REFERENCE[measure], n, d))


class Setting:
    """One corpus and pool: values (seed, layer, condition, read, measure) with the covariance
    measures over their reference at this n; the layer inputs (seed, layer, measure)."""

    def __init__(self, meta, data, ci: int, pi: int):
        self.corpus, self.pool = meta["corpora"][ci], meta["pools"][pi]
        self.n = self.pool * meta["length"]
        ref = np.array([reference(m, self.n, meta["d"]) for m in MEASURES])
        self.v = data["values"][ci, :, :, :, :, pi] / ref
        self.inputs = data["inputs"][ci, :, :, pi] / ref
        self.entropy = data["entropy"][ci]
        self.d = meta["d"]

    @property
    def name(self) -> str:
        return f"{self.corpus}, {self.pool} windows"

    def x(self, layer, cond, read, measure):
        return self.v[:, layer, NAMES.index(cond), READS.index(read), MEASURES.index(measure)]

    def effect(self, layer, read, measure, a, b, ref) -> dict:
        x, y = self.x(layer, a, read, measure), self.x(layer, b, read, measure)
        d = x - y
        lo, hi = (float(t) for t in seed_ci(d, -1))
        mean = float(np.mean(d))
        if measure in COSINES:
            base = self.x(layer, "lambda 1", "last", measure) if read == "last" else (
                self.inputs[:, layer, MEASURES.index(measure)])  # fmt: skip
            scale = float(np.mean(1.0 - base))
        else:
            scale = abs(float(np.mean(self.x(layer, ref, read, measure))))
        res = floor(self.n, self.d, float(np.mean(x)), float(np.mean(y)))
        return {"mean": mean, "half": (hi - lo) / 2, "verdict": verdict(lo, hi, mean, scale, res)}


def settings(meta, data) -> list[Setting]:
    return [
        Setting(meta, data, ci, pi)
        for ci in range(len(meta["corpora"]))
        for pi in range(len(meta["pools"]))
    ]


def _num(x: float) -> str:
    return f"{x:+.4f}" if abs(x) >= 1e-3 else f"{x:+.1e}"


def cell(e) -> str:
    half = f"{e['half']:.4f}" if e["half"] >= 1e-3 else f"{e['half']:.0e}"
    return f"{_num(e['mean'])} ± {half} ({e['verdict']})"


def rows():
    """(read, effect, measure) of every verdict row, in the printed order."""
    out = [("layer", e, m) for e in EFFECTS for m in MEASURES]
    return out + [("last", e, m) for e in LAST_EFFECTS for m in COSINES]


def block(root: Path) -> str:
    meta, data = load(root)
    sets = settings(meta, data)
    layers = meta["layers"]
    sha = meta["corpus_text_sha256"]
    lines = [
        f"Model {meta['model']}, each layer on its own (its input the model's hidden state "
        f"below it; the layers above unchanged), {len(meta['seeds'])} seeds of "
        f"{meta['windows']} windows x {meta['length']} tokens per corpus: "
        + "; ".join(
            f"{c} ({meta['corpus_tokens'][c]:,} tokens, text sha256 {sha[c][:12]}…)"
            for c in meta["corpora"]
        )
        + f". Every measure is read on the first {meta['pools'][0]} windows (n = "
        f"{meta['pools'][0] * meta['length']} tokens) and on all {meta['pools'][1]} (n = "
        f"{meta['pools'][1] * meta['length']}) of the same forward, d = {meta['d']}. Conditions "
        "on the studied layer: lambda = q_scale = k_scale 1 (trained) and 100 (sharpened), the "
        "uniform clamp, the token clamp at the trained layer's entropy, the attention or the MLP "
        "branch removed; read at the layer's output. Effects a - b paired by seed (seed mean "
        "± 95% Student-t half-width), verdicts by experiments/gallery_geometry.py's rule "
        "(material: 1% of the room left 1 - input cos for a cosine, of |reference| for a "
        "covariance measure). The covariance "
        "measures are over their isotropic Gaussian reference at the same n and d (/ iso: "
        "1 is an isotropic sample of that size), so a number is read against its own n, "
        "never across n. Wall time "
        f"{meta['wall_s'] / 60:.0f} min on {meta['cpus']} CPUs shared with other jobs (per "
        "seed, with the load: meta.json).",
        "",
        "**The trained model** (seed mean at lambda 1; H / ln T: the heads' mean; cosines of "
        "the layer's input → output):",
        "",
        "| setting | layer | H / ln T | global cos | between-sequence cos | within-sequence cos "
        "| PR / iso | IsoScore / iso | top share / iso | eff. rank / iso |",
        "|---|---|" + "---|" * 8,
    ]
    for s in sets:
        for li, layer in enumerate(layers):
            h = float(np.mean(s.entropy[:, li, NAMES.index("lambda 1")]))
            cos = [
                f"{np.mean(s.inputs[:, li, MEASURES.index(m)]):.3f} → "
                f"{np.mean(s.x(li, 'lambda 1', 'layer', m)):.3f}"
                for m in COSINES
            ]
            cov = [f"{np.mean(s.x(li, 'lambda 1', 'layer', m)):.3f}" for m in COVARIANCE]
            lines.append(f"| {s.name} | {layer} | {h:.3f} | " + " | ".join(cos + cov) + " |")
    lines.append("")
    verdicts = {}  # row -> setting -> [verdict per layer]
    for s in sets:
        lines += [
            f"<details><summary><b>{s.name}</b> (n = {s.n} tokens): the verdict table</summary>",
            "",
            "| read | effect | measure | " + " | ".join(f"layer {x}" for x in layers) + " |",
            "|---|---|---|" + "---|" * len(layers),
        ]
        for read, (label, a, b, ref), m in rows():
            if read == "last" and s.pool != POOL_LAST:
                continue
            es = [s.effect(li, read, m, a, b, ref) for li in range(len(layers))]
            lines.append(
                f"| {read} | {label} | {LABELS[m]} | " + " | ".join(cell(e) for e in es) + " |"
            )
            verdicts.setdefault((read, label, m), {})[s.name] = [e["verdict"] for e in es]
        lines += ["", "</details>", ""]
    lines += [
        "**Summary**: a verdict where all four settings give it, layers by verdict; where they "
        "do not, the layer with the four settings' verdicts in the order "
        + ", ".join(s.name for s in sets)
        + " (r raises, l lowers, n no material effect, u unresolved):",
        "",
        "| read | effect | measure | holds in every setting | settings differ |",
        "|---|---|---|---|---|",
    ]
    for read, (label, *_), m in rows():
        held, differ = summary(verdicts[read, label, m], layers)
        lines.append(f"| {read} | {label} | {LABELS[m]} | {held} | {differ} |")
    return "\n".join(lines).rstrip() + "\n"


def summary(per_setting: dict[str, list], layers) -> tuple[str, str]:
    """(layers grouped by the verdict every setting gives, the rest with each setting's)."""
    groups, differ = {}, []
    for i, layer in enumerate(layers):
        vs = [per_setting[s][i] for s in per_setting]
        if len(set(vs)) == 1:
            groups.setdefault(vs[0], []).append(str(layer))
        else:
            differ.append(f"{layer} ({' '.join(SHORT[v] for v in vs)})")
    held = "; ".join(f"{v} in {', '.join(ls)}" for v, ls in sorted(groups.items()))
    return held or "—", ", ".join(differ) or "—"


def write(root: Path) -> None:
    from simlab.studies.table import replace_blocks

    got = block(root)
    for doc in DOCS:
        doc.write_text(replace_blocks(doc.read_text(), {BLOCK: got}, MARK, doc))


def file_name(label: str, read: str) -> str:
    """minilm_effect_<effect>[_last].png."""
    slug = label.lower().replace(" - ", "_minus_").replace(" ", "_")
    return f"minilm_effect_{slug}{'_last' if read == 'last' else ''}.png"


FILES = [file_name(e[0], "layer") for e in EFFECTS]
FILES += [file_name(e[0], "last") for e in LAST_EFFECTS]


def figures(root: Path, out: Path, only=None) -> list[Path]:
    """One figure per effect (FILES; `only`: those named): per studied layer, the effect with
    its 95% interval, one panel per measure, one line per setting (colour: corpus; line style:
    pool; the last read: the 2-window pool only)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta, data = load(root)
    sets = settings(meta, data)
    layers = meta["layers"]
    colour = {c: f"C{i}" for i, c in enumerate(meta["corpora"])}
    style = dict(zip(meta["pools"], ("--", "-"), strict=True))
    paths = []
    for read, effects, ms in (("layer", EFFECTS, MEASURES), ("last", LAST_EFFECTS, COSINES)):
        for label, a, b, ref in effects:
            if only is not None and file_name(label, read) not in only:
                continue
            rows_ = 2 if len(ms) > len(COSINES) else 1
            fig, axs = plt.subplots(rows_, 4, figsize=(13, 3.3 * rows_ + 0.4), squeeze=False)
            panels = list(axs[0, : len(COSINES)]) + list(axs[1]) if rows_ == 2 else list(axs[0])
            for ax, m in zip(panels, ms, strict=False):
                for k, s in enumerate(sets):
                    if read == "last" and s.pool != POOL_LAST:
                        continue
                    es = [s.effect(li, read, m, a, b, ref) for li in range(len(layers))]
                    off = (k - 1.5) * 0.08
                    ax.errorbar([x + off for x in layers], [e["mean"] for e in es],
                                [e["half"] for e in es], color=colour[s.corpus],
                                ls=style[s.pool], marker="o", ms=3, capsize=2,
                                label=f"{s.name} (n = {s.n})")  # fmt: skip
                ax.axhline(0, color="k", lw=0.6)
                ax.set(xlabel="studied layer", title=LABELS[m])
                ax.set_xticks(layers)
                ax.grid(alpha=0.3)
            handles, names = panels[0].get_legend_handles_labels()
            axs[0, 3].axis("off")  # the legend's panel
            axs[0, 3].legend(handles, names, loc="center", fontsize=9, title="setting")
            for r in range(rows_):
                axs[r, 0].set_ylabel(f"{label}:\n{a} - {b}", fontsize=9)
            where = "the layer's output" if read == "layer" else "the last layer's output"
            cov = "; covariance measures over their isotropic reference at the same n" * (rows_ > 1)
            fig.suptitle(
                f"all-MiniLM-L6-v2, {label} at {where}: per studied layer, seed mean ± 95% CI "
                f"({len(meta['seeds'])} seeds){cov}",
                fontsize=10,
            )
            fig.tight_layout()
            paths.append(out / file_name(label, read))
            fig.savefig(paths[-1], dpi=100)
            plt.close(fig)
    return paths


if __name__ == "__main__":
    verdicts_cli(sys.argv[1:], write, figures, block)
