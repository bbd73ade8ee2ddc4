"""Training dynamics: does the mean query/key drift appear, and does it explain sharpening?

Godey, de la Clergerie & Sagot (EACL 2024, arXiv 2401.12143), section on training: in trained
language models the mean query mq and the mean key mk drift away from the origin along
nearly parallel (or anti-parallel) directions, |mq . mk| grows, and attention gets sharper.
Here a small decoder is trained from scratch on a synthetic corpus (simlab.corpus) and the
statistics are tracked at log-spaced checkpoints on a fixed held-out batch; then the measured
statistics are fed as knobs into the untrained lab (simlab.lab.Lab) to see whether an
untrained block with the same scale and shift reproduces the trained attention entropy.

Model: token embedding + learned positions, `depth` pre-LN causal blocks computed by
simlab.block.stack_apply (the same pure functions, params layout and init as the lab; knobs at
their defaults), final LayerNorm, untied unembedding; AdamW with warm-up + cosine decay.

Tracked, per layer l and head h, from the RAW projections q = LN1(x) W_Q + b_Q, k likewise
(over all B*T held-out tokens; mq, mk the means, q~ = q - mq):
  q_mean_norm |mq|, k_mean_norm |mk|, qk_mean_cos cos(mq, mk) (simlab.metrics.qk_drift),
  qk_mean_dot |mq . mk|, q_rms sqrt(mean |q~|^2), k_rms likewise,
  attn_entropy (simlab.metrics.attn_entropy of the head, normalised), attn_max,
  logit_std, token_logit_std, shift_logit_std: the std over the attended keys j <= i of
  l_ij = q_i.k_j/sqrt(K), of its token-specific part q~_i.k_j/sqrt(K) and of its shared part
  mq.k_j/sqrt(K), RMS over rows i >= 1 (q_i.mk is constant over j: softmax ignores it);
per layer: input_cos, input_cos_within (anisotropy of the layer input, simlab.metrics.anisotropy),
  out_cos, out_cos_within (of the layer output = hidden state), attn_input_corr (mean
  within-sequence cosine of the globally centred LN1(x));
per step: loss (held-out next-token cross-entropy, nats).

Result file (simlab.load): axes (step, layer, head) and every metric has shape
(step, layer, head, seed): a metric that does not depend on head (or layer) has size 1 there
(broadcastable); meta["dims"][name] names the real dims. seed = training seeds (default 1).
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
import time
from collections import OrderedDict
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from simlab import attention as A
from simlab import block as B
from simlab import corpus as C
from simlab import metrics as M
from simlab import results as R
from simlab.init import init_params
from simlab.lab import Lab, knob_arrays
from simlab.spec import BlockSpec, ConfigError, InputSpec


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything a training-dynamics run depends on (FULL: the documented run; QUICK: a
    smaller model, d_model 64 and context 64, for 120 steps)."""
    corpus: str = "zipf"          # "zipf" | "uniform" (simlab.corpus.CorpusSpec.kind)
    vocab: int = 256
    zipf_s: float = 1.1
    branches: int = 4
    noise: float = 0.1
    depth: int = 2
    d_model: int = 128
    n_heads: int = 4
    context: int = 128
    batch: int = 16
    steps: int = 800
    lr: float = 1e-2
    warmup: int = 50
    weight_decay: float = 0.1
    ln_eps: float = 1e-5
    n_checkpoints: int = 32
    eval_batch: int = 16
    seeds: int = 1
    seed: int = 0                 # base seed: weights, corpus maps and data all derive from it
    lab_seeds: int = 2            # untrained-lab replicas for the closing-the-loop prediction
    loop_checkpoints: int = 12    # checkpoints (log-spaced subset) fed to the untrained lab

    def corpus_spec(self) -> C.CorpusSpec:
        return C.CorpusSpec(self.corpus, self.vocab, self.zipf_s, self.branches, self.noise,
                            self.seed).validate()

    def block_spec(self) -> BlockSpec:
        return BlockSpec(kind="pre_ln", d_model=self.d_model, n_heads=self.n_heads, causal=True,
                         depth=self.depth, init="bert", ln_eps=self.ln_eps).validate("train")


FULL = TrainConfig()
QUICK = dataclasses.replace(FULL, d_model=64, context=64, steps=120, warmup=15,
                            n_checkpoints=30, loop_checkpoints=8)
PER_HEAD = ("q_mean_norm", "k_mean_norm", "qk_mean_cos", "qk_mean_dot", "q_rms", "k_rms",
            "attn_entropy", "attn_max", "logit_std", "token_logit_std", "shift_logit_std")
PER_LAYER = ("input_cos", "input_cos_within", "out_cos", "out_cos_within", "attn_input_corr")
LOOP = ("lab_entropy_norms", "lab_entropy_aligned", "lab_token_logit_std")


class Decoder(nn.Module):
    """Decoder-only Transformer whose blocks are simlab.block.stack_apply (pure functions)."""
    spec: BlockSpec
    vocab: int
    context: int

    @nn.compact
    def __call__(self, ids_BT, observe=lambda layer: ()):
        s, d = self.spec, self.spec.d_model
        normal = nn.initializers.normal(0.02)
        embed = self.param("embed", normal, (self.vocab, d))
        pos = self.param("pos", normal, (self.context, d))
        blocks = self.param("blocks", lambda key: init_params(s, key))
        lnf_g = self.param("lnf_g", nn.initializers.ones, (d,))
        lnf_b = self.param("lnf_b", nn.initializers.zeros, (d,))
        unembed = self.param("unembed", normal, (d, self.vocab))
        x_BTD = embed[ids_BT] + pos[: ids_BT.shape[1]]
        zero_LHK = jnp.zeros((s.depth, s.n_heads, s.d_head))
        y_BTD, obs = B.stack_apply(s, blocks, x_BTD, knob_arrays({}), zero_LHK, zero_LHK, observe)
        return A.layer_norm(y_BTD, lnf_g, lnf_b, s.ln_eps) @ unembed, obs


def next_token_loss(logits_BTV, targets_BT):
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits_BTV, targets_BT))


def _decay_mask(params):
    """AdamW decays the weight matrices and embeddings, not biases or LayerNorm parameters."""
    decay = {"embed", "pos", "unembed", "wq", "wk", "wv", "wo", "w1", "w2"}
    return jax.tree_util.tree_map_with_path(lambda path, _: path[-1].key in decay, params)


def optimizer(cfg: TrainConfig):
    warmup = min(cfg.warmup, cfg.steps // 2)       # a short run (--steps) keeps a valid schedule
    sched = optax.warmup_cosine_decay_schedule(0.0, cfg.lr, warmup, max(cfg.steps, warmup + 1),
                                               0.1 * cfg.lr)
    return optax.chain(optax.clip_by_global_norm(1.0),
                       optax.adamw(sched, b1=0.9, b2=0.95, weight_decay=cfg.weight_decay,
                                   mask=_decay_mask))


# ---------------------------------------------------------------- statistics of one layer
def _masked_row_std(l_BHTS, causal: bool):
    """Per head: sqrt(mean over rows with >= 2 keys of the variance over attended keys)."""
    t, s = l_BHTS.shape[-2:]
    mask = A.causal_mask(t, s) if causal else jnp.ones((t, s), bool)
    n_T = jnp.sum(mask, -1)
    mean = jnp.sum(jnp.where(mask, l_BHTS, 0.0), -1, keepdims=True) / n_T[:, None]
    var = jnp.sum(jnp.where(mask, (l_BHTS - mean) ** 2, 0.0), -1) / n_T
    valid = n_T > 1
    return jnp.sqrt(jnp.sum(jnp.where(valid, var, 0.0), (0, 2)) / (jnp.sum(valid) * var.shape[0]))


def logit_parts(q_BTHK, k_BSHK, mq_HK):
    """(total, token-specific, shared) logits: q.k, (q - mq).k and mq.k over sqrt(K)."""
    sk = jnp.sqrt(jnp.float32(q_BTHK.shape[-1]))
    tok = jnp.einsum("bthk,bshk->bhts", q_BTHK - mq_HK, k_BSHK) / sk
    shift = jnp.einsum("hk,bshk->bhs", mq_HK, k_BSHK)[:, :, None, :] / sk
    return tok + shift, tok, jnp.broadcast_to(shift, tok.shape)


def layer_stats(spec: BlockSpec, p, layer: B.Layer) -> dict[str, jax.Array]:
    """PER_HEAD stats (H,) and PER_LAYER stats () of one layer (see the module docstring)."""
    q, k, w = layer.full.q, layer.full.k, layer.full.w     # the plain path's full intermediates
    heads = [M.qk_drift(q[:, :, h:h + 1], k[:, :, h:h + 1]) for h in range(spec.n_heads)]
    out = {n: jnp.stack([hd[i] for hd in heads]) for i, n in
           enumerate(("q_mean_norm", "k_mean_norm", "qk_mean_cos"))}
    mq, mk = jnp.mean(q, (0, 1)), jnp.mean(k, (0, 1))
    out["qk_mean_dot"] = jnp.abs(jnp.sum(mq * mk, -1))
    out["q_rms"] = jnp.sqrt(jnp.mean(jnp.sum((q - mq) ** 2, -1), (0, 1)))
    out["k_rms"] = jnp.sqrt(jnp.mean(jnp.sum((k - mk) ** 2, -1), (0, 1)))
    out["attn_entropy"] = jnp.stack([M.attn_entropy(w[:, h:h + 1], spec.causal)
                                     for h in range(spec.n_heads)])
    out["attn_max"] = jnp.mean(jnp.max(w, -1), (0, 2))
    for name, part in zip(("logit_std", "token_logit_std", "shift_logit_std"), logit_parts(q, k, mq)):
        out[name] = _masked_row_std(part, spec.causal)
    out["input_cos"], out["input_cos_within"] = M.anisotropy(layer.x)
    out["out_cos"], out["out_cos_within"] = M.anisotropy(layer.y)
    a = B.attn_input(spec, p, layer.x)
    out["attn_input_corr"] = M.anisotropy(a - jnp.mean(a, (0, 1)))[1]
    return out


def _shapes_only(cfg: TrainConfig) -> TrainConfig:
    """cfg without the fields that do not change what is compiled (so corpora share it)."""
    return dataclasses.replace(cfg, corpus="zipf", zipf_s=1.0, branches=1, noise=0.0, seeds=1,
                               seed=0, lab_seeds=1, n_checkpoints=1, loop_checkpoints=1)


def compiled(cfg: TrainConfig):
    """(model, optimizer, jitted init, jitted train step, jitted evaluation) for cfg's sizes."""
    return _compiled(_shapes_only(cfg))


@functools.lru_cache(maxsize=8)
def _compiled(cfg: TrainConfig):
    spec = cfg.block_spec()
    model, tx = Decoder(spec, cfg.vocab, cfg.context), optimizer(cfg)

    @jax.jit
    def init(key):
        params = model.init(key, jnp.zeros((1, cfg.context), jnp.int32))
        return params, tx.init(params)

    @jax.jit
    def train_step(params, opt_state, ids_BT1):
        def loss_fn(pr):
            return next_token_loss(model.apply(pr, ids_BT1[:, :-1])[0], ids_BT1[:, 1:])
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    @jax.jit
    def evaluate(params, ids_BT1):
        logits, layers = model.apply(params, ids_BT1[:, :-1], observe=lambda l: l)
        blocks = params["params"]["blocks"]
        stats = jax.vmap(lambda p, l: layer_stats(spec, p, l))(blocks, layers)
        stats["loss"] = next_token_loss(logits, ids_BT1[:, 1:])
        return stats

    return model, tx, init, train_step, evaluate


def checkpoint_steps(steps: int, n: int) -> np.ndarray:
    """0 and at least n - 1 distinct log-spaced steps in [1, steps] (fewer if steps < n - 1)."""
    for m in range(max(n - 1, 1), 20 * n):
        s = np.unique(np.round(np.geomspace(1, steps, m)).astype(int))
        if len(s) >= min(n - 1, steps):
            return np.concatenate([[0], s])
    return np.arange(steps + 1)


def _rngs(cfg: TrainConfig, s: int):
    """Training-data and held-out generators of training seed s (independent streams)."""
    return (np.random.default_rng([cfg.seed, s, 1]), np.random.default_rng([cfg.seed, 2]))


def train_one(cfg: TrainConfig, s: int, progress=None) -> tuple[dict, np.ndarray, dict]:
    """Train seed s; return (stats at the checkpoints, stacked over steps, as numpy; the
    training loss at every step; the final parameters)."""
    _, _, init, train_step, evaluate = compiled(cfg)
    cs = cfg.corpus_spec()
    rng_train, rng_eval = _rngs(cfg, s)
    held = jnp.asarray(C.sample(cs, cfg.eval_batch, cfg.context + 1, rng_eval))
    data = C.sample(cs, cfg.steps * cfg.batch, cfg.context + 1, rng_train)
    data = data.reshape(cfg.steps, cfg.batch, cfg.context + 1)
    params, opt_state = init(jax.random.fold_in(jax.random.PRNGKey(cfg.seed), s))
    ckpts, stats, losses = set(checkpoint_steps(cfg.steps, cfg.n_checkpoints).tolist()), [], []
    for step in range(cfg.steps + 1):
        if step in ckpts:
            stats.append(jax.device_get(evaluate(params, held)))
        if step == cfg.steps:
            break
        params, opt_state, loss = train_step(params, opt_state, data[step])
        losses.append(loss)
        if progress is not None:
            progress.update(1)
    stacked = {k: np.stack([st[k] for st in stats]) for k in stats[0]}
    return stacked, np.asarray(jax.device_get(losses)), params


def flat_params(params) -> dict[str, np.ndarray]:
    """{"params/blocks/wq": array, ...} (for np.savez)."""
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    return {"/".join(k.key for k in path): np.asarray(v) for path, v in leaves}


def load_params(path) -> dict:
    """Inverse of flat_params for a params_seed<S>.npz written by `run`."""
    out: dict = {}
    with np.load(path) as z:
        for name in z.files:
            *parents, leaf = name.split("/")
            d = out
            for p in parents:
                d = d.setdefault(p, {})
            d[leaf] = jnp.asarray(z[name])
    return out


# ---------------------------------------------------------------- closing the loop
def lab_for(cfg: TrainConfig) -> Lab:
    """The untrained lab matching the trained blocks: pre-LN, causal, same sizes, BERT init,
    gaussian inputs (batch x context) whose input_corr knob carries the measured
    within-sequence structure. No MLP: a depth-1 block's entropy does not depend on it."""
    block = dataclasses.replace(cfg.block_spec(), depth=1, mlp=False)
    return Lab(block, InputSpec(kind="gaussian", batch=cfg.eval_batch, length=cfg.context),
               metrics=("attn_entropy",))


def _centred_rms(q_BTHK):
    return jnp.sqrt(jnp.mean(jnp.sum((q_BTHK - jnp.mean(q_BTHK, (0, 1))) ** 2, -1)))


def lab_point(lab: Lab, state, pt):
    """The untrained block given one trained head's statistics pt (p = attn_input_corr, q_rms,
    k_rms, q_mean_norm, k_mean_norm, shift_logit_std):
      q_scale = q_rms / (the lab's own centred RMS at input_corr = p), k_scale likewise;
      "norms":   q_shift = |mq|, k_shift = |mk|  (random directions u_q, u_k per head);
      "aligned": q_shift chosen so that the lab's shared-logit std mq.k_j/sqrt(K) equals the
                 measured shift_logit_std (the measured alignment of mq with the keys).
    Returns (entropy "norms", entropy "aligned", the lab's token_logit_std at these scales)."""
    spec = lab.block
    knobs = dict(knob_arrays({}), input_corr=pt["p"])
    x, _ = lab.inputs_of(state, knobs)
    p0 = jax.tree.map(lambda a: a[0], state["params"])
    q, k, _ = B.qkv(p0, B.attn_input(spec, p0, x))
    q_scale, k_scale = pt["q_rms"] / _centred_rms(q), pt["k_rms"] / _centred_rms(k)
    q, k = q_scale * q, k_scale * k
    _, tok, _ = logit_parts(q, k, jnp.mean(q, (0, 1)))
    _, _, unit_shift = logit_parts(q, k, state["u_q"][0])
    per_unit = jnp.mean(_masked_row_std(unit_shift, spec.causal))
    knobs.update(q_scale=q_scale, k_scale=k_scale, k_shift=pt["k_mean_norm"])
    norms = lab.point(state, dict(knobs, q_shift=pt["q_mean_norm"]))["attn_entropy"]
    aligned = lab.point(state, dict(knobs, q_shift=pt["shift_logit_std"] / per_unit))["attn_entropy"]
    return norms, aligned, jnp.mean(_masked_row_std(tok, spec.causal))


@functools.lru_cache(maxsize=4)
def _lab_fn(cfg: TrainConfig):
    lab = lab_for(cfg)

    @jax.jit
    def run(key, pts):
        state = lab.seed_state(key)
        return jax.lax.map(lambda pt: lab_point(lab, state, pt), pts, batch_size=16)

    return run


def loop_indices(steps: np.ndarray, n: int) -> np.ndarray:
    """Indices of the checkpoints fed to the lab: about n, evenly spread over the (log-spaced)
    checkpoint list, always including those nearest to TABLE_FRACTIONS of the run."""
    idx = set(np.round(np.linspace(0, len(steps) - 1, max(n, 2))).astype(int).tolist())
    idx |= {int(np.argmin(np.abs(steps - f * steps[-1]))) for f in TABLE_FRACTIONS}
    return np.array(sorted(idx))


def close_loop(cfg: TrainConfig, stats: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """LOOP metrics (mean over cfg.lab_seeds lab replicas, each with its own random heads) at
    the checkpoints `loop_indices`, for every layer and head; NaN at the other checkpoints.
    `stats`: arrays (step, layer, head) / (step, layer) over all checkpoints."""
    steps = checkpoint_steps(cfg.steps, cfg.n_checkpoints)
    sel = loop_indices(steps, cfg.loop_checkpoints)
    shape = stats["q_rms"].shape
    pts = {n: stats[n][sel] for n in ("q_rms", "k_rms", "q_mean_norm", "k_mean_norm", "shift_logit_std")}
    pts["p"] = np.broadcast_to(np.clip(stats["attn_input_corr"][sel], 0.0, 1.0)[..., None],
                               pts["q_rms"].shape)
    pts = {n: jnp.asarray(v.reshape(-1), jnp.float32) for n, v in pts.items()}
    run, base = _lab_fn(_shapes_only(cfg)), jax.random.PRNGKey(cfg.seed + 1000)
    outs = [run(jax.random.fold_in(base, s), pts) for s in range(cfg.lab_seeds)]
    res = {}
    for i, n in enumerate(LOOP):
        full = np.full(shape, np.nan, np.float32)
        full[sel] = np.mean([np.asarray(o[i]) for o in outs], 0).reshape((len(sel),) + shape[1:])
        res[n] = full
    return res


# ---------------------------------------------------------------- one corpus, on disk
def run(cfg: TrainConfig, out_dir=None, quiet: bool = False) -> R.Results:
    """Train cfg.seeds models on cfg.corpus, track, close the loop; save to out_dir if given."""
    from tqdm.auto import tqdm
    t0 = time.perf_counter()
    cs = cfg.corpus_spec()
    per_seed, train_losses, finals = [], [], []
    with tqdm(total=cfg.steps * cfg.seeds, desc=f"train {cfg.corpus}", disable=quiet) as bar:
        for s in range(cfg.seeds):
            st, tl, params = train_one(cfg, s, bar)
            per_seed.append(st)
            train_losses.append(tl)
            finals.append(params)
    t_train = time.perf_counter() - t0
    for st in per_seed:
        st.update(close_loop(cfg, st))
    t_loop = time.perf_counter() - t0 - t_train
    steps = checkpoint_steps(cfg.steps, cfg.n_checkpoints)
    metrics, dims = {}, {}
    for name in per_seed[0]:
        x = np.stack([st[name] for st in per_seed], -1)          # (step, [layer, [head]], seed)
        real = ["step", "layer", "head"][: x.ndim - 1]
        while x.ndim < 4:
            x = np.expand_dims(x, x.ndim - 1)
        metrics[name], dims[name] = x, real + ["seed"]
    axes = OrderedDict(step=steps.astype(np.float64), layer=np.arange(cfg.depth, dtype=np.float64),
                       head=np.arange(cfg.n_heads, dtype=np.float64))
    meta = {"kind": "train-dynamics", "config": dataclasses.asdict(cfg),
            "corpus": {**dataclasses.asdict(cs), **C.entropies(cs)},
            "axes": [{"name": "step", "knobs": [], "space": "log", "values": steps.tolist()},
                     {"name": "layer", "knobs": [], "space": "values", "values": list(range(cfg.depth))},
                     {"name": "head", "knobs": [], "space": "values", "values": list(range(cfg.n_heads))}],
            "metrics": list(metrics), "dims": dims,
            "convention": "every metric is (step, layer, head, seed); a size-1 dim is broadcast "
                          "(the metric does not depend on it); dims[name] lists the real dims",
            "loop_steps": steps[loop_indices(steps, cfg.loop_checkpoints)].tolist(),
            "train_loss": np.stack(train_losses).tolist(),
            "versions": _versions(), "train_time_s": t_train, "loop_time_s": t_loop,
            "wall_time_s": time.perf_counter() - t0}
    if out_dir is None:
        return R.Results(axes, metrics, meta)
    res = R.save(out_dir, axes, metrics, meta)
    for s, params in enumerate(finals):
        R.atomic_save_npz(Path(out_dir) / f"params_seed{s}.npz", flat_params(params))
    return res


def _versions() -> dict[str, str]:
    import flax
    return {"jax": jax.__version__, "flax": flax.__version__, "optax": optax.__version__,
            "numpy": np.__version__, "python": sys.version.split()[0]}


# ---------------------------------------------------------------- summary, figures, CLI
TABLE_FRACTIONS = (0.25, 0.5, 1.0)   # checkpoints (as fractions of the run) for the loop table


def table_steps(res: R.Results) -> list[int]:
    """The checkpoints nearest to TABLE_FRACTIONS of the run."""
    steps = res.axes["step"]
    return sorted({int(steps[np.argmin(np.abs(steps - f * steps[-1]))]) for f in TABLE_FRACTIONS})


def summarize(res: R.Results) -> dict:
    """Numbers for the report: per layer at the first and the last checkpoint (head mean and
    [min, max] over heads, seed mean), the loss, and the closing-the-loop table."""
    steps, out = res.axes["step"], {}
    m = {n: res.mean(n) for n in res.metrics}                    # (step, layer|1, head|1)
    out["loss"] = {"first": float(m["loss"][0, 0, 0]), "last": float(m["loss"][-1, 0, 0]),
                   "floor": res.meta["corpus"]["conditional_entropy"],
                   "unigram_entropy": res.meta["corpus"]["unigram_entropy"]}
    per = {}
    for name in PER_HEAD + PER_LAYER:
        x = m[name]
        per[name] = {when: [{"mean": float(x[i, l].mean()), "min": float(x[i, l].min()),
                             "max": float(x[i, l].max())} for l in range(x.shape[1])]
                     for when, i in (("first", 0), ("last", -1))}
    a = np.abs(m["qk_mean_cos"])
    per["abs_qk_mean_cos"] = {when: [{"mean": float(a[i, l].mean()), "min": float(a[i, l].min()),
                                      "max": float(a[i, l].max())} for l in range(a.shape[1])]
                              for when, i in (("first", 0), ("last", -1))}
    out["layers"] = per
    share = m["shift_logit_std"] ** 2 / np.maximum(m["logit_std"] ** 2, 1e-30)
    out["shift_share_last"] = [float(v) for v in share[-1].mean(-1)]
    out["loop"] = []
    for s in table_steps(res):
        i = int(np.argmin(np.abs(steps - s)))
        for l in range(m["attn_entropy"].shape[1]):
            row = {"step": s, "layer": l}
            for n in ("attn_entropy", "lab_entropy_norms", "lab_entropy_aligned", "token_logit_std",
                      "lab_token_logit_std", "shift_logit_std", "q_mean_norm", "q_rms"):
                row[n] = float(m[n][i, l].mean())
            row["attn_input_corr"] = float(m["attn_input_corr"][i, l, 0])
            out["loop"].append(row)
    return out


def format_summary(corpus: str, s: dict) -> str:
    lines = [f"[{corpus}] held-out loss {s['loss']['first']:.3f} -> {s['loss']['last']:.3f} nats "
             f"(Markov floor {s['loss']['floor']:.3f}, unigram entropy "
             f"{s['loss']['unigram_entropy']:.3f})"]
    lay = s["layers"]
    for l in range(len(lay["attn_entropy"]["last"])):
        f = {n: lay[n]["first"][l]["mean"] for n in lay}
        t = {n: lay[n]["last"][l]["mean"] for n in lay}
        lines.append(
            f"  layer {l}: |mq| {f['q_mean_norm']:.2f}->{t['q_mean_norm']:.2f}  |mk| "
            f"{f['k_mean_norm']:.2f}->{t['k_mean_norm']:.2f}  |cos(mq,mk)| {t['abs_qk_mean_cos']:.2f} "
            f"(cos per head in [{lay['qk_mean_cos']['last'][l]['min']:+.2f},"
            f"{lay['qk_mean_cos']['last'][l]['max']:+.2f}])"
            f"  |mq.mk| {f['qk_mean_dot']:.3f}->{t['qk_mean_dot']:.2f}  entropy "
            f"{f['attn_entropy']:.2f}->{t['attn_entropy']:.2f}  anisotropy(out) "
            f"{f['out_cos']:.2f}->{t['out_cos']:.2f} (within {t['out_cos_within']:.2f})  "
            f"shared share of logit var {s['shift_share_last'][l]:.2f}")
    lines.append("  closing the loop (head means): step layer  measured  lab[norms]  lab[aligned]"
                 "  token-logit-std measured/lab")
    for r in s["loop"]:
        lines.append(f"    {r['step']:5d} {r['layer']:3d}     {r['attn_entropy']:.3f}     "
                     f"{r['lab_entropy_norms']:.3f}       {r['lab_entropy_aligned']:.3f}        "
                     f"{r['token_logit_std']:.3f}/{r['lab_token_logit_std']:.3f}")
    return "\n".join(lines)


COLORS = {"zipf": "tab:blue", "uniform": "tab:orange"}
STYLES = ("-", "--", ":", "-.")


def _plot_line(ax, x, mean, band, label, color, ls, y_label, y_log=False):
    """One series through simlab.plot.curves (log step axis), restyled; NaN points dropped."""
    from simlab.plot import curves
    keep = np.isfinite(mean)
    if band is not None:
        band = tuple(b[keep] for b in band)
    curves(x[keep], {label: (mean[keep], band)}, x_label="training step", y_label=y_label,
           x_log=True, y_log=y_log, ax=ax)
    ax.get_lines()[-1].set(color=color, linestyle=ls, markersize=2.5)
    if band is not None:
        ax.collections[-1].set_color(color)


def _legend(ax):
    ax.legend(fontsize=7, framealpha=0.85, handlelength=3.5)


def _per_layer_panel(ax, results, metric, y_label, y_log=False, band=True, fn=None):
    """Head mean of fn(metric) (seed mean) per corpus and layer, band = [min, max] over heads;
    step 0 is left out (log axis)."""
    for corpus, res in results.items():
        x, m = res.axes["step"][1:], res.mean(metric)[1:]
        m = fn(res)[1:] if fn is not None else m
        for l in range(m.shape[1]):
            v = m[:, l]
            b = (v.min(-1), v.max(-1)) if band and v.shape[-1] > 1 else None
            _plot_line(ax, x, v.mean(-1), b, f"{corpus} L{l}", COLORS[corpus],
                       STYLES[l % len(STYLES)], y_label, y_log)
    _legend(ax)


def make_figures(results: dict[str, R.Results], fig_dir) -> list[Path]:
    """train_drift.png, train_entropy_anisotropy.png, train_loop_entropy.png in fig_dir."""
    from matplotlib.figure import Figure
    from simlab.plot import save_figure
    fig_dir, paths = Path(fig_dir), []
    tag = ", ".join(f"{c}: {r.meta['config']['steps']} steps" for c, r in results.items())

    fig = Figure(figsize=(15, 12), layout="constrained")
    axs = fig.subplots(3, 3)
    share = lambda r: r.mean("shift_logit_std") ** 2 / np.maximum(r.mean("logit_std") ** 2, 1e-30)  # noqa: E731
    panels = [("q_mean_norm", "|mean q| (head mean; band: min-max over heads)", True, None),
              ("k_mean_norm", "|mean k|", True, None),
              ("qk_mean_dot", "|mean q . mean k|", True, None),
              ("qk_mean_cos", "|cos(mean q, mean k)|", False, lambda r: np.abs(r.mean("qk_mean_cos"))),
              ("q_rms", "RMS norm of centred queries |q - mean q|", True, None),
              ("k_rms", "RMS norm of centred keys |k - mean k|", True, None),
              ("shift_logit_std", "std over keys of shared logit mq.k_j/sqrt(K)", True, None),
              ("token_logit_std", "std over keys of token logit (q_i-mq).k_j/sqrt(K)", True, None),
              ("logit_std", "shared share of logit variance", False, share)]
    for ax, (metric, label, log, fn) in zip(axs.ravel(), panels):
        _per_layer_panel(ax, results, metric, label, y_log=log, fn=fn)
    fig.suptitle(f"Mean query/key drift during training ({tag}); held-out batch; "
                 "solid: layer 0, dashed: layer 1")
    paths.append(save_figure(fig, fig_dir / "train_drift.png"))

    fig = Figure(figsize=(11, 8.5), layout="constrained")
    axs = fig.subplots(2, 2)
    _per_layer_panel(axs[0, 0], results, "attn_entropy", "attention entropy / log(n_keys)")
    _per_layer_panel(axs[0, 1], results, "out_cos", "hidden-state anisotropy (global cos)", band=False)
    _per_layer_panel(axs[1, 0], results, "out_cos_within", "anisotropy within sequence", band=False)
    ax = axs[1, 1]
    for corpus, res in results.items():
        x = res.axes["step"][1:]
        _plot_line(ax, x, res.mean("loss")[1:, 0, 0], None, f"{corpus} held-out loss",
                   COLORS[corpus], "-", "next-token loss (nats)")
        ax.axhline(res.meta["corpus"]["conditional_entropy"], color=COLORS[corpus], ls=":", lw=1,
                   label=f"{corpus} Markov floor")
        ax.axhline(res.meta["corpus"]["unigram_entropy"], color=COLORS[corpus], ls="-.", lw=1,
                   label=f"{corpus} unigram entropy")
    _legend(ax)
    fig.suptitle(f"Attention entropy, anisotropy of layer outputs and loss ({tag})")
    paths.append(save_figure(fig, fig_dir / "train_entropy_anisotropy.png"))

    fig = Figure(figsize=(5 * (len(results) + 1), 4.8), layout="constrained")
    axs = fig.subplots(1, len(results) + 1)
    for ax, (corpus, res) in zip(axs, results.items()):
        x = res.axes["step"][1:]
        for l in range(res.metrics["attn_entropy"].shape[1]):
            for metric, ls, what in (("attn_entropy", "-", "measured"),
                                     ("lab_entropy_norms", "--", "lab [norms]"),
                                     ("lab_entropy_aligned", ":", "lab [aligned]")):
                _plot_line(ax, x, res.mean(metric)[1:, l].mean(-1), None, f"L{l} {what}",
                           f"C{l}", ls, "attention entropy (head mean)")
        ax.set_title(f"{corpus}: trained (solid) vs untrained lab block with the measured "
                     "scale/shift", fontsize=9)
        _legend(ax)
    ax = axs[-1]
    for corpus, res in results.items():
        steps = res.axes["step"]
        for j, s in enumerate(table_steps(res)):
            i = int(np.argmin(np.abs(steps - s)))
            meas = res.mean("attn_entropy")[i].ravel()
            for metric, mk in (("lab_entropy_norms", "o"), ("lab_entropy_aligned", "^")):
                ax.scatter(meas, res.mean(metric)[i].ravel(), marker=mk, s=20, color=COLORS[corpus],
                           alpha=0.3 + 0.35 * j, edgecolors="none",
                           label=f"{corpus} [{metric.split('_')[-1]}]" if j == 0 else None)
    ax.plot([1e-3, 2], [1e-3, 2], color="k", lw=0.8)
    ax.set(xlabel="measured entropy (one point per layer and head)", ylabel="lab-predicted entropy",
           xscale="log", yscale="log", xlim=(1e-2, 1.3), ylim=(1e-2, 1.3))
    ax.set_title("checkpoints at 1/4, 1/2 and all of the run (darker = later)", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, framealpha=0.85)
    paths.append(save_figure(fig, fig_dir / "train_loop_entropy.png"))
    return paths


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`simlab train-dynamics` arguments."""
    parser.add_argument("--quick", action="store_true",
                        help="small model, few steps (about a minute on 2 CPU cores)")
    parser.add_argument("--corpus", choices=("zipf", "uniform", "both"), default="both",
                        help="synthetic corpus (default: both)")
    parser.add_argument("--out", default=None,
                        help="output directory: OUT/<corpus>/results.npz + meta.json, OUT/summary.json "
                             "(default runs/train-dynamics[-quick])")
    parser.add_argument("--figures", default=None,
                        help="figure directory (default: figures/ for a full run, OUT/figures for --quick)")
    parser.add_argument("--no-figures", action="store_true", help="write no figures")
    parser.add_argument("--steps", type=int, default=None, help="override the number of steps")
    parser.add_argument("--seeds", type=int, default=None, help="training seeds (default 1)")
    parser.add_argument("--seed", type=int, default=None, help="base seed (default 0)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--plot-only", action="store_true",
                        help="do not train: reload OUT/<corpus> and redraw the figures and summary")


def cli_main(args) -> int:
    """Train on each corpus, save results, print the summary, draw the figures."""
    cfg = QUICK if args.quick else FULL
    for name in ("steps", "seeds", "seed"):
        v = getattr(args, name)
        if v is not None:
            if v < (0 if name == "seed" else 1):
                raise ConfigError(f"train-dynamics.{name}: {v} is too small")
            cfg = dataclasses.replace(cfg, **{name: v})
    out = Path(args.out or ("runs/train-dynamics-quick" if args.quick else "runs/train-dynamics"))
    corpora = ("zipf", "uniform") if args.corpus == "both" else (args.corpus,)
    t0, results, summary = time.perf_counter(), {}, {}
    for corpus in corpora:
        results[corpus] = (R.load(out / corpus) if args.plot_only else
                           run(dataclasses.replace(cfg, corpus=corpus), out / corpus, args.quiet))
        summary[corpus] = summarize(results[corpus])
        print(format_summary(corpus, summary[corpus]), flush=True)
    old = out / "summary.json"
    summary["wall_time_s"] = (json.loads(old.read_text()).get("wall_time_s") if args.plot_only
                              and old.exists() else time.perf_counter() - t0)
    R.atomic_write_bytes(old, json.dumps(summary, indent=2).encode())
    if not args.no_figures:
        fig_dir = Path(args.figures) if args.figures else (out / "figures" if args.quick else Path("figures"))
        for p in make_figures(results, fig_dir):
            print(f"figure: {p}")
    print(f"results in {out}/<corpus> (simlab.load), summary in {out / 'summary.json'}; "
          f"wall time {time.perf_counter() - t0:.0f} s")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simlab.train",
                                     description="follow sharpness and anisotropy during training")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return cli_main(args)
    except (ConfigError, FileNotFoundError) as e:
        print(f"simlab: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
