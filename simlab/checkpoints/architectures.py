"""Trained architectures as one registry, ARCHITECTURES: HF tensor names -> the lab's layout.

Each entry (an `Architecture`, keyed by config.json's model_type) states how one HF layer maps
onto a simlab block (simlab.core.block.BLOCKS) and the lab's parameter layout
(simlab.core.init: wq, wk, wv (D, H, K), bq, bk, bv (H, K), wo (H, K, D), bo (D,), w1 (D, F),
b1 (F,), w2 (F, D), b2 (D,), ln1_g, ln1_b, ln2_g, ln2_b (D,)), and how the embeddings are made:
  bert     BertLayer (Devlin et al. 2019) is "post_ln": h = LN1(x + Attn(x)),
           y = LN2(h + MLP(h)), LN1 = attention.output.LayerNorm, LN2 = output.LayerNorm; no
           attention mask; embeddings LN_e(word[id] + position[t] + type[0]).
  roberta  the same layer (Liu et al. 2019); positions count from padding_idx + 1 and skip
           padding tokens (HF's create_position_ids_from_input_ids), type 0.
  gpt2     "pre_ln", causal (Radford et al. 2019): h = x + Attn(LN1(x)), y = h + MLP(LN2(h)),
           LN1 = ln_1, LN2 = ln_2; Conv1D weights are stored (in, out), used as they are;
           c_attn splits into q, k, v along its output; embeddings wte[id] + wpe[t].
  gpt_neox "parallel2" (use_parallel_residual, Black et al. 2022; Pythia, Biderman et al.
           2023): y = x + Attn(LN1(x)) + MLP(LN2(x)), LN1 = input_layernorm,
           LN2 = post_attention_layernorm; otherwise "pre_ln". query_key_value's output is laid
           out per head as [q, k, v] (viewed (H, 3, K)); rotary embeddings on the first
           int(K * rotary_pct) dims of each head (simlab.core.rotary); embeddings embed_in[id].
  llama    "llama", causal (Touvron et al. 2023): h = x + Attn(RMS1(x)), y = h + GLU(RMS2(h)),
           RMS1 = input_layernorm, RMS2 = post_attention_layernorm (RMSNorm with a gain, eps
           rms_norm_eps), GLU(h) = down(act(gate h) * up h) (w1 = gate_proj, w3 = up_proj,
           w2 = down_proj, act = hidden_act, SiLU); grouped-query attention with
           num_key_value_heads (k_proj and v_proj repeated over their groups, HF's repeat_kv);
           rotary embeddings on every dim of a head with base rope_theta; biases only with
           attention_bias (q, k, v and o); embeddings embed_tokens[id].
  mistral  Llama's layer without biases (Jiang et al. 2023); a sliding_window that can matter
           (set, and below max_position_embeddings) is refused.
  qwen2    Llama's layer with biases on q, k and v and none on o (Qwen2, Yang et al. 2024);
           use_sliding_window true is refused.
Activations follow HF's ACT2FN: "gelu" is the exact erf GELU ("gelu_exact" here), "gelu_new"
and "gelu_pytorch_tanh" the tanh form (simlab's "gelu"), "relu" ReLU, "silu" and "swish" SiLU.
Anything else in config.json that changes the computation is refused, naming the field and the
file; the output head and tie_word_embeddings are not read (simlab runs the layers only).
The mappings live by family (simlab.checkpoints.layernorm_family: bert, roberta, gpt2, gpt_neox;
simlab.checkpoints.llama_family: llama, mistral, qwen2), config.json and the tensors are read
through simlab.checkpoints.hf; this module is the registry and its entries. Each mapping names
a built-in kind, a preset of the block data (simlab.core.structure), and fills its layout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import jax.numpy as jnp

from simlab.checkpoints import layernorm_family as lnf
from simlab.checkpoints import llama_family as llama
from simlab.checkpoints.hf import ACTIVATIONS, Config, Tensors, ints
from simlab.checkpoints.layernorm_family import mlp_width, roberta_positions
from simlab.registry import BUILTIN, Registry, require

# names that lived here before the split (the same objects; simlab.checkpoints.hf,
# layernorm_family): ACTIVATIONS, Config, Tensors, mlp_width, roberta_positions
__all__ = [
    "ACTIVATIONS",
    "ARCHITECTURES",
    "Architecture",
    "Config",
    "Tensors",
    "mlp_width",
    "register_architecture",
    "roberta_positions",
]


@dataclasses.dataclass(frozen=True)
class Architecture:
    """One trained architecture (see the module docstring).

    name: config.json's model_type; prefixes: the name prefixes a saved model may carry (its
    task head's wrapper: "bert.", "transformer.", ...), tried in order; probe: a tensor name
    (without prefix) that every checkpoint of it holds.
    spec(cfg) -> BlockSpec fields of one layer (kind, d_model, n_heads, mlp_ratio or d_ff,
    activation, causal, ln_eps, rotary_pct, rotary_base); n_layers(cfg), vocab(cfg),
    max_positions(cfg) -> int (max_positions 0: no limit);
    layer(get, i, cfg, d) -> layer i in the lab's layout (`d`: the spec fields);
    tables(get, cfg, d) -> the embedding tables; embed(tables, ids_BT, d) -> x_BTD (pure jax).
    """

    name: str
    prefixes: tuple[str, ...]
    probe: str
    spec: Callable[[Config], dict]
    n_layers: Callable[[Config], int]
    vocab: Callable[[Config], int]
    max_positions: Callable[[Config], int]
    layer: Callable[[Tensors, int, Config, dict], dict]
    tables: Callable[[Tensors, Config, dict], dict]
    embed: Callable[[Mapping, jnp.ndarray, dict], jnp.ndarray]
    doc: str = ""


def _check(a: Architecture) -> None:
    require(
        "architecture",
        a.name,
        {
            "prefixes": (isinstance(a.prefixes, tuple), "must be a tuple of strings"),
            "probe": (isinstance(a.probe, str) and bool(a.probe), "must name a tensor"),
            **{
                f: (callable(getattr(a, f)), "must be callable")
                for f in ("spec", "n_layers", "vocab", "max_positions", "layer", "tables", "embed")
            },
        },
    )


# model_type -> Architecture, read live
ARCHITECTURES: Registry[Architecture] = Registry("architecture", Architecture, _check)


def register_architecture(a: Architecture) -> Architecture:
    """Add an architecture (validated; a duplicate name is an error)."""
    return ARCHITECTURES.register(a)


for _arch in (
    Architecture(
        "bert",
        ("", "bert."),
        "embeddings.word_embeddings.weight",
        lnf.bert_spec,
        ints("num_hidden_layers"),
        ints("vocab_size"),
        ints("max_position_embeddings"),
        lnf.bert_layer,
        lnf.bert_tables,
        lnf.bert_embed,
        doc="BERT (post-LN, bidirectional, learned positions, token types)",
    ),
    Architecture(
        "roberta",
        ("", "roberta."),
        "embeddings.word_embeddings.weight",
        lnf.roberta_spec,
        ints("num_hidden_layers"),
        ints("vocab_size"),
        lambda c: c.int("max_position_embeddings") - c.int("pad_token_id", 1, lo=0) - 1,
        lnf.bert_layer,
        lnf.bert_tables,
        lnf.roberta_embed,
        doc="RoBERTa (BERT's layer; positions from padding_idx + 1)",
    ),
    Architecture(
        "gpt2",
        ("", "transformer."),
        "wte.weight",
        lnf.gpt2_spec,
        ints("n_layer"),
        ints("vocab_size"),
        ints("n_positions"),
        lnf.gpt2_layer,
        lnf.gpt2_tables,
        lnf.gpt2_embed,
        doc="GPT-2 (pre-LN, causal, learned positions)",
    ),
    Architecture(
        "gpt_neox",
        ("", "gpt_neox."),
        "embed_in.weight",
        lnf.neox_spec,
        ints("num_hidden_layers"),
        ints("vocab_size"),
        lambda c: 0,
        lnf.neox_layer,
        lnf.neox_tables,
        lnf.neox_embed,
        doc="GPT-NeoX / Pythia (parallel residual with two LayerNorms, rotary, causal)",
    ),
    *(
        Architecture(
            name,
            ("", "model."),
            "embed_tokens.weight",
            spec,
            ints("num_hidden_layers"),
            ints("vocab_size"),
            llama.sliding_positions if name == "mistral" else (lambda c: 0),
            llama.llama_layer,
            llama.llama_tables,
            llama.llama_embed,
            doc=doc,
        )
        for name, spec, doc in (
            (
                "llama",
                llama.llama_spec,
                "Llama (pre-RMSNorm, SwiGLU, grouped-query attention, rotary)",
            ),
            ("mistral", llama.mistral_spec, "Mistral (Llama's layer; no sliding window)"),
            (
                "qwen2",
                llama.qwen2_spec,
                "Qwen2 (Llama's layer with q, k, v biases; no sliding window)",
            ),
        )
    ),
):
    ARCHITECTURES.register(_arch, source=BUILTIN)
