"""The tokenizer embedded in a GGUF file's metadata, as the text of a tokenizer.json (read by the
`tokenizers` package when the input kind "text" asks; building the text needs no package).

llama.cpp stores a byte-level BPE tokenizer (tokenizer.ggml.model = "gpt2": GPT-2's, Radford et
al. 2019, and every later BPE model's) as tokenizer.ggml.tokens (id -> token, spelled in GPT-2's
byte alphabet), tokenizer.ggml.merges ("a b", best first), tokenizer.ggml.token_type (3:
control, 4: user defined), the bos/eos ids and add_bos_token / add_eos_token. The tokenizer.json
made here is the one HuggingFace transformers builds from the same keys
(transformers/integrations/gguf/gguf_tokenizer_mapping.py: byte_level_tokenizer,
add_gguf_special_tokens, set_split_regex) and its tokenizer test compares the two on every
string of tests/checkpoints/test_gguf_tokenizer.py: a BPE model without unk, GPT-2's ByteLevel
pre-tokenizer (its regex, no prefix space) or, for llama.cpp's Llama-3 pre-tokenizer names, the
Llama-3 split then ByteLevel; the control tokens (within the byte alphabet) as special added
tokens and the user-defined ones as plain added tokens, matched whole; a post-processor that puts
the bos token before a sequence when add_bos_token is true (the eos token after it with
add_eos_token); ByteLevel decoding. Missing or inconsistent metadata is refused in one line
naming the file and the key.
"""

from __future__ import annotations

import functools
import json

# llama.cpp's pre-tokenizer names whose split HF replaces by Llama 3's (set_split_regex); any
# other name keeps GPT-2's regex, as in HF
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_PRE = ("llama3", "llama-v3", "llama-bpe", "falcon3", "smaug-bpe", "dbrx")
# pre-tokenizer names HF splits by a regex of its own that simlab does not carry
OTHER_SPLITS = (
    "qwen2",
    "deepseek-r1-qwen",
    "tekken",
    "gpt-4o",
    "llama4",
    "qwen35",
    "falcon-h1",
    "pixtral",
    "midm-2.0",
    "lfm2",
    "jina-v5-nano",
    "kormo",
    "f2llmv2",
    "megrez",
    "kanana2",
    "talkie",
    "minimax-m2",
)
CONTROL, USER_DEFINED = 3, 4


@functools.cache
def byte_alphabet() -> dict[int, str]:
    """GPT-2's byte -> printable character (openai/gpt-2 encoder.py bytes_to_unicode)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def _spelled(token: str, alphabet: set[str]) -> str:
    """A token in the byte alphabet as it is; another respelled from its UTF-8 bytes (HF)."""
    if set(token) <= alphabet:
        return token
    table = byte_alphabet()
    return "".join(table[b] for b in token.encode("utf-8"))


def _added(token_id: int, content: str, special: bool) -> dict:
    return {
        "id": token_id,
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": special,
    }


def _template(bos: str | None, eos: str | None, ids: dict[str, int]) -> dict:
    def seq(name, type_id):
        out = [{"SpecialToken": {"id": bos, "type_id": type_id}}] if bos else []
        out.append({"Sequence": {"id": name, "type_id": type_id}})
        return out + ([{"SpecialToken": {"id": eos, "type_id": type_id}}] if eos else [])

    special = {t: {"id": t, "ids": [ids[t]], "tokens": [t]} for t in (bos, eos) if t}
    return {
        "type": "TemplateProcessing",
        "single": seq("A", 0),
        "pair": seq("A", 0) + seq("B", 1),
        "special_tokens": special,
    }


def _special_id(m, key: str, n: int, needed: bool) -> int | None:
    v = m.get(key)
    if v is None:
        if needed:
            m.fail(key, "missing, and add_bos_token / add_eos_token asks for it")
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < n:
        m.fail(key, f"{v!r} is not a token id in 0..{n - 1} (tokenizer.ggml.tokens)")
    return int(v)


def tokenizer_json(m, vocab_size: int) -> str:
    """The tokenizer.json text of the GGUF tokenizer (`m`: gguf_file.Meta, its checked reads;
    vocab_size: the rows of the token embedding), refused naming the key if missing or
    inconsistent (see the module docstring)."""
    model = m.get("tokenizer.ggml.model")
    if model is None:
        m.fail("tokenizer.ggml.model", "missing (the file embeds no tokenizer)")
    if model != "gpt2":
        m.fail(
            "tokenizer.ggml.model",
            f"{model!r} is not supported (simlab reads byte-level BPE, 'gpt2')",
        )
    tokens = m.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
        m.fail("tokenizer.ggml.tokens", "missing or not a list of strings")
    if len(tokens) != vocab_size:
        m.fail(
            "tokenizer.ggml.tokens",
            f"{len(tokens)} tokens, but the model's vocabulary has {vocab_size} (its token "
            "embedding rows / vocab_size)",
        )
    merges = m.get("tokenizer.ggml.merges")
    if not isinstance(merges, list) or not all(isinstance(t, str) for t in merges):
        m.fail(
            "tokenizer.ggml.merges", "missing or not a list of strings (simlab needs the merges)"
        )
    types = m.get("tokenizer.ggml.token_type")
    if types is not None and (not isinstance(types, list) or len(types) != len(tokens)):
        m.fail("tokenizer.ggml.token_type", f"must list one type per token ({len(tokens)})")
    pre = m.get("tokenizer.ggml.pre")
    if pre in OTHER_SPLITS:
        m.fail("tokenizer.ggml.pre", f"{pre!r}: this pre-tokenizer's split is not supported")
    alphabet = set(byte_alphabet().values())
    vocab = {_spelled(t, alphabet): i for i, t in enumerate(tokens)}
    if len(vocab) != len(tokens):
        m.fail("tokenizer.ggml.tokens", f"{len(tokens) - len(vocab)} tokens appear twice")
    pairs = []
    for i, merge in enumerate(merges):
        parts = merge.split(" ")
        if len(parts) != 2 or any(p not in vocab for p in (*parts, "".join(parts))):
            m.fail(
                "tokenizer.ggml.merges",
                f"entry {i} {merge!r} is not two tokens whose join is a token of "
                "tokenizer.ggml.tokens",
            )
        pairs.append(parts)
    types = types or [0] * len(tokens)
    added = [
        _added(i, t, True)
        for i, (t, k) in enumerate(zip(tokens, types))
        if k == CONTROL and set(t) <= alphabet
    ] + [_added(i, t, False) for i, (t, k) in enumerate(zip(tokens, types)) if k == USER_DEFINED]
    add_bos = bool(m.get("tokenizer.ggml.add_bos_token", False))
    add_eos = bool(m.get("tokenizer.ggml.add_eos_token", False))
    bos = _special_id(m, "tokenizer.ggml.bos_token_id", len(tokens), add_bos)
    eos = _special_id(m, "tokenizer.ggml.eos_token_id", len(tokens), add_eos)
    byte_level = {"add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    if pre in LLAMA3_PRE:
        pre_tok = {
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split",
                    "pattern": {"Regex": LLAMA3_SPLIT},
                    "behavior": "Isolated",
                    "invert": False,
                },
                {"type": "ByteLevel", **byte_level, "use_regex": False},
            ],
        }
    else:
        pre_tok = {"type": "ByteLevel", **byte_level}
    out = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": sorted(added, key=lambda a: a["id"]),
        "normalizer": None,
        "pre_tokenizer": pre_tok,
        "post_processor": _template(
            tokens[bos] if add_bos else None,
            tokens[eos] if add_eos else None,
            {tokens[i]: i for i in (bos, eos) if i is not None},
        ),
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": True,
            "trim_offsets": True,
            "use_regex": True,
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": pairs,
        },
    }
    return json.dumps(out, ensure_ascii=False)
