"""simlab's layers on trained weights against HuggingFace's own forward, elementwise.

The oracles (tests/fixtures/checkpoints/<arch>/oracle.npz, made by
tests/fixtures/make_checkpoints.py) hold HF's embeddings output and every layer's output for
fixed token ids, in float64 (model.double()) and float32. No transformers needed here."""

from __future__ import annotations

import pathlib

import jax
import numpy as np
import pytest

from simlab.checkpoints import load

FIXTURES = pathlib.Path(__file__).parent.parent / "fixtures" / "checkpoints"
ARCHS = (
    "bert",
    "roberta",
    "gpt2",
    "gpt_neox",
    "gpt_neox_sequential",
    "llama",
    "mistral",
    "qwen2",
)


def rel_err(a, ref) -> float:
    """max |a - ref| / max |ref| over the array."""
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    return float(np.max(np.abs(a - ref)) / np.max(np.abs(ref)))


def errors(arch: str, x64: bool) -> list[float]:
    oracle = np.load(FIXTURES / arch / "oracle.npz")
    with jax.enable_x64(x64):
        hs = load(FIXTURES / arch).hidden_states(oracle["ids"])
        ref = oracle["hidden64" if x64 else "hidden32"]
        assert len(hs) == len(ref)
        return [rel_err(h, r) for h, r in zip(hs, ref)]


@pytest.mark.parametrize("arch", ARCHS)
def test_every_layer_matches_hf_float64(arch):
    errs = errors(arch, True)
    assert max(errs) < 1e-9, errs


@pytest.mark.parametrize("arch", ARCHS)
def test_every_layer_matches_hf_float32(arch):
    errs = errors(arch, False)
    assert max(errs) < 1e-4, errs


@pytest.mark.parametrize("arch", ARCHS)
def test_a_later_range_of_layers_starts_from_the_real_hidden_state(arch):
    oracle = np.load(FIXTURES / arch / "oracle.npz")
    with jax.enable_x64(True):
        hs = load(FIXTURES / arch).hidden_states(oracle["ids"], layers=[1])
    assert rel_err(hs[0], oracle["hidden64"][1]) < 1e-9
    assert rel_err(hs[1], oracle["hidden64"][2]) < 1e-9


@pytest.mark.parametrize("arch", ARCHS)
def test_attention_weights_match_hf(arch):
    """The plain path's full weights of each layer against HF's attentions (float64)."""
    from simlab.core import block
    from simlab.core.knobs import knob_arrays

    oracle = np.load(FIXTURES / arch / "oracle.npz")
    with jax.enable_x64(True):
        ck = load(FIXTURES / arch)
        hs = ck.hidden_states(oracle["ids"])
        spec = ck.block(1)
        z = np.zeros((spec.n_heads, spec.d_head))
        for i in range(ck.n_layers):
            p = jax.tree.map(lambda a: a[0], ck.stacked([i]))
            lay = block.layer_apply(spec, p, hs[i], knob_arrays({}), z, z)
            np.testing.assert_allclose(lay.full.w, oracle["attn64"][i], rtol=0, atol=1e-12)
