"""A trained checkpoint for the conformance checks without files: `random_checkpoint`, a
BERT-layout checkpoint of random weights held in memory with a tiny word-level tokenizer
(`tiny_tokenizer_json`), whose layers 1..2 the trained input kinds run on (`weights_for`).
"""

from __future__ import annotations

import functools
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from simlab.checkpoints.checkpoint import Checkpoint, Weights
from simlab.core.init import init_params
from simlab.core.inputs import INPUTS
from simlab.core.spec import BlockSpec

# the seed of every conformance draw (weights, inputs, the random checkpoint)
SEED = 0
# the words of tiny_tokenizer_json, most frequent English words and punctuation first
TINY_WORDS = (
    ". , the of a to and in is ( ) : = for be it that with as on this or by are an if "
    "not from at value # - default one each per all its - [ ] number seed grid knob block "
    "inputs sweep axes model layer token tokens text attention head heads drift scale width "
    "name names file files run runs point points when what which how then than true false "
    "none no only can every time also but has have more most other out over same so some "
    "such up use used was were will would"
).split()


def tiny_tokenizer_json(vocab: int = 100) -> str:
    """The text of a tokenizer.json (HuggingFace `tokenizers`' format) of a tiny BERT-style
    tokenizer: BERT's normaliser (lower case) and pre-tokenizer, a WordLevel vocabulary of
    [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3 and the first vocab - 4 distinct TINY_WORDS, and BERT's
    single-sequence template [CLS] $A [SEP]. random_checkpoint carries it (the "text" kind's
    conformance cases); tests/fixtures/make_tokenizer.py writes it beside the BERT fixture."""
    import json

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    words = list(dict.fromkeys(TINY_WORDS))[: max(0, vocab - len(special))]
    ids = {w: i for i, w in enumerate(special + words)}
    flags = dict(single_word=False, lstrip=False, rstrip=False, normalized=False, special=True)
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": ids[t], "content": t, **flags} for t in special],
        "normalizer": {
            "type": "BertNormalizer",
            "clean_text": True,
            "handle_chinese_chars": True,
            "strip_accents": None,
            "lowercase": True,
        },
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [
                {"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
            ],
            "pair": [
                {"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
                {"Sequence": {"id": "B", "type_id": 1}},
                {"SpecialToken": {"id": "[SEP]", "type_id": 1}},
            ],
            "special_tokens": {
                t: {"id": t, "ids": [ids[t]], "tokens": [t]} for t in ("[CLS]", "[SEP]")
            },
        },
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": ids, "unk_token": "[UNK]"},
    }
    return json.dumps(tok, indent=1) + "\n"


@functools.lru_cache(maxsize=8)
def random_checkpoint(
    d_model: int = 16, n_heads: int = 4, n_layers: int = 3, vocab: int = 40, positions: int = 512
) -> Checkpoint:
    """A BERT-layout checkpoint of random weights held in memory (no files; the architecture
    "bert" of simlab.checkpoints.architectures): the layers as simlab.core.init draws a post-LN
    stack at fan_in scale (N(0, 1 / fan_in)), the word and position tables N(0, 1) and
    N(0, 0.1^2), token type 0, the embedding LayerNorm at gain 1 and bias 0. The trained input
    kinds' conformance cases run on its layers 1..2 (layer 0 below them makes their inputs)."""
    fields = dict(
        kind="post_ln",
        d_model=d_model,
        n_heads=n_heads,
        mlp_ratio=2,
        activation="gelu_exact",
        causal=False,
        ln_eps=1e-12,
    )
    kp, kw, kpos = jax.random.split(jax.random.PRNGKey(SEED), 3)
    spec = BlockSpec(**fields, depth=n_layers, init="fan_in")
    params = {k: np.asarray(v) for k, v in init_params(spec, kp, jnp.float32).items()}
    zeros = np.zeros(d_model, np.float32)
    tables = dict(
        word=np.asarray(jax.random.normal(kw, (vocab, d_model), jnp.float32)),
        position=0.1 * np.asarray(jax.random.normal(kpos, (positions, d_model), jnp.float32)),
        type=zeros,
        ln_g=zeros + 1,
        ln_b=zeros,
    )
    return Checkpoint(
        folder=pathlib.Path("<simlab.testing.random_checkpoint>"),
        architecture="bert",
        fields=fields,
        params=params,
        tables=tables,
        hashes={"random_checkpoint": f"seed {SEED}, d_model {d_model}, vocab {vocab}"},
        n_layers=n_layers,
        vocab=vocab,
        max_positions=positions,
        tokenizer_json=tiny_tokenizer_json(vocab),
    )


def weights_for(kind: str, d_model: int = 16, vocab: int = 40) -> Weights | None:
    """None for an input kind any Lab draws; for a trained kind (`InputKind.trained`) layers 1
    and 2 of random_checkpoint(d_model, vocab=vocab)."""
    if not INPUTS[kind].trained:
        return None
    return random_checkpoint(d_model, vocab=vocab).at([1, 2])
