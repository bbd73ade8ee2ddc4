"""simlab.core.block against an independent float64 numpy implementation; the depth stack against a
Python loop of layers; the hoisted / factored / tiled Lab against the plain Lab
(hoist=False, factor=False, tiled=False: the oracle).

GELU: jax.nn.gelu defaults to approximate=True, the tanh form
0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) that BERT's reference code uses; the oracle
implements exactly that form (test_gelu_is_tanh_form pins the choice: the erf form differs
by up to ~1e-3, far above the tolerances here).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import erf

from simlab.core import block, tiled
from simlab.core.init import init_params, layer
from simlab.core.knobs import knob_arrays, knob_defaults
from simlab.core.lab import Lab
from simlab.core.spec import BlockSpec, InputSpec

from conftest import np_gelu_tanh, np_layer, np_pattern_weights

B, T, D, H = 2, 8, 32, 4
K = D // H


def nontrivial_params(spec: BlockSpec, seed=0):
    """simlab's parameter layout (names and shapes from init_params, via eval_shape), filled
    in numpy: weights N(0, 1/fan_in), and random biases and LayerNorm gains/biases so that
    every term is exercised. (numpy draws: no per-shape XLA compile of the PRNG.)"""
    shapes = jax.eval_shape(lambda k: init_params(spec, k), jax.random.PRNGKey(0))
    r = np.random.default_rng(seed)
    out = {}
    for n, sd in sorted(shapes.items()):
        shape = sd.shape
        if n.startswith("w"):
            fan_in = shape[1] * shape[2] if n == "wo" else shape[1]  # shape[0] is the layer
            v = r.standard_normal(shape) / math.sqrt(fan_in)
        elif n.endswith("_g"):
            v = 1.0 + 0.3 * r.standard_normal(shape)
        else:  # bq, bk, bv, bo, b1, b2, ln*_b
            v = 0.3 * r.standard_normal(shape)
        out[n] = jnp.asarray(v, jnp.float32)
    return out


def normal(seed, shape, offset=0.0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape) + offset, jnp.float32)


def unit_dirs(seed, shape):
    u = np.random.default_rng(seed).standard_normal(shape)
    return jnp.asarray(u / np.linalg.norm(u, axis=-1, keepdims=True), jnp.float32)


KNOBS = dict(
    q_scale=1.8,
    k_scale=0.7,
    q_shift=0.9,
    k_shift=1.3,
    temperature=0.9,
    attn_residual=0.7,
    mlp_residual=1.6,
    qk_norm_gain=1.2,
    attn_gain=0.6,
    mlp_gain=1.4,
)


def test_gelu_is_tanh_form():
    x = np.linspace(-5, 5, 1001).astype(np.float32)
    g = np.asarray(jax.jit(jax.nn.gelu)(jnp.asarray(x)), np.float64)
    np.testing.assert_allclose(g, np_gelu_tanh(x.astype(np.float64)), atol=2e-6)
    exact = 0.5 * x * (1 + erf(x / math.sqrt(2.0)))
    assert np.max(np.abs(g - exact)) > 1e-4  # the two forms are distinguishable


CASES = [  # kind, mlp, activation, causal, qk_norm
    ("post_ln", True, "gelu", False, "none"),  # BERT
    ("post_ln", True, "gelu", True, "layernorm"),
    ("pre_ln", True, "gelu", False, "none"),
    ("pre_ln", True, "relu", True, "rmsnorm"),
    ("parallel", True, "gelu", False, "none"),  # GPT-J (docs/extending.md's worked example)
    ("parallel", True, "relu", True, "layernorm"),
    ("attention", False, "gelu", False, "none"),  # attention only
    ("attention", True, "relu", True, "none"),
    ("post_ln", True, "linear", False, "none"),  # the identity activation (an ablation)
    ("parallel", True, "linear", True, "none"),
    ("pre_ln", True, "silu", True, "none"),  # SiLU (Llama's gate) in a plain MLP
]


@pytest.mark.parametrize(
    "kind,mlp,act,causal,qk_norm,center",
    [c + (False,) for c in CASES]
    + [
        ("post_ln", True, "gelu", False, "none", True),
        ("pre_ln", True, "relu", True, "none", True),
    ],
)
def test_layer_apply_vs_numpy(kind, mlp, act, causal, qk_norm, center):
    """Tolerance: float32 vs float64 with O(1) activations (fan_in init, sigma 1): each
    einsum has relative error ~ D eps ~ 4e-6; LayerNorm (eps 1e-12, so no damping) and
    softmax pass that through with O(1) gain. 5e-5 abs / 5e-5 rel is ~10x the measured error
    and far below any term being wrong (the residual strengths, shifts and biases each move
    the output by >= 1e-2)."""
    spec = BlockSpec(
        kind=kind,
        d_model=D,
        n_heads=H,
        mlp=mlp,
        mlp_ratio=2,
        activation=act,
        causal=causal,
        qk_norm=qk_norm,
        init="fan_in",
        mlp_center=center,
    ).validate()
    assert spec.ln_eps == 1e-12
    p = layer(nontrivial_params(spec), 0)
    x = normal(1, (B, T, D), 0.5)
    kn = knob_arrays(KNOBS)
    u_q, u_k = unit_dirs(1, (H, K)), unit_dirs(2, (H, K))
    got = jax.jit(block.layer_apply, static_argnums=0)(spec, p, x, kn, u_q, u_k)
    y, attn, w, q, k = np_layer(spec, p, x, kn, u_q, u_k)
    for name, g, want in (
        ("y", got.y, y),
        ("attn", got.attn, attn),
        ("w", got.full.w, w),
        ("q", got.full.q, q),
        ("k", got.full.k, k),
    ):
        np.testing.assert_allclose(np.asarray(g), want, rtol=5e-5, atol=5e-5, err_msg=name)
    np.testing.assert_array_equal(np.asarray(got.x), np.asarray(x))
    # the residual strengths and the branch gains really enter: each changes the output
    for changed in (dict(attn_residual=1.0, mlp_residual=1.0), dict(attn_gain=1.0)) + (
        (dict(mlp_gain=1.0),) if mlp else ()
    ):
        y1 = np_layer(spec, p, x, knob_arrays(dict(KNOBS, **changed)), u_q, u_k)[0]
        assert np.max(np.abs(y1 - y)) > 1e-2, changed


def test_branch_gains_switch_branches_off():
    """Exact invariants of the gains: attn_gain = 0 makes the output independent of everything
    the attention sees (here q_scale and the shifts: bit-identical y); mlp_gain = 0 with
    m = 1 in the attention-only wiring gives exactly the block without an MLP; the branches'
    own outputs (Layer.attn, Layer.mlp) are the ungained ones."""
    spec = BlockSpec(kind="attention", d_model=D, n_heads=H, mlp_ratio=2, init="fan_in")
    p = layer(nontrivial_params(spec, seed=5), 0)
    x = normal(6, (B, T, D), 0.3)
    u_q, u_k = unit_dirs(7, (H, K)), unit_dirs(8, (H, K))
    run = jax.jit(block.layer_apply, static_argnums=(0, 6, 9))

    def y_of(sp, **kn):
        return run(sp, p, x, knob_arrays(kn), u_q, u_k, None, None, None, sp.mlp)

    off = [y_of(spec, attn_gain=0.0, q_scale=s, q_shift=s) for s in (0.3, 7.0)]
    np.testing.assert_array_equal(np.asarray(off[0].y), np.asarray(off[1].y))
    assert np.max(np.abs(np.asarray(off[0].attn - off[1].attn))) > 1e-3  # attention did change
    on = y_of(spec, q_scale=7.0, q_shift=7.0)
    np.testing.assert_array_equal(np.asarray(on.attn), np.asarray(off[1].attn))
    np.testing.assert_array_equal(
        np.asarray(y_of(spec).mlp), np.asarray(y_of(spec, mlp_gain=3.0).mlp)
    )
    no_mlp = dataclasses.replace(spec, mlp=False)
    np.testing.assert_array_equal(
        np.asarray(y_of(spec, mlp_gain=0.0).y), np.asarray(y_of(no_mlp).y)
    )


SLOW = pytest.mark.slow
PATTERN_CASES = [  # kind, pattern, causal, qk_norm (one case per clamp in the fast tier)
    ("post_ln", "uniform", False, "none"),
    ("post_ln", "shared", True, "none"),
    ("post_ln", "token", False, "layernorm"),
    pytest.param("pre_ln", "token", True, "none", marks=SLOW),
    pytest.param("pre_ln", "shared", False, "rmsnorm", marks=SLOW),
    pytest.param("parallel", "uniform", True, "none", marks=SLOW),
    pytest.param("attention", "token", False, "none", marks=SLOW),
    pytest.param("attention", "shared", False, "none", marks=SLOW),
]


@pytest.mark.parametrize("kind,pattern,causal,qk_norm", PATTERN_CASES)
def test_pattern_layer_vs_numpy(kind, pattern, causal, qk_norm):
    """A clamped pattern (simlab.core.patterns) on both paths against the float64 oracle with
    the same weights: the plain path builds the full weights (compared with the definition,
    np_pattern_weights), the fast path computes A V W_O, the entropy and the maximum from the
    closed form; the output, the MLP branch's output, the row entropy (-sum w log w of the
    numpy weights) and the row maximum agree; q/k keep the softmax path's shaped queries and
    keys (the token means the q/k metrics read). Tolerance as test_layer_apply_vs_numpy."""
    spec = BlockSpec(
        kind=kind,
        d_model=D,
        n_heads=H,
        mlp_ratio=2,
        causal=causal,
        qk_norm=qk_norm,
        init="fan_in",
        pattern=pattern,
    ).validate()
    p = layer(nontrivial_params(spec, seed=3), 0)
    x = normal(2, (B, T, D), 0.5)
    kn = knob_arrays(dict(KNOBS, pattern_beta=1.3))
    u_q, u_k = unit_dirs(3, (H, K)), unit_dirs(4, (H, K))
    y, attn, w, q, k, f = np_layer(spec, p, x, kn, u_q, u_k, with_mlp=True)
    ent = -np.sum(np.where(w > 0, w * np.log(np.where(w > 0, w, 1.0)), 0.0), axis=-1)
    tol = dict(rtol=5e-5, atol=5e-5)
    run = jax.jit(block.layer_apply, static_argnums=(0, 6, 9))
    for tiling in (None, tiled.choose_tiling(B, T, H, T, budget=2 * H * T)):
        got = run(spec, p, x, kn, u_q, u_k, tiling, None, None, True)
        where = "plain" if tiling is None else "fast"
        for name, g, want in (
            ("y", got.y, y),
            ("attn", got.attn, attn),
            ("mlp", got.mlp, f),
            ("entropy", got.row_entropy, ent),
            ("max", got.row_max, w.max(-1)),
            ("q_mean", got.q_mean, q.mean((0, 1))),
            ("k_mean", got.k_mean, k.mean((0, 1))),
        ):
            np.testing.assert_allclose(np.asarray(g), want, err_msg=f"{where} {name}", **tol)
        if tiling is None:
            np.testing.assert_allclose(np.asarray(got.full.w), w, err_msg="weights", **tol)
            np.testing.assert_allclose(
                np.asarray(got.full.w[0, 0]),
                np_pattern_weights(pattern, 1.3, T, causal),
                err_msg="weights",
                **tol,
            )
        else:
            assert got.full is None


@pytest.mark.slow
def test_stack_apply_vs_python_loop():
    spec = BlockSpec(
        kind="post_ln", d_model=D, n_heads=H, mlp_ratio=2, depth=3, causal=True, init="fan_in"
    ).validate()
    params = nontrivial_params(spec, seed=4)
    x = normal(5, (B, T, D))
    kn = knob_arrays(KNOBS)
    u_q, u_k = unit_dirs(5, (3, H, K)), unit_dirs(6, (3, H, K))
    y, obs = jax.jit(block.stack_apply, static_argnums=0)(spec, params, x, kn, u_q, u_k)
    one = jax.jit(block.layer_apply, static_argnums=0)
    h = x
    for i in range(3):
        li = one(spec, layer(params, i), h, kn, u_q[i], u_k[i])
        for (path, got), want in zip(
            jax.tree_util.tree_flatten_with_path(obs)[0], jax.tree.leaves(li)
        ):  # every intermediate of every layer
            np.testing.assert_allclose(
                np.asarray(got[i]),
                np.asarray(want),
                rtol=2e-6,
                atol=2e-6,
                err_msg=f"layer {i} {jax.tree_util.keystr(path)}",
            )
        h = li.y
    np.testing.assert_allclose(np.asarray(y), np.asarray(h), rtol=2e-6, atol=2e-6)
    # layers are independent draws and use their own shift directions
    assert np.max(np.abs(np.asarray(params["wq"][0] - params["wq"][1]))) > 0.1
    # and the numpy oracle agrees with layer 2 given layer 1's output
    want = np_layer(spec, layer(params, 2), obs.x[2], kn, u_q[2], u_k[2])[0]
    np.testing.assert_allclose(np.asarray(y), want, rtol=5e-5, atol=5e-5)


# ----------------------------------------------------------------------------- hoisting
POINTS = [  # several knob settings per compiled call (vmapped)
    dict(),
    dict(
        q_scale=4.0,
        temperature=0.5,
        q_shift=1.5,
        k_shift=2.0,
        drift_norm=2.5,
        input_corr=0.3,
        attn_residual=0.5,
        mlp_residual=0.8,
    ),
    dict(q_scale=0.5, k_scale=3.0, temperature=2.0, drift_norm=0.7, input_corr=0.8),
]


HOIST_CASES = [  # kind, inputs, causal
    ("attention", "gaussian", True),
    ("post_ln", "gaussian", True),
    ("pre_ln", "gaussian", True),
    ("attention", "embedding", False),
    ("post_ln", "embedding", False),
]


def hoist_case(kind, inputs, causal):
    spec = BlockSpec(
        kind=kind, d_model=D, n_heads=H, mlp_ratio=2, depth=2, causal=causal, init="fan_in"
    )
    ispec = InputSpec(kind=inputs, batch=B, length=T, vocab=64, embed_std=1.0)
    points = (
        POINTS
        if inputs == "gaussian"
        else [{k: v for k, v in pt.items() if k != "input_corr"} for pt in POINTS]
    )
    return spec, ispec, points


@pytest.fixture(scope="module")
def hoist_results():
    """Plain Lab (the oracle: nothing hoisted, full weights) and default Lab (hoisted
    projections, factored layer-0 logits) for every case, three knob points each, in ONE
    compiled call (one XLA module for all Labs compiles about twice as fast as one per Lab)."""
    labs, states, kns = [], [], []
    for case in HOIST_CASES:
        spec, ispec, points = hoist_case(*case)
        for hoist in (False, True):
            labs.append(Lab(spec, ispec, hoist=hoist, factor=hoist, tiled=hoist))
            states.append(labs[-1].seed_state(jax.random.PRNGKey(7)))
            kns.append(
                {k: jnp.stack([knob_arrays(pt)[k] for pt in points]) for k in knob_defaults()}
            )
    outs = jax.jit(
        lambda sts, kn: [
            jax.vmap(lab.point, in_axes=(None, 0))(st, k) for lab, st, k in zip(labs, sts, kn)
        ]
    )(states, kns)
    return {
        case: (labs[2 * i : 2 * i + 2], states[2 * i : 2 * i + 2], outs[2 * i : 2 * i + 2])
        for i, case in enumerate(HOIST_CASES)
    }


@pytest.mark.slow
@pytest.mark.parametrize("kind,inputs,causal", HOIST_CASES)
def test_hoisted_lab_equals_plain_lab(hoist_results, kind, inputs, causal):
    """Lab(hoist=True) (projections by linearity, and for no QK-norm the factored layer-0
    logits) vs Lab(hoist=False) (the plain oracle), depth 2, three knob points each. The math
    is identical; float32 rounding differs because sum_c a_c (X_c W) reassociates
    (sum_c a_c X_c) W (relative ~ D eps ~ 4e-6 of |x| |W|) and the factored logits drop
    j-constant terms of size ~ |drift|^2 that the plain path carries (rounding ~ eps |drift|^2
    ~ 1e-6 here). Metrics are O(1) (stable_rank O(T)); 2e-5 abs + 2e-5 rel is ~20x the
    measured difference and 1000x below the spread between the knob points. (pre-LN has a
    norm before W_Q, so Lab(hoist=True) falls back to the plain path: checked too.)"""
    (plain_lab, lab), (plain_state, state), (plain, hoisted) = hoist_results[kind, inputs, causal]
    assert lab.hoist == (not block.BLOCKS[kind].norm_before_projections) and lab.factor == lab.hoist
    assert not plain_lab.hoist and not plain_lab.factor
    for name in ("params", "comps", "u_q", "u_k"):  # the same draws whatever is hoisted
        jax.tree.map(np.testing.assert_array_equal, state[name], plain_state[name])
    n_points = len(hoist_case(kind, inputs, causal)[2])
    assert set(hoisted) == set(plain)
    for name, arr in hoisted.items():
        assert arr.shape == (n_points, 2)
        np.testing.assert_allclose(
            np.asarray(arr), np.asarray(plain[name]), rtol=2e-5, atol=2e-5, err_msg=name
        )
    # not vacuous: the knob points really differ (attention, drift statistics and outputs)
    for name in ("attn_entropy", "q_mean_norm", "out_cos"):
        assert np.ptp(np.asarray(plain[name])[:, 0]) > 1e-2, name


@pytest.mark.slow
def test_pre_ln_embedding_hoist_falls_back_to_plain():
    """Lab(hoist=True) on pre-LN must fall back to the plain path: hoist/factor off, no hoisted
    state, the same draws -- so point() runs the identical code (computed numerically for the
    gaussian case above; here the structure, to save a compile)."""
    spec, ispec, _ = hoist_case("pre_ln", "embedding", False)
    labs = [
        Lab(spec, ispec, hoist=h, factor=f)
        for h, f in ((False, False), (True, True), (True, False))
    ]
    assert not any(lab.hoist or lab.factor for lab in labs)
    states = [lab.seed_state(jax.random.PRNGKey(7)) for lab in labs]
    for st in states[1:]:
        assert jax.tree.structure(st) == jax.tree.structure(states[0])
        jax.tree.map(np.testing.assert_array_equal, st, states[0])


@pytest.mark.slow
def test_hoisted_lab_with_qk_norm_equals_plain():
    """QK-norm: projections hoisted, logits not factored (the norm is not linear)."""
    spec = BlockSpec(
        kind="post_ln", d_model=D, n_heads=H, mlp_ratio=2, qk_norm="layernorm", init="fan_in"
    )
    ispec = InputSpec(kind="gaussian", batch=B, length=T)
    kn = knob_arrays(dict(POINTS[1], qk_norm_gain=2.0))
    labs = [Lab(spec, ispec, hoist=h, factor=h, tiled=h) for h in (False, True)]
    assert labs[1].hoist and not labs[1].factor
    states = [lab.seed_state(jax.random.PRNGKey(8)) for lab in labs]
    plain, hoisted = jax.jit(lambda sts, k: [lab.point(st, k) for lab, st in zip(labs, sts)])(
        states, kn
    )
    for name in plain:
        np.testing.assert_allclose(
            np.asarray(hoisted[name]), np.asarray(plain[name]), rtol=2e-5, atol=2e-5, err_msg=name
        )
