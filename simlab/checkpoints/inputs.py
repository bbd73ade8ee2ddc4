"""The input kinds of trained layers, registered in simlab.core.inputs.INPUTS like every kind
(`InputKind.trained`: their components also get the Weights a Lab holds, and without them they
are refused; docs/checkpoints.md).

  tokens: a checkpoint's own embeddings of token ids, through its layers below the first one
          studied (Weights.hidden); the ids are the Weights' fixed ones (a [checkpoint] table's
          `ids`) or drawn per seed as for "embedding": uniform or Zipf over inputs.vocab
          (simlab.core.inputs.token_ids).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from simlab.core.inputs import INPUTS, InputKind, embedding_noise, token_ids
from simlab.registry import BUILTIN


def _tokens_noise(spec, d: int) -> dict:
    return {"ids": embedding_noise(spec, d)["ids"]}


def _tokens(spec, d: int, z: dict, t_key, weights) -> dict:
    if weights.ids is not None:
        # fixed ids and fixed weights: the lower layers are evaluated here, once, and reach
        # the compiled program as data; traced, XLA would constant-fold them at compile time
        # (a minute per layer at BERT's size)
        with jax.ensure_compile_time_eval():
            return {"x": weights.hidden(_tokens_ids(spec, z, weights), z["u_b"].dtype)}
    return {"x": weights.hidden(_tokens_ids(spec, z, weights), z["u_b"].dtype)}


def _tokens_ids(spec, z: dict, weights) -> jax.Array:
    """The ids the tokens are embeddings of: the Weights' fixed ones, or drawn per seed."""
    if weights.ids is not None:
        return jnp.asarray(weights.ids)
    return token_ids(spec, noise={"ids": z["ids"]})


TOKENS = InputKind(
    "tokens",
    _tokens_noise,
    _tokens,
    doc="a checkpoint's embeddings of uniform or Zipf token ids, through its lower layers",
    trained=True,
    ids=_tokens_ids,
)
if TOKENS.name not in INPUTS:
    INPUTS.register(TOKENS, source=BUILTIN)
