"""The trained-model quantities of Godey et al. (2024), per layer and head, over training steps.

For one model on a fixed sample of token ids (B, T), per layer l and head h, with the queries
q_ti and keys k_tj the projected ones that enter the logits (after the bias, and rotated where
the model has rotary embeddings):
  q_mean_norm   |q_bar|, q_bar = mean over all B T tokens of q_t   (the mean query)
  k_mean_norm   |k_bar|                                            (the mean key)
  qk_mean_cos   cos(q_bar, k_bar) (0 if either is zero)
  entropy       mean over rows of H(w_i) / log n_i, n_i the keys row i attends (1 = uniform,
                0 = one-hot; the first causal row, a single key, left out: as the lab's metric
                attn_entropy, simlab.core.metrics)
and per layer (the same value on each head's row):
  anisotropy    mean pairwise cosine of the layer's outputs over all B T tokens
  anisotropy_within  its mean over sequences of the within-sequence cosine.
`quantities` works on any stack of simlab blocks (a checkpoint's layers or the lab's own trained
decoder, simlab.studies.train_dynamics); `series` runs it over a folder of checkpoints (one
subfolder per training step) into one table, `write_table` saves it as CSV or JSON and
`figure` draws each quantity against the step, one line per layer (head mean). `text_sample`
cuts the fixed sample from real text as the input kind "text" does (simlab.checkpoints.inputs);
`simlab series FOLDER` (simlab.cli.series) runs `command` from the command line.
"""

from __future__ import annotations

import csv
import json
import pathlib
from collections.abc import Iterable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from simlab.checkpoints import inputs
from simlab.checkpoints.checkpoint import load_series, step_of
from simlab.core import attention, block, metrics
from simlab.core.knobs import knob_arrays
from simlab.core.spec import InputSpec
from simlab.errors import ConfigError

HEAD_QUANTITIES = ("q_mean_norm", "k_mean_norm", "qk_mean_cos", "entropy")
LAYER_QUANTITIES = ("anisotropy", "anisotropy_within")
QUANTITIES = HEAD_QUANTITIES + LAYER_QUANTITIES


def _observe(causal: bool):
    def observe(layer: block.Layer) -> dict:
        mq, mk = layer.q_mean, layer.k_mean  # (H, K)
        nq, nk = jnp.linalg.norm(mq, axis=-1), jnp.linalg.norm(mk, axis=-1)
        cos = jnp.sum(metrics.unit_vectors(mq) * metrics.unit_vectors(mk), axis=-1)
        h_BHT = attention.row_entropy(layer.full.w)
        s = layer.full.w.shape[-1]
        ent = jax.vmap(lambda h_BT: metrics.entropy_of_rows(h_BT[:, None], s, causal), in_axes=1)(
            h_BHT
        )
        glob, within = metrics.anisotropy(layer.y)
        return dict(
            q_mean_norm=nq,
            k_mean_norm=nk,
            qk_mean_cos=cos,
            entropy=ent,
            anisotropy=glob,
            anisotropy_within=within,
        )

    return observe


def quantities(spec, params, x_BTD) -> dict[str, np.ndarray]:
    """QUANTITIES of a stack of simlab blocks (spec.depth layers, params stacked (L, ...)) on
    inputs x (B, T, D), default knobs, plain attention: head ones (L, H), layer ones (L,)."""
    z = jnp.zeros((spec.depth, spec.n_heads, spec.d_head), x_BTD.dtype)
    _, obs = block.stack_apply(
        spec, params, x_BTD, knob_arrays({}, x_BTD.dtype), z, z, observe=_observe(spec.causal)
    )
    return {k: np.asarray(v, np.float64) for k, v in obs.items()}


def checkpoint_quantities(ckpt, ids_BT) -> dict[str, np.ndarray]:
    """QUANTITIES of every layer of a checkpoint (simlab.checkpoints.Checkpoint) on token ids."""
    ids = ckpt.check_ids(ids_BT, "ids")
    every = range(ckpt.n_layers)
    return quantities(ckpt.block(ckpt.n_layers), ckpt.stacked(every), ckpt.embed(ids))


def rows(name: str, step: int, q: Mapping[str, np.ndarray]) -> list[dict]:
    """One row per (layer, head) of one model's quantities."""
    n_layers, n_heads = q["q_mean_norm"].shape
    return [
        {
            "checkpoint": name,
            "step": step,
            "layer": l,
            "head": h,
            **{k: float(q[k][l, h]) for k in HEAD_QUANTITIES},
            **{k: float(q[k][l]) for k in LAYER_QUANTITIES},
        }
        for l in range(n_layers)
        for h in range(n_heads)
    ]


def series(checkpoints, ids_BT) -> list[dict]:
    """The table of QUANTITIES over checkpoints: `checkpoints` a folder holding one checkpoint
    folder per step (simlab.checkpoints.load_series), or (name, Checkpoint) pairs. The same ids
    for every checkpoint; the step is the last number in a checkpoint's name."""
    if isinstance(checkpoints, (str, pathlib.Path)):
        pairs = load_series(checkpoints, "checkpoints")
    else:
        pairs = list(checkpoints)
    out = []
    for name, ck in pairs:
        out += rows(name, step_of(name), checkpoint_quantities(ck, ids_BT))
    return out


# simlab train-dynamics tracks the same quantities (simlab.studies.train_dynamics.stats) under
# these names: quantity -> tracked metric
TRAIN_DYNAMICS_NAMES = {
    "q_mean_norm": "q_mean_norm",
    "k_mean_norm": "k_mean_norm",
    "qk_mean_cos": "qk_mean_cos",
    "entropy": "attn_entropy",
    "anisotropy": "out_cos",
    "anisotropy_within": "out_cos_within",
}


def from_train_dynamics(res, name: str = "train-dynamics") -> list[dict]:
    """The same table from a `simlab train-dynamics` run (its Results: every metric
    (step, layer, head, seed), simlab.studies.train_dynamics), the mean over seeds: the lab's
    own training beside a checkpoint series (`figure({...: series(...), ...: this})`)."""
    steps = np.asarray(res.axes["step"])
    mean = {q: np.mean(np.asarray(res[m]), axis=-1) for q, m in TRAIN_DYNAMICS_NAMES.items()}
    n_layers, n_heads = len(res.axes["layer"]), len(res.axes["head"])
    out = []
    for i, step in enumerate(steps):
        q = {k: np.broadcast_to(v[i], (n_layers, n_heads)) for k, v in mean.items()}
        out += rows(name, int(step), {**q, **{k: q[k][:, 0] for k in LAYER_QUANTITIES}})
    return out


COLUMNS = ("checkpoint", "step", "layer", "head") + QUANTITIES
TABLE_SUFFIXES = (".csv", ".json")
FIGURE_SUFFIXES = (".png", ".pdf", ".svg")


def text_sample(ckpt, corpus: str, batch: int, length: int, seed: int) -> np.ndarray:
    """(batch, length) token ids of real text through the checkpoint's own tokenizer and special
    tokens: the windows the input kind "text" draws for seed key PRNGKey(seed) (corpus:
    "stdlib" or a text file or folder; refused in one line before any compute)."""
    flags = {"inputs.corpus": "--text", "inputs.length": "--length", "inputs.batch": "--batch"}
    try:
        spec = InputSpec(kind="text", batch=batch, length=length, corpus=corpus).validate()
        weights = ckpt.at([0])
        weights.check(ckpt.block(1), spec)
    except ConfigError as e:  # named as the command line names them
        field, sep, rest = str(e).partition(": ")
        raise ConfigError(f"{flags.get(field, field)}{sep}{rest}") from None
    return np.asarray(inputs.text_ids(spec, weights, jax.random.PRNGKey(seed)))


def command(
    folder,
    out,
    ids=None,
    text: str | None = None,
    batch: int = 8,
    length: int = 128,
    seed: int = 0,
    figure_path=None,
) -> list[dict]:
    """`simlab series`: the table of `folder`'s checkpoints on fixed token ids (`ids`, a .npy
    file of (batch, length) ids) or on windows of real text (`text`, text_sample with the
    first checkpoint's tokenizer), written to `out` (.csv or .json) and, if given, drawn to
    `figure_path`. Every argument is checked before anything is computed or written."""
    out = pathlib.Path(out)
    if out.suffix not in TABLE_SUFFIXES:
        raise ConfigError(f"--out: {str(out)!r} must end in .csv or .json")
    if not out.parent.is_dir():
        raise ConfigError(f"--out: {str(out.parent)!r} is not a directory")
    if figure_path is not None and pathlib.Path(figure_path).suffix not in FIGURE_SUFFIXES:
        raise ConfigError(f"--figure: {str(figure_path)!r} must end in .png, .pdf or .svg")
    if (ids is None) == (text is None):
        raise ConfigError("--ids / --text: give exactly one (fixed ids or windows of text)")
    if ids is not None:
        try:
            sample = np.load(ids)
        except (OSError, ValueError) as e:
            raise ConfigError(f"--ids: cannot read {str(ids)!r} ({e})") from None
    pairs = load_series(folder, "folder")
    if text is not None:
        sample = text_sample(pairs[0][1], text, batch, length, seed)
    for _, ck in pairs:  # every checkpoint reads the sample: checked before any compute
        ck.check_ids(sample, f"{'--ids' if text is None else '--text'} on {ck.folder}")
    table = series(pairs, sample)
    write_table(table, out)
    if figure_path is not None:
        figure(table, figure_path, label=str(folder))
    return table


def write_table(table: Iterable[Mapping], path) -> pathlib.Path:
    """The table as CSV (path ends in .csv) or JSON (.json, a list of rows), written atomically."""
    path = pathlib.Path(path)
    table = list(table)
    tmp = path.with_name(path.name + ".tmp")
    if path.suffix == ".csv":
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS)
            w.writeheader()
            w.writerows(table)
    elif path.suffix == ".json":
        tmp.write_text(json.dumps(table, indent=1))
    else:
        raise ConfigError(f"--out: {str(path)!r} must end in .csv or .json")
    tmp.replace(path)
    return path


def figure(tables, path=None, label: str = ""):
    """Each quantity against the training step, one line per layer (the mean over heads); one
    row of panels per table when `tables` maps names to tables (e.g. a checkpoint series and
    the lab's own run, from_train_dynamics, side by side); saved to `path` if given. Returns the
    matplotlib figure."""
    import matplotlib  # deferred: plotting only

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    named = dict(tables) if isinstance(tables, Mapping) else {label: list(tables)}
    n = len(QUANTITIES)
    fig, grid = plt.subplots(len(named), n, figsize=(3.2 * n, 3.0 * len(named)), squeeze=False)
    for axes, (name, table) in zip(grid, named.items()):
        table = list(table)
        layers = sorted({r["layer"] for r in table})
        steps = sorted({r["step"] for r in table})
        for ax, q in zip(axes, QUANTITIES):
            for l in layers:
                ys = [
                    np.mean([r[q] for r in table if r["layer"] == l and r["step"] == s])
                    for s in steps
                ]
                ax.plot(steps, ys, marker="o", ms=3, label=f"layer {l}")
            ax.set_title(f"{name}: {q}" if name else q, fontsize=9)
            ax.set_xlabel("training step")
            if len(steps) > 2 and min(steps) > 0 and max(steps) / min(steps) > 100:
                ax.set_xscale("log")
        axes[0].legend(fontsize=7)
    if label and isinstance(tables, Mapping):
        fig.suptitle(label, fontsize=10)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig
