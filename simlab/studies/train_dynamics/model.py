"""The trained model: a decoder-only Transformer whose blocks are simlab.core.block.stack_apply
(the same pure functions, parameter layout and init as the lab), its loss and its optimiser.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from simlab.core import attention, block
from simlab.core.init import init_params
from simlab.core.knobs import knob_arrays
from simlab.core.spec import BlockSpec

if TYPE_CHECKING:
    from simlab.studies.train_dynamics.config import TrainConfig


def sinusoidal_init(std: float):
    """Positions initialised as the sinusoids of Vaswani et al. (2017), scaled to entries of
    RMS std: P[t, 2i] = sin(t w_i), P[t, 2i + 1] = cos(t w_i), w_i = 10000^(-2i / d). A
    relative offset is then a fixed rotation of each (sin, cos) pair, which a head can learn."""

    def init(key, shape, dtype=jnp.float32):
        t, d = shape
        w = 10000.0 ** (-jnp.arange(0, d, 2) / d)
        ang_TI = jnp.arange(t)[:, None] * w[None, : d // 2 + d % 2]
        p = jnp.stack([jnp.sin(ang_TI), jnp.cos(ang_TI)], -1).reshape(t, -1)[:, :d]
        return (std * jnp.sqrt(2.0) * p).astype(dtype)

    return init


class Decoder(nn.Module):
    """Decoder-only Transformer whose blocks are simlab.core.block.stack_apply (pure functions)."""

    spec: BlockSpec
    vocab: int
    context: int

    @nn.compact
    def __call__(self, ids_BT, observe=lambda layer: ()):
        s, d = self.spec, self.spec.d_model
        normal = nn.initializers.normal(0.02)
        embed = self.param("embed", normal, (self.vocab, d))
        pos = self.param("pos", sinusoidal_init(0.02), (self.context, d))
        blocks = self.param("blocks", lambda key: init_params(s, key))
        lnf_g = self.param("lnf_g", nn.initializers.ones, (d,))
        lnf_b = self.param("lnf_b", nn.initializers.zeros, (d,))
        unembed = self.param("unembed", normal, (d, self.vocab))
        x_BTD = embed[ids_BT] + pos[: ids_BT.shape[1]]
        zero_LHK = jnp.zeros((s.depth, s.n_heads, s.d_head))
        y_BTD, obs = block.stack_apply(
            s, blocks, x_BTD, knob_arrays({}), zero_LHK, zero_LHK, observe=observe
        )
        return attention.layer_norm(y_BTD, lnf_g, lnf_b, s.ln_eps) @ unembed, obs


def next_token_loss(logits_BTV, targets_BT):
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits_BTV, targets_BT))


def _decay_mask(params):
    """AdamW decays the weight matrices and embeddings, not biases or LayerNorm parameters."""
    decay = {"embed", "pos", "unembed", "wq", "wk", "wv", "wo", "w1", "w2"}
    return jax.tree_util.tree_map_with_path(lambda path, _: path[-1].key in decay, params)


def optimizer(cfg: TrainConfig):
    warmup = min(cfg.warmup, cfg.steps // 2)  # a short run (--steps) keeps a valid schedule
    sched = optax.warmup_cosine_decay_schedule(
        0.0, cfg.lr, warmup, max(cfg.steps, warmup + 1), 0.1 * cfg.lr
    )
    return optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adamw(sched, b1=0.9, b2=0.95, weight_decay=cfg.weight_decay, mask=_decay_mask),
    )
