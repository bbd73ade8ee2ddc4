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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import jax.numpy as jnp
import numpy as np

from simlab.core import attention
from simlab.errors import ConfigError
from simlab.registry import BUILTIN, Registry, require

# HF's ACT2FN names -> simlab's activations (simlab.core.spec.ACTIVATIONS)
ACTIVATIONS = {
    "gelu": "gelu_exact",
    "gelu_new": "gelu",
    "gelu_pytorch_tanh": "gelu",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}


class Config:
    """config.json with checked reads: every error names the field and the file."""

    def __init__(self, cfg: Mapping, file: str):
        self.cfg, self.file = cfg, file

    def fail(self, field: str, why: str):
        raise ConfigError(f"{self.file}: {field}: {why}")

    def int(self, field: str, default=None, lo: int = 1) -> int:
        v = self.cfg.get(field, default)
        if v is None:
            self.fail(field, "missing")
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            self.fail(field, f"must be an integer >= {lo}, got {v!r}")
        return v

    def float(self, field: str, default=None) -> float:
        v = self.cfg.get(field, default)
        if v is None:
            self.fail(field, "missing")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            self.fail(field, f"must be a positive number, got {v!r}")
        return float(v)

    def expect(self, field: str, allowed: tuple, default=None):
        """The value of `field`, which must be one of `allowed` (what simlab computes)."""
        v = self.cfg.get(field, default)
        if v not in allowed:
            computes = " or ".join(map(repr, allowed))
            self.fail(field, f"{v!r} is not supported (simlab computes {computes})")
        return v

    def activation(self, field: str, default=None) -> str:
        v = self.cfg.get(field, default)
        if v not in ACTIVATIONS:
            supported = ", ".join(ACTIVATIONS)
            self.fail(field, f"activation {v!r} is not supported; supported: {supported}")
        return ACTIVATIONS[v]


class Tensors:
    """A checkpoint's tensors under one name prefix, read with their expected shapes."""

    def __init__(self, tensors: Mapping, origin: Mapping[str, str], prefix: str, folder):
        self.tensors, self.origin, self.prefix, self.folder = tensors, origin, prefix, folder

    def __call__(self, name: str, shape: tuple[int, ...], optional: bool = False):
        """The tensor `name` (a LayerNorm's weight/bias also as gamma/beta) as float numpy, or
        a ConfigError naming it and the file (missing, of another shape, not floating point,
        or holding NaN or Inf); optional: None when absent."""
        full = self.prefix + name
        for cand in (
            full,
            full.replace("LayerNorm.weight", "LayerNorm.gamma"),
            full.replace("LayerNorm.bias", "LayerNorm.beta"),
        ):
            if cand in self.tensors:
                a = self.tensors[cand]
                if tuple(a.shape) != tuple(shape):
                    raise ConfigError(
                        f"{self.folder / self.origin[cand]}: tensor {cand!r} has shape "
                        f"{tuple(a.shape)}, config.json implies {tuple(shape)}"
                    )
                if not np.issubdtype(a.dtype, np.floating):
                    raise ConfigError(
                        f"{self.folder / self.origin[cand]}: tensor {cand!r} is {a.dtype}, not "
                        "floating point"
                    )
                a = a if a.dtype in (np.float32, np.float64) else a.astype(np.float32)
                bad = int(np.size(a) - np.count_nonzero(np.isfinite(a)))
                if bad:
                    raise ConfigError(
                        f"{self.folder / self.origin[cand]}: tensor {cand!r} holds {bad} NaN or "
                        "Inf values; simlab never computes on non-finite weights"
                    )
                return a
        if optional:
            return None
        files = sorted(set(self.origin.values())) or ["(no weight file)"]
        raise ConfigError(f"{self.folder / files[0]}: tensor {full!r} is missing")


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


# ------------------------------------------------------------------------------ shared helpers
def _heads(w_OD: np.ndarray, h: int) -> np.ndarray:
    """A torch Linear weight (out, in) with out = (h, k) -> the lab's (D, H, K)."""
    return w_OD.T.reshape(w_OD.shape[1], h, -1)


def _zeros_if_none(a, shape):
    return np.zeros(shape, np.float32) if a is None else a


def _layer_norm(x, g, b, eps):
    return attention.layer_norm(x, g, b, eps)


# ------------------------------------------------------------------------------ BERT, RoBERTa
def _width(s: dict) -> int:
    """The MLP width of a layer's spec fields (mlp_width's inverse)."""
    return s.get("d_ff") or s["d_model"] * s["mlp_ratio"]


def mlp_width(d: int, f: int) -> dict:
    """The BlockSpec fields of an MLP of hidden width f at model width d: mlp_ratio where f is a
    multiple of d it can say (so a checkpoint's fingerprint reads as it always has), else
    d_ff = f (any positive width, e.g. intermediate_size 100 at hidden_size 48)."""
    return {"mlp_ratio": f // d} if f % d == 0 and f // d <= 64 else {"d_ff": f}


def _bert_spec(c: Config) -> dict:
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


def _bert_layer(get: Tensors, i: int, c: Config, s: dict) -> dict:
    d, h = s["d_model"], s["n_heads"]
    f, k = _width(s), d // h
    at, pre = f"encoder.layer.{i}.attention.", f"encoder.layer.{i}."
    out = {}
    for n, hf in (("q", "query"), ("k", "key"), ("v", "value")):
        out[f"w{n}"] = _heads(get(f"{at}self.{hf}.weight", (d, d)), h)
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


def _bert_tables(get: Tensors, c: Config, s: dict) -> dict:
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


def _bert_embed(t: Mapping, ids_BT, s: dict):
    """LN_e(word[id] + position[t] + type[0]) (token type 0 everywhere)."""
    pos = t["position"][: ids_BT.shape[1]][None]
    return _layer_norm(t["word"][ids_BT] + pos + t["type"], t["ln_g"], t["ln_b"], s["ln_eps"])


def roberta_positions(ids_BT, padding_idx: int):
    """HF's create_position_ids_from_input_ids: the n-th non-padding token of a sequence (from 1)
    sits at padding_idx + n; padding tokens at padding_idx."""
    mask = (ids_BT != padding_idx).astype(jnp.int32)
    return jnp.cumsum(mask, axis=1) * mask + padding_idx


def _roberta_spec(c: Config) -> dict:
    s = _bert_spec(c)
    s["padding_idx"] = c.int("pad_token_id", 1, lo=0)
    return s


def _roberta_embed(t: Mapping, ids_BT, s: dict):
    """LN_e(word[id] + position[p] + type[0]), p from roberta_positions."""
    pos = t["position"][roberta_positions(ids_BT, s["padding_idx"])]
    return _layer_norm(t["word"][ids_BT] + pos + t["type"], t["ln_g"], t["ln_b"], s["ln_eps"])


# ------------------------------------------------------------------------------ GPT-2
def _gpt2_spec(c: Config) -> dict:
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


def _gpt2_layer(get: Tensors, i: int, c: Config, s: dict) -> dict:
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


def _gpt2_tables(get: Tensors, c: Config, s: dict) -> dict:
    d = s["d_model"]
    return {
        "word": get("wte.weight", (c.int("vocab_size"), d)),
        "position": get("wpe.weight", (c.int("n_positions"), d)),
    }


def _gpt2_embed(t: Mapping, ids_BT, s: dict):
    """wte[id] + wpe[t]."""
    return t["word"][ids_BT] + t["position"][: ids_BT.shape[1]][None]


# ------------------------------------------------------------------------------ GPT-NeoX
def _neox_rotary(c: Config) -> tuple[float, float]:
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


def _neox_spec(c: Config) -> dict:
    d, h, f = c.int("hidden_size"), c.int("num_attention_heads"), c.int("intermediate_size")
    if d % h:
        c.fail("num_attention_heads", f"{h} does not divide hidden_size {d}")
    pct, base = _neox_rotary(c)
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


def _neox_layer(get: Tensors, i: int, c: Config, s: dict) -> dict:
    d, h = s["d_model"], s["n_heads"]
    f, k = _width(s), d // h
    pre = f"layers.{i}."
    w = get(f"{pre}attention.query_key_value.weight", (3 * d, d))
    b = get(f"{pre}attention.query_key_value.bias", (3 * d,), optional=True)
    b = _zeros_if_none(b, (3 * d,))
    w_DH3K = w.T.reshape(d, h, 3, k)  # per head [q, k, v]
    b_H3K = b.reshape(h, 3, k)
    out = {}
    for j, n in enumerate("qkv"):
        out[f"w{n}"] = np.ascontiguousarray(w_DH3K[:, :, j])
        out[f"b{n}"] = np.ascontiguousarray(b_H3K[:, j])
    out["wo"] = get(f"{pre}attention.dense.weight", (d, d)).T.reshape(h, k, d)
    out["bo"] = _zeros_if_none(get(f"{pre}attention.dense.bias", (d,), optional=True), (d,))
    out["ln1_g"] = get(f"{pre}input_layernorm.weight", (d,))
    out["ln1_b"] = get(f"{pre}input_layernorm.bias", (d,))
    out["ln2_g"] = get(f"{pre}post_attention_layernorm.weight", (d,))
    out["ln2_b"] = get(f"{pre}post_attention_layernorm.bias", (d,))
    out["w1"] = get(f"{pre}mlp.dense_h_to_4h.weight", (f, d)).T
    out["b1"] = get(f"{pre}mlp.dense_h_to_4h.bias", (f,))
    out["w2"] = get(f"{pre}mlp.dense_4h_to_h.weight", (d, f)).T
    out["b2"] = get(f"{pre}mlp.dense_4h_to_h.bias", (d,))
    return out


def _neox_tables(get: Tensors, c: Config, s: dict) -> dict:
    return {"word": get("embed_in.weight", (c.int("vocab_size"), s["d_model"]))}


def _neox_embed(t: Mapping, ids_BT, s: dict):
    """embed_in[id] (positions enter through the rotary embeddings)."""
    return t["word"][ids_BT]


# ------------------------------------------------------------------------------ Llama family
def _llama_spec(c: Config) -> dict:
    """Llama, Mistral and Qwen2's layer fields; the family's own refusals are in the callers."""
    d, h, f = c.int("hidden_size"), c.int("num_attention_heads"), c.int("intermediate_size")
    if d % h:
        c.fail("num_attention_heads", f"{h} does not divide hidden_size {d}")
    g = c.int("num_key_value_heads", h)
    if h % g:
        c.fail("num_key_value_heads", f"{g} does not divide num_attention_heads {h}")
    k = d // h
    c.expect("head_dim", (k, None), k)  # simlab's d_head is d_model / n_heads
    c.expect("pretraining_tp", (1,), 1)
    if c.cfg.get("model_type") == "llama":  # Mistral's and Qwen2's layers never read these
        c.expect("mlp_bias", (False,), False)
        c.expect("attention_bias", (False, True), False)
    pct, base = _neox_rotary(c)
    if pct != 1.0:
        c.fail("partial_rotary_factor", f"{pct!r} is not supported (this layer rotates every dim)")
    return dict(
        kind="llama",
        d_model=d,
        n_heads=h,
        **({"n_kv_heads": g} if g != h else {}),
        d_ff=f,
        activation=c.activation("hidden_act", "silu"),
        causal=True,
        ln_eps=c.float("rms_norm_eps", 1e-6),
        rotary_pct=1.0,
        rotary_base=base,
    )


def _mistral_spec(c: Config) -> dict:
    w, n = c.cfg.get("sliding_window"), c.int("max_position_embeddings")
    if w is not None and not (isinstance(w, int) and not isinstance(w, bool) and w >= n):
        c.fail(
            "sliding_window",
            f"{w!r} is below max_position_embeddings {n}: sliding-window attention is not "
            "supported (simlab computes full causal attention; set it to null)",
        )
    return _llama_spec(c)


def _qwen2_spec(c: Config) -> dict:
    c.expect("use_sliding_window", (False,), False)
    types = c.cfg.get("layer_types") or []
    if any(t != "full_attention" for t in types):
        c.fail("layer_types", "only 'full_attention' layers are supported")
    return _llama_spec(c)


def _attention_biases(c: Config) -> str:
    """Which of q, k, v, o carry a bias: Qwen2 q, k, v (HF's Qwen2Attention); Llama all four
    with attention_bias, else none; Mistral none (HF's MistralAttention)."""
    t = c.cfg.get("model_type")
    if t == "qwen2":
        return "qkv"
    return "qkvo" if t == "llama" and c.cfg.get("attention_bias", False) else ""


def _sliding_positions(c: Config) -> int:
    """Mistral's positions: beyond a sliding_window (accepted only >= max_position_embeddings)
    the window would matter, so longer inputs are refused; none set: no limit (rotary)."""
    w = c.cfg.get("sliding_window")
    return 0 if w is None else c.int("sliding_window")


def _llama_layer(get: Tensors, i: int, c: Config, s: dict) -> dict:
    d, h, f = s["d_model"], s["n_heads"], s["d_ff"]
    g, k = s.get("n_kv_heads", h), d // h
    pre = f"layers.{i}."
    bias = _attention_biases(c)
    out = {}
    for n, heads in (("q", h), ("k", g), ("v", g)):
        w = _heads(get(f"{pre}self_attn.{n}_proj.weight", (heads * k, d)), heads)
        b = get(f"{pre}self_attn.{n}_proj.bias", (heads * k,)) if n in bias else None
        b = _zeros_if_none(b, (heads * k,)).reshape(heads, k)
        # grouped-query attention: each key/value head serves h / g consecutive query heads
        out[f"w{n}"] = np.repeat(w, h // heads, axis=1)
        out[f"b{n}"] = np.repeat(b, h // heads, axis=0)
    out["wo"] = get(f"{pre}self_attn.o_proj.weight", (d, d)).T.reshape(h, k, d)
    bo = get(f"{pre}self_attn.o_proj.bias", (d,)) if "o" in bias else None
    out["bo"] = _zeros_if_none(bo, (d,))
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


def _llama_tables(get: Tensors, c: Config, s: dict) -> dict:
    return {"word": get("embed_tokens.weight", (c.int("vocab_size"), s["d_model"]))}


def _llama_embed(t: Mapping, ids_BT, s: dict):
    """embed_tokens[id] (positions enter through the rotary embeddings)."""
    return t["word"][ids_BT]


def _ints(field: str, default=None):
    return lambda c: c.int(field, default)


for _arch in (
    Architecture(
        "bert",
        ("", "bert."),
        "embeddings.word_embeddings.weight",
        _bert_spec,
        _ints("num_hidden_layers"),
        _ints("vocab_size"),
        _ints("max_position_embeddings"),
        _bert_layer,
        _bert_tables,
        _bert_embed,
        doc="BERT (post-LN, bidirectional, learned positions, token types)",
    ),
    Architecture(
        "roberta",
        ("", "roberta."),
        "embeddings.word_embeddings.weight",
        _roberta_spec,
        _ints("num_hidden_layers"),
        _ints("vocab_size"),
        lambda c: c.int("max_position_embeddings") - c.int("pad_token_id", 1, lo=0) - 1,
        _bert_layer,
        _bert_tables,
        _roberta_embed,
        doc="RoBERTa (BERT's layer; positions from padding_idx + 1)",
    ),
    Architecture(
        "gpt2",
        ("", "transformer."),
        "wte.weight",
        _gpt2_spec,
        _ints("n_layer"),
        _ints("vocab_size"),
        _ints("n_positions"),
        _gpt2_layer,
        _gpt2_tables,
        _gpt2_embed,
        doc="GPT-2 (pre-LN, causal, learned positions)",
    ),
    Architecture(
        "gpt_neox",
        ("", "gpt_neox."),
        "embed_in.weight",
        _neox_spec,
        _ints("num_hidden_layers"),
        _ints("vocab_size"),
        lambda c: 0,
        _neox_layer,
        _neox_tables,
        _neox_embed,
        doc="GPT-NeoX / Pythia (parallel residual with two LayerNorms, rotary, causal)",
    ),
    *(
        Architecture(
            name,
            ("", "model."),
            "embed_tokens.weight",
            spec,
            _ints("num_hidden_layers"),
            _ints("vocab_size"),
            _sliding_positions if name == "mistral" else (lambda c: 0),
            _llama_layer,
            _llama_tables,
            _llama_embed,
            doc=doc,
        )
        for name, spec, doc in (
            ("llama", _llama_spec, "Llama (pre-RMSNorm, SwiGLU, grouped-query attention, rotary)"),
            ("mistral", _mistral_spec, "Mistral (Llama's layer; no sliding window)"),
            ("qwen2", _qwen2_spec, "Qwen2 (Llama's layer with q, k, v biases; no sliding window)"),
        )
    ),
):
    ARCHITECTURES.register(_arch, source=BUILTIN)
