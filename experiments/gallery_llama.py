"""The reading of docs/gallery.md section 9 (experiment 1 on an untrained Llama-style block),
printed from figures/data/paper_llama: per drift N, the added cosine out_cos - input_cos at
lambda 1, and along lambda where the attention entropy H / ln T falls below 0.5 (the contour the
figure draws), how much the block still adds there, and the first lambda where it adds nothing
(seed mean <= 0). The numbers are the committed data's seed means (3 seeds) and 95% Student-t
half-widths (Results.ci_half_width).

    python experiments/gallery_llama.py [figures/data]           # prints the markdown block
    python experiments/gallery_llama.py --write [figures/data]   # rewrites docs/gallery.md's
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import simlab
from simlab.studies.table import replace_blocks

BLOCK = "paper-llama"
MARK = "(python experiments/gallery_llama.py --write figures/data; do not edit by hand)"
CONTOUR = 0.5


def rows(root: Path) -> list[tuple]:
    """(N, gain at lambda 1 +- hw, (lambda, H, gain +- hw) at the first lambda with H < 0.5,
    (the first lambda with gain <= 0, its H) or None) per drift N whose gain at lambda 1 is at
    least 1e-3."""
    r = simlab.load(root / "paper_llama")
    drifts, lambdas = r.axes["drift_norm"], r.axes["lambda"]
    g, hw = r.mean("out_cos_gain"), r.ci_half_width("out_cos_gain")
    h = r.mean("attn_entropy")
    out = []
    for i, n in enumerate(drifts):
        if g[i, 0] < 1e-3:
            continue
        below = np.flatnonzero(h[i] < CONTOUR)
        j = below[0]
        gone = np.flatnonzero(g[i] <= 0)
        z = gone[0] if gone.size else None
        out.append(
            (
                n,
                (g[i, 0], hw[i, 0]),
                (lambdas[j], h[i, j], g[i, j], hw[i, j]),
                None if z is None else (lambdas[z], h[i, z]),
            )
        )
    return out


def block(root: Path) -> str:
    lines = [
        "| drift N | added cosine at lambda 1 | first lambda with H / ln T < 0.5: lambda, "
        "H / ln T, added cosine | first lambda adding nothing (its H / ln T) |",
        "|---|---|---|---|",
    ]
    for n, (g1, h1), (lj, hj, gj, hwj), z in rows(root):
        zs = "none in the grid" if z is None else f"{z[0]:.3g} ({z[1]:.3f})"
        lines.append(
            f"| {n:.3g} | {g1:+.4f} ± {h1:.1e} | {lj:.3g}, {hj:.3f}, {gj:+.4f} ± {hwj:.1e} | {zs} |"
        )
    return "\n".join(lines) + "\n"


def write(root: Path) -> None:
    doc = Path(__file__).resolve().parents[1] / "docs" / "gallery.md"
    doc.write_text(replace_blocks(doc.read_text(), {BLOCK: block(root)}, MARK, doc))


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "--write":
        write(Path(args[1]) if len(args) > 1 else Path("figures/data"))
    else:
        print(block(Path(args[0]) if args else Path("figures/data")), end="")
