"""The untrained Llama block (kind "llama": pre-RMSNorm with gains, SwiGLU MLP, grouped-query
attention, rotary embeddings on every dim) against an independent float64 numpy implementation
written here from the math (Touvron et al. 2023; HF's LlamaDecoderLayer), on the weights the lab
draws; Llama's init; the spec's refusals; `simlab sweep` from a TOML against the lab itself."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

import simlab
from simlab.cli import main
from simlab.core import block
from simlab.core.init import init_params, param_shapes
from simlab.core.knobs import knob_arrays
from simlab.core.lab import Lab
from simlab.core.spec import BlockSpec, InputSpec
from simlab.errors import ConfigError

B, T = 2, 9


def llama_spec(**kw) -> BlockSpec:
    base = dict(
        kind="llama",
        d_model=32,
        n_heads=4,
        n_kv_heads=2,
        d_ff=44,  # not a multiple of d_model
        activation="silu",
        causal=True,
        ln_eps=1e-5,
        rotary_pct=1.0,
        rotary_base=500.0,
        depth=2,
    )
    return BlockSpec(**{**base, **kw}).validate()


# ----------------------------------------------------------------------------- the numpy oracle
def np_rms(x, g, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


def np_rope(x_BTHK, base):
    """HF's apply_rotary_pos_emb on every dim: x cos + rotate_half(x) sin, angles t base^(-2i/K)."""
    k = x_BTHK.shape[-1]
    inv = base ** (-np.arange(0, k, 2, dtype=np.float64) / k)
    ang = np.arange(x_BTHK.shape[1], dtype=np.float64)[:, None] * inv[None, :]
    ang = np.concatenate([ang, ang], axis=-1)[None, :, None, :]  # (1, T, 1, K)
    half = k // 2
    rot = np.concatenate([-x_BTHK[..., half:], x_BTHK[..., :half]], axis=-1)
    return x_BTHK * np.cos(ang) + rot * np.sin(ang)


def np_silu(z):
    return z / (1.0 + np.exp(-z))


def np_llama_layer(p, x, s: BlockSpec, kn: dict):
    """One layer: h = a x + g_A Attn(RMS1 x), y = m h + g_M down(silu(gate z) * up z), z = RMS2 h;
    the keys and values of G key/value heads, each serving H / G consecutive query heads."""
    h_, g_, k_ = s.n_heads, s.kv_heads, s.d_head
    rep = h_ // g_
    xn = np_rms(x, p["ln1_g"], s.ln_eps)
    q = np.einsum("btd,dhk->bthk", xn, p["wq"]) + p["bq"]
    wk_G, wv_G = p["wk"][:, ::rep], p["wv"][:, ::rep]  # one head of each group
    kg = np.einsum("btd,dgk->btgk", xn, wk_G) + p["bk"][::rep]
    vg = np.einsum("btd,dgk->btgk", xn, wv_G) + p["bv"][::rep]
    head_of = [j // rep for j in range(h_)]
    k, v = kg[:, :, head_of], vg[:, :, head_of]
    q = kn["q_scale"] * np_rope(q, s.rotary_base)
    k = kn["k_scale"] * np_rope(k, s.rotary_base)
    logits = np.einsum("bthk,bshk->bhts", q, k) / (math.sqrt(k_) * kn["temperature"])
    logits = np.where(np.tril(np.ones((x.shape[1],) * 2, bool)), logits, -np.inf)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    attn = np.einsum("bhts,bshk->bthk", w, v)
    attn = np.einsum("bthk,hkd->btd", attn, p["wo"]) + p["bo"]
    h = kn["attn_residual"] * x + kn["attn_gain"] * attn
    z = np_rms(h, p["ln2_g"], s.ln_eps)
    f = (np_silu(z @ p["w1"] + p["b1"]) * (z @ p["w3"])) @ p["w2"] + p["b2"]
    return kn["mlp_residual"] * h + kn["mlp_gain"] * f


KNOBS = dict(
    q_scale=1.3,
    k_scale=0.8,
    temperature=0.7,
    attn_residual=0.9,
    mlp_residual=1.1,
    attn_gain=1.2,
    mlp_gain=0.6,
)


@pytest.mark.parametrize("init", ["bert", "fan_in"])
def test_block_matches_numpy_float64_at_the_labs_init(init):
    """Every layer's output of a depth-2 stack at the weights the lab draws (simlab.core.init;
    "bert": Llama's N(0, 0.02^2); "fan_in": N(0, 1/fan_in), so attention and MLP are far from
    linear)."""
    s = llama_spec(init=init)
    with jax.enable_x64(True):
        params = init_params(s, jax.random.PRNGKey(3))
        x = np.random.default_rng(0).standard_normal((B, T, s.d_model))
        z = np.zeros((s.depth, s.n_heads, s.d_head))
        _, ys = block.stack_apply(s, params, x, knob_arrays(KNOBS), z, z, observe=lambda l: l.y)
        p64 = {n: np.asarray(a, np.float64) for n, a in params.items()}
        assert {n: a.dtype for n, a in params.items()} == {n: np.float64 for n in params}
    ref = x
    for i in range(s.depth):
        ref = np_llama_layer({n: a[i] for n, a in p64.items()}, ref, s, KNOBS)
        np.testing.assert_allclose(np.asarray(ys[i]), ref, rtol=0, atol=1e-12 * np.abs(ref).max())


def test_llamas_init():
    """Llama's init (LlamaPreTrainedModel._init_weights at initializer_range 0.02): every matrix
    N(0, 0.02^2), RMSNorm gains 1, biases 0; the keys and values of a group's query heads are
    one head's, and different groups and the query heads differ."""
    s = llama_spec(d_model=64, d_ff=100, depth=1)
    p = {n: np.asarray(a[0], np.float64) for n, a in init_params(s, jax.random.PRNGKey(0)).items()}
    for n in ("wq", "wo", "w1", "w2", "w3", "wk", "wv"):
        a = p[n][:, ::2] if n in ("wk", "wv") else p[n]  # the drawn key/value heads
        assert abs(a.std() / 0.02 - 1) < 0.05 and abs(a.mean()) < 0.002, (n, a.std())
    for n in ("ln1_g", "ln2_g"):
        assert np.all(p[n] == 1.0)
    for n in ("bq", "bk", "bv", "bo", "b1", "b2", "ln1_b", "ln2_b"):
        assert np.all(p[n] == 0.0)
    for n in ("wk", "wv"):
        np.testing.assert_array_equal(p[n][:, 0], p[n][:, 1])
        np.testing.assert_array_equal(p[n][:, 2], p[n][:, 3])
        assert not np.any(p[n][:, 0] == p[n][:, 2])
    assert not np.any(p["wq"][:, 0] == p["wq"][:, 1])


def test_normal_init_is_hfs_initializer_range():
    """init "normal" draws every matrix N(0, init_sigma^2) (HF's initializer_range): at 0.02 it
    is the "bert" draw bit for bit (the same noise times the same sigma), at 0.05 the same
    draw times 2.5; gains and biases as "bert"."""
    key = jax.random.PRNGKey(4)
    bert = init_params(llama_spec(init="bert"), key)
    same = init_params(llama_spec(init="normal", init_sigma=0.02), key)
    wide = init_params(llama_spec(init="normal", init_sigma=0.05), key)
    for n in bert:
        np.testing.assert_array_equal(np.asarray(same[n]), np.asarray(bert[n]), err_msg=n)
        want = np.asarray(bert[n], np.float64) * (2.5 if n[0] == "w" else 1.0)
        np.testing.assert_allclose(np.asarray(wide[n], np.float64), want, rtol=1e-6, err_msg=n)


def test_other_kinds_draw_as_before():
    """Adding the kind moved no other spec's draws: a post-LN spec has no w3 and its wk is the
    (D, H, K) draw that follows wq in the one threefry call."""
    s = BlockSpec(kind="post_ln", d_model=16, n_heads=4, depth=1)
    assert s.gated_mlp is False and s.kv_heads == 4
    assert list(param_shapes(s)) == ["wq", "wk", "wv", "wo", "w1", "w2"]
    assert list(param_shapes(llama_spec())) == ["wq", "wk", "wv", "wo", "w1", "w2", "w3"]
    assert param_shapes(llama_spec())["wk"] == (2, 32, 2, 8)


@pytest.mark.parametrize(
    "fields, field",
    [
        (dict(n_kv_heads=3), "block.n_kv_heads"),
        (dict(n_kv_heads=8), "block.n_kv_heads"),
        (dict(n_kv_heads=0), "block.n_kv_heads"),
        (dict(qk_weights="tied"), "block.n_kv_heads"),
        (dict(activation="swiglu"), "block.activation"),
    ],
)
def test_spec_refusals_name_the_field(fields, field):
    with pytest.raises(ConfigError) as e:
        llama_spec(**fields)
    assert str(e.value).startswith(field) and "\n" not in str(e.value)


TOML = """
[block]
kind = "llama"
d_model = 16
n_heads = 4
n_kv_heads = 2
d_ff = 24
activation = "silu"
causal = true
rotary_pct = 1.0
rotary_base = 500.0
ln_eps = 1e-5
depth = 2
init = "fan_in"
[inputs]
kind = "gaussian"
batch = 2
length = 8
[[axes]]
name = "lambda"
knobs = ["q_scale", "k_scale"]
values = [1.0, 4.0]
[sweep]
seeds = 2
"""


@pytest.mark.slow
def test_simlab_sweep_from_a_toml_equals_the_plain_lab(tmp_path):
    """`simlab sweep` on a TOML with kind "llama" stores, per seed and lambda, what the plain
    Lab (no hoisting, no tiling: the oracle) computes at the same seed key (one jitted call per
    seed over both lambdas: one compile, not one per primitive as op-by-op)."""
    cfg = tmp_path / "llama.toml"
    cfg.write_text(TOML)
    assert main(["sweep", str(cfg), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    res = simlab.load(tmp_path / "run")
    spec = llama_spec(d_model=16, d_ff=24, init="fan_in")
    lab = Lab(spec, InputSpec(kind="gaussian", batch=2, length=8).validate())
    lab = Lab(spec, lab.inputs, lab.metric_names, hoist=False, factor=False, tiled=False)
    kns = [knob_arrays(dict(q_scale=lam, k_scale=lam)) for lam in (1.0, 4.0)]
    kn = jax.tree.map(lambda *a: jax.numpy.stack(a), *kns)
    point = jax.jit(jax.vmap(lab.point, in_axes=(None, 0)))
    for s in range(2):
        out = point(lab.seed_state(jax.random.fold_in(jax.random.PRNGKey(0), s)), kn)
        for i in range(2):
            for m in ("attn_entropy", "out_cos"):
                np.testing.assert_allclose(res[m][i, s], out[m][i], rtol=2e-5, atol=2e-6)


def test_closed_forms_refuse_the_kind():
    """The closed forms that assume projections of the tokens themselves, a LayerNorm or a
    plain act(h W_1) W_2 MLP refuse kind "llama" and SiLU in one line naming the field."""
    from simlab import theory

    cfg = {"block": {"kind": "llama", "d_model": 16, "n_heads": 4, "init": "bert"}}
    cfg["inputs"] = {"kind": "embedding", "length": 8}
    silu = dict(activation="silu")
    calls = [
        (lambda: theory.paper_iso_entropy_curve(cfg), "block.kind"),
        (lambda: theory.paper_freezing_line_curve(cfg), "block.kind"),
        (lambda: theory.signal_propagation("llama", 2, 8, 2, 1.0), "block.kind"),
        (lambda: theory.signal_propagation("pre_ln", 2, 8, 2, 1.0, **silu), "block.activation"),
    ]
    for call, field in calls:
        with pytest.raises(ConfigError) as e:
            call()
        assert str(e.value).startswith(field) and "\n" not in str(e.value)


def test_covariates_leave_out_the_linear_mlp_terms():
    """A gated MLP has no linear part, so the covariates of A = W_1 W_2 / 2 (mlp_drift_dot,
    mlp_trace) are left out; mlp_shared = |1^T W_2|^2 / F and the attention terms stay, from
    the grouped weights (numpy float64)."""
    s = llama_spec(d_model=16, d_ff=24, depth=2)
    lab = Lab(s, InputSpec(kind="gaussian", batch=B, length=T).validate())
    state = lab.seed_state(jax.random.PRNGKey(1))
    cov = lab.covariates(state)
    assert set(cov) == {"drift_vo", "drift_vo_dot", "vo_iso", "vo_trace", "drift_q", "mlp_shared"}
    w2 = np.asarray(state["params"]["w2"], np.float64)
    np.testing.assert_allclose(cov["mlp_shared"], (w2.sum(1) ** 2).sum(-1) / 24, rtol=1e-12)
    wv, wo = (np.asarray(state["params"][n], np.float64) for n in ("wv", "wo"))
    vo = np.einsum("ldhk,lhke->lde", wv, wo)
    np.testing.assert_allclose(cov["vo_trace"], np.trace(vo, axis1=1, axis2=2) / 16, rtol=1e-10)
