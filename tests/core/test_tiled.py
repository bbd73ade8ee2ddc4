"""simlab.core.tiled against a float64 numpy softmax, and the tiled Lab against the plain
oracle with tiles small enough that every loop (sequence groups, query blocks) runs several
times."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from simlab.core import tiled
from simlab.core.block import BLOCKS
from simlab.core.inputs import INPUTS
from simlab.core.knobs import knob_arrays
from simlab.core.lab import Lab
from simlab.core.spec import BlockSpec, InputSpec

from conftest import np_attention


def run_attend(tiling, s_BHTS, factor, v_BHSK, wo, causal):
    b, h, t, n = s_BHTS.shape
    qx = s_BHTS.reshape(b, h, tiling.blocks, tiling.rows, n).transpose(0, 2, 1, 3, 4)
    f = jax.jit(
        lambda qx, v, c: tiled.attend(
            tiling, lambda sx, kx: sx, c, qx, jnp.zeros((b,)), v, wo, causal
        )
    )
    return f(qx, v_BHSK, jnp.float32(factor))


@pytest.mark.slow
@pytest.mark.parametrize("seqs,rows", [(4, 12), (2, 12), (1, 12), (1, 4), (1, 1)])
@pytest.mark.parametrize("causal", [False, True])
def test_attend_vs_float64_softmax(seqs, rows, causal):
    """Every tiling of (B, T) = (4, 12) -- whole batch, sequence groups, query blocks, single
    rows -- gives the float64 softmax's output, row entropies and maxima at moderate, sharp
    (factor 50: rows near one-hot) and uniform (factor 0) logits. Tolerance: float32 through
    one softmax and two contractions over <= 12 terms of O(1) values: ~1e-6; 2e-5 absolute."""
    r = np.random.default_rng(seqs * 10 + rows)
    b, h, t, k, d = 4, 3, 12, 5, 7
    s = jnp.asarray(r.standard_normal((b, h, t, t)), jnp.float32)
    v = jnp.asarray(r.standard_normal((b, h, t, k)), jnp.float32)
    wo = jnp.asarray(r.standard_normal((h, k, d)) / 3, jnp.float32)
    tiling = tiled.Tiling(b, t, seqs, rows)
    for factor in (1.3, 50.0, 0.0):
        got = run_attend(tiling, s, factor, v, wo, causal)
        want = np_attention(s, factor, v, wo, causal)
        for name, g, w in zip(("out", "entropy", "max"), got, want):
            np.testing.assert_allclose(
                np.asarray(g), w, atol=2e-5, rtol=2e-5, err_msg=f"{name} factor {factor}"
            )
    # uniform rows: H_i = log(number of attended keys) exactly (to rounding)
    n_keys = np.arange(1, t + 1) if causal else np.full(t, t)
    np.testing.assert_allclose(
        np.asarray(got.entropy), np.broadcast_to(np.log(n_keys), (b, h, t)), rtol=1e-6
    )


def test_attend_extreme_factor_is_finite_and_one_hot():
    """A huge scalar factor (1e30: logits far beyond float32 without the row-max shift) gives
    one-hot rows: entropy 0, max 1, out = v at the arg max; no inf - inf, no 0 * inf."""
    r = np.random.default_rng(0)
    b, h, t, k, d = 2, 2, 6, 3, 4
    s = jnp.asarray(r.standard_normal((b, h, t, t)), jnp.float32)
    v = jnp.asarray(r.standard_normal((b, h, t, k)), jnp.float32)
    wo = jnp.asarray(np.eye(h * k, d).reshape(h, k, d), jnp.float32)
    for causal in (False, True):
        got = run_attend(tiled.Tiling(b, t, 1, 3), s, 1e30, v, wo, causal)
        assert all(np.all(np.isfinite(np.asarray(a))) for a in got)
        np.testing.assert_array_equal(np.asarray(got.entropy), 0.0)
        np.testing.assert_array_equal(np.asarray(got.max), 1.0)
        sm = (
            np.where(np.tril(np.ones((t, t), bool)), np.asarray(s), -np.inf)
            if causal
            else np.asarray(s)
        )
        w = (sm == sm.max(-1, keepdims=True)).astype(np.float64)  # the one-hot limit
        want = np.einsum(
            "bthk,hkd->btd", np.einsum("bhts,bhsk->bthk", w, np.asarray(v)), np.asarray(wo)
        )
        np.testing.assert_allclose(np.asarray(got.out), want, atol=1e-6)


def test_tiled_layer_vs_float64_softmax_attention():
    """The default path's attention (block.tiled_attention: the softmax of a block with a norm
    before its projections, tiled) against a numpy float64 softmax attention written from the
    math (conftest.np_layer): logits q'_i . k'_j / (sqrt(d_head) T), q' = q_scale q + q_shift
    u_q, k' = k_scale k + k_shift u_k; its output (A V) W_O, its row entropy in nats
    -sum_j w_ij ln w_ij, its row maximum and the weight w_i0 on key 0 (the tiled path's one
    weight it keeps: e_i0 / z_i), causal and not, d_head = D / H = 4 with H = 4
    heads (so sqrt(d_head) and sqrt(D) differ), tiles of 3 query rows of one sequence (both
    tile loops run). Fast: one compiled call. Tolerance as test_attend_vs_float64_softmax."""
    from simlab.core.block import layer_apply
    from simlab.core.init import init_params

    from conftest import np_layer

    b, t, d = 2, 6, 16
    kn = dict(q_scale=2.0, k_scale=1.5, temperature=0.8, q_shift=0.4, k_shift=0.9)
    r = np.random.default_rng(7)
    x = jnp.asarray(r.standard_normal((b, t, d)), jnp.float32)
    u_q, u_k = (r.standard_normal((4, 4)) for _ in range(2))
    u_q, u_k = (jnp.asarray(u / np.linalg.norm(u, axis=-1, keepdims=True), jnp.float32)
                for u in (u_q, u_k))  # fmt: skip
    specs = [
        BlockSpec(kind="pre_ln", d_model=d, n_heads=4, depth=1, mlp=False, causal=c, init="fan_in")
        for c in (False, True)
    ]
    tiling = tiled.Tiling(b, t, 1, 3)
    for spec in specs:  # the Lab's default path for these blocks is this one
        lab = Lab(spec, InputSpec(kind="gaussian", batch=b, length=t))
        assert lab.tiling is not None and not lab.factor
    p = {n: a[0] for n, a in init_params(specs[0], jax.random.PRNGKey(5), jnp.float32).items()}
    p["wo"] = p["wo"] * 3.0  # an attention output of order 1
    knobs = knob_arrays(kn)
    kn1 = {k: float(v) for k, v in knobs.items()}  # every knob, for the oracle
    got = jax.jit(lambda p, x: [layer_apply(s, p, x, knobs, u_q, u_k, tiling) for s in specs])(p, x)
    for spec, layer in zip(specs, got, strict=True):
        _, attn, w, _, _ = np_layer(
            spec, p, x, {**{k: float(v) for k, v in knobs.items()}}, u_q, u_k
        )
        logw = np.log(np.where(w > 0, w, 1.0))
        want = {"attn": attn, "entropy": -(w * logw).sum(-1), "max": w.max(-1), "w0": w[..., 0]}
        for name, g in (("attn", layer.attn), ("entropy", layer.row_entropy),
                        ("max", layer.row_max), ("w0", layer.sink)):  # fmt: skip
            np.testing.assert_allclose(
                np.asarray(g), want[name], atol=2e-5, rtol=2e-5, err_msg=f"{name} {spec.causal}"
            )
        # not vacuous: rows neither uniform nor one-hot on average, and sqrt(D) = 2 sqrt(d_head)
        # in place of sqrt(d_head) (the oracle at twice the temperature) moves the entropies by
        # far more than the tolerance; in bits (/ ln 2) they would be 44% larger
        n_keys = np.arange(1, t + 1) if spec.causal else np.full(t, t)
        frac = want["entropy"][..., 1:] / np.log(n_keys[1:])  # of the uniform row's
        assert 0.2 < frac.mean() < 0.8, frac.mean()
        w2 = np_layer(spec, p, x, {**kn1, "temperature": 2 * kn["temperature"]}, u_q, u_k)[2]
        h2 = -(w2 * np.log(np.where(w2 > 0, w2, 1.0))).sum(-1)
        assert np.max(np.abs(h2 - want["entropy"])) > 0.05


def test_choose_tiling():
    """Whole sequences while they fit the budget (as many as divide the batch), else the
    largest divisor of the length in rows; never a partial tile."""
    assert tiled.choose_tiling(16, 512, 12, 512) == tiled.Tiling(16, 512, 1, 512)  # BERT base
    assert tiled.choose_tiling(8, 256, 4, 256) == tiled.Tiling(8, 256, 8, 256)
    assert tiled.choose_tiling(6, 64, 4, 64, budget=4 * 64 * 64 * 4) == tiled.Tiling(6, 64, 3, 64)
    t = tiled.choose_tiling(2, 4096, 12, 4096)
    assert t.seqs == 1 and 4096 % t.rows == 0 and 12 * t.rows * 4096 <= tiled.TILE_ELEMENTS
    assert 12 * 2 * t.rows * 4096 > tiled.TILE_ELEMENTS  # largest
    assert tiled.choose_tiling(3, 7, 2, 7, budget=1).rows == 1


CASES = [  # kind, qk_norm, causal, inputs, logits per tile (3 sequences' or 2 query rows')
    ("attention", "none", False, "embedding", 3 * 12 * 4 * 12),
    ("post_ln", "none", True, "gaussian", 2 * 4 * 12),
    ("post_ln", "layernorm", False, "gaussian", 3 * 12 * 4 * 12),
    ("pre_ln", "none", True, "student_t", 3 * 12 * 4 * 12),
    ("pre_ln", "rmsnorm", False, "anisotropic", 2 * 4 * 12),
    ("attention", "none", True, "embedding", 2 * 4 * 12),
    ("parallel", "none", False, "gaussian", 2 * 4 * 12),
    ("post_ln", "none", False, "rademacher", 3 * 12 * 4 * 12),
]
# every registry entry not named above gets a case of its own: a new block or input kind is
# tested against the plain oracle by adding it to its registry
CASES += [
    (k, "none", True, "gaussian", 2 * 4 * 12) for k in BLOCKS if k not in {c[0] for c in CASES}
]
CASES += [
    ("post_ln", "none", False, k, 2 * 4 * 12)
    for k in INPUTS
    if k not in {c[3] for c in CASES} and not INPUTS[k].trained  # trained: test_conformance.py
]
POINTS = [
    dict(),
    dict(
        q_scale=4.0,
        k_scale=0.5,
        temperature=0.5,
        q_shift=1.5,
        k_shift=2.0,
        drift_norm=2.5,
        attn_residual=0.5,
        mlp_residual=0.8,
    ),
    dict(q_scale=30.0, k_scale=30.0, drift_norm=10.0),
]


@pytest.fixture(scope="module")
def tiled_results():
    """Every case's tiled Lab and plain oracle Lab, all points vmapped, in ONE compiled call."""
    labs, states, knobs = [], [], []
    for kind, qk_norm, causal, inputs, budget in CASES:
        block = BlockSpec(
            kind=kind,
            d_model=16,
            n_heads=4,
            mlp_ratio=2,
            depth=2,
            causal=causal,
            qk_norm=qk_norm,
            init="fan_in",
        )
        ispec = InputSpec(kind=inputs, batch=4, length=12, vocab=40, embed_std=1.0)
        pts = [dict(p, qk_norm_gain=2.0) if qk_norm != "none" else p for p in POINTS]
        for lab in (
            Lab(block, ispec, tile_elements=budget),
            Lab(block, ispec, hoist=False, factor=False, tiled=False),
        ):
            labs.append(lab)
            states.append(lab.seed_state(jax.random.PRNGKey(4)))
            knobs.append({k: jnp.stack([knob_arrays(p)[k] for p in pts]) for k in knob_arrays({})})
    outs = jax.jit(
        lambda sts, kns: [
            jax.vmap(lab.point, in_axes=(None, 0))(st, kn) for lab, st, kn in zip(labs, sts, kns)
        ]
    )(states, knobs)
    return labs, outs


@pytest.mark.slow
@pytest.mark.parametrize(
    "case", range(len(CASES)), ids=[f"{c[0]}-{c[1]}-causal{c[2]}-{c[3]}" for c in CASES]
)
def test_tiled_lab_equals_plain(tiled_results, case):
    """The default Lab (tiled attention and token-wise work; factored or hoisted layer 0 where
    the block allows) against the plain oracle Lab, depth 2, B = 4, T = 12, with tile budgets
    of 3 sequences' or of 2 query rows' logits (so both tile loops run). Float32 rounding only:
    the tiled entropy is log z - sum e l / z instead of -sum w log w, the factored logits
    reassociate sums (~D eps): 2e-5 of (1 + |value|) is ~20x the measured difference."""
    labs, outs = tiled_results
    fast, got, want = labs[2 * case], outs[2 * case], outs[2 * case + 1]
    assert fast.tiling.blocks > 1 or fast.tiling.groups > 1
    assert fast.factor == (
        not BLOCKS[CASES[case][0]].norm_before_projections and CASES[case][1] == "none"
    )
    for m in fast.metric_names:
        np.testing.assert_allclose(
            np.asarray(got[m]), np.asarray(want[m]), rtol=2e-5, atol=2e-5, err_msg=m
        )
    assert np.ptp(np.asarray(want["attn_entropy"])[:, 0]) > 1e-2  # the points differ


@pytest.mark.slow
def test_micro_batch_and_point_bytes_from_sizes():
    """The default micro-batch is a power of two from the sizes alone: 1 at the paper's size,
    more for small blocks, never above 64; point_bytes counts the tile's logits and the
    activations."""
    paper = Lab(BlockSpec(), InputSpec())
    assert paper.default_micro_batch() == 1
    small = Lab(
        BlockSpec(kind="attention", d_model=64, n_heads=4, mlp=False),
        InputSpec(kind="embedding", batch=4, length=64),
    )
    mb = small.default_micro_batch()
    assert 1 < mb <= 64 and mb & (mb - 1) == 0
    tiny = Lab(
        BlockSpec(kind="attention", d_model=8, n_heads=2, mlp=False),
        InputSpec(kind="gaussian", batch=1, length=4),
    )
    assert tiny.default_micro_batch() == 64
    b, t, d, h, f = 16, 512, 768, 12, 3072
    assert paper.point_bytes() == 4 * (3 * h * t * t + b * t * (12 * d + 2 * f))
    assert math.log2(mb) == int(math.log2(mb))
