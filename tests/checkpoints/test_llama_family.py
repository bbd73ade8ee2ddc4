"""The Llama family as checkpoints (model_type llama, mistral, qwen2): what config.json may say.
The forward itself against HF's is in test_oracle.py (the committed fixtures) and
test_hf_live.py (fresh models, transformers needed). Each refusal is one line naming the field
and config.json."""

from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import pytest

from simlab.checkpoints import load
from simlab.errors import ConfigError

FIXTURES = pathlib.Path(__file__).parent.parent / "fixtures" / "checkpoints"


def edited(tmp_path, arch: str, **fields) -> pathlib.Path:
    """A copy of the fixture `arch` with config.json's fields set (None: removed)."""
    d = tmp_path / arch
    shutil.copytree(FIXTURES / arch, d)
    cfg = json.loads((d / "config.json").read_text())
    for k, v in fields.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def refused(path) -> str:
    with pytest.raises(ConfigError) as e:
        load(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path / "config.json") in msg, msg
    return msg


@pytest.mark.parametrize(
    "arch, fields, field",
    [
        ("mistral", dict(sliding_window=16), "sliding_window"),
        ("qwen2", dict(use_sliding_window=True), "use_sliding_window"),
        ("qwen2", dict(layer_types=["sliding_attention"] * 2), "layer_types"),
        ("llama", dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), "rope_scaling"),
        ("llama", dict(rope_parameters={"rope_theta": 500.0, "rope_type": "yarn"}), "rope_type"),
        ("llama", dict(mlp_bias=True), "mlp_bias"),
        ("llama", dict(attention_bias="yes"), "attention_bias"),
        ("llama", dict(num_key_value_heads=3), "num_key_value_heads"),
        ("llama", dict(hidden_act="gelu_fast"), "hidden_act"),
        ("llama", dict(pretraining_tp=2), "pretraining_tp"),
        ("qwen2", dict(rope_parameters={"rope_theta": 500.0, "partial_rotary_factor": 0.5}),
         "partial_rotary_factor"),
    ],
)  # fmt: skip
def test_refusals_name_field_and_file(tmp_path, arch, fields, field):
    assert field in refused(edited(tmp_path, arch, **fields))


def test_a_sliding_window_that_cannot_matter_is_accepted_and_bounds_the_length(tmp_path):
    """sliding_window >= max_position_embeddings: every input up to the window sees all its
    keys (the same forward as without it); a longer input is refused, naming its length."""
    ck = load(edited(tmp_path, "mistral", sliding_window=32))
    oracle = np.load(FIXTURES / "mistral" / "oracle.npz")
    np.testing.assert_array_equal(
        np.asarray(ck.hidden_states(oracle["ids"])[-1]),
        np.asarray(load(FIXTURES / "mistral").hidden_states(oracle["ids"])[-1]),
    )
    assert ck.max_positions == 32
    with pytest.raises(ConfigError, match=r"inputs.length: 33 tokens exceed"):
        ck.check_length(33)


@pytest.mark.parametrize(
    "arch, fields",
    [
        ("llama", dict(tie_word_embeddings=True)),  # the output head, never read
        ("mistral", dict(attention_bias=True, mlp_bias=True)),  # HF's Mistral has no biases
        ("qwen2", dict(attention_bias=True, mlp_bias=True)),  # Qwen2: q, k, v biases always
    ],
)
def test_fields_hf_does_not_read_for_the_layer_change_nothing(tmp_path, arch, fields):
    oracle = np.load(FIXTURES / arch / "oracle.npz")
    a = load(edited(tmp_path, arch, **fields)).hidden_states(oracle["ids"])
    b = load(FIXTURES / arch).hidden_states(oracle["ids"])
    np.testing.assert_array_equal(np.asarray(a[-1]), np.asarray(b[-1]))


def test_fields_and_grouped_heads():
    """The block fields read from config.json, and the key/value weights repeated over their
    groups (query heads 0, 1 share key head 0; 2, 3 key head 1) with Qwen2's biases."""
    ck = load(FIXTURES / "qwen2")
    c = json.loads((FIXTURES / "qwen2" / "config.json").read_text())
    assert ck.block_fields() == dict(
        kind="llama",
        d_model=c["hidden_size"],
        n_heads=c["num_attention_heads"],
        n_kv_heads=c["num_key_value_heads"],
        d_ff=c["intermediate_size"],
        activation=c["hidden_act"],
        causal=True,
        ln_eps=c["rms_norm_eps"],
        rotary_pct=1.0,
        rotary_base=c["rope_parameters"]["rope_theta"],
    )
    for n in ("wk", "wv", "bk", "bv"):
        a = ck.params[n]
        axis = 2 if n[0] == "w" else 1
        np.testing.assert_array_equal(np.take(a, 0, axis), np.take(a, 1, axis))
        assert not np.array_equal(np.take(a, 1, axis), np.take(a, 2, axis))
    assert np.any(ck.params["bq"] != 0) and np.all(ck.params["bo"] == 0)
    assert np.all(load(FIXTURES / "llama").params["bq"] == 0)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_a_sweep_on_the_fixture_sees_hfs_attention(arch, tmp_path):
    """A [checkpoint] sweep on layer 1 with the oracle's token ids fixed: at drift 0 its
    attn_max is HF's (mean over rows of max_j w_ij of HF's float64 attention weights), and the
    resolved config records the grouped heads read from config.json."""
    import simlab

    oracle = np.load(FIXTURES / arch / "oracle.npz")
    np.save(tmp_path / "ids.npy", oracle["ids"])
    b, t = oracle["ids"].shape
    cfg = {
        "checkpoint": {"path": str(FIXTURES / arch), "layer": 1, "ids": str(tmp_path / "ids.npy")},
        "block": {"depth": 1},
        "inputs": {"kind": "tokens", "vocab": 100, "batch": b, "length": t},
        "axes": [{"name": "drift_norm", "values": [0.0, 1.0]}],
        "sweep": {"seeds": 1, "metrics": ["attn_max"]},
    }
    res = simlab.run_sweep(cfg, out=tmp_path / "run", quiet=True)
    want = oracle["attn64"][1].max(-1).mean()
    np.testing.assert_allclose(res["attn_max"][0, 0], want, rtol=1e-5)
    assert res.meta["config"]["block"]["n_kv_heads"] == 2


def _write_safetensors(path: pathlib.Path, tensors: dict) -> None:
    """huggingface/safetensors' layout: 8-byte little-endian header length, the JSON header
    (name -> dtype, shape, data_offsets), the float32 data."""
    import struct

    header, blobs, off = {}, [], 0
    for n, a in tensors.items():
        b = np.ascontiguousarray(a, np.float32).tobytes()
        header[n] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def test_a_head_width_other_than_hidden_over_heads(tmp_path):
    """config.json's head_dim 16 at hidden_size 48 and 4 heads (H K = 64 != 48) becomes the
    block's head_dim (data on kind llama, no new kind); q, k, v are read as (H K, D), o as
    (D, H K), and the layer computes the numpy float64 Llama layer of tests/core/test_llama.py
    with the same weights (1e-12 relative)."""
    import importlib.util
    import math

    import jax

    from simlab.core import block
    from simlab.core.init import layer
    from simlab.core.knobs import knob_arrays
    from simlab.core.spec import BlockSpec

    path = pathlib.Path(__file__).parent.parent / "core" / "test_llama.py"
    mod_spec = importlib.util.spec_from_file_location("_test_llama_oracle", path)
    oracle = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(oracle)

    cfg = json.loads((FIXTURES / "llama" / "config.json").read_text())
    cfg["head_dim"] = 16
    d, h, g, k, f, n_layers = 48, 4, 2, 16, 100, cfg["num_hidden_layers"]
    r = np.random.default_rng(0)
    t = {"model.embed_tokens.weight": 0.02 * r.standard_normal((cfg["vocab_size"], d))}
    for i in range(n_layers):
        pre = f"model.layers.{i}."
        for n, shape in (
            ("q", (h * k, d)),
            ("k", (g * k, d)),
            ("v", (g * k, d)),
            ("o", (d, h * k)),
        ):
            t[f"{pre}self_attn.{n}_proj.weight"] = r.standard_normal(shape) / math.sqrt(shape[1])
        for n, shape in (("gate", (f, d)), ("up", (f, d)), ("down", (d, f))):
            t[f"{pre}mlp.{n}_proj.weight"] = r.standard_normal(shape) / math.sqrt(shape[1])
        for n in ("input_layernorm", "post_attention_layernorm"):
            t[f"{pre}{n}.weight"] = 1.0 + 0.2 * r.standard_normal(d)
    folder = tmp_path / "llama_head16"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    _write_safetensors(folder / "model.safetensors", t)

    ck = load(folder)
    fields = ck.block_fields()
    assert fields["head_dim"] == 16 and fields["n_heads"] * 16 != fields["d_model"]
    spec = BlockSpec(**{**fields, "depth": 1}).validate()
    assert spec.d_head == 16 and ck.params["wo"].shape == (n_layers, h, k, d)
    x = r.standard_normal((2, 9, d))
    with jax.enable_x64(True):
        p = {n: np.asarray(a, np.float64) for n, a in layer(ck.params, 1).items()}
        z = np.zeros((h, k))
        got = block.layer_apply(spec, p, x, knob_arrays(oracle.KNOBS), z, z).y
        want = oracle.np_llama_layer(p, x, spec, oracle.KNOBS)
        np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=1e-12 * np.abs(want).max())
