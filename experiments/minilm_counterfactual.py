"""Counterfactuals on every layer of a real trained BERT (docs/gallery.md, "On a trained model";
docs/checkpoints.md, "A real trained model"): does a trained layer's own attention make its
output more anisotropic than uniform or token-specific attention would, and does sharpening it?

    pip install -e '.[models]'
    python experiments/minilm_counterfactual.py run [figures/data]   # computes, writes the data
    python experiments/minilm_counterfactual.py [figures/data]       # prints the markdown block

Declared before the run (committed with this script, before its data):
  model       all-MiniLM-L6-v2 (experiments/minilm_layers.py), each of its 6 layers on its own:
              the layer's input is the model's own hidden state below it (default knobs); the
              studied layer's attention or knobs change, nothing else; the layers above it run
              unchanged on its modified output;
  inputs      per seed s (20 seeds, numpy Generator(s)): the first B = 4 of the 8 windows of
              minilm_layers.py's seed s (smaller than the other MiniLM studies' 8 x 128 to fit
              the CPU time this machine has: n = 512 tokens > d = 384, so the covariance
              measures keep full rank), T = 128 tokens, [CLS] ... [SEP]: "text" (the standard
              library's docstrings through the model's tokenizer) and "ids" (uniform over the
              vocabulary); the same windows for every condition (paired);
  conditions  on the studied layer (CONDITIONS below, in this order):
              lambda = q_scale = k_scale 0.01, 1 (the trained layer) and 100; the range moves
              every head from H / ln T = 1 to one-hot (printed per layer: the lowest head's
              H / ln T at lambda 0.01 and the highest head's at lambda 100);
              temperature 1e-4 (logits q k / (sqrt(K) t): t is lambda^-2 exactly, so it must
              equal lambda 100: printed as the largest difference);
              attn_gain 0 and mlp_gain 0 (the attention or the MLP branch removed);
              one head clamped to uniform (its queries multiplied by 0, so its logits are 0 and
              its weights exactly 1 / T; every other head unchanged): the layer's strongest sink
              head and its weakest, by the [CLS] + [SEP] mass (seed mean) of minilm_heads.py's
              committed data, per input kind (SINK_HEADS, printed);
              the clamps of simlab.core.patterns replacing the layer's attention in every head:
              "uniform", and "shared" / "token" / "other" at the entropy of the trained softmax,
              matched per seed: beta solved from the closed form H(beta) / ln T = the layer's
              mean H / ln T over heads and rows at lambda 1;
  read        the layer's output ("layer") and the last layer's output ("last"): the global
              mean pairwise cosine, within-sequence and centred cosine, the common share
              |hbar|^2 / mean |h|^2, the participation ratio and IsoScore of the centred
              covariance, the top direction's share (minilm_layers.layer_metrics); the layer's
              input read the same way (out_cos_gain = out cos - input cos); per head H / ln T;
  effects     paired by seed: the trained layer (lambda 1) minus uniform, minus token, other
              and shared at its entropy; sharpening lambda 100 - 1, flattening lambda 0.01 - 1;
              each branch: the trained layer minus the branch removed (what the branch adds);
              a single head: its clamp minus the trained layer;
  verdict     the rule of experiments/gallery_geometry.py (seed mean +- 95% Student-t interval;
              material = 1% of the scale; the float32 floor at n = B T, d = 384): the scale is
              the room left, mean(1 - cos of the layer's input) for out_cos_gain, mean(1 - cos
              of the trained last output) for the last read's cosine, |mean of the reference|
              (the trained layer, or the clamp) for every other measure.
What it cannot say: one model, fine-tuned for sentence embeddings (not a raw masked-LM
checkpoint); no training-step series offline; the windows are 128 tokens, not the paper's 512.
"""

import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gallery_geometry import floor, verdict  # noqa: E402  (the declared rule, one copy)
from minilm_layers import (  # noqa: E402
    LENGTH,
    MODEL,
    SEEDS,
    cli,
    draw_windows,
    layer_metrics,
    setup,
)
from minilm_layers import METRICS as MEASURES  # noqa: E402

from simlab.engine import records  # noqa: E402
from simlab.engine.results import seed_ci  # noqa: E402

OUT = "minilm_counterfactual"
INPUTS = ("text", "ids")
READS = ("layer", "last")
LAMBDAS = (0.01, 1.0, 100.0)
TEMPERATURES = (1e-4,)
GAINS = (("attn_gain", 0.0), ("mlp_gain", 0.0))
SINKS = ("strongest sink", "weakest sink")
CLAMPS = ("shared", "token", "other")
MATCHED = (1.0,)  # the lambdas whose softmax entropy the clamps match
N_HEADS, WINDOWS = 12, 4


def conditions() -> list[tuple[str, str, dict, float | None]]:
    """(name, pattern, knobs, matched lambda) of every condition, in the stored order; knobs
    "sink" = i clamps the head sink_heads()[layer, input][i] to uniform (its queries times 0)."""
    out = [(f"lambda {lam:g}", "softmax", {"lambda": lam}, None) for lam in LAMBDAS]
    out += [(f"temperature {t:g}", "softmax", {"temperature": t}, None) for t in TEMPERATURES]
    out += [(f"{k} {g:g}", "softmax", {k: g}, None) for k, g in GAINS]
    out += [(f"{k} head uniform", "softmax", {"sink": i}, None) for i, k in enumerate(SINKS)]
    out += [("uniform", "uniform", {}, None)]
    out += [(f"{c} at lambda {m:g}", c, {}, m) for m in MATCHED for c in CLAMPS]
    return out


CONDITIONS = conditions()
NAMES = [c[0] for c in CONDITIONS]


def head_scales(n_heads: int, head: int | None = None, lam: float = 1.0) -> np.ndarray:
    """The per-head query scale (H, 1) (broadcast over the head's K dims by
    attention.shift_q): lam everywhere, 0 on `head` (its logits 0, its weights 1 / T)."""
    s = np.full((n_heads, 1), lam)
    if head is not None:
        s[head] = 0.0
    return s


def beta_for_entropy(frac, n: int):
    """beta >= 0 with H(beta) / ln n = frac for a clamped row of n keys (the closed form of
    simlab.core.patterns.row_stats, inverted on a grid of beta in float64: H decreases from
    ln n at beta 0 to 0)."""
    from simlab.core import patterns

    grid = np.linspace(0.0, 80.0, 160001)
    with jax.enable_x64(True):
        h = np.asarray(patterns.row_stats(jnp.asarray(grid), jnp.float64(n))[2]) / np.log(n)
    return np.interp(np.asarray(frac, np.float64), h[::-1], grid[::-1])


def sink_heads(root: Path) -> np.ndarray:
    """(layer, input, 2): each layer's strongest and weakest sink head per input kind, by the
    [CLS] + [SEP] mass (seed mean) of minilm_heads.py's committed data."""
    d = root / "minilm_heads"
    stats = json.loads((d / "meta.json").read_text())["stats"]
    v = np.load(d / "results.npz")["values"]  # (layer, input, seed, head, stat)
    mass = np.mean(v[..., stats.index("cls_mass")] + v[..., stats.index("sep_mass")], axis=2)
    return np.stack([np.argmax(mass, -1), np.argmin(mass, -1)], axis=-1)


def _knobs(items, sinks) -> dict:
    """Stacked knob arrays for the softmax points `items` (dicts of conditions()); sinks: the
    (strongest, weakest) sink head of this layer and input."""
    from simlab.core.knobs import knob_arrays

    pts = []
    for it in items:
        lam = it.get("lambda", 1.0)
        head = None if "sink" not in it else int(sinks[it["sink"]])
        k = knob_arrays({key: v for key, v in it.items() if key not in ("lambda", "sink")})
        k["k_scale"] = jnp.asarray(lam, k["k_scale"].dtype)
        k["q_scale"] = jnp.asarray(head_scales(N_HEADS, head, lam), k["q_scale"].dtype)
        pts.append(k)
    return _stack(pts)


def layer_program(ck, layer: int, pattern: str):
    """jit(vmap over knob points) of (reads of the layer's output, of the last output, per-head
    H / ln T) for layer `layer` with attention `pattern`; weights and input are arguments (data,
    never constants the compiler folds)."""
    from simlab.core import block as blocks
    from simlab.core.knobs import knob_arrays

    spec = ck.block(1, pattern=pattern)
    n_up = ck.n_layers - layer - 1
    up = ck.block(n_up) if n_up else None

    def point(p, p_up, x_BTD, knobs):
        z = jnp.zeros((spec.n_heads, spec.d_head), x_BTD.dtype)
        lo = blocks.layer_apply(spec, p, x_BTD, knobs, z, z)
        y = lo.y
        if up is not None:
            zz = jnp.zeros((n_up, spec.n_heads, spec.d_head), x_BTD.dtype)
            last = blocks.stack_apply(
                up, p_up, y, knob_arrays({}, y.dtype), zz, zz, observe=lambda l: ()
            )[0]
        else:
            last = y
        ent = jnp.mean(lo.row_entropy, axis=(0, 2)) / jnp.log(x_BTD.shape[1])
        return layer_metrics(y), layer_metrics(last), ent

    return jax.jit(jax.vmap(point, in_axes=(None, None, None, 0)))


def run(root: Path, layers=None, seeds: int = SEEDS) -> None:
    """Compute and write the data (every layer and seed by default; fewer for a check)."""
    from simlab.core.knobs import knob_arrays

    ck, _, cls, sep, _, corpus = setup()
    assert ck.block(1).n_heads == N_HEADS
    layers = list(range(ck.n_layers)) if layers is None else list(layers)
    sinks = sink_heads(root if (root / "minilm_heads").is_dir() else Path("figures/data"))
    soft_items = [c[2] for c in CONDITIONS if c[1] == "softmax"]
    n_soft = len(soft_items)
    shape = (len(layers), len(INPUTS), seeds, len(CONDITIONS))
    values = np.zeros(shape + (len(READS), len(MEASURES)))
    entropy = np.zeros(shape + (N_HEADS,))
    inputs = np.zeros((len(layers), len(INPUTS), seeds, len(MEASURES)))
    betas = np.zeros((len(layers), len(INPUTS), seeds, len(MATCHED)))
    i_match = [LAMBDAS.index(m) for m in MATCHED]
    progs, weights = {}, {}
    for layer in layers:
        progs[layer] = {p: layer_program(ck, layer, p) for p in ("softmax", "uniform", *CLAMPS)}
        up = range(layer + 1, ck.n_layers)
        weights[layer] = (
            jax.tree.map(lambda a: a[0], ck.stacked([layer])),
            ck.stacked(up) if len(up) else {},
        )
    uniform = _stack([knob_arrays({})])
    for s in range(seeds):
        win = draw_windows(np.random.default_rng(s), corpus, cls, sep, ck.vocab)
        for j, inp in enumerate(INPUTS):
            hs = ck.hidden_states(win[inp][:WINDOWS])
            for li, layer in enumerate(layers):
                x, (p, p_up), prog = hs[layer], weights[layer], progs[layer]
                inputs[li, j, s] = np.asarray(layer_metrics(x))
                kn = _knobs(soft_items, sinks[layer, j])
                a, b, h = prog["softmax"](p, p_up, x, kn)
                values[li, j, s, :n_soft] = np.stack([np.asarray(a), np.asarray(b)], axis=1)
                entropy[li, j, s, :n_soft] = np.asarray(h)
                a, b, h = prog["uniform"](p, p_up, x, uniform)
                values[li, j, s, n_soft] = np.stack([np.asarray(a), np.asarray(b)], axis=1)[0]
                entropy[li, j, s, n_soft] = np.asarray(h)[0]
                frac = [float(np.mean(entropy[li, j, s, i])) for i in i_match]
                betas[li, j, s] = beta_for_entropy(frac, LENGTH)
                kn = _stack([knob_arrays({"pattern_beta": float(bt)}) for bt in betas[li, j, s]])
                for name in CLAMPS:
                    a, b, h = prog[name](p, p_up, x, kn)
                    for m, lam in enumerate(MATCHED):
                        k = NAMES.index(f"{name} at lambda {lam:g}")
                        values[li, j, s, k] = np.stack([np.asarray(a[m]), np.asarray(b[m])])
                        entropy[li, j, s, k] = np.asarray(h[m])
        print(f"seed {s + 1}/{seeds}", file=sys.stderr, flush=True)
    d = root / OUT
    d.mkdir(parents=True, exist_ok=True)
    np.savez(d / "results.npz", values=values, entropy=entropy, inputs=inputs, betas=betas)
    meta = {
        "model": MODEL,
        "files": dict(ck.hashes),
        "seeds": seeds,
        "layers": layers,
        "batch": WINDOWS,
        "length": LENGTH,
        "inputs": list(INPUTS),
        "conditions": NAMES,
        "reads": list(READS),
        "measures": [m for m, _ in MEASURES],
        "matched_lambdas": list(MATCHED),
        "sink_heads": sinks.tolist(),
        "dims": {
            "values": ["layer", "inputs", "seed", "condition", "read", "measure"],
            "entropy": ["layer", "inputs", "seed", "condition", "head"],
            "inputs": ["layer", "inputs", "seed", "measure"],
            "betas": ["layer", "inputs", "seed", "matched lambda"],
            "sink_heads": ["layer", "inputs", "strongest, weakest"],
        },
        "versions": records.versions("tokenizers"),
        "dtype": str(jnp.zeros(()).dtype),
    }
    (d / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")


def _stack(pts):
    return {name: jnp.stack([p[name] for p in pts]) for name in pts[0]}


if __name__ == "__main__":
    cli(run, lambda root: "")
