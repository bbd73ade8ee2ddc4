"""The stable rank's top eigenvalue (LAPACK tridiagonalisation up to 64 x 64, Lanczos beyond,
Sturm multisection) against float64 eigensolvers, and the entropy's log(max(w, tiny)) form
against the previous formula."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from simlab.core import linalg, metrics

from conftest import np_top


@pytest.mark.slow
@pytest.mark.parametrize("n", [8, 64, 96])
def test_top_eigenvalue_vs_float64(n):
    """Exact path (n <= 64) and Lanczos path (n > 64) on Gram matrices of isotropic Gaussian
    rows (the slowest Lanczos convergence we found), a drift (one dominant direction), rank one
    (breakdown after one step) and orthonormal rows (all eigenvalues equal: breakdown).
    float32 eigvalsh itself is ~3e-7 off; 2e-6 relative is ~10x the measured error."""
    r = np.random.default_rng(n)
    d = n + n // 2
    ys = [
        r.standard_normal((3, n, d)),
        r.standard_normal((2, n, d)) + 0.7 * r.standard_normal(d),
        np.einsum("bt,bd->btd", r.standard_normal((2, n)), r.standard_normal((2, d))),
        np.linalg.qr(r.standard_normal((2, d, n)))[0].transpose(0, 2, 1) * 3.0,
    ]
    top = jax.jit(linalg.top_eigenvalue)
    for y in ys:
        g = np.einsum("btd,bsd->bts", y, y)
        want = np_top(g)
        got = np.asarray(top(jnp.asarray(g, jnp.float32)))
        np.testing.assert_allclose(got, want, rtol=2e-6)
    assert float(top(jnp.zeros((1, n, n)))[0]) == 0.0


def test_stable_rank_paper_size_vs_svd():
    """T = 512 > 64 (Lanczos) on an isotropic and a drifted 512 x 768 sequence."""
    r = np.random.default_rng(0)
    y = np.stack(
        [
            r.standard_normal((512, 768)),
            r.standard_normal((512, 768)) + 0.2 * r.standard_normal(768),
        ]
    )
    s = np.linalg.svd(y.astype(np.float64), compute_uv=False)
    want = np.mean(np.sum(s**2, -1) / s[:, 0] ** 2)
    got = float(jax.jit(metrics.stable_rank)(jnp.asarray(y, jnp.float32)))
    assert abs(got - want) < 2e-6 * want


def test_tridiagonal_top_vs_float64():
    r = np.random.default_rng(3)
    d, e = r.standard_normal((6, 40)), r.standard_normal((6, 39))
    e[0, 5:10] = 0.0  # split matrices too
    t = np.stack([np.diag(d[i]) + np.diag(e[i], 1) + np.diag(e[i], -1) for i in range(6)])
    want = np_top(t)
    got = np.asarray(
        jax.jit(linalg.tridiagonal_top)(jnp.asarray(d, jnp.float32), jnp.asarray(e, jnp.float32))
    )
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


@pytest.mark.parametrize("causal", [False, True])
def test_entropy_equals_previous_formula(causal):
    """-sum w log(max(w, tiny)) vs the previous -sum w log(where(w > 0, w, 1)), with exact zeros
    (causal mask, underflow of very sharp rows)."""
    r = np.random.default_rng(1)
    logits = jnp.asarray(
        r.standard_normal((2, 3, 16, 16)) * np.array([1.0, 30.0, 300.0])[None, :, None, None],
        jnp.float32,
    )
    if causal:
        logits = jnp.where(jnp.tril(jnp.ones((16, 16), bool)), logits, -jnp.inf)
    w = jax.nn.softmax(logits, -1)
    assert float(jnp.min(w)) == 0.0

    def previous(w_BHTS, causal):
        _, _, t, s = w_BHTS.shape
        n_keys, valid = metrics._row_weights(t, s, causal)
        h = -jnp.sum(w_BHTS * jnp.log(jnp.where(w_BHTS > 0, w_BHTS, 1.0)), axis=-1)
        norm = jnp.log(jnp.where(valid, n_keys, 2).astype(h.dtype))
        h = jnp.where(valid, h / norm, 0.0)
        return jnp.sum(h) / (jnp.sum(valid) * w_BHTS.shape[0] * w_BHTS.shape[1])

    assert abs(float(metrics.attn_entropy(w, causal)) - float(previous(w, causal))) < 1e-6
