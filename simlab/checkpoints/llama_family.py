"""The Llama family of trained checkpoints: Llama, Mistral and Qwen2 (pre-RMSNorm, gated MLP,
grouped-query attention, rotary): config.json -> the BlockSpec fields of one layer, HF tensors ->
the lab's layout (simlab.core.init, with w3), the embedding table and the embedding function
(simlab.checkpoints.architectures' docstring states each mapping).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from simlab.checkpoints.hf import Config, Tensors, heads, zeros_if_none
from simlab.checkpoints.layernorm_family import neox_rotary


# ------------------------------------------------------------------------------ Llama family
def llama_spec(c: Config) -> dict:
    """Llama, Mistral and Qwen2's layer fields; the family's own refusals are in the callers."""
    d, h, f = c.int("hidden_size"), c.int("num_attention_heads"), c.int("intermediate_size")
    # the head width: config.json's head_dim where set (HF: q_proj has num_heads * head_dim
    # outputs, o_proj as many inputs), else hidden_size / num_attention_heads
    k = c.int("head_dim") if c.cfg.get("head_dim") is not None else None
    if k is None and d % h:
        c.fail("num_attention_heads", f"{h} does not divide hidden_size {d} (and no head_dim)")
    g = c.int("num_key_value_heads", h)
    if h % g:
        c.fail("num_key_value_heads", f"{g} does not divide num_attention_heads {h}")
    c.expect("pretraining_tp", (1,), 1)
    if c.cfg.get("model_type") == "llama":  # Mistral's and Qwen2's layers never read these
        c.expect("mlp_bias", (False,), False)
        c.expect("attention_bias", (False, True), False)
    pct, base = neox_rotary(c)
    if pct != 1.0:
        c.fail("partial_rotary_factor", f"{pct!r} is not supported (this layer rotates every dim)")
    return dict(
        kind="llama",
        d_model=d,
        n_heads=h,
        **({"n_kv_heads": g} if g != h else {}),
        **({"head_dim": k} if k is not None and k * h != d else {}),  # the block's data
        d_ff=f,
        activation=c.activation("hidden_act", "silu"),
        causal=True,
        ln_eps=c.float("rms_norm_eps", 1e-6),
        rotary_pct=1.0,
        rotary_base=base,
    )


def mistral_spec(c: Config) -> dict:
    w, n = c.cfg.get("sliding_window"), c.int("max_position_embeddings")
    if w is not None and not (isinstance(w, int) and not isinstance(w, bool) and w >= n):
        c.fail(
            "sliding_window",
            f"{w!r} is below max_position_embeddings {n}: sliding-window attention is not "
            "supported (simlab computes full causal attention; set it to null)",
        )
    return llama_spec(c)


def qwen2_spec(c: Config) -> dict:
    c.expect("use_sliding_window", (False,), False)
    types = c.cfg.get("layer_types") or []
    if any(t != "full_attention" for t in types):
        c.fail("layer_types", "only 'full_attention' layers are supported")
    return llama_spec(c)


def attention_biases(c: Config) -> str:
    """Which of q, k, v, o carry a bias: Qwen2 q, k, v (HF's Qwen2Attention); Llama all four
    with attention_bias, else none; Mistral none (HF's MistralAttention)."""
    t = c.cfg.get("model_type")
    if t == "qwen2":
        return "qkv"
    return "qkvo" if t == "llama" and c.cfg.get("attention_bias", False) else ""


def sliding_positions(c: Config) -> int:
    """Mistral's positions: beyond a sliding_window (accepted only >= max_position_embeddings)
    the window would matter, so longer inputs are refused; none set: no limit (rotary)."""
    w = c.cfg.get("sliding_window")
    return 0 if w is None else c.int("sliding_window")


def llama_layer(get: Tensors, i: int, c: Config, s: dict) -> dict:
    d, h, f = s["d_model"], s["n_heads"], s["d_ff"]
    g, k = s.get("n_kv_heads", h), s.get("head_dim") or d // h
    pre = f"layers.{i}."
    bias = attention_biases(c)
    out = {}
    for n, n_h in (("q", h), ("k", g), ("v", g)):
        w = heads(get(f"{pre}self_attn.{n}_proj.weight", (n_h * k, d)), n_h)
        b = get(f"{pre}self_attn.{n}_proj.bias", (n_h * k,)) if n in bias else None
        b = zeros_if_none(b, (n_h * k,)).reshape(n_h, k)
        # grouped-query attention: each key/value head serves h / g consecutive query heads
        out[f"w{n}"] = np.repeat(w, h // n_h, axis=1)
        out[f"b{n}"] = np.repeat(b, h // n_h, axis=0)
    out["wo"] = get(f"{pre}self_attn.o_proj.weight", (d, h * k)).T.reshape(h, k, d)
    bo = get(f"{pre}self_attn.o_proj.bias", (d,)) if "o" in bias else None
    out["bo"] = zeros_if_none(bo, (d,))
    zeros = np.zeros((d,), np.float32)
    out["ln1_g"] = get(f"{pre}input_layernorm.weight", (d,))
    out["ln1_b"] = zeros  # RMSNorm: no bias (kind "llama" reads the gains only)
    out["ln2_g"] = get(f"{pre}post_attention_layernorm.weight", (d,))
    out["ln2_b"] = zeros
    out["w1"] = get(f"{pre}mlp.gate_proj.weight", (f, d)).T
    out["w3"] = get(f"{pre}mlp.up_proj.weight", (f, d)).T
    out["w2"] = get(f"{pre}mlp.down_proj.weight", (d, f)).T
    out["b1"] = np.zeros((f,), np.float32)
    out["b2"] = zeros
    return out


def llama_tables(get: Tensors, c: Config, s: dict) -> dict:
    return {"word": get("embed_tokens.weight", (c.int("vocab_size"), s["d_model"]))}


def llama_embed(t: Mapping, ids_BT, s: dict):
    """embed_tokens[id] (positions enter through the rotary embeddings)."""
    return t["word"][ids_BT]
