"""simlab.core.attention against flax.linen.MultiHeadDotProductAttention and numpy oracles, and the
softmax shift invariance that the physics rests on (docs/design.md: a common key vector adds
q_i . m_k to row i, constant over j, which softmax ignores exactly).
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from simlab.core import attention
from simlab.core.knobs import knob_arrays, knob_defaults
from simlab.core.lab import Lab
from simlab.core.spec import BlockSpec, InputSpec

from conftest import np_layernorm, np_softmax

EPS32 = float(np.finfo(np.float32).eps)
B, T, D, H = 2, 8, 32, 4
K = D // H


def knobs(**kw):
    return {k: jnp.asarray(v, jnp.float32) for k, v in dict(knob_defaults(), **kw).items()}


@functools.partial(jax.jit, static_argnames=("qk_norm", "causal"))
def simlab_mha(p, x, kn, u_q, u_k, qk_norm, causal):
    q, k, v = (
        attention.project(p[w], p[b], x) for w, b in (("wq", "bq"), ("wk", "bk"), ("wv", "bv"))
    )
    q, k = attention.shape_qk(q, k, kn, u_q, u_k, qk_norm)
    w = attention.attention_weights(q, k, kn["temperature"], causal)
    return attention.attend(w, v, p["wo"], p["bo"])


# ----------------------------------------------------------------------------- flax oracle
def flax_module(normalize_qk):
    return nn.MultiHeadDotProductAttention(
        num_heads=H,
        qkv_features=D,
        out_features=D,
        use_bias=True,
        deterministic=True,
        dropout_rate=0.0,
        normalize_qk=normalize_qk,
        kernel_init=nn.initializers.normal(stddev=0.4),
        bias_init=nn.initializers.normal(0.5),
    )


@pytest.mark.parametrize("normalize_qk", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_flax_multihead_attention(normalize_qk, causal):
    module = flax_module(normalize_qk)
    x = jnp.asarray(np.random.default_rng(1).standard_normal((B, T, D)), jnp.float32)
    variables = module.init(jax.random.PRNGKey(2), x)
    fp = variables["params"]
    # flax's layout: DenseGeneral kernels (D, H, K) for q/k/v, (H, K, D) for the output
    for name in ("query", "key", "value"):
        assert fp[name]["kernel"].shape == (D, H, K) and fp[name]["bias"].shape == (H, K)
    assert fp["out"]["kernel"].shape == (H, K, D) and fp["out"]["bias"].shape == (D,)
    if normalize_qk:
        # flax's QK-norm: LayerNorm over the head dim, no bias, scale initialised to 1,
        # epsilon 1e-6 -- what simlab's qk_norm="layernorm" with qk_norm_gain=1 implements.
        for name in ("query_ln", "key_ln"):
            assert set(fp[name]) == {"scale"}
            np.testing.assert_array_equal(np.asarray(fp[name]["scale"]), np.ones(K))
        assert nn.LayerNorm().epsilon == attention.QK_NORM_EPS == 1e-6
    p = {
        "wq": fp["query"]["kernel"],
        "bq": fp["query"]["bias"],
        "wk": fp["key"]["kernel"],
        "bk": fp["key"]["bias"],
        "wv": fp["value"]["kernel"],
        "bv": fp["value"]["bias"],
        "wo": fp["out"]["kernel"],
        "bo": fp["out"]["bias"],
    }
    mask = nn.make_causal_mask(jnp.ones((B, T))) if causal else None
    want = module.apply(variables, x, mask=mask)
    u = jnp.zeros((H, K), jnp.float32)  # unused at q_shift = k_shift = 0
    got = simlab_mha(p, x, knobs(), u, u, "layernorm" if normalize_qk else "none", causal)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    # not vacuous: the mask / the norm change the output by far more than the tolerance
    other = simlab_mha(p, x, knobs(), u, u, "layernorm" if normalize_qk else "none", not causal)
    assert np.max(np.abs(np.asarray(other) - np.asarray(want))) > 1e-2

    if normalize_qk:
        # a uniform flax LN scale c equals simlab's scalar qk_norm_gain = c
        c = 1.7
        v2 = jax.tree.map(lambda a: a, variables)
        v2["params"]["query_ln"]["scale"] = jnp.full((K,), c, jnp.float32)
        v2["params"]["key_ln"]["scale"] = jnp.full((K,), c, jnp.float32)
        want2 = module.apply(v2, x, mask=mask)
        got2 = simlab_mha(p, x, knobs(qk_norm_gain=c), u, u, "layernorm", causal)
        np.testing.assert_allclose(np.asarray(got2), np.asarray(want2), rtol=1e-5, atol=1e-5)
        assert np.max(np.abs(np.asarray(want2) - np.asarray(want))) > 1e-2


# ----------------------------------------------------------------------------- numpy oracles
attention_weights = jax.jit(attention.attention_weights, static_argnums=3)


@pytest.mark.parametrize("causal", [False, True])
def test_temperature_scales_logits(causal):
    r = np.random.default_rng(0)
    q = r.standard_normal((B, T, H, K)).astype(np.float32)
    k = r.standard_normal((B, T, H, K)).astype(np.float32)
    logits = np.einsum("bthk,bshk->bhts", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(K)
    if causal:
        logits = np.where(np.tril(np.ones((T, T), bool)), logits, -np.inf)
    ws = {}
    for t in (0.3, 1.0, 4.0):
        want = np_softmax(logits / t)
        got = np.asarray(attention_weights(jnp.asarray(q), jnp.asarray(k), jnp.float32(t), causal))
        np.testing.assert_allclose(got, want, atol=2e-6, rtol=1e-5)
        # temperature t == queries scaled by 1/t at temperature 1
        alt = attention_weights(
            jnp.asarray(q / np.float32(t)), jnp.asarray(k), jnp.float32(1.0), causal
        )
        np.testing.assert_allclose(got, np.asarray(alt), atol=2e-6, rtol=1e-5)
        ws[t] = got
    assert np.max(np.abs(ws[0.3] - ws[4.0])) > 0.1  # the temperature matters
    if causal:
        assert np.all(ws[1.0][..., np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] == 0)


@pytest.mark.parametrize("qk_norm", ["none", "layernorm", "rmsnorm"])
def test_shape_qk_vs_numpy(qk_norm):
    r = np.random.default_rng(1)
    q = (3 * r.standard_normal((B, T, H, K)) + 1).astype(np.float32)
    k = (2 * r.standard_normal((B, T, H, K)) - 1).astype(np.float32)
    u_q = r.standard_normal((H, K)).astype(np.float32)
    u_k = r.standard_normal((H, K)).astype(np.float32)
    kv = dict(q_scale=1.7, k_scale=0.6, q_shift=2.5, k_shift=0.8, qk_norm_gain=1.3)
    got_q, got_k = jax.jit(attention.shape_qk, static_argnums=5)(
        jnp.asarray(q), jnp.asarray(k), knobs(**kv), jnp.asarray(u_q), jnp.asarray(u_k), qk_norm
    )
    q64, k64 = q.astype(np.float64), k.astype(np.float64)
    if qk_norm == "layernorm":
        q64, k64 = 1.3 * np_layernorm(q64, eps=1e-6), 1.3 * np_layernorm(k64, eps=1e-6)
    elif qk_norm == "rmsnorm":
        q64 = 1.3 * q64 / np.sqrt((q64**2).mean(-1, keepdims=True) + 1e-6)
        k64 = 1.3 * k64 / np.sqrt((k64**2).mean(-1, keepdims=True) + 1e-6)
    want_q = 1.7 * q64 + 2.5 * u_q
    want_k = 0.6 * k64 + 0.8 * u_k
    np.testing.assert_allclose(np.asarray(got_q), want_q, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(got_k), want_k, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- shift invariance
@pytest.mark.parametrize("causal", [False, True])
def test_k_shift_leaves_weights_unchanged_q_shift_does_not(causal):
    """k' = k + s u_k adds s q_i . u_k / (sqrt(K) t) to every logit of row i: exactly constant
    over j, so the exact weights are identical. In float32 the only difference is rounding:
    the dot product q_i . k'_j carries an absolute error <= (K + 2) eps |q_i| |k'_j| (the
    standard gamma_K bound, plus the rounding of k + s u_k), which perturbs w_ij by at most
    2 w_ij * delta_max (softmax's Lipschitz constant in the log domain), plus a few ulp from
    exp and the normalisation. That is the tolerance; the q_shift difference must exceed it
    by orders of magnitude."""
    r = np.random.default_rng(2)
    q = jnp.asarray(r.standard_normal((B, T, H, K)), jnp.float32)
    k = jnp.asarray(r.standard_normal((B, T, H, K)), jnp.float32)
    u = r.standard_normal((2, H, K))
    u_q, u_k = (jnp.asarray(v / np.linalg.norm(v, axis=-1, keepdims=True), jnp.float32) for v in u)
    shape = jax.jit(attention.shape_qk, static_argnums=5)
    temp = 0.8

    def weights(**kv):
        qq, kk = shape(q, k, knobs(**kv), u_q, u_k, "none")
        return np.asarray(attention_weights(qq, kk, jnp.float32(temp), causal)), qq, kk

    w0, _, _ = weights()
    for s in (3.7, 100.0):
        ws, qs, ks = weights(k_shift=s)
        np.testing.assert_allclose(
            np.asarray(ks - k), s * np.broadcast_to(u_k, ks.shape), atol=4 * EPS32 * (s + 4)
        )  # the shift really is applied
        delta = (
            (K + 2)
            * EPS32
            * float(jnp.max(jnp.linalg.norm(qs, axis=-1)))
            * float(jnp.max(jnp.linalg.norm(ks, axis=-1)))
            / (np.sqrt(K) * temp)
        )
        tol = 2 * w0 * delta + 8 * EPS32
        assert np.all(np.abs(ws - w0) <= tol), np.max(np.abs(ws - w0) - tol)
    wq, _, _ = weights(q_shift=3.7)
    assert np.max(np.abs(wq - w0)) > 0.05


@pytest.mark.slow
def test_lab_entropy_invariant_under_k_shift():
    """Through the Lab (post-LN, non-causal and causal; plain, tiled and factored paths):
    attn_entropy and attn_max equal for k_shift 0, 3.7, 100; q_shift 3.7 changes them. All six
    Labs and all points in one compiled call.
    Plain path (the oracle): the logits carry the float32 rounding bounded in the test above,
    delta <= (K + 2) eps |q| |k'| / (sqrt(K) t) ~ 3e-4 worst case at |k'| ~ 100; the errors are
    random, so the row-averaged entropy and max move far less (measured <= 3e-7). 1e-4 sits
    between the two and 100x below the q_shift effect (> 1e-2). The tiled paths (unhoisted and
    factored) drop the j-constant key terms exactly: bit-identical."""
    inputs = InputSpec(kind="gaussian", batch=B, length=T)
    labs, states = [], []
    for causal in (False, True):
        spec = BlockSpec(
            kind="post_ln", d_model=D, n_heads=H, mlp_ratio=2, causal=causal, init="fan_in"
        )
        for hoist, tiled in ((False, False), (False, True), (True, True)):
            labs.append(
                Lab(
                    spec,
                    inputs,
                    metrics=("attn_entropy", "attn_max"),
                    hoist=hoist,
                    factor=hoist,
                    tiled=tiled,
                )
            )
            states.append(labs[-1].seed_state(jax.random.PRNGKey(3)))
    base = dict(drift_norm=0.5, temperature=0.5)
    pts = [
        dict(base, k_shift=0.0),
        dict(base, k_shift=3.7),
        dict(base, k_shift=100.0),
        dict(base, q_shift=3.7),
    ]
    kn = {k: jnp.stack([knob_arrays(pt)[k] for pt in pts]) for k in knob_defaults()}
    outs = jax.jit(
        lambda sts, kn: [
            jax.vmap(lab.point, in_axes=(None, 0))(st, kn) for lab, st in zip(labs, sts)
        ]
    )(states, kn)
    for lab, out in zip(labs, outs):
        for m in ("attn_entropy", "attn_max"):
            v = np.asarray(out[m])
            assert np.all(np.abs(v[1:3] - v[0]) < 1e-4), (lab.hoist, lab.block.causal, m, v)
            if lab.tiled:
                assert np.all(v[1:3] == v[0]), (lab.hoist, lab.block.causal, m, v)
        e = np.asarray(out["attn_entropy"])
        assert abs(e[3] - e[0]) > 1e-2
