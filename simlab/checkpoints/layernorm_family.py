"""The LayerNorm families of trained checkpoints: BERT and RoBERTa (post-LN), GPT-2 (pre-LN)
and GPT-NeoX / Pythia (parallel residual, rotary): config.json -> the BlockSpec fields of one
layer, HF tensors -> the lab's layout (simlab.core.init), the embedding tables and the embedding
function (simlab.checkpoints.architectures' docstring states each mapping).
"""

from __future__ import annotations

from collections.abc import Mapping

import jax.numpy as jnp
import numpy as np

from simlab.checkpoints.hf import Config, Tensors, heads, layer_norm, zeros_if_none


# ------------------------------------------------------------------------------ BERT, RoBERTa
def _width(s: dict) -> int:
    """The MLP width of a layer's spec fields (mlp_width's inverse)."""
    return s.get("d_ff") or s["d_model"] * s["mlp_ratio"]


def mlp_width(d: int, f: int) -> dict:
    """The BlockSpec fields of an MLP of hidden width f at model width d: mlp_ratio where f is a
    multiple of d it can say (so a checkpoint's fingerprint reads as it always has), else
    d_ff = f (any positive width, e.g. intermediate_size 100 at hidden_size 48)."""
    return {"mlp_ratio": f // d} if f % d == 0 and f // d <= 64 else {"d_ff": f}


def bert_spec(c: Config) -> dict:
    d, h, f = c.int("hidden_size"), c.int("num_attention_heads"), c.int("intermediate_size")
    if d % h:
        c.fail("num_attention_heads", f"{h} does not divide hidden_size {d}")
    c.expect("position_embedding_type", ("absolute",), "absolute")
    c.expect("is_decoder", (False,), False)
    c.expect("add_cross_attention", (False,), False)
    return dict(
        kind="post_ln",
        d_model=d,
        n_heads=h,
        **mlp_width(d, f),
        activation=c.activation("hidden_act", "gelu"),
        causal=False,
        ln_eps=c.float("layer_norm_eps", 1e-12),
    )


def bert_layer(get: Tensors, i: int, c: Config, s: dict) -> dict:
    d, h = s["d_model"], s["n_heads"]
    f, k = _width(s), d // h
    at, pre = f"encoder.layer.{i}.attention.", f"encoder.layer.{i}."
    out = {}
    for n, hf in (("q", "query"), ("k", "key"), ("v", "value")):
        out[f"w{n}"] = heads(get(f"{at}self.{hf}.weight", (d, d)), h)
        out[f"b{n}"] = get(f"{at}self.{hf}.bias", (d,)).reshape(h, k)
    out["wo"] = get(f"{at}output.dense.weight", (d, d)).T.reshape(h, k, d)
    out["bo"] = get(f"{at}output.dense.bias", (d,))
    out["ln1_g"] = get(f"{at}output.LayerNorm.weight", (d,))
    out["ln1_b"] = get(f"{at}output.LayerNorm.bias", (d,))
    out["w1"] = get(f"{pre}intermediate.dense.weight", (f, d)).T
    out["b1"] = get(f"{pre}intermediate.dense.bias", (f,))
    out["w2"] = get(f"{pre}output.dense.weight", (d, f)).T
    out["b2"] = get(f"{pre}output.dense.bias", (d,))
    out["ln2_g"] = get(f"{pre}output.LayerNorm.weight", (d,))
    out["ln2_b"] = get(f"{pre}output.LayerNorm.bias", (d,))
    return out


def bert_tables(get: Tensors, c: Config, s: dict) -> dict:
    d = s["d_model"]
    return {
        "word": get("embeddings.word_embeddings.weight", (c.int("vocab_size"), d)),
        "position": get(
            "embeddings.position_embeddings.weight", (c.int("max_position_embeddings"), d)
        ),
        "type": get("embeddings.token_type_embeddings.weight", (c.int("type_vocab_size", 2), d))[0],
        "ln_g": get("embeddings.LayerNorm.weight", (d,)),
        "ln_b": get("embeddings.LayerNorm.bias", (d,)),
    }


def bert_embed(t: Mapping, ids_BT, s: dict):
    """LN_e(word[id] + position[t] + type[0]) (token type 0 everywhere)."""
    pos = t["position"][: ids_BT.shape[1]][None]
    return layer_norm(t["word"][ids_BT] + pos + t["type"], t["ln_g"], t["ln_b"], s["ln_eps"])


def roberta_positions(ids_BT, padding_idx: int):
    """HF's create_position_ids_from_input_ids: the n-th non-padding token of a sequence (from 1)
    sits at padding_idx + n; padding tokens at padding_idx."""
    mask = (ids_BT != padding_idx).astype(jnp.int32)
    return jnp.cumsum(mask, axis=1) * mask + padding_idx


def roberta_spec(c: Config) -> dict:
    s = bert_spec(c)
    s["padding_idx"] = c.int("pad_token_id", 1, lo=0)
    return s


def roberta_embed(t: Mapping, ids_BT, s: dict):
    """LN_e(word[id] + position[p] + type[0]), p from roberta_positions."""
    pos = t["position"][roberta_positions(ids_BT, s["padding_idx"])]
    return layer_norm(t["word"][ids_BT] + pos + t["type"], t["ln_g"], t["ln_b"], s["ln_eps"])


# ------------------------------------------------------------------------------ GPT-2
def gpt2_spec(c: Config) -> dict:
    d, h = c.int("n_embd"), c.int("n_head")
    if d % h:
        c.fail("n_head", f"{h} does not divide n_embd {d}")
    f = c.cfg.get("n_inner") or 4 * d
    if not isinstance(f, int) or isinstance(f, bool) or f < 1:
        c.fail("n_inner", f"{f!r} must be a positive integer width")
    c.expect("scale_attn_weights", (True,), True)
    c.expect("scale_attn_by_inverse_layer_idx", (False,), False)
    c.expect("add_cross_attention", (False,), False)
    return dict(
        kind="pre_ln",
        d_model=d,
        n_heads=h,
        **mlp_width(d, f),
        activation=c.activation("activation_function", "gelu_new"),
        causal=True,
        ln_eps=c.float("layer_norm_epsilon", 1e-5),
    )


def gpt2_layer(get: Tensors, i: int, c: Config, s: dict) -> dict:
    d, h = s["d_model"], s["n_heads"]
    f, k = _width(s), d // h
    pre = f"h.{i}."
    w = get(f"{pre}attn.c_attn.weight", (d, 3 * d))  # Conv1D: (in, out), y = x W + b
    b = get(f"{pre}attn.c_attn.bias", (3 * d,))
    out = {}
    for j, n in enumerate("qkv"):
        out[f"w{n}"] = w[:, j * d : (j + 1) * d].reshape(d, h, k)
        out[f"b{n}"] = b[j * d : (j + 1) * d].reshape(h, k)
    out["wo"] = get(f"{pre}attn.c_proj.weight", (d, d)).reshape(h, k, d)
    out["bo"] = get(f"{pre}attn.c_proj.bias", (d,))
    out["ln1_g"] = get(f"{pre}ln_1.weight", (d,))
    out["ln1_b"] = get(f"{pre}ln_1.bias", (d,))
    out["ln2_g"] = get(f"{pre}ln_2.weight", (d,))
    out["ln2_b"] = get(f"{pre}ln_2.bias", (d,))
    out["w1"] = get(f"{pre}mlp.c_fc.weight", (d, f))
    out["b1"] = get(f"{pre}mlp.c_fc.bias", (f,))
    out["w2"] = get(f"{pre}mlp.c_proj.weight", (f, d))
    out["b2"] = get(f"{pre}mlp.c_proj.bias", (d,))
    return out


def gpt2_tables(get: Tensors, c: Config, s: dict) -> dict:
    d = s["d_model"]
    return {
        "word": get("wte.weight", (c.int("vocab_size"), d)),
        "position": get("wpe.weight", (c.int("n_positions"), d)),
    }


def gpt2_embed(t: Mapping, ids_BT, s: dict):
    """wte[id] + wpe[t]."""
    return t["word"][ids_BT] + t["position"][: ids_BT.shape[1]][None]


# ------------------------------------------------------------------------------ GPT-NeoX
def neox_rotary(c: Config) -> tuple[float, float]:
    """(rotary_pct, base) from config.json in any of HF's spellings: rope_parameters
    {partial_rotary_factor, rope_theta, rope_type "default"}, or partial_rotary_factor /
    rope_theta, or Pythia's original rotary_pct / rotary_emb_base."""
    rp = c.cfg.get("rope_parameters") or {}
    if not isinstance(rp, dict):
        c.fail("rope_parameters", f"must be a table, got {rp!r}")
    if rp.get("rope_type", "default") != "default":
        c.fail(
            "rope_parameters.rope_type",
            f"{rp['rope_type']!r} is not supported (simlab computes 'default')",
        )
    if c.cfg.get("rope_scaling") not in (None, {}):
        c.fail("rope_scaling", f"{c.cfg['rope_scaling']!r} is not supported (simlab computes none)")
    top = c.cfg
    pct = rp.get(
        "partial_rotary_factor", top.get("partial_rotary_factor", top.get("rotary_pct", 1.0))
    )
    base = rp.get("rope_theta", top.get("rope_theta", top.get("rotary_emb_base", 10000.0)))
    if isinstance(pct, bool) or not isinstance(pct, (int, float)) or not 0 < pct <= 1:
        c.fail("rotary_pct", f"must be in (0, 1], got {pct!r}")
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not base > 0:
        c.fail("rotary_emb_base", f"must be a positive number, got {base!r}")
    return float(pct), float(base)


def neox_spec(c: Config) -> dict:
    d, h, f = c.int("hidden_size"), c.int("num_attention_heads"), c.int("intermediate_size")
    if d % h:
        c.fail("num_attention_heads", f"{h} does not divide hidden_size {d}")
    pct, base = neox_rotary(c)
    k = d // h
    if int(k * pct) % 2:
        c.fail("rotary_pct", f"int(d_head {k} * {pct}) = {int(k * pct)} rotated dims must be even")
    parallel = c.cfg.get("use_parallel_residual", True)
    if not isinstance(parallel, bool):
        c.fail("use_parallel_residual", f"must be true or false, got {parallel!r}")
    return dict(
        kind="parallel2" if parallel else "pre_ln",
        d_model=d,
        n_heads=h,
        **mlp_width(d, f),
        activation=c.activation("hidden_act", "gelu"),
        causal=True,
        ln_eps=c.float("layer_norm_eps", 1e-5),
        rotary_pct=pct,
        rotary_base=base,
    )


def neox_layer(get: Tensors, i: int, c: Config, s: dict) -> dict:
    d, h = s["d_model"], s["n_heads"]
    f, k = _width(s), d // h
    pre = f"layers.{i}."
    w = get(f"{pre}attention.query_key_value.weight", (3 * d, d))
    b = get(f"{pre}attention.query_key_value.bias", (3 * d,), optional=True)
    b = zeros_if_none(b, (3 * d,))
    w_DH3K = w.T.reshape(d, h, 3, k)  # per head [q, k, v]
    b_H3K = b.reshape(h, 3, k)
    out = {}
    for j, n in enumerate("qkv"):
        out[f"w{n}"] = np.ascontiguousarray(w_DH3K[:, :, j])
        out[f"b{n}"] = np.ascontiguousarray(b_H3K[:, j])
    out["wo"] = get(f"{pre}attention.dense.weight", (d, d)).T.reshape(h, k, d)
    out["bo"] = zeros_if_none(get(f"{pre}attention.dense.bias", (d,), optional=True), (d,))
    out["ln1_g"] = get(f"{pre}input_layernorm.weight", (d,))
    out["ln1_b"] = get(f"{pre}input_layernorm.bias", (d,))
    out["ln2_g"] = get(f"{pre}post_attention_layernorm.weight", (d,))
    out["ln2_b"] = get(f"{pre}post_attention_layernorm.bias", (d,))
    out["w1"] = get(f"{pre}mlp.dense_h_to_4h.weight", (f, d)).T
    out["b1"] = get(f"{pre}mlp.dense_h_to_4h.bias", (f,))
    out["w2"] = get(f"{pre}mlp.dense_4h_to_h.weight", (d, f)).T
    out["b2"] = get(f"{pre}mlp.dense_4h_to_h.bias", (d,))
    return out


def neox_tables(get: Tensors, c: Config, s: dict) -> dict:
    return {"word": get("embed_in.weight", (c.int("vocab_size"), s["d_model"]))}


def neox_embed(t: Mapping, ids_BT, s: dict):
    """embed_in[id] (positions enter through the rotary embeddings)."""
    return t["word"][ids_BT]
