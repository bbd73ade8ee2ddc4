"""A Lab on trained layers: the same metrics on every engine path, HF's own hidden states as the
inputs of a later layer, seeds that vary only the inputs, sweeps through run_sweep, and the
refusals of what trained weights cannot do."""

from __future__ import annotations

import dataclasses
import pathlib

import jax
import numpy as np
import pytest

import simlab
from simlab.checkpoints import load
from simlab.core.knobs import knob_arrays
from simlab.core.lab import Lab
from simlab.core.spec import InputSpec
from simlab.errors import ConfigError

from conftest import np_anisotropy

FIXTURES = pathlib.Path(__file__).parent.parent / "fixtures" / "checkpoints"
ARCHS = ("bert", "roberta", "gpt2", "gpt_neox", "gpt_neox_sequential")
KNOBS = [
    {},
    {"q_scale": 3.0, "k_scale": 0.5, "drift_norm": 2.0},
    {"temperature": 0.3, "q_shift": 1.5, "k_shift": 2.0},
    {"attn_residual": 0.5, "mlp_gain": 0.7, "attn_gain": 1.3},
]


def tokens(ck, batch=2, length=12):
    return InputSpec(kind="tokens", batch=batch, length=length, vocab=ck.vocab)


@pytest.mark.parametrize("arch", ARCHS)
def test_layer_1_on_hf_inputs_gives_hf_anisotropy(arch):
    """Fixed ids: layer 1 sees HF's hidden state after layer 0, and its output's cosine is that
    of HF's layer-1 output (float64)."""
    oracle = np.load(FIXTURES / arch / "oracle.npz")
    with jax.enable_x64(True):
        ck = load(FIXTURES / arch)
        lab = Lab(ck.block(1), tokens(ck), weights=ck.at(1, ids=oracle["ids"]))
        out = lab.point(lab.seed_state(jax.random.PRNGKey(0)), knob_arrays({}))
    glob, within = np_anisotropy(oracle["hidden64"][2])
    np.testing.assert_allclose(out["out_cos"], glob, rtol=1e-9)
    np.testing.assert_allclose(out["out_cos_within"], within, rtol=1e-9)
    glob, _ = np_anisotropy(oracle["hidden64"][1])
    np.testing.assert_allclose(out["input_cos"], glob, rtol=1e-9)


# the fast tier keeps two of the six (post-LN BERT with the softmax, rotary parallel GPT-NeoX
# with a clamp); the tiled softmax path has a fast float64 oracle test of its own
# (tests/core/test_tiled.py::test_tiled_layer_vs_float64_softmax_attention)
FAST_PATHS = {("bert", "softmax"), ("gpt_neox", "uniform")}


@pytest.mark.parametrize(
    "arch, pattern",
    [
        pytest.param(a, p, marks=() if (a, p) in FAST_PATHS else pytest.mark.slow)
        for p in ("softmax", "uniform")
        for a in ("bert", "gpt2", "gpt_neox")
    ],
)
def test_every_engine_path_agrees_on_trained_layers(arch, pattern):
    """Hoisted, factored and tiled paths against the plain oracle path, knobs away from their
    defaults, two layers deep (float64)."""
    with jax.enable_x64(True):
        ck = load(FIXTURES / arch)
        block = ck.block(2, pattern=pattern)
        plain = Lab(
            block, tokens(ck), hoist=False, factor=False, tiled=False, weights=ck.at([0, 1])
        )
        fast = Lab(block, tokens(ck), tile_elements=64, weights=ck.at([0, 1]))
        key = jax.random.PRNGKey(3)
        sp, sf = plain.seed_state(key), fast.seed_state(key)
        # both paths at a point as one compiled program, run at every point (op by op would
        # compile every op of both paths on its own: slower)
        both = jax.jit(lambda sp, sf, kn: (plain.point(sp, kn), fast.point(sf, kn)))
        for kn in KNOBS:
            if pattern != "softmax":
                kn = {k: v for k, v in kn.items() if k not in ("temperature",)}
            a, b = both(sp, sf, knob_arrays(kn))
            for m in a:
                np.testing.assert_allclose(b[m], a[m], rtol=1e-9, atol=1e-12, err_msg=f"{m} {kn}")


def test_seeds_vary_only_the_inputs():
    ck = load(FIXTURES / "gpt_neox")
    ids = np.load(FIXTURES / "gpt_neox" / "oracle.npz")["ids"]
    # the one metric compared (a program of every metric compiles several times slower)
    fixed = Lab(ck.block(1), tokens(ck), ("out_cos",), weights=ck.at(0, ids=ids))
    drawn = Lab(ck.block(1), tokens(ck), ("out_cos",), weights=ck.at(0))
    kn = knob_arrays({})
    # each Lab's seed state and point as one compiled program, run for seeds 0 and 1 (in this
    # file's only float32 test, op by op would compile every op on its own: slower)
    fixed_run, drawn_run = (
        jax.jit(lambda key, lab=lab: (st := lab.seed_state(key), lab.point(st, kn)))
        for lab in (fixed, drawn)
    )
    (a, pa), (b, pb) = (fixed_run(jax.random.PRNGKey(s)) for s in (0, 1))
    np.testing.assert_array_equal(a["params"]["wq"], b["params"]["wq"])
    np.testing.assert_array_equal(a["comps"]["x"], b["comps"]["x"])
    assert pa["out_cos"] == pb["out_cos"]  # no drift: equal
    (c, pc), (d, pd) = (drawn_run(jax.random.PRNGKey(s)) for s in (0, 1))
    np.testing.assert_array_equal(c["params"]["w1"], d["params"]["w1"])
    assert pc["out_cos"] != pd["out_cos"]


def test_a_sweep_of_lambda_and_the_uniform_clamp_on_a_trained_layer():
    """run_sweep (python API) over q_scale = k_scale = lambda on BERT's layer 1, and the uniform
    clamp, whose attention entropy is 1 at every point (the one metric asked for: a program of
    every metric compiles several times slower)."""
    ck = load(FIXTURES / "bert")
    inputs = dataclasses.asdict(tokens(ck, batch=2, length=8))
    axes = [{"name": "lambda", "knobs": ["q_scale", "k_scale"], "values": [0.5, 1.0, 4.0]}]
    out = {}
    for pattern in ("softmax", "uniform"):
        block = ck.block(1, pattern=pattern)
        res = simlab.run_sweep(
            block=dataclasses.asdict(block),
            inputs=inputs,
            axes=axes,
            sweep={"seeds": 2, "metrics": ["attn_entropy"]},
            lab=Lab(block, InputSpec(**inputs), ("attn_entropy",), weights=ck.at(1)),
            quiet=True,
        )
        out[pattern] = res
    ent = np.asarray(out["softmax"]["attn_entropy"])
    assert ent.shape == (3, 2) and np.all(np.diff(ent, axis=0) < 0)  # sharper with lambda
    np.testing.assert_allclose(out["uniform"]["attn_entropy"], 1.0, rtol=1e-6)


# ------------------------------------------------------------------------------ refusals
def test_tokens_need_a_checkpoint():
    with pytest.raises(ConfigError, match=r"inputs.kind: 'tokens' are a checkpoint's own"):
        Lab(simlab.BlockSpec(d_model=16, n_heads=2), InputSpec(kind="tokens", vocab=100))


def test_the_block_must_be_the_checkpoints():
    ck = load(FIXTURES / "bert")
    good = ck.block(1)
    for change, msg in [
        ({"kind": "pre_ln"}, r"block.kind: 'pre_ln' differs from the checkpoint's 'post_ln'"),
        ({"activation": "gelu"}, r"block.activation: 'gelu' differs from the checkpoint's"),
        ({"ln_eps": 1e-5}, r"block.ln_eps: 1e-05 differs"),
        ({"depth": 2}, r"block.depth: 2 differs from the 1 checkpoint layers 1..1"),
        (
            {"qk_norm": "rmsnorm"},
            r"block.qk_norm: 'rmsnorm' differs from the checkpoint's 'none' .*; on trained "
            r"weights \[block\] sets only pattern, depth",
        ),
    ]:
        with pytest.raises(ConfigError, match=msg):
            Lab(dataclasses.replace(good, **change), tokens(ck), weights=ck.at(1))


def test_inputs_must_fit_the_checkpoint():
    ck = load(FIXTURES / "gpt2")
    with pytest.raises(
        ConfigError, match=r"inputs.vocab: 30522 \(also .*\) exceeds the checkpoint"
    ):
        Lab(ck.block(1), InputSpec(kind="tokens", batch=2, length=8), weights=ck.at(0))
    with pytest.raises(ConfigError, match=r"inputs.length: 40 tokens exceed the checkpoint's 32"):
        Lab(ck.block(1), tokens(ck, length=40), weights=ck.at(0))
    ids = np.zeros((2, 5), np.int64)
    with pytest.raises(ConfigError, match=r"checkpoint.ids: shape \(2, 5\) differs"):
        Lab(ck.block(1), tokens(ck), weights=ck.at(0, ids=ids))


def test_rotary_turns_the_factored_path_off_and_stays_off_by_default():
    ck = load(FIXTURES / "gpt_neox_sequential")  # pre_ln: nothing hoisted anyway
    assert ck.block(1).rotary_dims == 4
    lab = Lab(
        simlab.BlockSpec(d_model=16, n_heads=2, kind="attention", rotary_pct=0.5),
        InputSpec(kind="gaussian", batch=2, length=8),
    )
    assert lab.hoist and not lab.factor
    assert Lab(simlab.BlockSpec(d_model=16, n_heads=2, kind="attention"), InputSpec()).factor
