"""Attention-pattern clamps (simlab.core.patterns, BlockSpec.pattern): the closed forms against
float64 numpy weights built from the definition, the exact invariants (shared and token
patterns share their row entropy at equal beta; beta = 0 is uniform), the fast path against the
plain oracle Lab on every path, finite metrics at the extreme knobs, the knob rules, and that
the fast path never forms a (B, H, T, S) array; the "other" clamp (target the previous key)
against its definition, the token clamp's rows, its fast and plain paths and a numpy block.
The layer against the numpy block oracle with the same weights: tests/core/test_block.py,
test_pattern_layer_vs_numpy."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from simlab import testing
from simlab.core import block, patterns, tiled
from simlab.core.init import init_params
from simlab.core.inputs import INPUTS
from simlab.core.knobs import knob_arrays, knob_defaults
from simlab.core.lab import Lab
from simlab.core.metrics import METRICS
from simlab.core.spec import BlockSpec, InputSpec
from simlab.errors import ConfigError

from conftest import np_gelu_tanh, np_layernorm, np_pattern_weights

BETAS = (0.0, 0.3, 1.0, 4.0, 30.0, 1e8)
CLAMPED = ("uniform", "shared", "token")


def np_entropy(w):
    return -np.sum(np.where(w > 0, w * np.log(np.where(w > 0, w, 1.0)), 0.0), axis=-1)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("pattern", CLAMPED)
def test_closed_forms_vs_float64_weights(pattern, causal):
    """Under x64: the full weights equal the definition, each row sums to 1 and puts its
    largest weight on the target; the closed-form entropy log(1 + r) + (n - 1) o beta and
    maximum p equal -sum w log w and max_j w of those weights, to float64 rounding, for beta
    from 0 to 1e8 (where e^beta overflows: the closed form never forms it)."""
    t = 9
    with jax.enable_x64(True):
        for beta in BETAS:
            b = jnp.float64(beta)
            w = np.asarray(patterns.weights(pattern, b, 1, 1, t, t, causal, jnp.float64))[0, 0]
            p, _, h = (
                np.asarray(a)
                for a in patterns.row_stats(
                    patterns.beta(pattern, {"pattern_beta": b}),
                    patterns.n_keys(t, t, causal, jnp.float64),
                )
            )
            if beta < 700:  # the definition needs e^beta
                np.testing.assert_allclose(w, np_pattern_weights(pattern, beta, t, causal), 1e-14)
            np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-14)
            np.testing.assert_allclose(h, np_entropy(w), rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(p, w.max(-1), rtol=1e-14)
            if pattern == "uniform" or beta == 0:
                n = np.arange(1, t + 1) if causal else np.full(t, t)
                np.testing.assert_allclose(h, np.log(n), rtol=1e-14)
            else:
                target = np.arange(t) if pattern == "token" else np.zeros(t, int)
                assert np.all(w[np.arange(t), target] == w.max(-1))


def test_attend_closed_form_vs_full_weights():
    """The O(T D) A V W_O (mean of the values plus the target's correction, cumulative under the
    causal mask) equals the full weights' (w V) W_O in float64 numpy, for every clamp."""
    r = np.random.default_rng(0)
    b, t, h, k, d = 3, 7, 2, 3, 5
    v = r.standard_normal((b, t, h, k))
    wo = r.standard_normal((h, k, d))
    with jax.enable_x64(True):
        for pattern in CLAMPED:
            for causal in (False, True):
                for beta in (0.0, 0.7, 5.0):
                    out, _, _ = patterns.attend(
                        pattern, jnp.float64(0.0 if pattern == "uniform" else beta), v, wo, causal
                    )
                    w = np_pattern_weights(pattern, beta, t, causal)
                    want = np.einsum("ts,bshk,hkd->btd", w, v, wo)
                    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------------ the Lab
NAMES = tuple(METRICS)  # every metric, the decomposition ones included


# what reads the attention sub-layer itself: its output, its rows' statistics, its weights
ATTENTION_FIELDS = {"attn", "row_entropy", "row_max", "q_mean", "k_mean", "full"}


def names_for(kind: str, every: bool = True) -> tuple[str, ...]:
    """Every metric an input kind can have (those splitting by token type need its ids); not
    `every`: of those, the default metrics and every metric reading the attention sub-layer."""
    names = [n for n in NAMES if INPUTS[kind].ids is not None or "ids" not in METRICS[n].reads]
    if not every:
        names = [n for n in names if METRICS[n].default or ATTENTION_FIELDS & set(METRICS[n].reads)]
    return tuple(names)


# Every metric on a declared sample of the cases (the two post-LN ones, with the shared and
# token clamps: the latter on embedding inputs, so the metrics by token type too); on the other
# four the default metrics and those of the attention sub-layer (it was every metric on every
# case, then on Llama's too; the metrics of the layer input and output besides the defaults
# are functions of the same fields on every pattern, checked through every path and on Llama
# in tests/core/test_metrics.py::test_decomposition_metrics_conform)
CASES = [
    testing.Case(
        testing.small_block(kind, causal=causal, qk_norm=qk, pattern=pattern),
        testing.small_inputs(inputs),
        names_for(inputs, every),
    )
    for kind, causal, qk, pattern, inputs, every in (
        ("post_ln", False, "none", "shared", "gaussian", True),
        ("post_ln", True, "none", "token", "embedding", True),
        ("attention", False, "none", "uniform", "gaussian", False),
        ("pre_ln", True, "layernorm", "shared", "gaussian", False),
        ("parallel", False, "none", "token", "rademacher", False),
        ("llama", True, "none", "other", "embedding", False),  # RMSNorm, GQA, rotary, gated MLP
    )
]


@functools.cache
def path_and_extremes():
    """The paths at the points and the default path at the extremes, one compiled call for the
    three tests below (simlab.testing.path_and_extreme_outputs)."""
    return testing.path_and_extreme_outputs(CASES)


@pytest.mark.slow
def test_fast_paths_equal_the_plain_oracle():
    """The default Lab (hoisted projections where the block allows, the closed-form A V,
    token-wise work in tiles; never factored: a clamp has no logits) against the plain oracle
    Lab (full clamped weights), depth 2, every metric, at points that move beta, the gains and
    the drift: within simlab.testing.PATH_TOL. At beta 1.5 and 6 the shared and token clamps
    really are sharper than at 0 (not vacuous)."""
    outs, _ = path_and_extremes()
    for case, out in zip(CASES, outs):
        lab = case.lab(**testing.PATHS["default"])
        assert not lab.factor and lab.hoist == (case.block.kind in ("post_ln", "attention"))
        for m, arr in out["default"].items():
            np.testing.assert_allclose(
                arr,
                out["plain"][m],
                rtol=testing.PATH_TOL,
                atol=testing.PATH_TOL,
                err_msg=f"{case.name} {case.block.pattern}: {m}",
            )
        h = out["plain"]["attn_entropy"][:, 0]
        if case.block.pattern == "uniform":
            np.testing.assert_allclose(h, 1.0, rtol=1e-6)
        else:
            assert h[0] > h[1] + 0.01 > h[2] + 0.02, h


@pytest.mark.slow
def test_float64_same_sample():
    """Under jax.enable_x64 the clamped Lab draws the same sample, computes in float64 and
    agrees with float32 within simlab.testing.X64_TOL (the float32 run: the default path's of
    path_and_extremes, the same labs at the same points, compiled once for three tests)."""
    cases = CASES[:2]
    f32 = [out["default"] for out in path_and_extremes()[0][:2]]
    for case, a, b in zip(cases, f32, testing.x64_outputs(cases), strict=True):
        testing.assert_x64_agrees(case, a, b)
        testing.assert_really_float64(case)


@pytest.mark.slow
def test_extreme_knobs_finite_and_in_bounds():
    """Every metric finite and inside its bounds at the corners of the promised ranges, with
    pattern_beta in {0, 1e8} (float32: e^-1e8 = 0, one-hot rows, no 0 * inf)."""
    for case, out in zip(CASES, path_and_extremes()[1]):
        assert any(p.get("pattern_beta") == 1e8 for p in testing.extreme_points(case)) == (
            case.block.pattern != "uniform"
        )
        testing.assert_finite_and_in_bounds(case, out)


@pytest.mark.slow
def test_shared_and_token_differ_only_in_sharing():
    """Same seed, same beta: the shared and token clamps have bit-identical attn_entropy and
    attn_max (one closed form); at beta = 0 both equal the uniform clamp; sharpening the shared
    pattern makes the attention output anisotropic, sharpening the token one does not."""
    block = dict(kind="attention", d_model=16, n_heads=4, mlp=False, init="fan_in")
    labs = {
        p: Lab(BlockSpec(**block, pattern=p), InputSpec(kind="gaussian", batch=2, length=16))
        for p in CLAMPED
    }
    betas = jnp.asarray([0.0, 1.0, 3.0, 8.0])
    pts = {k: jnp.broadcast_to(v, betas.shape) for k, v in knob_arrays({}).items()}
    pts["pattern_beta"] = betas
    out = jax.jit(
        lambda: {
            p: jax.vmap(lab.point, in_axes=(None, 0))(lab.seed_state(jax.random.PRNGKey(3)), pts)
            for p, lab in labs.items()
        }
    )()
    for m in ("attn_entropy", "attn_max"):
        np.testing.assert_array_equal(out["shared"][m], out["token"][m])
    for p in ("shared", "token"):
        for m in ("attn_cos", "attn_cos_within", "out_cos"):
            np.testing.assert_allclose(out[p][m][0], out["uniform"][m][0], rtol=1e-6, atol=1e-6)
    assert out["shared"]["attn_cos_within"][-1] > 0.9 > 0.2 > out["token"]["attn_cos_within"][-1]


def test_knob_rules():
    """pattern_beta is inert (sweeping or fixing it refused) for the softmax and the uniform
    clamp; temperature is inert for every clamp (it only scales the logits); q_scale keeps its
    effect (the q statistics); a bad pattern is a ConfigError naming the field."""
    i = InputSpec(kind="gaussian", batch=2, length=8)
    soft = Lab(BlockSpec(d_model=16, n_heads=4), i)
    with pytest.raises(ConfigError, match="pattern_beta.*'softmax'"):
        soft.check_knobs(["pattern_beta"], {})
    with pytest.raises(ConfigError, match="pattern_beta.*'uniform'"):
        Lab(BlockSpec(d_model=16, n_heads=4, pattern="uniform"), i).check_knobs(
            [], {"pattern_beta": 1.0}
        )
    tok = Lab(BlockSpec(d_model=16, n_heads=4, pattern="token"), i)
    tok.check_knobs(["pattern_beta", "q_scale", "attn_gain", "mlp_gain"], {})
    with pytest.raises(ConfigError, match="temperature.*replaces the softmax"):
        tok.check_knobs(["temperature"], {})
    with pytest.raises(ConfigError, match="block.pattern: 'sharp' is not one of"):
        BlockSpec(pattern="sharp").validate()
    with pytest.raises(ConfigError, match="pattern_beta: -1.0 is outside"):
        from simlab.core.knobs import check_knob

        check_knob("pattern_beta", -1.0)


def _shapes(jaxpr, out):
    for eqn in jaxpr.eqns:
        out.extend(tuple(v.aval.shape) for v in eqn.outvars if hasattr(v.aval, "shape"))
        for p in eqn.params.values():
            for sub in p if isinstance(p, (tuple, list)) else (p,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    _shapes(inner, out)
    return out


@pytest.mark.parametrize("pattern", CLAMPED)
def test_fast_path_forms_no_query_key_array(pattern):
    """The traced program of a default-Lab point with a clamp has no array with a query axis
    and a key axis (T = S = 24, a size no other dimension has): A V comes from the closed form;
    the softmax path (the control) does form them, tile by tile."""
    t = 24
    shapes = {}
    for pat in (pattern, "softmax"):
        lab = Lab(
            BlockSpec(kind="post_ln", d_model=16, n_heads=4, mlp_ratio=2, causal=True, pattern=pat),
            InputSpec(kind="gaussian", batch=2, length=t),
        )
        state = jax.eval_shape(lab.seed_state, jax.random.PRNGKey(0))
        jaxpr = jax.make_jaxpr(lab.point)(state, knob_arrays({}))
        shapes[pat] = _shapes(jaxpr.jaxpr, [])
    assert not [s for s in shapes[pattern] if s.count(t) >= 2], pattern
    assert [s for s in shapes["softmax"] if s.count(t) >= 2]


# ------------------------------------------------------------------------------ the registry
def test_every_clamp_conforms():
    """simlab.testing's closed-form check (targets attended, full weights against numpy, the
    closed-form entropy, maximum and A V in float64) for every registered clamp."""
    clamps = [n for n, p in patterns.PATTERNS.items() if not p.reads_logits]
    assert set(CLAMPED) <= set(clamps)
    for name in clamps:
        testing.assert_clamp_closed_forms(name)


def test_a_registered_pattern_is_read_everywhere():
    """A pattern registered after import (as a plugin would) validates in a BlockSpec, gets the
    knob rules from its entry (pattern_beta acts, temperature is inert, the uniform clamp's
    message names it), is never factored, and passes the closed-form check; malformed entries
    are refused naming the field."""
    from simlab.core.knobs import inert_knobs

    def mirror(t, s, causal):  # t_i = S - 1 - i, or i itself under the causal mask
        return np.arange(t) if causal else s - 1 - np.arange(t)

    entry = patterns.Pattern("mirror", "p_i on key S - 1 - i", target=mirror, sharpens=True)
    patterns.register_pattern(entry)
    try:
        i = InputSpec(kind="gaussian", batch=2, length=8)
        spec = BlockSpec(d_model=16, n_heads=4, pattern="mirror").validate()
        inert = inert_knobs(spec, i, ())
        assert "pattern_beta" not in inert and "replaces the softmax" in inert["temperature"]
        uniform = inert_knobs(BlockSpec(d_model=16, n_heads=4, pattern="uniform"), i, ())
        assert (
            "'shared', 'token'" in uniform["pattern_beta"] and "'mirror'" in uniform["pattern_beta"]
        )
        assert not Lab(spec, i).factor
        testing.assert_clamp_closed_forms("mirror")
    finally:
        patterns.PATTERNS.unregister("mirror")
    with pytest.raises(ConfigError, match="block.pattern: 'mirror' is not one of"):
        BlockSpec(pattern="mirror").validate()
    for bad, field in (
        (patterns.Pattern("bad", "x", sharpens=True), "sharpens"),
        (patterns.Pattern("bad", "x", reads_logits=True, target=mirror), "target"),
        (patterns.Pattern("bad", ""), "formula"),
    ):
        with pytest.raises(ConfigError, match=f"attention pattern 'bad': {field}"):
            patterns.register_pattern(bad)
    assert "bad" not in patterns.PATTERNS


# ------------------------------------------------------------------------------ "other"
def test_other_targets_the_previous_key():
    """Exact invariants of the "other" clamp (float64 weights, T = 9): row i puts p_i on key
    i - 1 (row 0 on key S - 1, or on key 0, its only key, under the causal mask), and that is the
    row's maximum; without the mask the targets are a permutation of the keys with no fixed
    point (each key copied by exactly one query, never by itself); at equal beta every row holds
    exactly the token clamp's weights (sorted), so the entropy and maximum are the token's."""
    t = 9
    rows = np.arange(t)
    with jax.enable_x64(True):
        for causal in (False, True):
            target = np.r_[0 if causal else t - 1, rows[:-1]]
            if not causal:
                assert sorted(target) == list(rows) and np.all(target != rows)
            n = patterns.n_keys(t, t, causal, jnp.float64)
            for beta in (0.0, 0.7, 5.0, 40.0):
                b = jnp.float64(beta)
                w, tok = (
                    np.asarray(patterns.weights(name, b, 1, 1, t, t, causal, jnp.float64))[0, 0]
                    for name in ("other", "token")
                )
                p = np.asarray(patterns.row_stats(b, n)[0])
                np.testing.assert_array_equal(w[rows, target], p)
                np.testing.assert_array_equal(w.max(-1), p)
                np.testing.assert_array_equal(np.sort(w, -1), np.sort(tok, -1))
                np.testing.assert_allclose(np_entropy(w), np_entropy(tok), rtol=1e-14, atol=0)
                np.testing.assert_allclose(
                    w, np_other_weights(beta, t, causal), rtol=1e-14, atol=1e-300
                )


def np_other_weights(beta, t_len, causal):
    """(T, S) weights of the "other" clamp from its definition: e^beta / (e^beta + n - 1) on key
    i - 1 (key S - 1 for row 0, or key 0 under the causal mask), 1 / (e^beta + n - 1) on each
    other attended key."""
    w = np.zeros((t_len, t_len))
    for i in range(t_len):
        n = i + 1 if causal else t_len
        target = i - 1 if i > 0 else (0 if causal else t_len - 1)
        for j in range(n):
            w[i, j] = (math.exp(beta) if j == target else 1.0) / (math.exp(beta) + n - 1)
    return w


def np_other_block(p, x, kn, causal, eps):
    """One post-LN block with MLP (GELU, tanh form) and the "other" clamp, in float64 numpy:
    h = LN1(a x + g_A Attn(x)), y = LN2(m h + g_M MLP(h)), Attn(x) = sum_h W V_h W_O,h + b_O."""
    v = np.einsum("btd,dhk->bthk", x, p["wv"]) + p["bv"]
    w = np_other_weights(kn["pattern_beta"], x.shape[1], causal)
    attn = np.einsum("ts,bshk,hkd->btd", w, v, p["wo"]) + p["bo"]
    h = np_layernorm(kn["attn_residual"] * x + kn["attn_gain"] * attn, p["ln1_g"], p["ln1_b"], eps)
    f = np_gelu_tanh(h @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    y = np_layernorm(kn["mlp_residual"] * h + kn["mlp_gain"] * f, p["ln2_g"], p["ln2_b"], eps)
    return y, attn


@pytest.mark.parametrize("causal", [False, True])
def test_other_layer_paths_and_numpy_oracle(causal):
    """The "other" clamp through block.layer_apply (post-LN, MLP, random biases and LayerNorm
    gains, knobs away from their defaults): the fast path (closed-form A V, vo rolled by one key)
    equals the plain path (full weights) and the float64 numpy block np_other_block within 5e-5
    in float32 (as tests/core/test_block.py); under jax.enable_x64 the paths agree within 1e-12
    and match numpy within 1e-10; the row entropy and maximum of both paths are those of the
    numpy weights."""
    b, t, d, h = 2, 6, 8, 2
    spec = BlockSpec(
        kind="post_ln", d_model=d, n_heads=h, mlp_ratio=2, causal=causal, pattern="other"
    ).validate()
    shapes = jax.eval_shape(lambda k: init_params(spec, k), jax.random.PRNGKey(0))
    r = np.random.default_rng(7)
    p64 = {n: r.standard_normal(sd.shape[1:]) / math.sqrt(d) for n, sd in shapes.items()}
    p64["ln1_g"] += 1.0
    p64["ln2_g"] += 1.0
    x64 = r.standard_normal((b, t, d))
    u64 = r.standard_normal((2, h, d // h))
    kn = dict(pattern_beta=1.3, attn_residual=0.7, attn_gain=1.2, mlp_residual=0.9, mlp_gain=0.8)
    y_np, attn_np = np_other_block(p64, x64, dict(knob_defaults(), **kn), causal, spec.ln_eps)
    w_np = np_other_weights(1.3, t, causal)
    ent_np, max_np = np_entropy(w_np), w_np.max(-1)
    tilings = (None, tiled.choose_tiling(b, t, h, t, budget=2 * h * t))
    for dtype, tol, tol_np in ((jnp.float32, 5e-5, 5e-5), (jnp.float64, 1e-12, 1e-10)):
        with jax.enable_x64(dtype == jnp.float64):
            pa = {n: jnp.asarray(a, dtype) for n, a in p64.items()}
            args = (pa, jnp.asarray(x64, dtype), knob_arrays(kn, dtype))
            run = jax.jit(block.layer_apply, static_argnums=(0, 6))
            plain, fast = (run(spec, *args, *jnp.asarray(u64, dtype), tl) for tl in tilings)
            assert fast.full is None and plain.full is not None
            for name in ("y", "attn", "row_entropy", "row_max"):
                np.testing.assert_allclose(
                    getattr(fast, name), getattr(plain, name), rtol=tol, atol=tol, err_msg=name
                )
            for lay, where in ((plain, "plain"), (fast, "fast")):
                for name, want in (
                    ("y", y_np),
                    ("attn", attn_np),
                    ("row_entropy", np.broadcast_to(ent_np, (b, h, t))),
                    ("row_max", np.broadcast_to(max_np, (b, h, t))),
                ):
                    np.testing.assert_allclose(
                        np.asarray(getattr(lay, name), np.float64),
                        want,
                        rtol=tol_np,
                        atol=tol_np,
                        err_msg=f"{where} {name} {dtype.__name__}",
                    )


def test_other_knob_rules():
    """pattern_beta acts on "other" as on "token" (sweepable), temperature is inert (it only
    scales the logits), and the uniform clamp's refusal names it among the sharpening clamps."""
    i = InputSpec(kind="gaussian", batch=2, length=8)
    other = Lab(BlockSpec(d_model=16, n_heads=4, pattern="other"), i)
    other.check_knobs(["pattern_beta", "q_scale", "attn_gain", "mlp_gain"], {})
    with pytest.raises(ConfigError, match="temperature.*'other' replaces the softmax"):
        other.check_knobs(["temperature"], {})
    with pytest.raises(ConfigError, match="'shared', 'token' and 'other' clamps"):
        Lab(BlockSpec(d_model=16, n_heads=4, pattern="uniform"), i).check_knobs(
            ["pattern_beta"], {}
        )


@pytest.mark.slow
def test_other_conforms():
    """simlab.testing's one-call check on the "other" clamp: closed forms, every path against
    the plain oracle, float64 on the same sample, the extreme knobs (chunk identity: the
    registry loops)."""
    testing.check_pattern("other", identity=False)
