"""The input kinds of trained layers, registered in simlab.core.inputs.INPUTS like every kind
(`InputKind.trained`: their components also get the Weights a Lab holds, and without them they
are refused; docs/checkpoints.md).

  tokens: a checkpoint's own embeddings of token ids, through its layers below the first one
          studied (Weights.hidden); the ids are the Weights' fixed ones (a [checkpoint] table's
          `ids`) or drawn per seed as for "embedding": uniform or Zipf over inputs.vocab
          (simlab.core.inputs.token_ids).
  text:   windows of real text through the checkpoint's own tokenizer (its tokenizer.json,
          read with the `tokenizers` package), then as "tokens". The corpus (inputs.corpus:
          "stdlib", the standard library's docstrings and license, or a text file or folder;
          simlab.checkpoints.corpus) is tokenized once without special tokens into ids
          c_0 .. c_{N-1}; a window is the tokenizer's own single-sequence template around
          T - P - S consecutive ids (models.template, P and S the prefix and suffix lengths):
          [CLS] c_s .. c_{s+T-3} [SEP] for BERT, <s> ... </s> for RoBERTa, running text with
          nothing added for GPT-2 and GPT-NeoX (their tokenizers add nothing). The starts s_b,
          b < inputs.batch, are uniform on 0..N - (T - P - S) from the seed's own key
          (jax.random.randint on fold_in(seed key, 1), as every seed's inputs), so a window
          depends on the seed alone, never on the chunking or the devices. The corpus stays on
          the host: the program receives the window ids (B, T) from a host callback, so its
          size does not grow with the corpus (tests/checkpoints/test_text.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from simlab.checkpoints import corpus, models
from simlab.checkpoints.checkpoint import TOKENIZER
from simlab.core.inputs import INPUTS, InputKind, embedding_noise, token_ids
from simlab.errors import ConfigError
from simlab.registry import BUILTIN


def _tokens_noise(spec, d: int) -> dict:
    return {"ids": embedding_noise(spec, d)["ids"]}


def _tokens(spec, d: int, z: dict, t_key, weights) -> dict:
    if weights.ids is not None:
        # fixed ids and fixed weights: the lower layers are evaluated once per Weights
        # (Weights.fixed_hidden) and reach the compiled program as data from a host callback,
        # not as a constant that grows with the ids (tests/checkpoints/test_text.py)
        return {"x": _from_host(weights.fixed_hidden(z["u_b"].dtype), z["u_b"])}
    return {"x": weights.hidden(_tokens_ids(spec, z, t_key, weights), z["u_b"].dtype)}


def _tokens_ids(spec, z: dict, t_key, weights) -> jax.Array:
    """The ids the tokens are embeddings of: the Weights' fixed ones (as data), or drawn per
    seed."""
    if weights.ids is not None:
        return _from_host(np.asarray(weights.ids), z["ids"])
    return token_ids(spec, noise={"ids": z["ids"]})


def _from_host(a: np.ndarray, like: jax.Array) -> jax.Array:
    """`a` inside a traced program (`like` a tracer) as the result of a host callback: data,
    not a constant; evaluated eagerly, simply `a` as a jax array."""
    if not isinstance(like, jax.core.Tracer):
        return jnp.asarray(a)
    out = jax.ShapeDtypeStruct(a.shape, a.dtype)
    return jax.pure_callback(lambda: a, out, vmap_method="sequential")


def _tokens_check(spec, weights) -> None:
    weights.check_ids_shape(spec)
    weights.check_vocab(spec)


TOKENS = InputKind(
    "tokens",
    _tokens_noise,
    _tokens,
    doc="a checkpoint's embeddings of uniform or Zipf token ids, through its lower layers",
    trained=True,
    ids=_tokens_ids,
    check=_tokens_check,
)


# ------------------------------------------------------------------------------ text
def text_corpus(spec, weights) -> tuple[np.ndarray, tuple[int, ...], tuple[int, ...]]:
    """(the corpus's token ids, the template's prefix, its suffix) for inputs `spec` on
    `weights` (their checkpoint's tokenizer), every refusal in one line before any compute:
    no tokenizer.json, fixed ids, a template that leaves no room in inputs.length, a corpus
    shorter than one window, ids outside the checkpoint's vocabulary."""
    ck = weights.checkpoint
    if weights.ids is not None:
        raise ConfigError(
            "checkpoint.ids: fixed ids and inputs.kind 'text' exclude each other (the text "
            "kind draws its windows per seed); leave one out"
        )
    tokenizer_json = ck.tokenizer_text()
    if tokenizer_json is None:
        raise ConfigError(
            f"inputs.kind: 'text' needs the checkpoint's {TOKENIZER}, and "
            f"{ck.folder / TOKENIZER} is missing"
        )
    where = str(ck.folder / TOKENIZER)
    prefix, suffix = _template(tokenizer_json, where)
    body = spec.length - len(prefix) - len(suffix)
    if body < 1:
        raise ConfigError(
            f"inputs.length: {spec.length} leaves no text between the tokenizer's "
            f"{len(prefix) + len(suffix)} special tokens ({where})"
        )
    ids = corpus.token_ids(tokenizer_json, spec.corpus)
    if len(ids) < body:
        raise ConfigError(
            f"inputs.corpus: {spec.corpus!r} has {len(ids)} tokens ({where}), fewer than one "
            f"window of {body} (inputs.length {spec.length} less {len(prefix) + len(suffix)} "
            "special tokens)"
        )
    top = max([int(ids.max()), *prefix, *suffix])
    if top >= ck.vocab:
        raise ConfigError(
            f"inputs.corpus: token id {top} of {where} is outside the checkpoint's vocab_size "
            f"{ck.vocab}"
        )
    return ids, prefix, suffix


_TEMPLATES: dict[str, tuple] = {}


def _template(tokenizer_json: str, where: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if tokenizer_json not in _TEMPLATES:
        _TEMPLATES[tokenizer_json] = models.template(
            models.tokenizer_from_str(tokenizer_json, where)
        )
    return _TEMPLATES[tokenizer_json]


def text_ids(spec, weights, key) -> jax.Array:
    """The window ids (inputs.batch, inputs.length) of one seed (the module docstring): the
    starts drawn from `key` in the program, the windows cut on the host (a callback)."""
    ids, prefix, suffix = text_corpus(spec, weights)
    body = spec.length - len(prefix) - len(suffix)
    start = jax.random.randint(key, (spec.batch,), 0, len(ids) - body + 1, jnp.int32)

    def cut(s):
        return models.windows(ids, prefix, suffix, np.asarray(s), spec.length).astype(np.int32)

    out = jax.ShapeDtypeStruct((spec.batch, spec.length), jnp.int32)
    return jax.pure_callback(cut, out, start, vmap_method="sequential")


def _text(spec, d: int, z: dict, t_key, weights) -> dict:
    return {"x": weights.hidden(text_ids(spec, weights, t_key), z["u_b"].dtype)}


def _text_check(spec, weights) -> None:
    text_corpus(spec, weights)


TEXT = InputKind(
    "text",
    lambda spec, d: {},
    _text,
    doc="a checkpoint's embeddings of windows of real text (inputs.corpus), its own tokenizer",
    trained=True,
    check=_text_check,
    ids=lambda spec, z, t_key, weights: text_ids(spec, weights, t_key),
)

for _kind in (TOKENS, TEXT):
    if _kind.name not in INPUTS:
        INPUTS.register(_kind, source=BUILTIN)
