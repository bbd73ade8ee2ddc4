"""Against transformers itself (skipped without it): fresh random models at other sizes than the
fixtures (3 heads, 3 layers, Pythia's rotary_pct 0.25), saved with save_pretrained, loaded by
simlab and compared layer by layer with HF's float64 forward."""

from __future__ import annotations

import importlib.util
import pathlib

import jax
import numpy as np
import pytest

from simlab.checkpoints import load

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _script():
    path = pathlib.Path(__file__).parent.parent / "fixtures" / "make_checkpoints.py"
    spec = importlib.util.spec_from_file_location("make_checkpoints", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


mk = _script()

SIZE = dict(hidden=24, heads=3, layers=3, mlp=96, vocab=50, positions=20)


@pytest.fixture(autouse=True, scope="module")
def _size():
    old = dict(mk.SIZE)
    mk.SIZE.update(SIZE)
    yield
    mk.SIZE.clear()
    mk.SIZE.update(old)


@pytest.mark.parametrize("arch", ["bert", "roberta", "gpt2", "gpt_neox", "gpt_neox_sequential"])
def test_fresh_model_matches_hf(arch, tmp_path):
    config, cls = mk._configs()[arch]
    if arch.startswith("gpt_neox"):
        config.rope_parameters["partial_rotary_factor"] = 0.25  # Pythia's: 2 of 8 dims
    config._attn_implementation = "eager"
    torch.manual_seed(1)
    model = cls(config).eval()
    mk._randomize(model)
    model.save_pretrained(tmp_path, safe_serialization=True)
    model = model.double()
    mk._float64_rotary(model)
    ids = np.random.default_rng(0).integers(0, SIZE["vocab"], (2, 9))
    with mk._float64_softmax():
        hidden, _ = mk._forward(model, ids)
    with jax.enable_x64(True):
        hs = load(tmp_path).hidden_states(ids)
    for h, ref in zip(hs, hidden):
        np.testing.assert_allclose(h, ref, rtol=0, atol=1e-9 * np.abs(ref).max())


LLAMA_SIZE = dict(hidden=36, heads=6, kv_heads=3, layers=3, mlp=50, vocab=50, positions=20)


@pytest.mark.parametrize(
    "arch, extra",
    [
        ("llama", dict(attention_bias=True)),  # q, k, v and o biases
        ("llama", dict(num_key_value_heads=6)),  # no grouping
        ("mistral", dict(num_key_value_heads=1)),  # one key/value head for all
        ("qwen2", {}),
    ],
)
def test_fresh_llama_family_matches_hf(arch, extra, tmp_path, monkeypatch):
    """Other sizes than the fixtures (6 heads of 6 dims, 3 layers), rope_theta 10000, the
    attention-bias and grouping variants; float64 against HF's forward with the rotary angles,
    the RMSNorm and the softmax kept in float64."""
    monkeypatch.setattr(mk, "LLAMA_SIZE", LLAMA_SIZE)
    config, cls = mk._configs()[arch]
    for k, v in extra.items():
        setattr(config, k, v)
    config.rope_parameters["rope_theta"] = 10000.0
    config._attn_implementation = "eager"
    torch.manual_seed(2)
    model = cls(config).eval()
    mk._randomize(model)
    model.save_pretrained(tmp_path, safe_serialization=True)
    model = model.double()
    mk._float64_rotary(model)
    mk._float64_rmsnorm(model)
    ids = np.random.default_rng(1).integers(0, LLAMA_SIZE["vocab"], (2, 11))
    with mk._float64_softmax():
        hidden, _ = mk._forward(model, ids)
    with jax.enable_x64(True):
        hs = load(tmp_path).hidden_states(ids)
    assert len(hs) == len(hidden)
    for h, ref in zip(hs, hidden):
        np.testing.assert_allclose(h, ref, rtol=0, atol=1e-9 * np.abs(ref).max())
