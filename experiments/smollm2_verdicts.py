"""The verdicts and figures of the SmolLM2-135M counterfactual study (docs/gallery.md, "On a
trained decoder"), from the data experiments/smollm2_counterfactual.py committed under
figures/data/smollm2_counterfactual (the protocol and the rule: that script's docstring).

    python experiments/smollm2_verdicts.py [figures/data]            # prints the markdown block
    python experiments/smollm2_verdicts.py --write [figures/data]    # rewrites docs/gallery.md's
    python experiments/smollm2_verdicts.py --figures [figures/data] [figures]   # draws the PNGs

Effects: condition minus trained, per seed (paired), the seed mean +- the 95% Student-t
half-width; the verdict by experiments/gallery_geometry.py's rule (material: 1% of the scale;
the float32 floor at n = B T, d = 576). A setting is one corpus (2 windows of 256 tokens per
seed). The summary states a verdict only where every setting gives it, and names the layers
where the settings disagree. tests/test_docs.py checks that docs/gallery.md carries the
printed block character for character.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gallery_geometry import floor, verdict, verdicts_cli  # noqa: E402  (the declared rule, one copy)
from smollm2_counterfactual import (  # noqa: E402
    CONDITIONS,
    COSINES,
    MEASURES,
    OUT,
    READS,
)

from simlab.engine.results import seed_ci  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GALLERY = ROOT / "docs" / "gallery.md"
BLOCK = "smollm2-counterfactual"
MARK = "(python experiments/smollm2_verdicts.py --write figures/data; do not edit by hand)"
D_MODEL = 576
NAMES = [m for m, _ in MEASURES]
LABELS = dict(MEASURES)
EFFECTS = CONDITIONS[1:]  # each minus "trained"


def load(root: Path) -> tuple[dict, dict]:
    """(meta, corpus -> its npz arrays) of the committed data, corpora in the declared order."""
    d = root / OUT
    meta = json.loads((d / "meta.json").read_text())
    data = {}
    for c in ("stdlib", "kjv"):
        if (d / f"results_{c}.npz").is_file():
            data[c] = dict(np.load(d / f"results_{c}.npz"))
    return meta, data


def effect(v, li: int, cond: str, read: str, measure: str, n_tok: int) -> dict | None:
    """Condition minus trained at studied layer index li (v: values (layer, seed, cond, read,
    measure)); None where the condition is not defined (NaN)."""
    r, m = READS.index(read), NAMES.index(measure)
    x = v[li, :, CONDITIONS.index(cond), r, m]
    y = v[li, :, 0, r, m]
    if np.isnan(x).any():
        return None
    d = x - y
    lo, hi = (float(t) for t in seed_ci(d, -1))
    mean = float(np.mean(d))
    scale = float(np.mean(1.0 - y)) if measure in COSINES else abs(float(np.mean(y)))
    res = floor(n_tok, D_MODEL, float(np.mean(x)), float(np.mean(y)))
    return {"mean": mean, "half": (hi - lo) / 2, "verdict": verdict(lo, hi, mean, scale, res)}


def _num(x: float, measure: str) -> str:
    if measure in COSINES:
        return f"{x:+.4f}" if abs(x) >= 1e-3 else f"{x:+.1e}"
    return f"{x:+.3g}"


def cell(e, measure: str) -> str:
    if e is None:
        return "—"
    half = f"{e['half']:.4f}" if measure in COSINES else f"{e['half']:.2g}"
    if measure in COSINES and e["half"] < 1e-3:
        half = f"{e['half']:.0e}"
    return f"{_num(e['mean'], measure)} ± {half} ({e['verdict']})"


def _mean_ci(x) -> tuple[np.ndarray, np.ndarray]:
    """Seed mean and 95% Student-t half-width over the leading (seed) axis."""
    lo, hi = (np.asarray(t) for t in seed_ci(np.asarray(x), 0))
    return np.mean(x, 0), (hi - lo) / 2


def block(root: Path) -> str:
    meta, data = load(root)
    layers, n_tok = meta["layers"], meta["batch"] * meta["length"]
    corpora = list(data)
    missing = [c for c in ("stdlib", "kjv") if c not in data]
    lines = [
        f"Model {meta['model']} (GGUF sha256 {meta['gguf_sha256'][:12]}…), studied layers "
        f"{', '.join(map(str, layers))} each on its own (its input the model's hidden state "
        f"below it; the layers above unchanged), {meta['seeds']} seeds of {meta['batch']} x "
        f"{meta['length']} tokens per corpus ({', '.join(corpora)}"
        + (f"; not run: {', '.join(missing)}" if missing else "")
        + "). Conditions on the studied layer: the causal uniform clamp, the sink clamp on "
        "every head, lambda = q_scale = k_scale 0.5 and 2, and the massive activation removed "
        "from its input (layers whose input carries it); each effect is the condition minus "
        "the trained layer, paired by seed, seed mean ± 95% Student-t half-width, verdict by "
        "experiments/gallery_geometry.py's rule (material: 1% of the scale: the room left "
        "1 - trained for the cosines, |trained| for the others). n = "
        f"{n_tok} tokens (510 without position 0), d = {D_MODEL}.",
        "",
    ]
    # the trained model at the studied layers
    lines += [
        "**The trained model at the studied layers** (the layer's input cosine, then its output's "
        "measures; seed mean):",
        "",
        "| corpus | layer | input cos | cos | within | between | cos without pos 0 | "
        "pos-0 norm ratio | PR (n 512) | PR without pos 0 (n 510) | sink mass, heads' mean | "
        "sink mass, massive removed |",
        "|---|---|" + "---|" * 10,
    ]
    for c in corpora:
        v, h = data[c]["values"], data[c]["heads"]
        for li, layer in enumerate(layers):
            t = np.mean(v[li, :, 0, 0], 0)
            sm = float(np.mean(h[li, :, 0, 0]))
            rm = h[li, :, CONDITIONS.index("massive removed"), 0]
            rms = "—" if np.isnan(rm).any() else f"{float(np.mean(rm)):.3f}"
            lines.append(
                f"| {c} | {layer} | {float(np.mean(data[c]['states'][:, layer, 0])):.4f} | "
                f"{t[0]:.4f} | {t[1]:.4f} | {t[2]:.4f} | {t[3]:.4f} | "
                f"{t[4]:.1f} | {t[5]:.2f} | {t[6]:.2f} | {sm:.3f} | {rms} |"
            )
    lines.append("")
    verdicts = {}  # (read, cond, measure) -> corpus -> [verdict per layer]
    for c in corpora:
        v = data[c]["values"]
        for read in READS:
            where = "the layer's output" if read == "layer" else "the last layer's output (29)"
            lines += [
                f"<details><summary><b>{c}, read at {where}</b>: condition minus trained</summary>",
                "",
                "| layer | measure | " + " | ".join(EFFECTS) + " |",
                "|---|---|" + "---|" * len(EFFECTS),
            ]
            for li, layer in enumerate(layers):
                for m in NAMES:
                    es = [effect(v, li, k, read, m, n_tok) for k in EFFECTS]
                    lines.append(
                        f"| {layer} | {LABELS[m]} | " + " | ".join(cell(e, m) for e in es) + " |"
                    )
                    for k, e in zip(EFFECTS, es, strict=True):
                        got = verdicts.setdefault((read, k, m), {}).setdefault(c, [])
                        got.append(None if e is None else e["verdict"])
            lines += ["", "</details>", ""]
    lines += [
        f"**Summary** (verdicts that hold in every setting run: {', '.join(corpora)}; layers "
        'by verdict; "settings differ" names the layers where they do not):',
        "",
    ]
    for read in READS:
        for k in EFFECTS:
            parts = [
                f"{LABELS[m]}: {summary(verdicts[read, k, m], layers)}"
                for m in NAMES
                if any(x is not None for x in verdicts[read, k, m][corpora[0]])
            ]
            where = "at the layer" if read == "layer" else "at the last layer"
            lines.append(f"- {k} minus trained, {where}: " + "; ".join(parts) + ".")
    return "\n".join(lines).rstrip() + "\n"


def summary(per_corpus: dict[str, list], layers) -> str:
    """Layers grouped by the verdict every corpus gives; the rest as "settings differ in"."""
    groups, differ = {}, []
    for i, layer in enumerate(layers):
        vs = {per_corpus[c][i] for c in per_corpus}
        if vs == {None}:
            continue
        if len(vs) == 1:
            groups.setdefault(vs.pop(), []).append(str(layer))
        else:
            differ.append(str(layer))
    out = [f"{v} in {', '.join(ls)}" for v, ls in sorted(groups.items())]
    if differ:
        out.append(f"settings differ in {', '.join(differ)}")
    return ", ".join(out)


def write(root: Path) -> None:
    from simlab.studies.table import replace_blocks

    text = GALLERY.read_text()
    GALLERY.write_text(replace_blocks(text, {BLOCK: block(root)}, MARK, GALLERY))


def figures(root: Path, out: Path) -> list[Path]:
    """Per layer, the trained model's anisotropy with and without position 0, the position-0
    norm ratio and the participation ratios (smollm2_per_layer.png); each effect with its
    interval per studied layer, at the layer and at the last layer
    (smollm2_effects_layer.png, smollm2_effects_last.png)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta, data = load(root)
    layers, n_tok = meta["layers"], meta["batch"] * meta["length"]
    title = f"SmolLM2-135M, {meta['seeds']} seeds x {meta['batch']} x {meta['length']} tokens"
    style = {"stdlib": "-", "kjv": "--"}
    paths = []
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    for c, f in data.items():
        st = f["states"]  # (seed, hidden state, measure)
        xs = np.arange(st.shape[1])
        for m, col in (("cos", "C0"), ("cos_rest", "C1"), ("cos_within", "C2"),
                       ("cos_between", "C3")):  # fmt: skip
            mu, h = _mean_ci(st[:, :, NAMES.index(m)])
            ax[0].errorbar(xs, mu, h, color=col, ls=style[c], label=f"{LABELS[m]}, {c}")
        mu, h = _mean_ci(st[:, :, NAMES.index("pos0_norm_ratio")])
        ax[1].errorbar(xs, mu, h, color="C4", ls=style[c], label=c)
        for m, col in (("participation_ratio", "C5"), ("participation_ratio_rest", "C6")):
            mu, h = _mean_ci(st[:, :, NAMES.index(m)])
            ax[2].errorbar(xs, mu, h, color=col, ls=style[c], label=f"{LABELS[m]}, {c}")
    ax[0].set(xlabel="hidden state (0 embeddings, l: output of layer l - 1)",
              ylabel="mean pairwise cosine", title="anisotropy, trained")  # fmt: skip
    ax[1].set(xlabel="hidden state", ylabel="|h_0| / median |h_t|", yscale="log",
              title="position 0's norm over the median")  # fmt: skip
    ax[2].set(xlabel="hidden state", ylabel="(tr C)^2 / ||C||_F^2", yscale="log",
              title=f"participation ratio (n {n_tok} / {n_tok - 2}, d {D_MODEL})")  # fmt: skip
    for a in ax:
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    fig.suptitle(f"{title}: the trained model per layer (mean ± 95% CI)")
    fig.tight_layout()
    paths.append(out / "smollm2_per_layer.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    shown = ("cos", "cos_within", "cos_between", "cos_rest", "pos0_norm_ratio",
             "participation_ratio_rest")  # fmt: skip
    for read in READS:
        fig, axs = plt.subplots(2, 3, figsize=(15, 8))
        for a, m in zip(axs.flat, shown, strict=True):
            for ki, k in enumerate(EFFECTS):
                for ci, (c, f) in enumerate(data.items()):
                    pts = [(li, effect(f["values"], li, k, read, m, n_tok))
                           for li in range(len(layers))]  # fmt: skip
                    pts = [(x, e) for x, e in pts if e is not None]
                    if not pts:
                        continue
                    off = (ki - 2) * 0.15 + (ci - 0.5) * 0.06
                    a.errorbar([x + off for x, _ in pts], [e["mean"] for _, e in pts],
                               [e["half"] for _, e in pts], color=f"C{ki}", ls=style[c],
                               marker="o", ms=3, capsize=2,
                               label=f"{k}, {c}")  # fmt: skip
            a.axhline(0, color="k", lw=0.6)
            if m in ("pos0_norm_ratio", "participation_ratio_rest"):
                a.set_yscale("symlog", linthresh=1.0)
            a.set(xlabel="studied layer", ylabel="condition - trained", title=LABELS[m])
            a.set_xticks(range(len(layers)), [str(x) for x in layers])
            a.grid(alpha=0.3)
        axs.flat[0].legend(fontsize=6, ncol=2)
        where = "the layer's output" if read == "layer" else "the last layer's output"
        fig.suptitle(f"{title}: each effect read at {where} (mean ± 95% CI, paired by seed)")
        fig.tight_layout()
        paths.append(out / f"smollm2_effects_{read}.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


if __name__ == "__main__":
    verdicts_cli(sys.argv[1:], write, figures, block)
