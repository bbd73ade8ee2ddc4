"""Blocks as data (simlab.core.structure, simlab.core.wiring, the BlockSpec structure fields):
the built-in kinds are presets that compute the very programs of their hand-written forms, and
three blocks declared as data only (no kind in code) match an independent float64 numpy
forward with the same weights: Peri-LN (a norm on both sides of each branch), a head width
other than d_model / n_heads, and Giorlandino & Goldt's encoder layer (ReLU, no W_O, LayerNorms
without gain or bias, random biases, one variance per matrix)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from simlab.core import block, wiring
from simlab.core.init import init_params, layer
from simlab.core.knobs import knob_arrays
from simlab.core.lab import Lab
from simlab.core.spec import BlockSpec, InputSpec
from simlab.core.structure import PRESETS
from simlab.engine import config as engine_config
from simlab.errors import ConfigError

B, T, D = 2, 8, 24
KN = dict(
    q_scale=1.3,
    k_scale=0.8,
    temperature=0.7,
    attn_residual=0.8,
    mlp_residual=1.3,
    attn_gain=0.9,
    mlp_gain=1.1,
)


# ------------------------------------------------- the presets are the hand-written kinds
def _old_attention(spec, p, x, a, kn):  # the kinds as written by hand before the data
    h = kn["attn_residual"] * x + a
    f = wiring.mlp(spec, p, h)
    return kn["mlp_residual"] * h + kn["mlp_gain"] * f, f


def _old_post_ln(spec, p, x, a, kn):
    h = wiring.ln1(spec, p, kn["attn_residual"] * x + a)
    f = wiring.mlp(spec, p, h)
    return wiring.ln2(spec, p, kn["mlp_residual"] * h + kn["mlp_gain"] * f), f


def _old_pre_ln(spec, p, x, a, kn):
    h = kn["attn_residual"] * x + a
    f = wiring.mlp(spec, p, wiring.ln2(spec, p, h))
    return kn["mlp_residual"] * h + kn["mlp_gain"] * f, f


def _old_parallel(spec, p, x, a, kn):
    h = kn["attn_residual"] * x + a
    f = wiring.mlp(spec, p, wiring.ln1(spec, p, x))
    return h + kn["mlp_gain"] * f, f


def _old_parallel2(spec, p, x, a, kn):
    h = kn["attn_residual"] * x + a
    f = wiring.mlp(spec, p, wiring.ln2(spec, p, x))
    return h + kn["mlp_gain"] * f, f


def _old_llama(spec, p, x, a, kn):
    h = kn["attn_residual"] * x + a
    f = wiring.gated_mlp(spec, p, wiring.rms2(spec, p, h))
    return kn["mlp_residual"] * h + kn["mlp_gain"] * f, f


OLD = {
    "attention": (_old_attention, wiring.identity),
    "post_ln": (_old_post_ln, wiring.identity),
    "pre_ln": (_old_pre_ln, wiring.ln1),
    "parallel": (_old_parallel, wiring.ln1),
    "parallel2": (_old_parallel2, wiring.ln1),
    "llama": (_old_llama, wiring.rms1),
}


@pytest.mark.parametrize("kind", list(OLD))
def test_presets_trace_the_hand_written_programs(kind):
    """Exact invariant: each built-in kind, now a preset of the data, traces to the very jaxpr
    of its hand-written form (so every result is bit-identical), and its flags follow."""
    spec = BlockSpec(kind=kind, d_model=D, n_heads=4, **block.BLOCKS[kind].typical).validate()
    assert block.BLOCKS[kind].structure == PRESETS[kind] == spec.structure
    shapes = jax.eval_shape(lambda k: init_params(spec, k), jax.random.PRNGKey(0))
    p = {n: jnp.zeros(s.shape[1:], s.dtype) for n, s in shapes.items()}
    x = jnp.zeros((B, T, D))
    kn = knob_arrays(KN)
    old_rest, old_input = OLD[kind]
    for new, old, args in (
        (wiring.branches, old_rest, (x, x, kn)),
        (wiring.attn_input, old_input, (x,)),
    ):
        got = jax.make_jaxpr(lambda *a, f=new: f(spec, p, *a))(*args)
        want = jax.make_jaxpr(lambda *a, f=old: f(spec, p, *a))(*args)
        assert str(got) == str(want), (kind, new.__name__)
    k = block.BLOCKS[kind]
    assert k.norm_before_projections == (kind not in ("attention", "post_ln"))
    assert k.norm_after_attention == (kind == "post_ln")
    assert k.mlp_residual == (kind not in ("parallel", "parallel2"))
    assert k.gated == (kind == "llama")


# --------------------------------------------------------- an independent numpy forward
def _np_norm(x, g, b, norm, gain, bias, eps):
    if norm == "layernorm":
        x = x - x.mean(-1, keepdims=True)
    y = x / np.sqrt((x**2).mean(-1, keepdims=True) + eps)
    return y * (g if gain else 1.0) + (b if bias else 0.0)


def np_block(p, x, kn, *, attn_norm, mlp_norm, norm="layernorm", gain=True, bias=True,
             act="gelu", w_o=True, eps=1e-12):  # fmt: skip
    """One sequential block in float64, written from the formulas of simlab.core.wiring's
    docstring (norms at the places named, softmax attention without shifts or mask)."""
    p = {n: np.asarray(v, np.float64) for n, v in p.items()}
    x = np.asarray(x, np.float64)

    def nrm(leaf, u):
        return _np_norm(u, p[f"{leaf}_g"], p[f"{leaf}_b"], norm, gain, bias, eps)

    def at(branch, places, place, u):
        if place not in places:
            return u
        leaf = f"ln{branch}" if place == places[0] else f"ln{branch}_{place}"
        return nrm(leaf, u)

    a_in = at(1, attn_norm, "pre", x)
    q = (np.einsum("btd,dhk->bthk", a_in, p["wq"]) + p["bq"]) * kn["q_scale"]
    k = (np.einsum("btd,dhk->bthk", a_in, p["wk"]) + p["bk"]) * kn["k_scale"]
    v = np.einsum("btd,dhk->bthk", a_in, p["wv"]) + p["bv"]
    logits = np.einsum("bthk,bshk->bhts", q, k) / (math.sqrt(q.shape[-1]) * kn["temperature"])
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    o = np.einsum("bhts,bshk->bthk", w, v)
    if w_o:
        attn = np.einsum("bthk,hkd->btd", o, p["wo"]) + p["bo"]
    else:
        attn = o.reshape(*o.shape[:2], -1)  # the heads concatenated
    h = at(
        1,
        attn_norm,
        "post",
        kn["attn_residual"] * x + at(1, attn_norm, "out", kn["attn_gain"] * attn),
    )
    u = at(2, mlp_norm, "pre", h)
    g = u @ p["w1"] + p["b1"]
    if act == "relu":
        g = np.maximum(g, 0.0)
    else:  # GELU, tanh form
        g = 0.5 * g * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (g + 0.044715 * g**3)))
    f = at(2, mlp_norm, "out", g @ p["w2"] + p["b2"])
    return at(2, mlp_norm, "post", kn["mlp_residual"] * h + kn["mlp_gain"] * f), attn


def _params(spec, seed=0):
    """The spec's init (its init_var and bias_var), with the norms' gains and biases and the
    zero biases made random so that every term is exercised."""
    p = layer(init_params(spec, jax.random.PRNGKey(seed), jnp.float32), 0)
    r = np.random.default_rng(seed)
    for n in list(p):
        if n.endswith("_g"):
            p[n] = jnp.asarray(1.0 + 0.3 * r.standard_normal(p[n].shape), jnp.float32)
        elif n.endswith("_b") or (n[0] == "b" and spec.bias_variance(n) == 0 and n != "bo"):
            p[n] = jnp.asarray(0.3 * r.standard_normal(p[n].shape), jnp.float32)
    if spec.w_o:
        p["bo"] = jnp.asarray(0.3 * r.standard_normal(p["bo"].shape), jnp.float32)
    return p


def _check_layer(spec, p, np_kw, x64: bool):
    """layer_apply (plain path) against np_block: 1e-10 in float64, 5e-5 in float32 (the float32
    tolerance of tests/core/test_block.py: ~10x the measured error, far below any wrong term)."""
    x = np.random.default_rng(7).standard_normal((B, T, spec.d_model))
    with jax.enable_x64(x64):
        dt = jnp.float64 if x64 else jnp.float32
        pj = {n: jnp.asarray(v, dt) for n, v in p.items()}
        kn = knob_arrays(KN, dt)
        u = jnp.zeros((spec.n_heads, spec.d_head), dt)
        got = block.layer_apply(spec, pj, jnp.asarray(x, dt), kn, u, u, keep_mlp=True)
        y, attn = np_block(p, x, KN, eps=spec.ln_eps, **np_kw)
        tol = 1e-10 if x64 else 5e-5
        np.testing.assert_allclose(np.asarray(got.y), y, rtol=tol, atol=tol)
        np.testing.assert_allclose(np.asarray(got.attn), attn, rtol=tol, atol=tol)
        assert got.y.dtype == dt


PERI = dict(kind="pre_ln", d_model=D, n_heads=4, attn_norm="pre+out", mlp_norm="pre+out",
            init="fan_in")  # fmt: skip
HEAD = dict(kind="post_ln", d_model=D, n_heads=4, head_dim=10, init="fan_in")  # 4 x 10 != 24
GG = dict(
    kind="post_ln",
    d_model=D,
    n_heads=1,
    d_ff=D,
    activation="relu",
    init="fan_in",
    norm_gain=False,
    norm_bias=False,
    w_o=False,
    init_var={"wv": 0.2, "w1": 0.2, "w2": 0.2},
    bias_var={"bv": 4e-4, "b1": 4e-4, "b2": 4e-4},
)
CASES = {
    "peri_ln": (PERI, dict(attn_norm=("pre", "out"), mlp_norm=("pre", "out"))),
    "head_dim": (HEAD, dict(attn_norm=("post",), mlp_norm=("post",))),
    "gg": (
        GG,
        dict(
            attn_norm=("post",), mlp_norm=("post",), gain=False, bias=False, act="relu", w_o=False
        ),
    ),  # fmt: skip
}


@pytest.mark.parametrize("x64", [True, False], ids=["float64", "float32"])
@pytest.mark.parametrize("case", list(CASES))
def test_block_as_data_vs_numpy(case, x64):
    """Peri-LN, a head width other than D / H and Giorlandino & Goldt's layer, each declared as
    data on a built-in kind, against the numpy forward with the same weights."""
    fields, np_kw = CASES[case]
    spec = BlockSpec(**fields).validate()
    if case == "peri_ln":
        assert spec.structure.extra_leaves() == ("ln1_out", "ln2_out")
        assert spec.norm_before_projections and spec.norm_after_attention
    if case == "head_dim":
        assert spec.d_head == 10 and spec.n_heads * spec.d_head != spec.d_model
    _check_layer(spec, _params(spec), np_kw, x64)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_block_as_data_fast_paths(case):
    """The default Lab (hoisted, factored where allowed, tiled) equals the plain oracle Lab on
    each block declared as data, two layers deep (2e-5, simlab.testing's tolerance)."""
    spec = BlockSpec(**dict(CASES[case][0], depth=2)).validate()
    inputs = InputSpec(kind="gaussian", batch=2, length=16).validate()
    kn = knob_arrays(dict(KN, drift_norm=0.5, q_shift=0.3))
    out = []
    for fast in (True, False):
        lab = Lab(spec, inputs, hoist=fast, factor=fast, tiled=fast)
        state = jax.jit(lab.seed_state)(jax.random.PRNGKey(3))
        out.append(jax.jit(lab.point)(state, kn))
    for name in out[1]:
        np.testing.assert_allclose(out[0][name], out[1][name], rtol=2e-5, atol=2e-5, err_msg=name)


def test_gg_init_draws_the_declared_variances():
    """init_var and bias_var set each matrix's and bias's variance (chi^2 bounds at 6 sigma of
    the sample variance), W_O is exactly the identity without an output projection, the query
    and key biases stay 0, and the declared biases are drawn after every matrix: the matrices'
    draws are those of the same spec without bias_var."""
    d, L = 128, 3
    spec = BlockSpec(**dict(GG, d_model=d, d_ff=d, depth=L)).validate()
    p = init_params(spec, jax.random.PRNGKey(1))
    want = dict(
        wq=1.0 / d, wk=1.0 / d, wv=0.2 / d, w1=0.2 / d, w2=0.2 / d, bv=4e-4, b1=4e-4, b2=4e-4
    )
    for n, var in want.items():
        a = np.asarray(p[n], np.float64).ravel()
        assert abs(a.var() / var - 1.0) < 6.0 * math.sqrt(2.0 / a.size), n
    np.testing.assert_array_equal(
        np.asarray(p["wo"]).reshape(L, d, d), np.broadcast_to(np.eye(d), (L, d, d))
    )
    for n in ("bq", "bk", "bo"):
        assert not np.any(np.asarray(p[n])), n
    p0 = init_params(
        BlockSpec(**dict(GG, d_model=d, d_ff=d, depth=L, bias_var=None)).validate(),
        jax.random.PRNGKey(1),
    )
    for n in ("wq", "wk", "wv", "w1", "w2"):
        np.testing.assert_array_equal(np.asarray(p[n]), np.asarray(p0[n]), err_msg=n)


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        (dict(n_heads=4, head_dim=10, w_o=False), "block.w_o"),
        (dict(init_var={"wz": 1.0}), "block.init_var"),
        (dict(bias_var={"b1": -1.0}), "block.bias_var.b1"),
        (dict(attn_norm="pre+side"), "block.attn_norm"),
        (dict(kind="parallel", attn_norm="pre+post"), "block.attn_norm"),
        (dict(kind="parallel2", mlp_norm="post"), "block.mlp_norm"),
        (dict(norm="batchnorm"), "block.norm"),
        (dict(mlp_kind="moe"), "block.mlp_kind"),
        (dict(init="glorot", init_var={"wq": 1.0}), "block.init_var"),
        (dict(init_var={"w3": 1.0}), "block.init_var.w3"),
        (dict(n_heads=5), "block.n_heads"),
    ],
)
def test_structure_fields_refused_naming_the_field(fields, names):
    with pytest.raises(ConfigError, match=names.replace(".", r"\.")):
        BlockSpec(**dict(dict(d_model=D, n_heads=4), **fields)).validate()


def test_structure_fields_at_their_defaults_stay_out_of_the_fingerprint():
    """A config of every built-in kind hashes, under every fingerprint rule, without any of the
    new fields (they default to None / the preset), so committed sweeps keep their fingerprints;
    a field set away from its default enters it."""
    new = ("attn_norm", "mlp_norm", "norm", "norm_gain", "norm_bias", "mlp_kind", "w_o",
           "head_dim", "init_var", "bias_var")  # fmt: skip
    axes = [{"name": "temperature", "values": [1.0]}]
    for rule in engine_config.FINGERPRINT_RULES:
        for kind in block.BLOCKS:
            raw = {"block": {"kind": kind, "d_model": 16, "n_heads": 2}, "axes": axes}
            canon = engine_config.canonical(engine_config.load_config(raw).to_dict(), rule)
            assert not set(new) & set(canon["block"]), (rule, kind)
        raw = {"block": {"kind": "post_ln", "d_model": 16, "n_heads": 1, "w_o": False,
                         "bias_var": {"b1": 0.1, "bv": 0.2}}, "axes": axes}  # fmt: skip
        canon = engine_config.canonical(engine_config.load_config(raw).to_dict(), rule)
        assert canon["block"]["w_o"] is False
        assert canon["block"]["bias_var"] == [["b1", 0.1], ["bv", 0.2]]  # sorted: order-free


def test_the_structure_formula_reads_the_data():
    assert PRESETS["post_ln"].formula() == "h = LN(a x + Attn(x)); y = LN(m h + MLP(h))"
    spec = BlockSpec(**PERI).validate()
    assert spec.structure.formula() == "h = a x + LN(Attn(LN(x))); y = m h + LN(MLP(LN(h)))"
    assert PRESETS["parallel"].formula() == "y = a x + Attn(LN(x)) + MLP(LN(x))"
