"""The instruments for decoders (issue 51, item 3) against float64 numpy oracles written from
their definitions: the sink clamp (key 0 removed from one head's or every head's softmax, the
rest renormalised) and the per-head lambda (one head's logits times lambda^2), each on the
tiled default path (tiles of 2 rows, so that every tile loop runs) and the plain one; through
the Lab, the per-head sink mass of a clamped head is 0 and its refusals name the field."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from simlab import testing
from simlab.core import block
from simlab.core.init import init_params
from simlab.core.knobs import knob_arrays
from simlab.core.lab import Lab
from simlab.core.spec import BlockSpec, InputSpec
from simlab.core.tiled import choose_tiling
from simlab.errors import ConfigError

from conftest import np_layer

B, T, D, H = 2, 6, 16, 4


def np_attention(p, x, kn, causal, drop0_heads=(), scaled=None):
    """float64: per head and row, logits q_i . k_j / (sqrt(K) temperature) (head `scaled`
    times head_scale^2) over the attended keys (j <= i when causal), key 0 left out in the heads
    drop0_heads on every row that attends another key; softmax; out = sum_h w v W_O + b_O.
    Returns (out (B, T, D), w (B, H, T, S))."""
    p = {n: np.asarray(v, np.float64) for n, v in p.items()}
    x = np.asarray(x, np.float64)
    q = kn["q_scale"] * (np.einsum("btd,dhk->bthk", x, p["wq"]) + p["bq"])
    k = kn["k_scale"] * (np.einsum("btd,dhk->bthk", x, p["wk"]) + p["bk"])
    v = np.einsum("btd,dhk->bthk", x, p["wv"]) + p["bv"]
    w = np.zeros((B, H, T, T))
    for b in range(B):
        for h in range(H):
            lam2 = kn["head_scale"] ** 2 if h == scaled else 1.0
            for i in range(T):
                keys = list(range(i + 1 if causal else T))
                if h in drop0_heads and len(keys) > 1:
                    keys.remove(0)
                lg = np.array([lam2 * q[b, i, h] @ k[b, j, h] for j in keys])
                lg /= math.sqrt(q.shape[-1]) * kn["temperature"]
                e = np.exp(lg - lg.max())
                w[b, h, i, keys] = e / e.sum()
    out = np.einsum("bhts,bshk,hkd->btd", w, v, p["wo"]) + p["bo"]
    return out, w


def _layers(spec, knobs):
    """Layer 0 of `spec` on the tiled path (tiles of 2 query rows; tiles of both sequences) and
    the plain path."""
    p = jax.tree.map(lambda a: a[0], init_params(spec, jax.random.PRNGKey(4), jnp.float32))
    x = jax.random.normal(jax.random.PRNGKey(5), (B, T, D), jnp.float32)
    zeros = jnp.zeros((H, D // H), jnp.float32)
    rows = choose_tiling(B, T, H, T, 2 * H * T)  # blocks of 2 query rows
    seqs = choose_tiling(B, T, H, T)  # both sequences in one tile (the per-head mask tiled)
    assert rows.blocks == T // 2 and seqs.seqs == B
    run = jax.jit(
        lambda tl: block.layer_apply(spec, p, x, knobs, zeros, zeros, tiling=tl),
        static_argnums=0,
    )
    return p, x, {"tiled": run(rows), "tiled_seqs": run(seqs), "plain": run(None)}


KNOBS = dict(q_scale=1.7, k_scale=1.7, temperature=0.8)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head", [None, 2])
def test_sink_clamp_vs_numpy_with_key0_masked(causal, head):
    """pattern "sink" (every head, or pattern_head = 2 alone): the attention output, the
    weights (plain), the mass on key 0 and the row entropy equal a float64 softmax with key 0
    masked in those heads (causal row 0 keeps its only key); the other heads are the softmax's."""
    spec = BlockSpec(
        kind="attention", d_model=D, n_heads=H, mlp=False, causal=causal, pattern="sink",
        pattern_head=head,
    ).validate()  # fmt: skip
    kn = knob_arrays(KNOBS)
    p, x, got = _layers(spec, kn)
    heads = range(H) if head is None else (head,)
    out, w = np_attention(p, x, {**knob_arrays({}), **KNOBS}, causal, drop0_heads=heads)
    ent = -np.sum(np.where(w > 0, w * np.log(np.where(w > 0, w, 1.0)), 0.0), -1)
    for path, lay in got.items():
        np.testing.assert_allclose(np.asarray(lay.attn), out, atol=2e-5, err_msg=path)
        np.testing.assert_allclose(np.asarray(lay.sink), w[..., 0], atol=2e-6, err_msg=path)
        np.testing.assert_allclose(np.asarray(lay.row_entropy), ent, atol=2e-5, err_msg=path)
        np.testing.assert_allclose(np.asarray(lay.row_max), w.max(-1), atol=2e-6, err_msg=path)
    np.testing.assert_allclose(np.asarray(got["plain"].full.w), w, atol=2e-6)
    clamped = np.zeros(H, bool)
    clamped[list(heads)] = True
    assert np.all(w[:, clamped, 1:, 0] == 0) and np.all(w[:, ~clamped, :, 0] > 0)
    if causal:
        assert np.all(w[:, :, 0, 0] == 1)


@pytest.mark.parametrize("causal", [False, True])
def test_per_head_lambda_scales_one_heads_logits_by_lambda_squared(causal):
    """head_scale = 1.6 on scaled_head = 1: that head's weights are the softmax of its logits
    times 1.6^2, the others identical to the unscaled block's (float64 numpy), on both paths;
    with head_scale = 1 the block is the plain softmax one."""
    spec = BlockSpec(
        kind="attention", d_model=D, n_heads=H, mlp=False, causal=causal, scaled_head=1
    ).validate()
    for lam in (1.6, 1.0):
        kv = {**KNOBS, "head_scale": lam}
        p, x, got = _layers(spec, knob_arrays(kv))
        out, w = np_attention(p, x, {**knob_arrays({}), **kv}, causal, scaled=1)
        for path, lay in got.items():
            np.testing.assert_allclose(np.asarray(lay.attn), out, atol=2e-5, err_msg=path)
            np.testing.assert_allclose(np.asarray(lay.sink), w[..., 0], atol=2e-6, err_msg=path)
            ent = -np.sum(w * np.log(np.where(w > 0, w, 1.0)), -1)
            np.testing.assert_allclose(np.asarray(lay.row_entropy), ent, atol=2e-5, err_msg=path)
        np.testing.assert_allclose(np.asarray(got["plain"].full.w), w, atol=2e-6)
    _, w1 = np_attention(p, x, {**knob_arrays({}), **KNOBS}, causal)
    _, w16 = np_attention(p, x, {**knob_arrays({}), **KNOBS, "head_scale": 1.6}, causal, scaled=1)
    assert np.array_equal(np.delete(w1, 1, axis=1), np.delete(w16, 1, axis=1))
    assert not np.allclose(w1[:, 1], w16[:, 1])


@pytest.mark.parametrize("path", [{}, dict(hoist=False, factor=False, tiled=False)])
def test_sink_clamp_through_the_lab(path):
    """Through the Lab (hoisted default path, not factored; and the plain one): with the sink
    clamp on head 3 attn_sink_head is 0 for that head and the softmax's for the others."""
    inputs = InputSpec(kind="gaussian", batch=B, length=T).validate()
    kn = knob_arrays(dict(q_scale=2.0, k_scale=2.0, drift_norm=1.5))
    out = {}
    for pattern, head in (("softmax", None), ("sink", 3)):
        spec = BlockSpec(
            kind="attention", d_model=D, n_heads=H, mlp_ratio=2, pattern=pattern,
            pattern_head=head,
        ).validate()  # fmt: skip
        lab = Lab(spec, inputs, ("attn_sink_head",), tile_elements=2 * H * T, **path)
        assert not (lab.factor and pattern == "sink")  # the softmax one is factored
        got = jax.jit(lab.point)(lab.seed_state(jax.random.PRNGKey(1)), kn)
        out[pattern] = np.asarray(got["attn_sink_head"])
    assert out["sink"][3] == 0 and out["softmax"][3] > 0
    np.testing.assert_allclose(out["sink"][:3], out["softmax"][:3], atol=1e-6)


def test_head_fields_are_checked():
    """pattern_head outside [0, H), or with a pattern that acts on every head, and scaled_head
    outside [0, H) are refused naming the field; head_scale is inert without scaled_head."""
    with pytest.raises(ConfigError, match=r"block\.pattern_head: 4 is outside"):
        BlockSpec(d_model=D, n_heads=H, pattern="sink", pattern_head=4).validate()
    with pytest.raises(ConfigError, match=r"block\.pattern_head: block\.pattern 'shared'"):
        BlockSpec(d_model=D, n_heads=H, pattern="shared", pattern_head=0).validate()
    with pytest.raises(ConfigError, match=r"block\.scaled_head: -1 is outside"):
        BlockSpec(d_model=D, n_heads=H, scaled_head=-1).validate()
    inputs = InputSpec(kind="gaussian", batch=B, length=T)
    lab = Lab(BlockSpec(d_model=D, n_heads=H), inputs, ("attn_sink_head",))
    with pytest.raises(ConfigError, match="head_scale.*scaled_head"):
        lab.check_knobs(["head_scale"], {})
    Lab(BlockSpec(d_model=D, n_heads=H, scaled_head=0), inputs).check_knobs(["head_scale"], {})


@pytest.mark.slow
def test_sink_clamp_conforms():
    """simlab.testing's one-call check on the sink clamp (every head): every path against the
    plain oracle, float64 on the same sample, the extreme knobs."""
    testing.check_pattern("sink", identity=False)


# ------------------------------------------------------------------ per-position measures
def np_cov_measures(x_ND):
    """(mean pairwise cosine over the pairs i != j, participation ratio, top-1 share) in
    float64, from the definitions (np.cov, eigvalsh)."""
    x = np.asarray(x_ND, np.float64)
    n = len(x)
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    g = u @ u.T
    cos = (g.sum() - np.trace(g)) / (n * (n - 1))
    c = np.cov(x.T, bias=True)
    lam = np.linalg.eigvalsh(c)
    return cos, np.trace(c) ** 2 / np.sum(c * c), lam[-1] / lam.sum()


def test_measures_without_position0_vs_numpy():
    """cos_rest, participation_ratio_rest and pc1_share_rest equal the float64 definitions on
    the tokens at positions >= 1; with a planted massive token at position 0 the measures over
    all tokens collapse (PR near 1, pc1 near 1) while the _rest ones are those of the rest."""
    from simlab.core.metrics import positions

    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 9, 8)) + 0.4
    x[:, 0, 2] = 500.0  # a massive activation at position 0, dim 2
    got = [
        float(f(jnp.asarray(x, jnp.float32)))
        for f in (positions.cos_rest, positions.participation_ratio_rest, positions.pc1_share_rest)
    ]
    want = np_cov_measures(x[:, 1:].reshape(-1, 8))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    _, pr_all, pc1_all = np_cov_measures(x.reshape(-1, 8))
    assert pc1_all > 0.99 and pr_all < 1.01 and want[1] > 3


def test_position_metrics_through_the_lab():
    """Through the Lab (depth 1): input_cos_rest and input_participation_ratio_rest of the
    layer input equal the float64 definitions on the Lab's own inputs at positions >= 1, and
    out_pc1_share_rest that of the float64 numpy block's output (tests/conftest.py)."""
    spec = BlockSpec(kind="pre_ln", d_model=D, n_heads=H, mlp_ratio=2, causal=True).validate()
    inputs = InputSpec(kind="gaussian", batch=B, length=T).validate()
    names = ("input_cos_rest", "input_participation_ratio_rest", "out_pc1_share_rest")
    lab = Lab(spec, inputs, names)
    kn = knob_arrays(dict(drift_norm=0.7))
    state = lab.seed_state(jax.random.PRNGKey(2))
    got = jax.jit(lab.point)(state, kn)
    x, _ = lab.inputs_of(state, kn)
    cos, pr, _ = np_cov_measures(np.asarray(x)[:, 1:].reshape(-1, D))
    np.testing.assert_allclose(float(got["input_cos_rest"]), cos, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(got["input_participation_ratio_rest"]), pr, rtol=1e-4)
    p = jax.tree.map(lambda a: a[0], state["params"])
    y = np_layer(spec, p, x, kn, state["u_q"][0], state["u_k"][0])[0]
    _, _, pc1 = np_cov_measures(y[:, 1:].reshape(-1, D))
    np.testing.assert_allclose(float(got["out_pc1_share_rest"]), pc1, rtol=1e-4)


@pytest.mark.slow
def test_position_metrics_conform():
    """simlab.testing on every block kind for the measures without position 0: the fast paths
    equal the plain oracle, the float64 dtypes, finite and inside their bounds at extreme
    knobs. Declared split with tests/core/test_metrics.py::test_decomposition_metrics_conform,
    which runs every metric not computed by default (these nine included) on post-LN and
    Llama, float64 agreeing with float32 on post-LN: here the other block kinds, no float64
    run of its own."""
    from simlab.core.block import BLOCKS
    from simlab.core.metrics import METRICS

    names = [n for n in METRICS if n.endswith("_rest")]
    assert len(names) == 9 and not any(METRICS[n].default for n in names)
    there = {"post_ln", "llama"}  # test_decomposition_metrics_conform's sample of kinds
    builtin = {k for k in BLOCKS if BLOCKS.source(k) == "simlab"}  # a plugin's: its own tests
    cases = [c for c in testing.metric_cases(names) if c.block.kind in builtin - there]
    assert {c.block.kind for c in cases} | there == builtin
    testing.check_cases(cases, identity=False, x64=lambda c: False)
