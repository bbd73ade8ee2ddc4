"""Training (one corpus, `cfg.seeds` seeds, statistics at log-spaced checkpoints on a fixed
held-out batch, the final held-out loss on `final_eval_batch` more sequences) and closing the
loop: the untrained lab fed the measured scale and shift (docs/training.md, "Closing the
loop").
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections import OrderedDict
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from simlab.core import block
from simlab.core.knobs import knob_arrays
from simlab.core.lab import Lab
from simlab.core.spec import InputSpec
from simlab.engine import records, results
from simlab.studies.train_dynamics import corpus
from simlab.studies.train_dynamics.config import Criteria, TrainConfig
from simlab.studies.train_dynamics.model import Decoder, next_token_loss, optimizer
from simlab.studies.train_dynamics.stats import _masked_row_std, layer_stats, logit_parts

LOOP = ("lab_entropy_norms", "lab_entropy_aligned", "lab_token_logit_std")

# ---------------------------------------------------------------- summary, figures, CLI
TABLE_FRACTIONS = (0.25, 0.5, 1.0)  # checkpoints (as fractions of the run) for the loop table


def _shapes_only(cfg: TrainConfig) -> TrainConfig:
    """cfg without the fields that do not change what is compiled (so corpora share it)."""
    return dataclasses.replace(
        cfg,
        vocab=cfg.model_vocab,
        corpus="zipf",
        corpora=("zipf",),
        zipf_s=1.0,
        branches=1,
        noise=0.0,
        pairs=1,
        period_min=2,
        period_max=2,
        text_heldout=0.5,
        criteria=Criteria(),
        seeds=1,
        seed=0,
        lab_seeds=1,
        n_checkpoints=1,
        loop_checkpoints=1,
    )


def compiled(cfg: TrainConfig):
    """(model, optimizer, jitted init, jitted train step, jitted evaluation of the tracked
    statistics, jitted held-out loss) for cfg's sizes."""
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
    def held_out_loss(params, ids_BT1):
        return next_token_loss(model.apply(params, ids_BT1[:, :-1])[0], ids_BT1[:, 1:])

    @jax.jit
    def evaluate(params, ids_BT1):
        logits, layers = model.apply(params, ids_BT1[:, :-1], observe=lambda l: l)
        blocks = params["params"]["blocks"]
        stats = jax.vmap(lambda p, l: layer_stats(spec, p, l))(blocks, layers)
        stats["loss"] = next_token_loss(logits, ids_BT1[:, 1:])
        return stats

    return model, tx, init, train_step, evaluate, held_out_loss


def checkpoint_steps(steps: int, n: int) -> np.ndarray:
    """0 and at least n - 1 distinct log-spaced steps in [1, steps] (fewer if steps < n - 1)."""
    for m in range(max(n - 1, 1), 20 * n):
        s = np.unique(np.round(np.geomspace(1, steps, m)).astype(int))
        if len(s) >= min(n - 1, steps):
            return np.concatenate([[0], s])
    return np.arange(steps + 1)


def _rngs(cfg: TrainConfig, s: int):
    """Training-data generator of training seed s, and the generators of the tracked held-out
    batch and of the final held-out sequences (shared by all seeds; independent streams)."""
    return (
        np.random.default_rng([cfg.seed, s, 1]),
        np.random.default_rng([cfg.seed, 2]),
        np.random.default_rng([cfg.seed, 3]),
    )


def held_out(cfg: TrainConfig) -> tuple[np.ndarray, np.ndarray]:
    """(the fixed held-out batch of the tracked statistics, the final held-out sequences):
    (eval_batch | final_eval_batch, context + 1) ids from the held-out split."""
    cs, (_, r_eval, r_final) = cfg.corpus_spec(), _rngs(cfg, 0)
    return (
        corpus.sample(cs, cfg.eval_batch, cfg.context + 1, r_eval, "heldout"),
        corpus.sample(cs, cfg.final_eval_batch, cfg.context + 1, r_final, "heldout"),
    )


def train_one(cfg: TrainConfig, s: int, progress=None) -> tuple[dict, np.ndarray, dict, float]:
    """Train seed s; return (stats at the checkpoints, stacked over steps, as numpy; the
    training loss at every step; the final parameters; the final held-out loss on the
    final_eval_batch sequences)."""
    _, _, init, train_step, evaluate, held_out_loss = compiled(cfg)
    cs = cfg.corpus_spec()
    rng_train = _rngs(cfg, s)[0]
    held, final_ids = (jnp.asarray(a) for a in held_out(cfg))
    data = corpus.sample(cs, cfg.steps * cfg.batch, cfg.context + 1, rng_train)
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
    final = float(held_out_loss(params, final_ids))
    return stacked, np.asarray(jax.device_get(losses)), params, final


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
    spec = dataclasses.replace(cfg.block_spec(), depth=1, mlp=False)
    return Lab(
        spec,
        InputSpec(kind="gaussian", batch=cfg.eval_batch, length=cfg.context),
        metrics=("attn_entropy",),
    )


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
    q, k, _ = block.qkv(p0, block.attn_input(spec, p0, x))
    q_scale, k_scale = pt["q_rms"] / _centred_rms(q), pt["k_rms"] / _centred_rms(k)
    q, k = q_scale * q, k_scale * k
    _, tok, _ = logit_parts(q, k, jnp.mean(q, (0, 1)))
    _, _, unit_shift = logit_parts(q, k, state["u_q"][0])
    per_unit = jnp.mean(_masked_row_std(unit_shift, spec.causal))
    knobs.update(q_scale=q_scale, k_scale=k_scale, k_shift=pt["k_mean_norm"])
    norms = lab.point(state, dict(knobs, q_shift=pt["q_mean_norm"]))["attn_entropy"]
    aligned = lab.point(state, dict(knobs, q_shift=pt["shift_logit_std"] / per_unit))[
        "attn_entropy"
    ]
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
    pts = {
        n: stats[n][sel]
        for n in ("q_rms", "k_rms", "q_mean_norm", "k_mean_norm", "shift_logit_std")
    }
    pts["p"] = np.broadcast_to(
        np.clip(stats["attn_input_corr"][sel], 0.0, 1.0)[..., None], pts["q_rms"].shape
    )
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
def run(cfg: TrainConfig, out_dir=None, quiet: bool = False) -> results.Results:
    """Train cfg.seeds models on cfg.corpus, track, close the loop; save to out_dir if given."""
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    cs = cfg.corpus_spec()
    floors = corpus.floors(cs, cfg.context + 1)
    per_seed, train_losses, finals, final_losses = [], [], [], []
    with tqdm(total=cfg.steps * cfg.seeds, desc=f"train {cfg.corpus}", disable=quiet) as bar:
        for s in range(cfg.seeds):
            st, tl, params, fl = train_one(cfg, s, bar)
            per_seed.append(st)
            train_losses.append(tl)
            finals.append(params)
            final_losses.append(fl)
    t_train = time.perf_counter() - t0
    for st in per_seed:
        st.update(close_loop(cfg, st))
    t_loop = time.perf_counter() - t0 - t_train
    steps = checkpoint_steps(cfg.steps, cfg.n_checkpoints)
    tracked, dims = {}, {}
    for name in per_seed[0]:
        x = np.stack([st[name] for st in per_seed], -1)  # (step, [layer, [head]], seed)
        real = ["step", "layer", "head"][: x.ndim - 1]
        while x.ndim < 4:
            x = np.expand_dims(x, x.ndim - 1)
        tracked[name], dims[name] = x, real + ["seed"]
    axes = OrderedDict(
        step=steps.astype(np.float64),
        layer=np.arange(cfg.depth, dtype=np.float64),
        head=np.arange(cfg.n_heads, dtype=np.float64),
    )
    meta = records.study_meta_record(
        "train-dynamics",
        config=dataclasses.asdict(cfg),
        axes=[
            {"name": "step", "knobs": [], "space": "log", "values": steps.tolist()},
            {"name": "layer", "knobs": [], "space": "values", "values": list(range(cfg.depth))},
            {"name": "head", "knobs": [], "space": "values", "values": list(range(cfg.n_heads))},
        ],
        dims=dims,
        extra_versions=("flax", "optax"),
        corpus={**dataclasses.asdict(cs), "task": cs.task, "law": cs.law, **floors},
        convention="every metric is (step, layer, head, seed); a size-1 dim is broadcast "
        "(the metric does not depend on it); dims[name] lists the real dims",
        loop_steps=steps[loop_indices(steps, cfg.loop_checkpoints)].tolist(),
        train_loss=np.stack(train_losses).tolist(),
        final_loss=final_losses,
        train_time_s=t_train,
        loop_time_s=t_loop,
        wall_time_s=time.perf_counter() - t0,
    )
    if out_dir is None:
        return results.Results(axes, tracked, meta)
    res = results.save(out_dir, axes, tracked, meta)
    for s, params in enumerate(finals):
        records.atomic_save_npz(Path(out_dir) / f"params_seed{s}.npz", flat_params(params))
    return res
