"""experiments/minilm_counterfactual.py (docs/gallery.md, "On a trained model"): its measures
(the registered metrics) against float64 numpy definitions; its layer program (a knob, a clamp,
the layers above, the 2- and 8-window pools) against a float64 numpy BERT layer on the tiny
fixture; the clamps' beta from an entropy against an explicit row; the lab's own init of
minilm_layers.py against numpy; the docs carry the block minilm_verdicts.py prints; and (where
the model is installed: `-m model`) one layer and seed recomputed."""

from __future__ import annotations

import importlib.util
import pathlib
from math import erf

import jax
import numpy as np
import pytest

from simlab.checkpoints import load, models

from conftest import doc_block, experiment_script

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "figures" / "data"
FIXTURES = ROOT / "tests" / "fixtures" / "checkpoints"
HAVE_MODEL = models.installed("all-minilm-l6-v2") and importlib.util.find_spec("tokenizers")


def _np_layer(x, p, eps, lam=1.0, temp=1.0, attn_gain=1.0, mlp_gain=1.0, head=None, clamp=None):
    """One post-LN BERT layer in float64 numpy, lab layout; head: that head's weights 1 / T;
    clamp: ("uniform", 0) or ("token", beta), every head's weights replaced."""
    p = {k: np.asarray(v, np.float64) for k, v in p.items()}

    def ln(z, g, b):
        mu = z.mean(-1, keepdims=True)
        return (z - mu) / np.sqrt(((z - mu) ** 2).mean(-1, keepdims=True) + eps) * g + b

    q = np.einsum("btd,dhk->bthk", x, p["wq"]) + p["bq"]
    k = np.einsum("btd,dhk->bthk", x, p["wk"]) + p["bk"]
    v = np.einsum("btd,dhk->bthk", x, p["wv"]) + p["bv"]
    s = lam * lam * np.einsum("bthk,bshk->bhts", q, k) / (np.sqrt(q.shape[-1]) * temp)
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    t = x.shape[1]
    if head is not None:
        w[:, head] = 1.0 / t
    if clamp is not None:
        name, beta = clamp
        row = np.full((t, t), 1.0 / t)
        if name == "token":
            e = np.exp(beta)
            row = np.where(np.eye(t, dtype=bool), e, 1.0) / (e + t - 1)
        w = np.broadcast_to(row, w.shape).copy()
    o = np.einsum("bhts,bshk,hkd->btd", w, v, p["wo"]) + p["bo"]
    h = ln(x + attn_gain * o, p["ln1_g"], p["ln1_b"])
    g = h @ p["w1"] + p["b1"]
    g = g * 0.5 * (1.0 + np.vectorize(erf)(g / np.sqrt(2.0)))
    m = g @ p["w2"] + p["b2"]
    ent = (-np.sum(w * np.log(w), -1)).mean((0, 2)) / np.log(t)
    return ln(h + mlp_gain * m, p["ln2_g"], p["ln2_b"]), ent


def _layer(ck, i):
    return {n: a[i] for n, a in ck.params.items()}


def _np_measures(h):
    """MEASURES of h (B, T, D) in float64 numpy from their definitions (docs/metrics.md):
    every ordered pair of distinct tokens visited (global, between two sequences, within one);
    the centred covariance (1/n) sum (x - xbar)(x - xbar)^T's participation ratio
    (tr C)^2 / tr(C^2), IsoScore (PR - 1) / (D - 1), top eigenvalue's share; Roy & Vetterli's
    effective rank exp(H(sigma / sum sigma)) of the centred tokens' singular values."""
    h = np.asarray(h, np.float64)
    b, t, d = h.shape
    u = h / np.linalg.norm(h, axis=-1, keepdims=True)
    seq = np.repeat(np.arange(b), t)
    g = u.reshape(-1, d) @ u.reshape(-1, d).T
    off = ~np.eye(b * t, dtype=bool)
    same = seq[:, None] == seq[None, :]
    x = h.reshape(-1, d) - h.reshape(-1, d).mean(0)
    lam = np.linalg.eigvalsh(x.T @ x / (b * t))[::-1]
    sig = np.linalg.svd(x, compute_uv=False)
    p = sig / sig.sum()
    pr = lam.sum() ** 2 / np.sum(lam**2)
    between = g[~same].mean() if b > 1 else np.nan
    return np.array(
        [
            g[off].mean(),
            between,
            g[off & same].mean(),
            pr,
            (pr - 1) / (d - 1),
            lam[0] / lam.sum(),
            np.exp(-np.sum(p * np.log(p))),
        ]  # fmt: skip
    )


def test_measures_are_the_registered_metrics_and_equal_numpy():
    """minilm_counterfactual.measures (the registry's functions on a layer output) against the
    float64 numpy definitions; its pools are the first 2 and all windows; a covariance measure
    over finite_sample's reference equals the registered `_rel` metric."""
    from simlab.core import finite_sample, metrics
    from simlab.core.block import Layer

    mod = experiment_script("minilm_counterfactual")
    assert set(mod.MEASURES) <= set(metrics.METRICS)
    h = np.random.default_rng(1).normal(0.3, 1.0, (4, 6, 5))
    with jax.enable_x64(True):
        got = np.asarray(mod.measures(h))
        np.testing.assert_allclose(got, _np_measures(h), rtol=1e-10)
        np.testing.assert_allclose(np.asarray(mod.pooled(h))[0], _np_measures(h[:2]), rtol=1e-10)
        z = np.zeros(1)
        rel = metrics.layer_metrics(
            ("out_participation_ratio_rel", "out_effective_rank_rel"), False,
            Layer(h, h, h, z, z, z, z, None),
        )  # fmt: skip
    verdicts = experiment_script("minilm_verdicts")
    for name, m in (("out_participation_ratio_rel", "out_participation_ratio"),
                    ("out_effective_rank_rel", "out_effective_rank")):  # fmt: skip
        ref = verdicts.reference(m, 24, 5)
        assert ref == finite_sample.isotropic_reference(verdicts.REFERENCE[m], 24, 5)
        np.testing.assert_allclose(float(rel[name]), got[mod.MEASURES.index(m)] / ref, rtol=1e-9)


def test_layer_program_matches_a_numpy_bert_layer_with_knobs_and_clamps():
    """Layer 0 of the tiny BERT with each condition kind equals float64 numpy: read on the
    first 2 windows and on all, and after layer 1 (unchanged) on the first 2 windows."""
    mod = experiment_script("minilm_counterfactual")
    ck = load(FIXTURES / "bert")
    eps = ck.block().ln_eps
    x = np.random.default_rng(0).normal(0, 1, (3, 7, 16))
    items = [{"lambda": 3.0}, {"temperature": 0.5}, {"attn_gain": 0.0}, {"mlp_gain": 0.0},
             {"lambda": 0.01}]  # fmt: skip
    want_kw = [dict(lam=3.0), dict(temp=0.5), dict(attn_gain=0.0), dict(mlp_gain=0.0),
               dict(lam=0.01)]  # fmt: skip

    def want(y):
        last, _ = _np_layer(y[:2], _layer(ck, 1), eps)
        return np.stack([_np_measures(y[:2]), _np_measures(y)]), _np_measures(last)

    with jax.enable_x64(True):
        kn = mod._knobs(items, n_heads=2)
        p0, p1 = ck.stacked([0]), ck.stacked([1])
        p0 = jax.tree.map(lambda a: a[0], p0)
        prog = mod.layer_program(ck, 0, "softmax")
        got_l, got_last, got_h = (np.asarray(a) for a in prog(p0, p1, x, kn))
        for i, kw in enumerate(want_kw):
            y, h = _np_layer(x, _layer(ck, 0), eps, **kw)
            w_l, w_last = want(y)
            np.testing.assert_allclose(got_l[i], w_l, rtol=1e-9)
            np.testing.assert_allclose(got_last[i, 0], w_last, rtol=1e-9)
            assert np.isnan(got_last[i, 1]).all()
            np.testing.assert_allclose(got_h[i], h, rtol=1e-9)
        from simlab.core.knobs import knob_arrays

        for name, beta in (("uniform", 0.0), ("token", 1.7)):
            prog = mod.layer_program(ck, 0, name)
            kc = mod._stack([knob_arrays({"pattern_beta": beta})])
            got = [np.asarray(a)[0] for a in prog(p0, p1, x, kc)]
            y, h = _np_layer(x, _layer(ck, 0), eps, clamp=(name, beta))
            w_l, w_last = want(y)
            np.testing.assert_allclose(got[0], w_l, rtol=1e-9)
            np.testing.assert_allclose(got[1][0], w_last, rtol=1e-9)
            np.testing.assert_allclose(got[2], h, rtol=1e-9)


@pytest.mark.parametrize("frac", [0.999, 0.8, 0.5, 0.1, 1e-3])
def test_beta_for_entropy_gives_a_row_of_that_entropy(frac):
    """An explicit clamped row (p on one key, o on the others) at the solved beta has
    H / ln n = frac (float64 numpy)."""
    mod = experiment_script("minilm_counterfactual")
    n = 128
    beta = float(mod.beta_for_entropy([frac], n)[0])
    row = np.full(n, 1.0)
    row[0] = np.exp(beta)
    row /= row.sum()
    assert abs(-np.sum(row * np.log(row)) / np.log(n) - frac) < 1e-6


def test_the_lab_init_matches_numpy_and_post_ln_invariants():
    """minilm_layers.lab_init_states on the tiny BERT: the input is the lab's embedding table
    (N(0, embed_std^2)) at the ids; each layer equals a float64 numpy post-LN layer with the
    lab's BERT-init weights, whose outputs have per-token mean 0 and mean square 1 (LayerNorm
    gain 1, bias 0)."""
    from simlab.core.init import init_params

    mod = experiment_script("minilm_layers")
    ck = load(FIXTURES / "bert")
    ids = np.array([[2, 5, 7, 11, 3, 9], [4, 4, 8, 1, 6, 2]])
    with jax.enable_x64(True):
        hs = [np.asarray(h) for h in mod.lab_init_states(ck, ids, 3)]
        k_layers, _ = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(0), 3))
        params = init_params(ck.block(ck.n_layers, init="bert"), k_layers)
    assert np.array_equal(hs[0][1, 0], hs[0][1, 1])  # the same id, the same table row
    assert 0.01 < np.std(hs[0]) < 0.04  # N(0, 0.02^2) rows, 12 draws x 16 dims
    eps = ck.block().ln_eps
    for i in range(ck.n_layers):
        want, _ = _np_layer(hs[i], {n: np.asarray(a[i]) for n, a in params.items()}, eps)
        np.testing.assert_allclose(hs[i + 1], want, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(hs[i + 1].mean(-1), 0.0, atol=1e-12)
        np.testing.assert_allclose((hs[i + 1] ** 2).mean(-1), 1.0, rtol=1e-9)


def test_docs_carry_the_counterfactual_study_printed_from_its_data():
    """Both docs carry minilm_verdicts.py's block, character for character; the old entry
    point (minilm_counterfactual.py DATA) prints the same."""
    verdicts = experiment_script("minilm_verdicts")
    got = verdicts.block(DATA)
    assert experiment_script("minilm_counterfactual").main(DATA) == got
    for doc in ("gallery.md", "checkpoints.md"):
        text = (ROOT / "docs" / doc).read_text()
        assert doc_block(text, verdicts.BLOCK) == got, (
            f"docs/{doc}: run python experiments/minilm_verdicts.py --write"
        )


def test_the_summary_states_a_verdict_only_where_every_setting_gives_it():
    verdicts = experiment_script("minilm_verdicts")
    per = {"a": ["raises", "lowers", "raises"], "b": ["raises", "unresolved", "raises"]}
    assert verdicts.summary(per, [0, 1, 2]) == ("raises in 0, 2", "1 (l u)")


@pytest.mark.model
@pytest.mark.skipif(not HAVE_MODEL, reason="simlab models install all-minilm-l6-v2")
def test_the_counterfactual_study_recomputes_layer_5_seed_0(tmp_path):
    """Layer 5 (the last), seed 0, both corpora, every condition, read and pool, from the
    installed model, equals the committed values (float32 rounding)."""
    mod = experiment_script("minilm_counterfactual")
    mod.run(tmp_path, layers=[5], seeds=1)
    got = np.load(tmp_path / mod.OUT / "results.npz")
    want = np.load(DATA / mod.OUT / "results.npz")
    for name in ("values", "entropy", "inputs", "betas"):
        np.testing.assert_allclose(got[name], want[name][:, :1, 5:], rtol=1e-4, atol=1e-5)


def test_simlab_reproduce_draws_the_declared_figures_from_the_committed_data(tmp_path):
    """experiments/minilm_counterfactual.toml's figures are of kind "script" (no sweep to
    validate or run): `simlab reproduce --only minilm_counterfactual` draws exactly the files
    its [[figures]] tables name, from figures/data, the ones the docs show."""
    from simlab.studies import reproduce
    from simlab.studies.reproduce.scripted import scripted_only

    assert scripted_only("minilm_counterfactual")
    declared = [f["file"] for f in reproduce.figure_specs("minilm_counterfactual")]
    assert declared == experiment_script("minilm_verdicts").FILES
    done = reproduce.reproduce(["minilm_counterfactual"], out=tmp_path, quick=True, quiet=True)
    files, _ = done["minilm_counterfactual"]
    assert [f.name for f in files] == declared
    assert all(f.stat().st_size > 10_000 and (ROOT / "figures" / f.name).exists() for f in files)
