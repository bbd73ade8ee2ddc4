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
