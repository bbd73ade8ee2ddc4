"""block.qk_weights (random / tied / identity) and inputs.normalize (unit tokens) against direct
numpy computations: the identity block is softmax(beta Y Y^T) Y by hand, the tied block has
W_K = W_Q exactly, and normalised inputs are x_i / |x_i| of the very same draw."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from simlab.core.init import init_params
from simlab.core.knobs import knob_arrays
from simlab.core.lab import Lab
from simlab.core.spec import BlockSpec, InputSpec
from simlab.errors import ConfigError

KEY = jax.random.PRNGKey(5)


def test_tied_weights_share_w_q_and_leave_the_rest_as_drawn():
    spec = BlockSpec(kind="attention", d_model=16, n_heads=2, mlp=False, init="fan_in")
    rand = init_params(spec, KEY)
    tied = init_params(BlockSpec(**{**spec.__dict__, "qk_weights": "tied"}), KEY)
    np.testing.assert_array_equal(tied["wk"], tied["wq"])
    np.testing.assert_array_equal(tied["wq"], rand["wq"])  # the same draws otherwise
    np.testing.assert_array_equal(tied["wv"], rand["wv"])
    assert np.max(np.abs(np.asarray(rand["wk"] - rand["wq"]))) > 0.1


@pytest.mark.slow
def test_identity_block_with_unit_tokens_is_softmax_of_the_gram_matrix():
    """Chen et al.'s model (docs/theory.md, claim 3): y_i = x_i / |x_i|, Q = K = V = O = I,
    output sum_j softmax_j(beta <y_i, y_j>) y_j with beta = q_scale k_scale / (sqrt(D) temperature);
    float64 numpy on the Lab's own inputs, tiled and plain paths alike."""
    d, t = 24, 12
    spec = BlockSpec(kind="attention", d_model=d, n_heads=1, mlp=False, qk_weights="identity")
    ispec = InputSpec(kind="gaussian", batch=2, length=t, normalize=True)
    kn = dict(q_scale=2.0, k_scale=1.5, temperature=0.1, attn_residual=0.0, input_corr=0.4)
    beta = 2.0 * 1.5 / (math.sqrt(d) * 0.1)
    metrics = ("input_cos_within", "out_cos_within", "attn_entropy")
    for tiled in (True, False):
        lab = Lab(spec, ispec, metrics, hoist=tiled, factor=tiled, tiled=tiled)
        assert not lab.hoist  # unit tokens are not linear in the knobs
        state = lab.seed_state(KEY)
        x, _ = lab.inputs_of(state, knob_arrays(kn))
        y = np.asarray(x, np.float64)
        np.testing.assert_allclose(np.linalg.norm(y, axis=-1), 1.0, atol=1e-6)
        logits = beta * np.einsum("btd,bsd->bts", y, y)
        w = np.exp(logits - logits.max(-1, keepdims=True))
        w /= w.sum(-1, keepdims=True)
        out = np.einsum("bts,bsd->btd", w, y)
        got = jax.jit(lab.point)(state, knob_arrays(kn))
        u = out / np.linalg.norm(out, axis=-1, keepdims=True)
        g = np.einsum("btd,bsd->bts", u, u)
        want_cos = np.mean([(g[b].sum() - t) / (t * (t - 1)) for b in range(2)])
        np.testing.assert_allclose(float(got["out_cos_within"]), want_cos, atol=2e-5)
        ent = -np.sum(w * np.log(np.maximum(w, 1e-300)), -1) / np.log(t)
        np.testing.assert_allclose(float(got["attn_entropy"]), ent.mean(), atol=2e-5)
        assert 0.05 < ent.mean() < 0.95  # neither uniform nor one-hot: a real check


def test_normalized_inputs_are_the_unit_vectors_of_the_same_draw():
    spec = BlockSpec(kind="post_ln", d_model=16, n_heads=2, mlp=False)
    kn = knob_arrays(dict(drift_norm=3.0))
    plain = InputSpec(kind="embedding", batch=2, length=8, vocab=50, embed_std=1.0)
    unit = InputSpec(**{**plain.__dict__, "normalize": True})
    x, _ = Lab(spec, plain).inputs_of(Lab(spec, plain).seed_state(KEY), kn)
    lab = Lab(spec, unit)
    y, _ = lab.inputs_of(lab.seed_state(KEY), kn)
    x = np.asarray(x, np.float64)
    np.testing.assert_allclose(
        np.asarray(y), x / np.linalg.norm(x, axis=-1, keepdims=True), rtol=1e-6, atol=1e-7
    )


@pytest.mark.parametrize(
    "block, message",
    [
        (dict(qk_weights="identity", n_heads=2), r"block\.n_heads: qk_weights = 'identity'"),
        (dict(qk_weights="orthogonal"), r"block\.qk_weights: 'orthogonal' is not one of"),
    ],
)
def test_weight_option_errors_name_the_field(block, message):
    with pytest.raises(ConfigError, match=message):
        BlockSpec(**{"d_model": 16, "n_heads": 1, **block}).validate()


def test_normalize_must_be_a_bool():
    with pytest.raises(ConfigError, match=r"inputs\.normalize: must be true or false"):
        InputSpec(normalize=1).validate()


def test_identity_weights_keep_x64_dtype():
    """Under JAX_ENABLE_X64 the identity matrices follow the dtype asked for."""
    spec = BlockSpec(kind="attention", d_model=8, n_heads=1, mlp=False, qk_weights="identity")
    p = init_params(spec, KEY, dtype=jnp.float32)
    assert p["wq"].dtype == jnp.float32 and p["wo"].shape == (1, 1, 8, 8)
    np.testing.assert_array_equal(np.asarray(p["wv"][0, :, 0, :]), np.eye(8))
