"""simlab.core.metrics against naive float64 numpy oracles (explicit loops / pairwise matrices).

Tolerances: simlab runs in float32 (eps = 1.19e-7). Every metric here is a mean of O(1)
terms (cosines, normalised entropies, weights) or a ratio of sums of squares, so the float32
result differs from the float64 oracle by a few hundred ulp at most; 1e-5 (absolute) leaves
room for the O(n d) accumulation without hiding a wrong formula (the conventions tested
here change results by >= 1e-2).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from simlab.core import metrics
from simlab.core.attention import attention_weights

from conftest import (
    np_anisotropy,
    np_anisotropy_centred,
    np_attn_entropy,
    np_attn_max,
    np_pairwise_cos,
    np_qk_drift,
    np_residual_ratio,
    np_stable_rank,
    np_token_cos,
)

TOL = 1e-5

# jitted once per shape: far cheaper on CPU than eager op-by-op dispatch
anisotropy = jax.jit(metrics.anisotropy)
anisotropy_centred = jax.jit(metrics.anisotropy_centred)
mean_pairwise_cos = jax.jit(metrics.mean_pairwise_cos)
attn_entropy = jax.jit(metrics.attn_entropy, static_argnums=1)
attn_max = jax.jit(metrics.attn_max)
stable_rank = jax.jit(metrics.stable_rank)
qk_drift = jax.jit(metrics.qk_drift)


def rng(seed=0):
    return np.random.default_rng(seed)


# ----------------------------------------------------------------------------- anisotropy
@pytest.mark.parametrize("shape,offset", [((3, 8, 16), 0.0), ((2, 16, 8), 1.5), ((4, 5, 32), -0.7)])
def test_anisotropy_vs_pairwise_oracle(shape, offset):
    x = (rng(1).standard_normal(shape) + offset).astype(np.float32)
    g, w = anisotropy(jnp.asarray(x))
    og, ow = np_anisotropy(x)
    assert abs(float(g) - og) < TOL and abs(float(w) - ow) < TOL


def test_mean_pairwise_cos_zero_vector_counts_in_pairs():
    x = rng(2).standard_normal((7, 5)).astype(np.float32)
    x[3] = 0.0
    got = float(mean_pairwise_cos(jnp.asarray(x)))
    assert np.isfinite(got)
    assert abs(got - np_pairwise_cos(x)) < TOL
    # the convention matters: dropping the zero row would give a different (larger n) mean
    x_drop = np.delete(x, 3, axis=0)
    alt = np_pairwise_cos(x_drop)
    assert abs(np_pairwise_cos(x) - alt * (6 * 5) / (7 * 6)) < 1e-12


def test_mean_pairwise_cos_all_zero_is_zero_not_nan():
    for shape in [(6, 4), (2, 5, 3)]:
        got = np.asarray(mean_pairwise_cos(jnp.zeros(shape, jnp.float32)))
        assert np.all(got == 0.0)
    g, w = anisotropy(jnp.zeros((2, 4, 3), jnp.float32))
    assert float(g) == 0.0 and float(w) == 0.0


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_token_makes_the_cosines_nan_never_a_number(bad):
    """A NaN or Inf in one token gives NaN cosines (global, within its sequence, centred),
    never the plausible 0 that `where(norm > 0, ..., 0)` made of it; the other sequences'
    within-sequence cosines stay finite and a zero token still counts as 0."""
    x = rng(5).standard_normal((2, 4, 3)).astype(np.float32)
    x[0, 1, 2] = bad
    x[1, 0] = 0.0
    u = np.asarray(metrics.unit_vectors(jnp.asarray(x)))
    assert np.all(np.isnan(u[0, 1])) and np.all(u[1, 0] == 0.0) and np.isfinite(u[1]).all()
    g, w = anisotropy(jnp.asarray(x))
    assert np.isnan(float(g)) and np.isnan(float(w))
    assert np.isnan(float(mean_pairwise_cos(jnp.asarray(x[0]))))
    assert np.isfinite(float(mean_pairwise_cos(jnp.asarray(x[1]))))
    assert np.isnan(float(metrics.anisotropy_centred(jnp.asarray(x))[0]))


def test_mean_pairwise_cos_identical_and_antipodal():
    v = rng(3).standard_normal(9).astype(np.float32)
    same = np.tile(v, (6, 1)) * np.array([[1.0], [2.0], [0.5], [7.0], [1e-3], [3.0]], np.float32)
    assert abs(float(mean_pairwise_cos(jnp.asarray(same))) - 1.0) < 1e-6
    # a pair x, -x: cosine -1 exactly
    assert abs(float(mean_pairwise_cos(jnp.asarray(np.stack([v, -v])))) + 1.0) < 1e-6
    # {v, -v, w, -w}: sum of unit vectors is 0, so the mean is -n / (n (n - 1)) = -1/3
    w = rng(4).standard_normal(9).astype(np.float32)
    x = np.stack([v, -v, 3 * w, -0.2 * w])
    got = float(mean_pairwise_cos(jnp.asarray(x)))
    assert abs(got - (-1.0 / 3.0)) < 1e-6
    assert abs(got - np_pairwise_cos(x)) < 1e-6


@pytest.mark.parametrize("scale", [1e30, 1e-30])
def test_mean_pairwise_cos_extreme_magnitudes(scale):
    """|x|^2 of 1e30-scale rows overflows float32 (max 3.4e38); 1e-30 underflows. The
    metric must be scale-invariant and finite."""
    base = rng(5).standard_normal((3, 6, 8)) + 0.4
    x = (base * scale).astype(np.float32)
    g, w = anisotropy(jnp.asarray(x))
    og, ow = np_anisotropy(base)
    assert np.isfinite(float(g)) and np.isfinite(float(w))
    assert abs(float(g) - og) < TOL and abs(float(w) - ow) < TOL
    # rows of wildly different magnitudes in one set
    mixed = base.reshape(-1, 8).copy()
    mixed[::3] *= 1e30
    got = float(mean_pairwise_cos(jnp.asarray(mixed.astype(np.float32))))
    assert abs(got - np_pairwise_cos(mixed)) < TOL


# ----------------------------------------------------------------------------- centred
def _drifted(shape, drift, seed):
    """Gaussian tokens with a per-sequence offset (so global and within centring differ) plus
    a common vector of norm `drift`, as float32."""
    r = rng(seed)
    x = r.standard_normal(shape) + 0.5 * r.standard_normal((shape[0], 1, shape[2]))
    v = r.standard_normal(shape[2])
    return (x + drift * v / np.linalg.norm(v)).astype(np.float32)


@pytest.mark.parametrize("drift", [0.0, 3.0, 1e4])
@pytest.mark.parametrize("shape", [(3, 8, 16), (2, 16, 32)])
def test_anisotropy_centred_vs_pairwise_oracle(shape, drift):
    """Against the O(n^2) float64 definition on the same float32 sample: within float32
    tolerance even at drift 1e4 (where a one-pass float32 mean loses the spread), and within
    1e-12 when the same sample is computed in float64."""
    x = _drifted(shape, drift, seed=13)
    want = np_anisotropy_centred(x)
    got = anisotropy_centred(jnp.asarray(x))
    np.testing.assert_allclose([float(v) for v in got], want, atol=TOL, rtol=0)
    with jax.enable_x64(True):
        got64 = jax.jit(metrics.anisotropy_centred)(jnp.asarray(x, jnp.float64))
        assert got64[0].dtype == jnp.float64
        np.testing.assert_allclose([float(v) for v in got64], want, atol=1e-12, rtol=0)
    # the centring matters: the raw cosine of a drifted set is far from the centred one
    if drift >= 3.0:
        assert float(anisotropy(jnp.asarray(x))[0]) - want[0] > 0.1


def test_anisotropy_centred_huge_drift_keeps_float32_accuracy():
    """A common vector of norm 1e6 over O(1) spread: the centred float32 rows are exact to a
    few ulp of the spread (power-of-two scaling, corrected two-pass mean), so the cosine
    matches the float64 definition of the same float32 sample within 1e-6; subtracting a
    one-pass float32 mean instead is off by more than 1e-5 (the mean itself rounds by
    ~eps 1e6)."""
    x = _drifted((3, 16, 32), 1e6, seed=14)
    want = np_anisotropy_centred(x)
    got = [float(v) for v in anisotropy_centred(jnp.asarray(x))]
    np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)
    xj = jnp.asarray(x).reshape(-1, 32)
    naive = float(mean_pairwise_cos(xj - jnp.mean(xj, axis=0)))
    assert abs(naive - want[0]) > 1e-5


@pytest.mark.parametrize("drift", [0.0, 1e4])
def test_anisotropy_centred_equal_norms_is_minus_one_over_n_minus_one(drift):
    """n centred vectors of equal norm sum to 0, so sum_i u_i = 0 and the mean pairwise cosine
    is exactly -1/(n-1): the vertices of a regular simplex (e_i - 1/n, rotated into d
    dimensions) plus a common vector; per sequence for the within-sequence cosine."""
    r = rng(15)
    b, t, d = 2, 12, 32

    def simplex(n):
        q, _ = np.linalg.qr(r.standard_normal((d, n)))  # d x n orthonormal columns
        return 3.0 * (np.eye(n) - 1.0 / n) @ q.T  # (n, d): equal norms, zero sum

    common = drift * r.standard_normal(d) / np.sqrt(d)
    glob = (simplex(b * t) + common).reshape(b, t, d).astype(np.float32)
    within = (np.stack([simplex(t) for _ in range(b)]) + common).astype(np.float32)
    g = float(anisotropy_centred(jnp.asarray(glob))[0])
    w = float(anisotropy_centred(jnp.asarray(within))[1])
    assert abs(g + 1.0 / (b * t - 1)) < 1e-6 and abs(w + 1.0 / (t - 1)) < 1e-6
    assert abs(g - np_anisotropy_centred(glob)[0]) < 1e-6
    # in general it is not -1/(n-1): centred norms spread over a factor 30
    scale = rng(16).uniform(0.1, 3.0, size=(b, t, 1))
    x = (_drifted((b, t, d), 0.0, seed=16) * scale).astype(np.float32)
    assert abs(np_anisotropy_centred(x)[0] + 1.0 / (b * t - 1)) > 1e-3


def test_anisotropy_centred_ignores_common_vectors_and_equal_tokens():
    """cos(x + v) = cos(x) for a vector v common to all B*T tokens (global) and for a vector
    v_b common to each sequence (within), to float32 rounding; a set of equal tokens centres
    to zero vectors: 0, not NaN."""
    x = _drifted((3, 8, 16), 0.0, seed=17)
    r = rng(18)
    v_D, v_B1D = r.standard_normal(16) * 5.0, r.standard_normal((3, 1, 16)) * 5.0
    g0, w0 = (float(v) for v in anisotropy_centred(jnp.asarray(x)))
    g1, w1 = (float(v) for v in anisotropy_centred(jnp.asarray((x + v_D).astype(np.float32))))
    _, w2 = (float(v) for v in anisotropy_centred(jnp.asarray((x + v_B1D).astype(np.float32))))
    assert abs(g1 - g0) < 1e-6 and abs(w1 - w0) < 1e-6 and abs(w2 - w0) < 1e-6
    # the raw cosines move by far more under the same vectors
    assert (
        abs(float(anisotropy(jnp.asarray(x + v_D))[0]) - float(anisotropy(jnp.asarray(x))[0])) > 0.1
    )
    same = np.broadcast_to(r.standard_normal(16) * 1e3, (2, 5, 16)).astype(np.float32)
    assert [float(v) for v in anisotropy_centred(jnp.asarray(same))] == [0.0, 0.0]


@pytest.mark.parametrize("pattern", ["uniform", "shared"])
def test_centred_gain_of_a_common_shift_is_zero_through_run_sweep(pattern):
    """An attention-only block without MLP whose weights are the same for every query
    (the uniform or the shared clamp, not causal): y_bt = x_bt + c_b, one vector c_b per
    sequence, so the within-sequence centred gain is 0 (the raw one is not). A drift N b adds
    N (b + b W_V W_O) to every output token of every sequence (the weights are the clamp's),
    so the global centred gain does not move with N (the raw one does); the raw cosines move by
    more than 1e-2, the centred ones by float32 rounding (measured: at most 4e-9)."""
    import simlab

    names = ["out_cos_within_gain", "out_cos_gain", "out_cos_centred_within_gain"]
    names += ["out_cos_centred_gain", "input_cos_centred", "out_cos_centred"]
    cfg = dict(
        block=dict(
            kind="attention", d_model=32, n_heads=4, mlp=False, pattern=pattern, init="fan_in"
        ),
        inputs=dict(kind="gaussian", batch=2, length=16),
        axes=[dict(name="drift_norm", values=[0.0, 1.0, 10.0])],
        knobs=dict(pattern_beta=3.0) if pattern == "shared" else {},
        sweep=dict(seeds=2, metrics=names),
    )
    res = simlab.run_sweep(cfg, quiet=True)
    m = {n: np.asarray(res[n], np.float64) for n in names}  # (drift, seed)
    assert np.max(np.abs(m["out_cos_centred_within_gain"])) < 1e-7
    assert np.min(np.abs(m["out_cos_within_gain"])) > 1e-2
    for n in ("out_cos_centred_gain", "input_cos_centred", "out_cos_centred"):
        assert np.max(np.abs(m[n] - m[n][0])) < 1e-6, n
    assert np.max(np.abs(m["out_cos_gain"] - m["out_cos_gain"][0])) > 1e-2


# ----------------------------------------------------------------------------- attention
def _random_weights(shape, causal, seed=0, sharp=1.0):
    logits = sharp * rng(seed).standard_normal(shape)
    if causal:
        t, s = shape[-2:]
        logits = np.where(np.arange(s)[None, :] <= np.arange(t)[:, None], logits, -np.inf)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sharp", [0.3, 3.0])
def test_attn_entropy_and_max_vs_loop(causal, sharp):
    w = _random_weights((2, 3, 7, 7), causal, seed=int(10 * sharp), sharp=sharp)
    assert abs(float(attn_entropy(jnp.asarray(w), causal)) - np_attn_entropy(w, causal)) < TOL
    assert abs(float(attn_max(jnp.asarray(w))) - np_attn_max(w)) < TOL


def test_attn_entropy_from_attention_weights_causal():
    r = rng(6)
    q = jnp.asarray(r.standard_normal((2, 9, 2, 4)), jnp.float32)
    k = jnp.asarray(r.standard_normal((2, 9, 2, 4)), jnp.float32)
    for causal in (False, True):
        w = np.asarray(attention_weights(q, k, 0.5, causal))
        if causal:
            assert np.all(np.triu(np.ones((9, 9)), 1)[None, None] * w == 0)
        assert abs(float(attn_entropy(jnp.asarray(w), causal)) - np_attn_entropy(w, causal)) < TOL


@pytest.mark.parametrize("causal", [False, True])
def test_attn_entropy_one_hot_uniform_and_mixed(causal):
    b, h, t = 2, 2, 6
    tri = np.tril(np.ones((t, t))) if causal else np.ones((t, t))
    uniform = np.broadcast_to(tri / tri.sum(-1, keepdims=True), (b, h, t, t)).astype(np.float32)
    one_hot = np.zeros((b, h, t, t), np.float32)
    one_hot[..., np.arange(t), np.arange(t) // 2] = 1.0  # key j = i // 2 <= i: allowed causally
    assert abs(float(attn_entropy(jnp.asarray(uniform), causal)) - 1.0) < 1e-6
    assert float(attn_entropy(jnp.asarray(one_hot), causal)) == 0.0
    assert abs(float(attn_max(jnp.asarray(one_hot))) - 1.0) < 1e-7
    want_max = np.mean(1.0 / np.arange(1, t + 1)) if causal else 1.0 / t
    assert abs(float(attn_max(jnp.asarray(uniform))) - want_max) < 1e-6
    # half the heads one-hot, half uniform: the mean over valid rows
    mixed = uniform.copy()
    mixed[:, 0] = one_hot[:, 0]
    got = float(attn_entropy(jnp.asarray(mixed), causal))
    assert abs(got - 0.5) < 1e-6
    assert abs(got - np_attn_entropy(mixed, causal)) < 1e-6


# ----------------------------------------------------------------------------- stable rank
@pytest.mark.parametrize("shape", [(3, 5, 12), (2, 12, 5), (2, 6, 6)])
def test_stable_rank_vs_svd(shape):
    r = rng(7)
    y = r.standard_normal(shape) * r.uniform(0.1, 3.0, size=shape[-1])  # uneven spectrum
    y = y.astype(np.float32)
    got = float(stable_rank(jnp.asarray(y)))
    assert abs(got - np_stable_rank(y)) < 1e-4 * np_stable_rank(y)


@pytest.mark.parametrize("shape", [(2, 72, 100), (2, 100, 70)])
def test_stable_rank_large_gram_vs_svd(shape):
    """Gram matrices larger than 64 x 64 (where the top eigenvalue may come from an iterative
    solver): still the SVD value to float32-level accuracy, for an isotropic Gaussian (the
    smallest relative spectral gap) and for a spiked one."""
    r = rng(12)
    iso = r.standard_normal(shape)
    spiked = iso + 3.0 * np.einsum(
        "bt,d->btd", r.standard_normal(shape[:2]), r.standard_normal(shape[2])
    )
    for y in (iso, spiked):
        y = y.astype(np.float32)
        want = np_stable_rank(y)
        assert abs(float(stable_rank(jnp.asarray(y))) - want) < 1e-4 * want


@pytest.mark.slow
def test_stable_rank_exact_cases():
    r = rng(8)
    # rank one: exactly 1; orthonormal rows: exactly T (T <= D); a zero sequence counts as 0
    a, b = r.standard_normal(5), r.standard_normal(11)
    rank1 = np.outer(a, b)[None]
    q, _ = np.linalg.qr(r.standard_normal((11, 5)))
    ortho = q.T[None] * 4.0
    y = np.concatenate([rank1, ortho, np.zeros_like(rank1)]).astype(np.float32)
    got = np.array([float(stable_rank(jnp.asarray(y[i : i + 1]))) for i in range(3)])
    np.testing.assert_allclose(got, [1.0, 5.0, 0.0], atol=1e-5)
    assert abs(float(stable_rank(jnp.asarray(y))) - 2.0) < 1e-5
    assert abs(float(stable_rank(jnp.asarray(y))) - np_stable_rank(y)) < 1e-5
    # huge magnitudes: no overflow in ||Y||_F^2
    assert abs(float(stable_rank(jnp.asarray(y[:2] * 1e30))) - 3.0) < 1e-5
    # T > D zero matrix
    assert float(stable_rank(jnp.zeros((2, 9, 4), jnp.float32))) == 0.0


# ----------------------------------------------------------------------------- qk drift
def test_qk_drift_vs_numpy_with_zero_means():
    r = rng(9)
    q = (r.standard_normal((3, 7, 4, 5)) + r.standard_normal((1, 1, 4, 5))).astype(np.float32)
    k = (r.standard_normal((3, 7, 4, 5)) + 2.0 * r.standard_normal((1, 1, 4, 5))).astype(np.float32)
    q[:, :, 1] = 0.0  # head 1: mean query exactly 0 -> cos 0
    k[:, :, 2] = 0.0  # head 2: mean key exactly 0 -> cos 0
    got = [float(v) for v in qk_drift(jnp.asarray(q), jnp.asarray(k))]
    want = np_qk_drift(q, k)
    np.testing.assert_allclose(got, want, atol=TOL, rtol=TOL)
    # the convention matters: a naive cos would be NaN for heads 1 and 2
    assert all(np.isfinite(got))


def test_qk_drift_shared_direction():
    """q = m + noise, k = 3 m + noise with exactly zero-mean noise: cos 1, norms |m|, 3|m|."""
    r = rng(10)
    m = r.standard_normal((2, 6))
    noise = r.standard_normal((2, 4, 2, 6))
    noise = np.concatenate([noise, -noise], axis=1)  # zero mean over (batch, tokens)
    q = (m + noise).astype(np.float32)
    k = (3 * m + 0.5 * noise).astype(np.float32)
    nq, nk, c = (float(v) for v in qk_drift(jnp.asarray(q), jnp.asarray(k)))
    norms = np.linalg.norm(m, axis=-1)
    assert abs(nq - norms.mean()) < 1e-5 and abs(nk - 3 * norms.mean()) < 1e-5
    assert abs(c - 1.0) < 1e-6


def test_layer_metrics_selects_and_matches_pieces():
    r = rng(11)
    x, attn, y, f = (jnp.asarray(r.standard_normal((2, 6, 8)), jnp.float32) for _ in range(4))
    x = x + 0.7  # some anisotropy (and correlation with the branches below)
    attn, f = attn + 0.5 * x, f - 0.3 * x + 1.0
    w = jnp.asarray(_random_weights((2, 2, 6, 6), True, seed=3))
    q, k = (jnp.asarray(r.standard_normal((2, 6, 2, 4)), jnp.float32) for _ in range(2))
    from simlab.core.attention import row_entropy
    from simlab.core.block import Layer

    layer = Layer(
        x,
        attn,
        y,
        row_entropy(w),
        jnp.max(w, -1),
        jnp.mean(q, (0, 1)),
        jnp.mean(k, (0, 1)),
        None,
        f,
        w[..., 0],
    )
    layer_metrics = jax.jit(metrics.layer_metrics, static_argnums=(0, 1))
    ids = jnp.asarray(r.integers(0, 5, (2, 6)))
    out = layer_metrics(tuple(metrics.METRICS), True, layer, ids)
    assert set(out) == set(tuple(metrics.METRICS))
    np.testing.assert_allclose(float(out["attn_cos_within"]), np_anisotropy(attn)[1], atol=TOL)
    np.testing.assert_allclose(float(out["out_cos"]), np_anisotropy(y)[0], atol=TOL)
    gain = np_anisotropy(y)[0] - np_anisotropy(x)[0]
    np.testing.assert_allclose(float(out["out_cos_gain"]), gain, atol=TOL)
    np.testing.assert_allclose(float(out["attn_entropy"]), np_attn_entropy(w, True), atol=TOL)
    np.testing.assert_allclose(float(out["stable_rank"]), np_stable_rank(y), rtol=1e-4)
    np.testing.assert_allclose(float(out["qk_mean_cos"]), np_qk_drift(q, k)[2], atol=TOL)
    ratio = np_residual_ratio(attn, x)
    np.testing.assert_allclose(float(out["attn_residual_ratio"]), ratio, rtol=1e-5)
    # the decomposition metrics: within-sequence gain, the branches against the input, the
    # MLP branch's own anisotropy
    within = np_anisotropy(y)[1] - np_anisotropy(x)[1]
    np.testing.assert_allclose(float(out["out_cos_within_gain"]), within, atol=TOL)
    np.testing.assert_allclose(float(out["attn_x_cos"]), np_token_cos(attn, x), atol=TOL)
    np.testing.assert_allclose(float(out["mlp_x_cos"]), np_token_cos(f, x), atol=TOL)
    for m, want in zip(("mlp_cos", "mlp_cos_within"), np_anisotropy(f)):
        np.testing.assert_allclose(float(out[m]), want, atol=TOL)
    assert abs(float(out["attn_x_cos"])) > 0.1 and abs(float(out["mlp_x_cos"])) > 0.1
    # the centred cosines and their gains
    cx, cy = np_anisotropy_centred(x), np_anisotropy_centred(y)
    for i, tail in enumerate(("", "_within")):
        np.testing.assert_allclose(float(out[f"input_cos_centred{tail}"]), cx[i], atol=TOL)
        np.testing.assert_allclose(float(out[f"out_cos_centred{tail}"]), cy[i], atol=TOL)
        gain = float(out[f"out_cos_centred{tail}_gain"])
        np.testing.assert_allclose(gain, cy[i] - cx[i], atol=TOL)
    sub = layer_metrics(("attn_max",), True, layer)
    assert tuple(sub) == ("attn_max",) and float(sub["attn_max"]) == float(out["attn_max"])


def test_residual_ratio_zero_rows_and_huge_values():
    """A zero input row counts as ratio 0 (not NaN); a row with |x| ~ 1e30 (|x|^2 overflows
    float32) still gives the exact ratio: here a_i = c x_i, so the ratio is |c| per token."""
    x = np.ones((1, 4, 8), np.float32)
    x[0, 1] = 0.0
    x[0, 2] *= 1e30
    c = np.array([2.0, 5.0, 0.5, 3.0], np.float32)[None, :, None]
    got = float(jax.jit(metrics.residual_ratio)(jnp.asarray(c * x), jnp.asarray(x)))
    np.testing.assert_allclose(got, (2.0 + 0.0 + 0.5 + 3.0) / 4, rtol=1e-6)
    np.testing.assert_allclose(got, np_residual_ratio(c * x.astype(np.float64), x), rtol=1e-6)


def test_token_cos_conventions():
    """cos(a_i, x_i) per token, averaged: 1 for a = c x (c > 0), -1 for c < 0, 0 where a_i or
    x_i is zero (never NaN), exact at magnitudes whose squares overflow float32."""
    x = np.ones((1, 4, 8), np.float32)
    x[0, 3] *= 1e30
    a = x * np.array([2.0, -1.0, 0.0, 1e-30], np.float32)[None, :, None]
    got = float(jax.jit(metrics.token_cos)(jnp.asarray(a), jnp.asarray(x)))
    np.testing.assert_allclose(got, (1 - 1 + 0 + 1) / 4, atol=1e-6)
    np.testing.assert_allclose(got, np_token_cos(a, x), atol=1e-6)


@pytest.mark.slow
def test_decomposition_metrics_conform():
    """The metrics not computed by default (so not in the registry loops of
    tests/core/test_numerics.py), through simlab.testing (those of the MLP branch on every
    block kind, the others on a declared sample of kinds), in one compiled call: the fast paths
    equal the plain oracle, finite and in their bounds at the extreme knobs, float64 dtypes;
    float64 agrees with float32 on the post-LN cases (a declared sample: every metric once; a
    kind's float64 layer is its registry check's, simlab.testing.check_block_kind)."""
    from simlab import testing
    from simlab.core.block import BLOCKS

    names = [n for n, m in metrics.METRICS.items() if not m.default]
    assert {"out_cos_within_gain", "attn_x_cos", "mlp_x_cos", "mlp_cos"} <= set(names)
    assert {"out_cos_centred", "out_cos_centred_gain", "input_cos_centred_within"} <= set(names)
    by_type = [n for n in names if "ids" in metrics.METRICS[n].reads]
    assert {"out_variance_within_type", "input_variance_between_type"} <= set(by_type)
    rest = [n for n in names if n not in by_type]
    # every kind for the metrics of its MLP branch's output (Layer.mlp); the others (reading
    # what the default metrics read) on post-LN and Llama (RMSNorm, gated MLP, rotary, GQA);
    # the type split needs inputs with token ids: its own cases (metric_cases picks the kinds)
    own = [n for n in rest if "mlp" in metrics.METRICS[n].reads]
    assert {"mlp_x_cos", "mlp_cos"} <= set(own)
    sample = {"post_ln", "llama"}
    # the built-in kinds (an installed plugin's kinds are its own tests', simlab.testing)
    builtin = {k for k in BLOCKS if BLOCKS.source(k) == "simlab"}
    cases = [c for c in testing.metric_cases(own) if c.block.kind in builtin] + [
        c
        for group in ([n for n in rest if n not in own], by_type)
        for c in testing.metric_cases(group)
        if c.block.kind in sample
    ]
    assert {c.block.kind for c in cases} == builtin and len(cases) == len(builtin) + 4
    assert set(names) == {m for c in cases if c.block.kind == "post_ln" for m in c.metrics}
    testing.check_cases(cases, identity=False, x64=lambda c: c.block.kind == "post_ln")


def test_mlp_metrics_refused_without_an_mlp_output():
    """A metric reading the MLP branch's output (Layer.mlp) is refused, naming it, where there
    is none: block.mlp = false, or a block kind without token_wise_mlp (a plugin's)."""
    import dataclasses

    from simlab.core.block import BLOCKS
    from simlab.core.lab import Lab
    from simlab.core.spec import BlockSpec, InputSpec
    from simlab.errors import ConfigError

    i = InputSpec(kind="gaussian", batch=2, length=8)
    with pytest.raises(ConfigError, match="mlp_x_cos read the MLP branch.*block.mlp is false"):
        Lab(BlockSpec(d_model=16, n_heads=4, mlp=False), i, ("out_cos", "mlp_x_cos"))
    kind = dataclasses.replace(BLOCKS["post_ln"], name="no_mlp_output", token_wise_mlp=None)
    BLOCKS.register(kind)
    try:
        with pytest.raises(ConfigError, match="mlp_cos.*'no_mlp_output' does not expose"):
            Lab(BlockSpec(kind="no_mlp_output", d_model=16, n_heads=4), i, ("mlp_cos",))
        Lab(BlockSpec(kind="no_mlp_output", d_model=16, n_heads=4), i, ("out_cos",))
    finally:
        BLOCKS.unregister("no_mlp_output")
