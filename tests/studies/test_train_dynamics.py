"""Training dynamics (simlab.studies.train_dynamics); the corpora are tested in
test_train_corpora.py, the report's numbers and verdicts in test_train_report.py.

Oracles and invariants only: the tracked statistics equal a direct numpy computation on the
same parameters; a short run lowers the loss and its results reload; a bad config is refused
before any work. Whether drift appears is reported, not tested.
"""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import simlab
from simlab import cli
from simlab.core import block
from simlab.core.knobs import knob_arrays
from simlab.engine import records
from simlab.errors import ConfigError
from simlab.studies import train_dynamics
from simlab.studies.train_dynamics import config, corpus, loop, stats

TINY = dataclasses.replace(
    config.load(quick=True),
    vocab=256,  # = the text corpus: one compiled model for every test
    d_model=32,
    n_heads=4,
    context=16,
    batch=8,
    steps=40,
    warmup=5,
    n_checkpoints=12,
    eval_batch=4,
    final_eval_batch=6,
    lab_seeds=1,
    seeds=1,
    pairs=4,
    period_min=3,
    period_max=8,
)


# ------------------------------------------------------------------ checkpoints
def test_checkpoints_are_log_spaced_and_enough():
    for cfg in (config.load(quick=False), config.load(quick=True)):
        s = loop.checkpoint_steps(cfg.steps, cfg.n_checkpoints)
        assert len(s) >= min(cfg.n_checkpoints, cfg.steps) and s[0] == 0 and s[-1] == cfg.steps
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


@pytest.mark.slow
def test_tracked_stats_equal_a_direct_computation():
    cfg = TINY
    _, _, init, train_step, evaluate, held_out_loss = loop.compiled(cfg)
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
    np.testing.assert_allclose(held_out_loss(params, jnp.asarray(ids)), want["loss"], rtol=1e-5)


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
@pytest.mark.slow
def test_quick_run_lowers_loss_and_reloads(tmp_path):
    cfg = dataclasses.replace(TINY, corpus="recall_zipf", seeds=2)
    res = loop.run(cfg, tmp_path / "r", quiet=True)
    loss = res.metrics["loss"][:, 0, 0, :]
    assert np.all(loss[-1] < loss[0] - 0.3)
    assert np.all(np.isfinite(loss))
    back = simlab.load(tmp_path / "r")
    assert list(back.axes) == ["step", "layer", "head"]
    n_steps = len(loop.checkpoint_steps(cfg.steps, cfg.n_checkpoints))
    for n in stats.PER_HEAD + stats.PER_LAYER + loop.LOOP + ("loss",):
        assert back[n].shape[0] == n_steps and back[n].ndim == 4, n
        assert np.array_equal(back[n], res.metrics[n], equal_nan=True)
    assert back["q_rms"].shape == (n_steps, cfg.depth, cfg.n_heads, 2)
    assert back["out_cos"].shape == (n_steps, cfg.depth, 1, 2)
    assert back.meta["dims"]["out_cos"] == ["step", "layer", "seed"]
    assert len(back.meta["train_loss"][1]) == cfg.steps
    # written by the records like every record: its schema, its kind, the versions it ran with
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    assert (meta["schema"], meta["kind"]) == (records.SCHEMA, "train-dynamics")
    assert {"flax", "optax", "jax"} <= set(meta["versions"])
    # seeds are different models on different data, the held-out batch is shared
    assert not np.array_equal(back["q_rms"][-1, ..., 0], back["q_rms"][-1, ..., 1])
    # the saved final parameters reproduce the last checkpoint's statistics and final loss
    _, _, _, _, evaluate, held_out_loss = loop.compiled(cfg)
    held, final = loop.held_out(cfg)
    for s in range(2):
        params = loop.load_params(tmp_path / "r" / f"params_seed{s}.npz")
        again = jax.device_get(evaluate(params, jnp.asarray(held)))
        for n in stats.PER_HEAD:
            np.testing.assert_allclose(
                again[n], back[n][-1, ..., s], rtol=1e-5, atol=1e-6, err_msg=n
            )
        f = float(held_out_loss(params, jnp.asarray(final)))
        assert f == pytest.approx(back.meta["final_loss"][s], rel=1e-6)
    assert final.shape == (cfg.final_eval_batch, cfg.context + 1)
    assert back.meta["corpus"]["loss_floor"] == pytest.approx(
        corpus.floors(cfg.corpus_spec(), cfg.context + 1)["loss_floor"]
    )
    done = np.isin(back.axes["step"], back.meta["loop_steps"])
    assert done.sum() >= 3 and np.all(np.isnan(back["lab_entropy_norms"][~done]))
    for n in loop.LOOP[:2]:
        assert np.all((back[n][done] >= 0) & (back[n][done] <= 1 + 1e-6))


@pytest.mark.slow
def test_same_seed_same_run():
    """Weights, data order and held-out data derive from the seed: a second run is identical."""
    cfg = dataclasses.replace(TINY, corpus="induction_uniform")
    a, b = loop.run(cfg, quiet=True), loop.run(cfg, quiet=True)
    for n in a.metrics:
        assert np.array_equal(a[n], b[n], equal_nan=True), n
    assert a.meta["train_loss"] == b.meta["train_loss"]


def _toml(cfg, **train) -> str:
    """An experiments/train_dynamics.toml with cfg's fields ([train], [criteria])."""
    vals = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name != "criteria"}
    vals.update(train)
    crit = dataclasses.asdict(cfg.criteria)
    lines = ["[train]"] + [
        f"{k} = {json.dumps(list(v) if isinstance(v, tuple) else v)}" for k, v in vals.items()
    ]
    lines += ["[quick]", "[criteria]"] + [f"{k} = {json.dumps(v)}" for k, v in crit.items()]
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_cli_quick_writes_results_and_figures(tmp_path, monkeypatch, capsys):
    """The command end to end, its sizes read from its own experiments folder (the TINY sizes
    above: compiled once)."""
    (tmp_path / "train_dynamics.toml").write_text(_toml(TINY, corpora=["uniform", "text"]))
    monkeypatch.setenv("SIMLAB_EXPERIMENTS", str(tmp_path))
    argv = ["train-dynamics", "--quick", "--out", str(tmp_path / "out"), "--quiet"]
    assert cli.main(argv + ["--figures", str(tmp_path / "figs")]) == 0
    n = len(loop.checkpoint_steps(TINY.steps, TINY.n_checkpoints))
    for c in ("uniform", "text"):
        assert simlab.load(tmp_path / "out" / c)["loss"].shape[0] == n
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert set(summary) == {"uniform", "text", "overall", "wall_time_s"}
    assert summary["text"]["corpus"]["python"] and summary["text"]["corpus"]["train_sha256"]
    for f in ("train_drift.png", "train_entropy_anisotropy.png", "train_loop_entropy.png"):
        assert (tmp_path / "figs" / f).stat().st_size > 10_000
    out = capsys.readouterr().out
    assert "held-out loss" in out and "not only long-tailed" in out
    # --corpus picks every corpus of a task
    assert train_dynamics.selected(TINY, ["recall", "text"]) == (
        "recall_zipf",
        "recall_uniform",
        "text",
    )


@pytest.mark.parametrize(
    "train, argv, field",
    [
        ({"pairs": 8}, [], "corpus.pairs"),  # 2 * 8 + 2 > context + 1 = 17
        ({"period_max": 17}, [], "corpus.period_max"),  # no copy in 17 tokens
        ({"corpora": ["zipf", "nope"]}, [], "train.corpora"),
        ({"lr": -1.0}, [], "train.lr"),
        ({}, ["--steps", "0"], "train.steps"),
        ({}, ["--seeds", "0"], "train.seeds"),
        ({"bogus": 1}, [], "train.bogus"),
    ],
)
def test_bad_config_exits_2_before_any_output(tmp_path, monkeypatch, capsys, train, argv, field):
    (tmp_path / "train_dynamics.toml").write_text(
        _toml(TINY, **{"corpora": ["recall_zipf", "induction_zipf"], **train})
    )
    monkeypatch.setenv("SIMLAB_EXPERIMENTS", str(tmp_path))
    code = cli.main(["train-dynamics", "--out", str(tmp_path / "out"), "--no-figures", *argv])
    assert code == 2
    assert field in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_bad_criteria_are_refused(tmp_path, monkeypatch):
    bad = dataclasses.replace(TINY, criteria=dataclasses.replace(TINY.criteria, drift_cos=1.5))
    (tmp_path / "train_dynamics.toml").write_text(_toml(bad))
    monkeypatch.setenv("SIMLAB_EXPERIMENTS", str(tmp_path))
    with pytest.raises(ConfigError, match=r"criteria\.drift_cos: 1\.5 is outside"):
        config.load()


def test_unknown_train_and_criteria_fields_are_named():
    """A field the [train] or [criteria] table does not have is refused, naming the file, the
    table and the field, and listing the fields (sorted) that exist."""
    train = sorted({f.name for f in dataclasses.fields(config.TrainConfig)} - {"criteria"})
    with pytest.raises(ConfigError) as e:
        config.load(quick=True, overrides={"stepz": 3})
    assert str(e.value).endswith(f": train.stepz: unknown field; allowed: {', '.join(train)}")
    assert "train_dynamics.toml" in str(e.value)
