"""A llama.cpp GGUF file as a checkpoint: `parts(path)` -> the fields of its Checkpoint, which
simlab.checkpoints.checkpoint.load builds (docs/checkpoints.md, "GGUF checkpoints").

The file is read with the `gguf` package (llama.cpp's own Python reader, gguf.GGUFReader) and
every tensor dequantised by its own functions (gguf.quants.dequantize: F32, F16, BF16, Q8_0,
Q4_0, Q4_1, Q5_0, Q5_1 and the K-quants Q2_K .. Q6_K; float32 out, as HF's GGUF loader gets
them). The metadata becomes the HF config of the architecture (GGUF key -> config field):

  llama.embedding_length -> hidden_size      llama.attention.head_count -> num_attention_heads
  llama.block_count -> num_hidden_layers     llama.attention.head_count_kv -> num_key_value_heads
  llama.feed_forward_length -> intermediate_size
  llama.attention.layer_norm_rms_epsilon -> rms_norm_eps    llama.rope.freq_base -> rope_theta
  llama.vocab_size (or the tokens' count) -> vocab_size
  llama.context_length -> max_position_embeddings, no output.weight -> tie_word_embeddings

and the tensors their HF names (blk.i.attn_q -> layers.i.self_attn.q_proj, ffn_gate ->
mlp.gate_proj, token_embd -> embed_tokens, ...), so the Llama entry of ARCHITECTURES maps them
onto simlab's layer as it maps a safetensors folder. llama.cpp's converter stores the rows of q
and k permuted for its rotary layout (convert_hf_to_gguf.py, LlamaModel.permute: per head, the
two halves of the rotated pairs interleaved); `unpermute` undoes it exactly as HF's GGUF loader
does (transformers' LlamaTensorProcessor._reverse_permute_weights):
W.reshape(heads, K/2, 2, D).swapaxes(1, 2).reshape(H*K, D), with the key/value head count for k.
The embedded tokenizer becomes a tokenizer.json (simlab.checkpoints.gguf_tokenizer). The file's
sha256 (of the bytes the reader maps) names the checkpoint, as config.json's and the
safetensors' hashes name a folder's. Refused in one line naming the file and the metadata key
or tensor: a truncated file, another architecture, a tensor type outside SUPPORTED, a setting
simlab does not compute, a NaN or Inf after dequantisation.
"""

from __future__ import annotations

import hashlib
import pathlib

import numpy as np

from simlab.checkpoints import gguf_tokenizer
from simlab.checkpoints.architectures import ARCHITECTURES, Config, Tensors
from simlab.errors import ConfigError

ARCHITECTURE = "llama"
# GGML tensor types read (gguf.GGMLQuantizationType names), dequantised by gguf.quants
SUPPORTED = (
    "F32",
    "F16",
    "BF16",
    "Q8_0",
    "Q4_0",
    "Q4_1",
    "Q5_0",
    "Q5_1",
    "Q2_K",
    "Q3_K",
    "Q4_K",
    "Q5_K",
    "Q6_K",
)
# GGUF per-layer tensor -> HF Llama name (below "layers.{i}.")
LAYER_TENSORS = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
GLOBAL_TENSORS = {"token_embd": "embed_tokens", "output_norm": "norm", "output": "lm_head"}


def is_gguf(path) -> bool:
    """Whether `path` names a file (not a folder) ending in .gguf."""
    p = pathlib.Path(path).expanduser()
    return p.suffix.lower() == ".gguf" and not p.is_dir()


def _package():
    try:
        import gguf  # deferred: an optional dependency ([models], [test])
    except ImportError:
        raise ConfigError(
            "reading a .gguf checkpoint needs the gguf package: pip install -e '.[models]' "
            "(or pip install gguf)"
        ) from None
    return gguf


def _reader(f: pathlib.Path):
    """gguf.GGUFReader of `f` whose tensor table is checked against the file's length first, so
    a truncated file is refused naming the first tensor whose data is cut."""
    gguf = _package()

    class Reader(gguf.GGUFReader):
        def _build_tensors(self, start_offs, fields):
            size = len(self.data)
            for field in fields:
                _, name, _, dims, raw, off = field.parts
                name = bytes(name).decode("utf-8", "replace")
                try:
                    qtype = gguf.GGMLQuantizationType(int(raw[0]))
                except ValueError:
                    raise ConfigError(
                        f"{f}: tensor {name!r} has GGML type code {int(raw[0])}, unknown to the "
                        f"gguf package; simlab reads {', '.join(SUPPORTED)}"
                    ) from None
                block, nbytes = gguf.GGML_QUANT_SIZES[qtype]
                end = int(start_offs + off[0]) + int(np.prod(dims)) * nbytes // block
                if end > size:
                    raise ConfigError(
                        f"{f}: tensor {name!r} ends at byte {end}, past the file's {size} bytes "
                        "(a truncated file: download or copy it again)"
                    )
            super()._build_tensors(start_offs, fields)

    try:
        return Reader(f)
    except ConfigError:
        raise
    except OSError as e:
        raise ConfigError(f"{f}: cannot be read ({e.strerror or e})") from None
    except Exception as e:  # the reader's own errors on a cut or corrupt header
        raise ConfigError(
            f"{f}: not a readable GGUF file (truncated or corrupt metadata: "
            f"{type(e).__name__}: {e})"
        ) from None


def metadata(reader) -> dict:
    """Every metadata key -> its value (str, int, float, bool, or a list of them)."""
    gguf = _package()
    out = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        if field.types and field.types[0] == gguf.GGUFValueType.ARRAY:
            out[key] = list(field.contents())
        else:
            out[key] = field.contents()
    return out


class Meta:
    """The metadata with checked reads: every error names the file and the key."""

    def __init__(self, meta: dict, f: pathlib.Path):
        self.meta, self.f = meta, f

    def fail(self, key: str, why: str):
        raise ConfigError(f"{self.f}: metadata {key}: {why}")

    def get(self, key: str, default=None):
        return self.meta.get(key, default)

    def int(self, key: str, default=None, lo: int = 1) -> int:
        v = self.meta.get(key, default)
        if v is None:
            self.fail(key, "missing")
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            self.fail(key, f"must be an integer >= {lo}, got {v!r}")
        return int(v)

    def float(self, key: str, default=None) -> float:
        v = self.meta.get(key, default)
        if v is None:
            self.fail(key, "missing")
        if isinstance(v, bool) or not isinstance(v, (int, float, np.number)) or not v > 0:
            self.fail(key, f"must be a positive number, got {v!r}")
        return float(v)


def hf_config(m: Meta, names: set[str], n_tokens: int | None, n_rows: int | None) -> dict:
    """The HF Llama config.json the metadata states (see the module docstring); settings simlab
    does not compute refused naming the key. The vocabulary: llama.vocab_size, else the
    tokens' count (as HF), else the token embedding's rows."""
    arch = m.get("general.architecture")
    if arch is None:
        m.fail("general.architecture", "missing (the file names no architecture)")
    if arch != ARCHITECTURE:
        m.fail("general.architecture", f"{arch!r} is not supported; supported: {ARCHITECTURE}")
    a = arch + "."
    d, h = m.int(a + "embedding_length"), m.int(a + "attention.head_count")
    g = m.int(a + "attention.head_count_kv", h)
    if d % h:
        m.fail(a + "attention.head_count", f"{h} does not divide embedding_length {d}")
    if h % g:
        m.fail(a + "attention.head_count_kv", f"{g} does not divide attention.head_count {h}")
    k = d // h
    for key in ("rope.dimension_count", "attention.key_length", "attention.value_length"):
        if m.int(a + key, k) != k:
            m.fail(
                a + key,
                f"{m.get(a + key)} differs from embedding_length / head_count = {k} (simlab's "
                "d_head is d_model / n_heads and its rotary covers every dim)",
            )
    if m.int(a + "expert_count", 0, lo=0):
        m.fail(a + "expert_count", "mixture-of-experts layers are not supported")
    scaling = m.get(a + "rope.scaling.type")
    if scaling not in (None, "none") and not (
        scaling == "linear" and m.get(a + "rope.scaling.factor", 1.0) == 1.0
    ):
        m.fail(a + "rope.scaling.type", f"{scaling!r}: rope scaling is not supported")
    vocab = m.get(a + "vocab_size", n_tokens or n_rows)
    if vocab is None:
        m.fail(a + "vocab_size", "missing, and no tokenizer.ggml.tokens or token_embd to count")
    bias = "blk.0.attn_q.bias" in names
    return {
        "model_type": "llama",
        "hidden_size": d,
        "num_attention_heads": h,
        "num_key_value_heads": g,
        "num_hidden_layers": m.int(a + "block_count"),
        "intermediate_size": m.int(a + "feed_forward_length"),
        "rms_norm_eps": m.float(a + "attention.layer_norm_rms_epsilon", 1e-5),
        "rope_theta": m.float(a + "rope.freq_base", 10000.0),
        "max_position_embeddings": m.int(a + "context_length", 2048),
        "vocab_size": m.int(a + "vocab_size", vocab),
        "hidden_act": "silu",
        "attention_bias": bias,
        "tie_word_embeddings": "output.weight" not in names,
    }


def hf_name(name: str) -> str | None:
    """The HF Llama tensor name (no "model." prefix) of a GGUF tensor name (None: not read)."""
    parts = name.split(".")
    if parts[0] == "blk" and len(parts) == 4 and parts[2] in LAYER_TENSORS:
        return f"layers.{parts[1]}.{LAYER_TENSORS[parts[2]]}.{parts[3]}"
    if len(parts) == 2 and parts[0] in GLOBAL_TENSORS:
        return f"{GLOBAL_TENSORS[parts[0]]}.{parts[1]}"
    return None


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation (rows = n_head heads of K, a weight (H*K, D) or a
    bias (H*K,)): HF's _reverse_permute_weights, w.reshape(H, K/2, 2, ...).swapaxes(1, 2)."""
    half = w.shape[0] // n_head // 2
    return w.reshape(n_head, half, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)


def dequantised(reader, f: pathlib.Path, cfg: dict) -> dict[str, np.ndarray]:
    """HF name -> float32 numpy of every tensor the Llama layer reads, dequantised by the gguf
    package, q and k unpermuted; refused naming the tensor: a type outside SUPPORTED, NaN/Inf."""
    gguf = _package()
    out = {}
    for t in reader.tensors:
        name = hf_name(t.name)
        if name is None:
            continue
        if t.tensor_type.name not in SUPPORTED:
            raise ConfigError(
                f"{f}: tensor {t.name!r} has type {t.tensor_type.name}, which simlab does not "
                f"read; supported: {', '.join(SUPPORTED)}"
            )
        a = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), np.float32)
        a = a.reshape(tuple(int(n) for n in reversed(t.shape.tolist())))
        if ".attn_q." in t.name:
            a = unpermute(a, cfg["num_attention_heads"])
        elif ".attn_k." in t.name:
            a = unpermute(a, cfg["num_key_value_heads"])
        bad = int(a.size - np.count_nonzero(np.isfinite(a)))
        if bad:
            raise ConfigError(
                f"{f}: tensor {t.name!r} holds {bad} NaN or Inf values after dequantisation; "
                "simlab never computes on non-finite weights"
            )
        out[name] = a
    return out


def read(f: pathlib.Path):
    """(HF config dict, HF name -> float32 tensor, metadata, sha256 of the file's bytes)."""
    reader = _reader(f)
    sha = hashlib.sha256(memoryview(reader.data)).hexdigest()
    meta = metadata(reader)
    names = {t.name for t in reader.tensors}
    tokens = meta.get("tokenizer.ggml.tokens")
    rows = next((int(t.shape[-1]) for t in reader.tensors if t.name == "token_embd.weight"), None)
    cfg = hf_config(Meta(meta, f), names, len(tokens) if tokens is not None else None, rows)
    wanted = ["token_embd.weight"] + [
        f"blk.{i}.{t}.weight" for i in range(cfg["num_hidden_layers"]) for t in LAYER_TENSORS
    ]
    missing = [n for n in wanted if n not in names]
    if missing:
        raise ConfigError(
            f"{f}: tensor {missing[0]!r} is missing ({len(missing)} of the {len(wanted)} tensors "
            f"that {cfg['num_hidden_layers']} llama layers need)"
        )
    shapes = expected_shapes(cfg)
    for t in reader.tensors:
        kind = t.name.split(".")[-2] if t.name.endswith(".weight") else None
        shape = tuple(int(n) for n in reversed(t.shape.tolist()))
        if kind in shapes and shape != shapes[kind]:
            raise ConfigError(
                f"{f}: tensor {t.name!r} has shape {shape}, the metadata implies "
                f"{shapes[kind]} (llama.embedding_length, attention.head_count(_kv), "
                "feed_forward_length, vocab_size)"
            )
    return cfg, dequantised(reader, f, cfg), meta, sha


def expected_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """GGUF tensor kind -> its (rows, columns) in numpy order, as the metadata states them."""
    d, h, g = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    f, v, k = cfg["intermediate_size"], cfg["vocab_size"], d // h
    return {
        "token_embd": (v, d),
        "output": (v, d),
        "output_norm": (d,),
        "attn_norm": (d,),
        "ffn_norm": (d,),
        "attn_q": (h * k, d),
        "attn_k": (g * k, d),
        "attn_v": (g * k, d),
        "attn_output": (d, h * k),
        "ffn_gate": (f, d),
        "ffn_up": (f, d),
        "ffn_down": (d, f),
    }


def output_head(path) -> dict:
    """The model's head above the layers (not part of any layer, so not in a Checkpoint): the
    final RMSNorm's gain "norm" (D,), the output matrix "output" (vocab, D) (the token
    embedding when the file is tied) and "tied" (no output.weight in the file)."""
    f = pathlib.Path(path).expanduser()
    _, t, _, _ = read(f)
    tied = "lm_head.weight" not in t
    return {
        "norm": t["norm.weight"],
        "output": t["embed_tokens.weight" if tied else "lm_head.weight"],
        "tied": tied,
    }


def parts(path, where: str = "checkpoint.path") -> dict:
    """The fields of the Checkpoint of a .gguf file (simlab.checkpoints.checkpoint.load builds
    it; its folder field: the file), every tensor read once."""
    f = pathlib.Path(path).expanduser()
    if not f.is_file():
        raise ConfigError(f"{where}: {str(f)!r} does not exist (nothing is downloaded)")
    cfg, tensors, meta, sha = read(f)
    tokenizer_json = gguf_tokenizer.tokenizer_json(Meta(meta, f), cfg["vocab_size"])
    c = Config(cfg, f"{f} (metadata)")
    arch = ARCHITECTURES[ARCHITECTURE]
    fields = arch.spec(c)
    n_layers = arch.n_layers(c)
    get = Tensors(tensors, dict.fromkeys(tensors, f.name), "", f.parent)
    layers = [arch.layer(get, i, c, fields) for i in range(n_layers)]
    return dict(
        folder=f,
        architecture=arch.name,
        fields=fields,
        params={n: np.stack([lay[n] for lay in layers]) for n in layers[0]},
        tables=arch.tables(get, c, fields),
        hashes={f.name: sha},
        n_layers=n_layers,
        vocab=arch.vocab(c),
        max_positions=arch.max_positions(c),
        tokenizer_json=tokenizer_json,
    )
