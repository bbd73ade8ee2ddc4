"""Training dynamics (simlab.studies.train_dynamics) and the synthetic corpora
(simlab.studies.train_dynamics.corpus).

Oracles and invariants only: the tracked statistics equal a direct numpy computation on the
same parameters; the corpora have the requested unigram law and a Markov structure; a short
run lowers the loss and its results reload. Whether drift appears is reported, not tested.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import simlab
from simlab.core import block
from simlab.core.lab import knob_arrays
from simlab.studies import train_dynamics
from simlab.studies.train_dynamics import config, corpus, loop, stats

TINY = dataclasses.replace(
    config.load(quick=True),
    vocab=64,
    d_model=32,
    n_heads=4,
    context=16,
    batch=8,
    steps=40,
    warmup=5,
    n_checkpoints=12,
    eval_batch=4,
    lab_seeds=1,
)


# ------------------------------------------------------------------ corpora
@pytest.mark.parametrize("s", [0.8, 1.1, 1.5])
def test_zipf_exponent_fitted_on_a_sample(s):
    spec = corpus.CorpusSpec("zipf", vocab=256, zipf_s=s, seed=3)
    ids = corpus.sample(spec, 400, 129, np.random.default_rng(0))
    assert abs(corpus.fit_zipf_exponent(ids, 256) - s) < 0.1
    # independent estimate: least squares of log frequency on log rank (ranks seen >= 20 times)
    counts = np.bincount(ids.ravel(), minlength=256)
    keep = counts >= 20
    slope = np.polyfit(np.log(np.arange(1, 257)[keep]), np.log(counts[keep]), 1)[0]
    assert abs(-slope - s) < 0.1


def test_uniform_corpus_has_a_uniform_unigram():
    spec = corpus.CorpusSpec("uniform", vocab=256, seed=3)
    ids = corpus.sample(spec, 400, 129, np.random.default_rng(1))
    counts = np.bincount(ids.ravel(), minlength=256)
    n, v = counts.sum(), 256
    chi2 = np.sum((counts - n / v) ** 2 / (n / v))  # ~ v - 1 +- sqrt(2 (v - 1)) for iid
    assert chi2 < (v - 1) + 8 * math.sqrt(2 * (v - 1))
    assert abs(corpus.fit_zipf_exponent(ids, v)) < 0.05
    p = counts / n
    assert abs(-np.sum(p * np.log(p)) - math.log(v)) < 0.01


@pytest.mark.parametrize("kind", ["zipf", "uniform"])
def test_markov_structure(kind):
    """Exact chain: rows sum to 1, pi is stationary, H(next | current) < H(unigram); a sample
    shows the same conditional entropy (plug-in estimate, slightly biased low)."""
    spec = corpus.CorpusSpec(kind, vocab=128, seed=5)
    p, pi = corpus.transition_matrix(spec), corpus.unigram(spec)
    np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-12)
    np.testing.assert_allclose(pi @ p, pi, atol=1e-12)
    h = corpus.entropies(spec)
    assert h["conditional_entropy"] < h["unigram_entropy"] - 0.5
    ids = corpus.sample(spec, 2000, 65, np.random.default_rng(2))
    joint = np.zeros((128, 128))
    np.add.at(joint, (ids[:, :-1].ravel(), ids[:, 1:].ravel()), 1.0)
    joint /= joint.sum()
    cond = joint / np.maximum(joint.sum(1, keepdims=True), 1e-300)
    h_emp = -np.sum(joint * np.log(np.where(cond > 0, cond, 1.0)))
    u = np.bincount(ids.ravel(), minlength=128) / ids.size
    h1_emp = -np.sum(u * np.log(np.where(u > 0, u, 1.0)))
    assert h_emp < h1_emp - 0.5
    assert abs(h_emp - h["conditional_entropy"]) < 0.1
    # the first position is already stationary
    first = np.bincount(ids[:, 0], minlength=128) / len(ids)
    assert np.abs(first - pi).max() < 5 * np.sqrt(pi.max() / len(ids))


def test_same_maps_for_both_corpora():
    """The bigram map on the quantile scale depends on the seed only."""
    a, b = corpus.CorpusSpec("zipf", seed=7), corpus.CorpusSpec("uniform", seed=7)
    assert np.array_equal(corpus.permutations(a), corpus.permutations(b))


def test_checkpoints_are_log_spaced_and_enough():
    for cfg in (config.load(quick=False), config.load(quick=True)):
        s = loop.checkpoint_steps(cfg.steps, cfg.n_checkpoints)
        assert len(s) >= 30 and s[0] == 0 and s[-1] == cfg.steps
        assert np.all(np.diff(s) > 0)
        gaps = np.diff(np.log(s[1:]))
        assert gaps.max() <= np.log(2) + 1e-12  # at most doubling (rounding at the start)
        late = gaps[s[1:-1] >= 10]
        assert late.max() < 1.5 * np.median(late)  # geometric spacing where rounding is mild


# ------------------------------------------------------------------ oracle for the tracked stats
def _gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def _ln(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * g + b


def _pairwise_cos(x):
    u = x / np.linalg.norm(x, axis=-1, keepdims=True)
    c = u @ u.T
    n = len(x)
    return (c.sum() - np.trace(c)) / (n * (n - 1))


def direct_stats(cfg, params, ids):
    """Forward pass and every tracked statistic in float64 numpy, written from the math."""
    P = jax.tree.map(lambda a: np.asarray(a, np.float64), params["params"])
    x, y_ids = ids[:, :-1], ids[:, 1:]
    b_, t = x.shape
    h = P["embed"][x] + P["pos"][:t]
    mask = np.tril(np.ones((t, t), bool))
    out = {n: [] for n in stats.PER_HEAD + stats.PER_LAYER}
    for l in range(cfg.depth):
        p = {k: v[l] for k, v in P["blocks"].items()}
        a = _ln(h, p["ln1_g"], p["ln1_b"], cfg.ln_eps)
        q = np.einsum("btd,dhk->bthk", a, p["wq"]) + p["bq"]
        k = np.einsum("btd,dhk->bthk", a, p["wk"]) + p["bk"]
        v = np.einsum("btd,dhk->bthk", a, p["wv"]) + p["bv"]
        K = q.shape[-1]
        logits = np.einsum("bthk,bshk->bhts", q, k) / np.sqrt(K)
        lg = np.where(mask, logits, -np.inf)
        w = np.exp(lg - lg.max(-1, keepdims=True))
        w /= w.sum(-1, keepdims=True)
        attn = np.einsum("hkd,bthk->btd", p["wo"], np.einsum("bhts,bshk->bthk", w, v)) + p["bo"]
        y = h + attn
        y = (
            y
            + _gelu(_ln(y, p["ln2_g"], p["ln2_b"], cfg.ln_eps) @ p["w1"] + p["b1"]) @ p["w2"]
            + p["b2"]
        )
        for hd in range(cfg.n_heads):
            qh, kh = q[:, :, hd].reshape(-1, K), k[:, :, hd].reshape(-1, K)
            mq, mk = qh.mean(0), kh.mean(0)
            out["q_mean_norm"].append(np.linalg.norm(mq))
            out["k_mean_norm"].append(np.linalg.norm(mk))
            out["qk_mean_cos"].append(mq @ mk / np.linalg.norm(mq) / np.linalg.norm(mk))
            out["qk_mean_dot"].append(abs(mq @ mk))
            out["q_rms"].append(np.sqrt(np.mean(np.sum((qh - mq) ** 2, -1))))
            out["k_rms"].append(np.sqrt(np.mean(np.sum((kh - mk) ** 2, -1))))
            ent, mx, std = [], [], {"logit_std": [], "token_logit_std": [], "shift_logit_std": []}
            for bi in range(b_):
                for i in range(t):
                    row = w[bi, hd, i, : i + 1]
                    mx.append(row.max())
                    if i == 0:
                        continue
                    nz = row[row > 0]
                    ent.append(-np.sum(nz * np.log(nz)) / np.log(i + 1))
                    keys = k[bi, : i + 1, hd]
                    for name, vec in (
                        ("logit_std", q[bi, i, hd]),
                        ("token_logit_std", q[bi, i, hd] - mq),
                        ("shift_logit_std", mq),
                    ):
                        std[name].append(np.var(keys @ vec / np.sqrt(K)))
            out["attn_entropy"].append(np.mean(ent))
            out["attn_max"].append(np.mean(mx))
            for name, vals in std.items():
                out[name].append(np.sqrt(np.mean(vals)))
        out["input_cos"].append(_pairwise_cos(h.reshape(-1, h.shape[-1])))
        out["input_cos_within"].append(np.mean([_pairwise_cos(s) for s in h]))
        out["out_cos"].append(_pairwise_cos(y.reshape(-1, y.shape[-1])))
        out["out_cos_within"].append(np.mean([_pairwise_cos(s) for s in y]))
        ac = a - a.reshape(-1, a.shape[-1]).mean(0)
        out["attn_input_corr"].append(np.mean([_pairwise_cos(s) for s in ac]))
        h = y
    res = {n: np.reshape(out[n], (cfg.depth, cfg.n_heads)) for n in stats.PER_HEAD}
    res.update({n: np.asarray(out[n]) for n in stats.PER_LAYER})
    f = _ln(h, P["lnf_g"], P["lnf_b"], cfg.ln_eps) @ P["unembed"]
    f = f - f.max(-1, keepdims=True)
    logp = f - np.log(np.exp(f).sum(-1, keepdims=True))
    res["loss"] = -np.mean(np.take_along_axis(logp, y_ids[..., None], -1))
    return res


def test_tracked_stats_equal_a_direct_computation():
    cfg = TINY
    _, _, init, train_step, evaluate = loop.compiled(cfg)
    rng = np.random.default_rng(0)
    spec = dataclasses.replace(cfg, corpus="zipf").corpus_spec()
    params, opt = init(jax.random.PRNGKey(1))
    for _ in range(15):  # move away from the init: biases, LayerNorms and drift non-trivial
        params, opt, _ = train_step(
            params, opt, corpus.sample(spec, cfg.batch, cfg.context + 1, rng)
        )
    ids = corpus.sample(spec, cfg.eval_batch, cfg.context + 1, rng)
    got = jax.device_get(evaluate(params, jnp.asarray(ids)))
    want = direct_stats(cfg, params, ids)
    assert set(got) == set(want)
    for n in want:
        np.testing.assert_allclose(got[n], want[n], rtol=2e-3, atol=2e-5, err_msg=n)


# ------------------------------------------------------------------ closing the loop
def test_lab_point_maps_statistics_to_knobs():
    """Fed c times the untrained block's own centred RMS and a mean-query norm m, lab_point is
    the lab at q_scale = k_scale = c and q_shift = m ("norms"), or q_shift = 0 when the
    shared-logit std is 0 ("aligned")."""
    lab = loop.lab_for(TINY)
    c, m, mk = 20.0, 3.0, 1.0

    @jax.jit
    def both(key):
        state = lab.seed_state(key)
        knobs = dict(knob_arrays({}), input_corr=jnp.float32(0.3))
        x, _ = lab.inputs_of(state, knobs)
        p0 = jax.tree.map(lambda a: a[0], state["params"])
        q, k, _ = block.qkv(p0, block.attn_input(lab.block, p0, x))
        pt = {
            "p": jnp.float32(0.3),
            "q_rms": c * loop._centred_rms(q),
            "k_rms": c * loop._centred_rms(k),
            "q_mean_norm": jnp.float32(m),
            "k_mean_norm": jnp.float32(mk),
            "shift_logit_std": jnp.float32(0.0),
        }
        norms, aligned, _ = loop.lab_point(lab, state, pt)
        knobs.update(q_scale=jnp.float32(c), k_scale=jnp.float32(c), k_shift=jnp.float32(mk))
        ref_n = lab.point(state, dict(knobs, q_shift=jnp.float32(m)))["attn_entropy"]
        ref_a = lab.point(state, dict(knobs, q_shift=jnp.float32(0.0)))["attn_entropy"]
        return norms, aligned, ref_n, ref_a

    norms, aligned, ref_n, ref_a = both(jax.random.PRNGKey(4))
    assert float(ref_n) < 0.95 and float(ref_a) < 0.95  # not trivially uniform
    np.testing.assert_allclose([norms, aligned], [ref_n, ref_a], rtol=1e-4)


# ------------------------------------------------------------------ a whole (tiny) run
def test_quick_run_lowers_loss_and_reloads(tmp_path):
    cfg = dataclasses.replace(TINY, corpus="zipf")
    res = loop.run(cfg, tmp_path / "zipf", quiet=True)
    loss = res.metrics["loss"][:, 0, 0, 0]
    assert loss[-1] < loss[0] - 0.3
    assert np.all(np.isfinite(loss))
    back = simlab.load(tmp_path / "zipf")
    assert list(back.axes) == ["step", "layer", "head"]
    n_steps = len(loop.checkpoint_steps(cfg.steps, cfg.n_checkpoints))
    for n in stats.PER_HEAD + stats.PER_LAYER + loop.LOOP + ("loss",):
        assert back[n].shape[0] == n_steps and back[n].ndim == 4, n
        assert np.array_equal(back[n], res.metrics[n], equal_nan=True)
    assert back["q_rms"].shape == (n_steps, cfg.depth, cfg.n_heads, 1)
    assert back["out_cos"].shape == (n_steps, cfg.depth, 1, 1)
    assert back.mean("attn_entropy").shape == (n_steps, cfg.depth, cfg.n_heads)
    assert back.meta["dims"]["out_cos"] == ["step", "layer", "seed"]
    assert len(back.meta["train_loss"][0]) == cfg.steps
    # the saved final parameters reproduce the last checkpoint's statistics
    params = loop.load_params(tmp_path / "zipf" / "params_seed0.npz")
    held = corpus.sample(cfg.corpus_spec(), cfg.eval_batch, cfg.context + 1, loop._rngs(cfg, 0)[1])
    again = jax.device_get(loop.compiled(cfg)[4](params, jnp.asarray(held)))
    for n in stats.PER_HEAD:
        np.testing.assert_allclose(again[n], back[n][-1, ..., 0], rtol=1e-5, atol=1e-6, err_msg=n)
    done = np.isin(back.axes["step"], back.meta["loop_steps"])
    assert done.sum() >= 3 and np.all(np.isnan(back["lab_entropy_norms"][~done]))
    for n in loop.LOOP[:2]:
        assert np.all((back[n][done] >= 0) & (back[n][done] <= 1 + 1e-6))


def test_cli_quick_writes_results_and_figures(tmp_path, monkeypatch, capsys):
    """The command end to end, its sizes read from its own experiments folder (the TINY sizes
    above: compiled once)."""
    import argparse

    lines = (
        ["[train]"]
        + [
            f"{f.name} = {getattr(TINY, f.name)!r}".replace("'", '"')
            for f in dataclasses.fields(TINY)
        ]
        + ["[quick]"]
    )
    (tmp_path / "train_dynamics.toml").write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("SIMLAB_EXPERIMENTS", str(tmp_path))
    parser = argparse.ArgumentParser()
    train_dynamics.add_arguments(parser)
    args = parser.parse_args(
        ["--quick", "--out", str(tmp_path / "out"), "--quiet", "--figures", str(tmp_path / "figs")]
    )
    assert train_dynamics.cli_main(args) == 0
    for c in ("zipf", "uniform"):
        n = len(loop.checkpoint_steps(TINY.steps, TINY.n_checkpoints))
        assert simlab.load(tmp_path / "out" / c)["loss"].shape[0] == n
    assert (tmp_path / "out" / "summary.json").exists()
    for f in ("train_drift.png", "train_entropy_anisotropy.png", "train_loop_entropy.png"):
        assert (tmp_path / "figs" / f).stat().st_size > 10_000
    assert "held-out loss" in capsys.readouterr().out
