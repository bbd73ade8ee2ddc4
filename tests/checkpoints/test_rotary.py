"""Rotary position embeddings (simlab.core.rotary) against an independent numpy oracle:
complex multiplication of the pairs (x_i, x_{i + n/2}) by e^{i t theta_i} (Su et al. 2021)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from simlab.core import rotary


def np_rotary(x_BTHK: np.ndarray, n: int, base: float) -> np.ndarray:
    """The pairs as complex numbers z = x_i + i x_{i+n/2}, times exp(i t base^(-2i/n))."""
    half = n // 2
    out = np.array(x_BTHK, np.float64)
    t = np.arange(x_BTHK.shape[1], dtype=np.float64)
    theta = np.outer(t, base ** (-np.arange(half) * 2.0 / n))  # (T, half)
    z = out[..., :half] + 1j * out[..., half:n]
    z = z * np.exp(1j * theta)[None, :, None, :]
    out[..., :half], out[..., half:n] = z.real, z.imag
    return out


@pytest.mark.parametrize("n,k", [(4, 8), (8, 8), (2, 6), (0, 4)])
def test_rotate_matches_the_complex_oracle(n, k):
    x = np.random.default_rng(0).normal(size=(2, 7, 3, k))
    with jax.enable_x64(True):
        got = np.asarray(rotary.rotate(x, n, 10000.0))
    np.testing.assert_allclose(got, np_rotary(x, n, 10000.0), rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(got[..., n:], x[..., n:])  # the rest passes unchanged


def test_scores_depend_on_relative_positions_only():
    """q_i' . k_j' for the same q and k at every position depends on j - i only."""
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=8), rng.normal(size=8)
    t = 6
    with jax.enable_x64(True):
        qs = np.asarray(rotary.rotate(np.broadcast_to(q, (1, t, 1, 8)), 8, 100.0))[0, :, 0]
        ks = np.asarray(rotary.rotate(np.broadcast_to(k, (1, t, 1, 8)), 8, 100.0))[0, :, 0]
    s = qs @ ks.T
    for d in range(-t + 1, t):
        diag = np.diagonal(s, d)
        np.testing.assert_allclose(diag, diag[0], rtol=1e-12, atol=1e-12)


def test_n_dims_rounds_as_hf():
    assert rotary.n_dims(64, 0.25) == 16 and rotary.n_dims(8, 0.5) == 4
    assert rotary.n_dims(6, 0.4) == 2


def test_an_untrained_rotary_block_against_numpy():
    """A drawn block with rotary_pct 0.5: the plain path's weights are softmax of the numpy
    rotated queries and keys (causal and not)."""
    from simlab.core import block
    from simlab.core.init import init_params
    from simlab.core.knobs import knob_arrays
    from simlab.core.spec import BlockSpec

    for causal in (False, True):
        spec = BlockSpec(kind="attention", d_model=16, n_heads=2, rotary_pct=0.5, causal=causal)
        with jax.enable_x64(True):
            p = jax.tree.map(lambda a: a[0], init_params(spec.validate(), jax.random.PRNGKey(0)))
            x = np.random.default_rng(2).normal(size=(2, 7, 16))
            z = np.zeros((2, 8))
            lay = block.layer_apply(spec, p, x, knob_arrays({"q_scale": 20.0}), z, z)
            w = np.asarray(lay.full.w)
        q = np_rotary(np.einsum("btd,dhk->bthk", x, np.asarray(p["wq"])), 4, 10000.0)
        k = np_rotary(np.einsum("btd,dhk->bthk", x, np.asarray(p["wk"])), 4, 10000.0)
        logits = 20.0 * np.einsum("bthk,bshk->bhts", q, k) / np.sqrt(8.0)
        if causal:
            logits = np.where(np.tril(np.ones((7, 7), bool)), logits, -np.inf)
        ref = np.exp(logits - logits.max(-1, keepdims=True))
        ref /= ref.sum(-1, keepdims=True)
        np.testing.assert_allclose(w, ref, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kind", ["attention", "pre_ln", "parallel2"])
def test_rotary_engine_paths_agree(kind):
    """Hoisted and tiled paths against the plain one on an untrained rotary block (float64)."""
    from simlab.core.knobs import knob_arrays
    from simlab.core.lab import Lab
    from simlab.core.spec import BlockSpec, InputSpec

    block = BlockSpec(kind=kind, d_model=16, n_heads=2, rotary_pct=1.0, causal=True, depth=2)
    inputs = InputSpec(kind="gaussian", batch=2, length=12)
    with jax.enable_x64(True):
        plain = Lab(block, inputs, hoist=False, factor=False, tiled=False)
        fast = Lab(block, inputs, tile_elements=32)
        key = jax.random.PRNGKey(1)
        sp, sf = plain.seed_state(key), fast.seed_state(key)
        # both paths at a point as one compiled program (op by op: slower)
        both = jax.jit(lambda sp, sf, kn: (plain.point(sp, kn), fast.point(sf, kn)))
        for kn in ({}, {"q_scale": 4.0, "drift_norm": 3.0, "k_shift": 1.0, "input_corr": 0.5}):
            a, b = both(sp, sf, knob_arrays(kn))
            for m in a:
                np.testing.assert_allclose(b[m], a[m], rtol=1e-9, atol=1e-12, err_msg=m)
