"""Metrics with named dimensions and the metrics that prove them, against float64 numpy oracles
written from the definitions (explicit loops over pairs, rows and heads): the pair split of the
cosine (and the exact identity that mixes it into the global cosine), the per-head entropy, the
per-head sink mass on every attention path (softmax tiled and factored, plain, clamped), the
position-0 norm ratio; what a metric declares (Metric.dims, DIMS) and what the Lab makes of it.
The conformance checks (paths, float64, extremes) of these metrics run with every other
non-default metric in tests/core/test_metrics.py (`test_decomposition_metrics_conform`); their
chunk and device bit-identity in tests/test_conformance.py."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from simlab.core import metrics
from simlab.core.knobs import knob_arrays
from simlab.core.lab import Lab
from simlab.core.spec import BlockSpec, InputSpec
from simlab.errors import ConfigError

from conftest import np_layer

NEW = (
    "input_cos_within_pooled",
    "input_cos_between",
    "attn_cos_within_pooled",
    "attn_cos_between",
    "out_cos_within_pooled",
    "out_cos_between",
    "attn_entropy_head",
    "attn_sink_head",
    "input_pos0_norm_ratio",
    "out_pos0_norm_ratio",
)


def np_cos(a, b) -> float:
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return 0.0 if na == 0 or nb == 0 else float(a @ b / (na * nb))


def np_pair_split(x):
    """(within, between, global): the mean cosine over the ordered pairs of distinct tokens of
    one sequence, of two sequences, and of all, each pair visited explicitly."""
    x = np.asarray(x, np.float64)
    b, t, _ = x.shape
    within, between = [], []
    for b1 in range(b):
        for t1 in range(t):
            for b2 in range(b):
                for t2 in range(t):
                    if (b1, t1) == (b2, t2):
                        continue
                    c = np_cos(x[b1, t1], x[b2, t2])
                    (within if b1 == b2 else between).append(c)
    return np.mean(within), np.mean(between), np.mean(within + between)


@pytest.mark.parametrize("shape,offset", [((3, 5, 8), 0.0), ((2, 6, 4), 1.5), ((4, 3, 16), -0.4)])
def test_pair_split_vs_pairwise_oracle(shape, offset):
    x = np.random.default_rng(1).standard_normal(shape) + offset
    x[0, 1] = 0.0  # a zero vector counts in the pairs with cosine 0
    within, between = jax.jit(metrics.pair_split)(jnp.asarray(x, jnp.float32))
    ow, ob, _ = np_pair_split(x)
    assert abs(float(within) - ow) < 1e-5 and abs(float(between) - ob) < 1e-5
    # equal T: the pooled within-sequence cosine is the mean of the per-sequence ones
    assert abs(float(metrics.anisotropy(jnp.asarray(x, jnp.float32))[1]) - ow) < 1e-5


@pytest.mark.parametrize("shape", [(3, 5, 8), (2, 7, 4), (5, 2, 3)])
def test_global_cosine_is_the_pair_weighted_mix(shape):
    """global = [B T (T-1) within + B (B-1) T^2 between] / [B T (B T - 1)]: exact in the
    oracle's float64 (to rounding, 1e-14) and in simlab's float64 (x64) to 1e-12, and the float32
    metrics within float32 rounding (2e-6)."""
    b, t, _ = shape
    x = np.random.default_rng(2).standard_normal(shape) + 0.7
    x[-1, 0] = 0.0
    w_pairs, b_pairs, n = b * t * (t - 1), b * (b - 1) * t * t, b * t * (b * t - 1)
    ow, ob, og = np_pair_split(x)
    assert w_pairs + b_pairs == n
    assert abs((w_pairs * ow + b_pairs * ob) / n - og) < 1e-14
    with jax.enable_x64(True):
        within, between = jax.jit(metrics.pair_split)(jnp.asarray(x, jnp.float64))
        glob, _ = jax.jit(metrics.anisotropy)(jnp.asarray(x, jnp.float64))
        assert within.dtype == jnp.float64
        mix = (w_pairs * float(within) + b_pairs * float(between)) / n
        assert abs(mix - float(glob)) < 1e-12 and abs(float(glob) - og) < 1e-12
    within, between = jax.jit(metrics.pair_split)(jnp.asarray(x, jnp.float32))
    glob, _ = jax.jit(metrics.anisotropy)(jnp.asarray(x, jnp.float32))
    assert abs((w_pairs * float(within) + b_pairs * float(between)) / n - float(glob)) < 2e-6


def test_between_of_one_sequence_is_nan():
    """One sequence has no pair between sequences: NaN, not a number made up."""
    within, between = metrics.pair_split(jnp.ones((1, 4, 3)))
    assert np.isnan(float(between)) and float(within) == pytest.approx(1.0)


def np_rows(b, h, t, causal, seed):
    """Random attention weights (B, H, T, S) with rows summing to 1 (masked above the diagonal
    when causal) and the per-row entropy in nats."""
    r = np.random.default_rng(seed)
    w = r.random((b, h, t, t)) ** 3
    if causal:
        w = np.tril(w)
    w /= w.sum(-1, keepdims=True)
    ent = -np.sum(np.where(w > 0, w * np.log(np.where(w > 0, w, 1.0)), 0.0), -1)
    return w, ent


@pytest.mark.parametrize("causal", [False, True])
def test_per_head_entropy_and_sink_vs_loops(causal):
    b, h, t = 3, 4, 6
    w, ent = np_rows(b, h, t, causal, 5)
    want_h, want_s = np.zeros(h), np.zeros(h)
    for hh in range(h):
        rows = [
            ent[bb, hh, i] / np.log(i + 1 if causal else t)
            for bb in range(b)
            for i in range(t)
            if (i + 1 if causal else t) > 1
        ]
        want_h[hh] = np.mean(rows)
        want_s[hh] = np.mean([w[bb, hh, i, 0] for bb in range(b) for i in range(t)])
    got_h = metrics.entropy_per_head(jnp.asarray(ent, jnp.float32), t, causal)
    np.testing.assert_allclose(np.asarray(got_h), want_h, atol=1e-6)
    got_s = metrics.sink_per_head(jnp.asarray(w[..., 0], jnp.float32))
    np.testing.assert_allclose(np.asarray(got_s), want_s, atol=1e-6)
    # the head mean of the per-head entropy is the pooled attn_entropy
    pooled = metrics.entropy_of_rows(jnp.asarray(ent, jnp.float32), t, causal)
    assert float(jnp.mean(got_h)) == pytest.approx(float(pooled), abs=1e-6)


def test_position0_norm_ratio_vs_numpy():
    x = np.random.default_rng(3).standard_normal((3, 6, 5))
    x[0, 0] *= 40.0  # a massive activation at position 0 of the first sequence
    x[2] = 0.0  # a zero sequence counts as 0
    n = np.linalg.norm(x, axis=-1)
    want = np.mean(
        [n[b, 0] / np.median(n[b, 1:]) if np.median(n[b, 1:]) > 0 else 0.0 for b in range(3)]
    )
    got = float(metrics.position0_norm_ratio(jnp.asarray(x, jnp.float32)))
    assert got == pytest.approx(want, rel=1e-5)
    # scale-free and huge values do not overflow
    big = float(metrics.position0_norm_ratio(jnp.asarray(x * 1e30, jnp.float32)))
    assert big == pytest.approx(want, rel=1e-5)


@pytest.mark.parametrize(
    "kind,causal,pattern",
    [
        ("attention", False, "softmax"),  # hoisted and factored layer 0 (tiled)
        ("post_ln", True, "softmax"),  # factored, causal
        ("pre_ln", False, "softmax"),  # a norm before the projections: tiled, not hoisted
        ("post_ln", False, "shared"),  # clamps: the closed form
        ("pre_ln", True, "token"),
        ("attention", True, "uniform"),
    ],
)
def test_sink_and_head_entropy_on_every_path_vs_numpy_layer(kind, causal, pattern):
    """Through the Lab (depth 1), on the default path (tiles of 2 rows so that every tile loop
    runs) and the plain one, against the float64 numpy block of tests/conftest.py (np_layer):
    attn_sink_head is mean_(b,i) w_bhi0, attn_entropy_head the per-head normalised entropy."""
    spec = BlockSpec(
        kind=kind, d_model=16, n_heads=4, mlp_ratio=2, causal=causal, pattern=pattern
    ).validate()
    inputs = InputSpec(kind="gaussian", batch=2, length=6).validate()
    knobs = knob_arrays(dict(q_scale=2.5, k_scale=2.5, drift_norm=1.5, pattern_beta=2.0))
    names = ("attn_sink_head", "attn_entropy_head")
    for kw in (dict(tile_elements=2 * 4 * 6), dict(hoist=False, factor=False, tiled=False)):
        lab = Lab(spec, inputs, names, **kw)
        state = lab.seed_state(jax.random.PRNGKey(3))
        got = jax.jit(lab.point)(state, knobs)
        x, _ = lab.inputs_of(state, knobs)
        p = jax.tree.map(lambda a: a[0], state["params"])
        _, _, w, _, _ = np_layer(spec, p, x, knobs, state["u_q"][0], state["u_k"][0])
        want_sink = w[..., 0].mean(axis=(0, 2))
        n = np.minimum(np.arange(1, 7), 6) if causal else np.full(6, 6)
        ent = -np.sum(np.where(w > 0, w * np.log(np.where(w > 0, w, 1.0)), 0.0), -1)
        rows = ent[..., n > 1] / np.log(n[n > 1])
        want_h = rows.mean(axis=(0, 2))
        assert got["attn_sink_head"].shape == (4,) == got["attn_entropy_head"].shape
        np.testing.assert_allclose(np.asarray(got["attn_sink_head"]), want_sink, atol=2e-5)
        np.testing.assert_allclose(np.asarray(got["attn_entropy_head"]), want_h, atol=2e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_key0_weight_of_the_previous_key_clamp(causal):
    """ "other": row i's target is key i - 1 (row 0: key S - 1, or key 0 under the mask), so key 0
    is the target of row 1 (and, causal, of row 0): w_i0 = e^b / (e^b + n_i - 1) there,
    1 / (e^b + n_i - 1) elsewhere."""
    from simlab.core import patterns

    t, beta = 5, 1.3
    got = np.asarray(patterns.key0_weight("other", jnp.float32(beta), t, t, causal))
    want = []
    for i in range(t):
        n = i + 1 if causal else t
        target = (i - 1) if i >= 1 else (0 if causal else t - 1)
        want.append((np.exp(beta) if target == 0 else 1.0) / (np.exp(beta) + n - 1))
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_the_lab_declares_each_metrics_dims():
    """Lab.metric_dims: `layer` for a stack, then the metric's own; the sizes from the specs."""
    inputs = InputSpec(kind="gaussian", batch=2, length=6)
    deep = Lab(BlockSpec(d_model=16, n_heads=4, depth=3), inputs, ("attn_sink_head", "out_cos"))
    assert deep.metric_dims() == {"attn_sink_head": ["layer", "head"], "out_cos": ["layer"]}
    assert deep.metric_shapes() == {"attn_sink_head": (4,), "out_cos": ()}
    one = Lab(BlockSpec(d_model=16, n_heads=2), inputs, ("attn_entropy_head",))
    assert one.metric_dims() == {"attn_entropy_head": ["head"]}
    for n in NEW:
        assert n in metrics.METRICS and not metrics.METRICS[n].default, n


def test_a_metric_declaring_an_unknown_dim_is_refused():
    m = metrics.Metric("bad_dims", lambda c: c.layer.y, ("y",), "y", dims=("token_kind",))
    with pytest.raises(ConfigError, match=r"register metric 'bad_dims': dims .*token_kind"):
        metrics.register_metric(m)
    with pytest.raises(ConfigError, match="dims"):  # the stack's own dimension
        metrics.register_metric(dataclasses.replace(m, dims=("layer",)))
    assert "bad_dims" not in metrics.METRICS


def test_a_registered_dim_serves_a_metric(monkeypatch):
    """A plugin's dimension: a Dim with its size from the specs, then a metric declaring it."""
    dim = metrics.Dim("half_batch", lambda block, inputs: inputs.batch // 2, "half the batch")
    metric = metrics.Metric(
        "first_half_cos",
        lambda c: jnp.stack([c.cos("y")[0]] * (c.layer.y.shape[0] // 2)),
        ("y",),
        "y",
        dims=("half_batch",),
        default=False,
    )
    try:
        metrics.register_dim(dim)
        metrics.register_metric(metric)
        lab = Lab(BlockSpec(d_model=8, n_heads=2), InputSpec(kind="gaussian", batch=4, length=3))
        lab = Lab(lab.block, lab.inputs, ("first_half_cos",))
        assert lab.metric_shapes() == {"first_half_cos": (2,)}
        out = jax.jit(lab.point)(lab.seed_state(jax.random.PRNGKey(0)), knob_arrays({}))
        assert out["first_half_cos"].shape == (2,)
        wrong = Lab(lab.block, dataclasses.replace(lab.inputs, batch=2), ("first_half_cos",))
        wrong._shapes = {"first_half_cos": (3,)}  # a metric that breaks its declaration
        with pytest.raises(ConfigError, match=r"returns shape \(1,\) per layer; its declared"):
            jax.jit(wrong.point)(wrong.seed_state(jax.random.PRNGKey(0)), knob_arrays({}))
    finally:
        metrics.METRICS.unregister("first_half_cos")
        metrics.DIMS.unregister("half_batch")
