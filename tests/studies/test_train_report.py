"""The report of the training study (simlab.studies.train_dynamics.report): the numbers over
seeds and the verdicts equal a direct computation, from the documented criteria, on arrays
made up for the test. Nothing here runs a model or asserts a scientific outcome."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict

import numpy as np
import pytest

from simlab.engine.results import Results
from simlab.studies.train_dynamics import config, report

N_STEP, N_LAYER, N_HEAD, N_SEED = 9, 2, 3, 4
CRIT = config.Criteria()


def fake_results(rng, law="uniform", cf=3.0, floor=1.0) -> Results:
    steps = np.array([0, 1, 2, 4, 8, 16, 32, 64, 100], np.float64)
    shape = (N_STEP, N_LAYER, N_HEAD, N_SEED)
    m = {
        "attn_entropy": rng.uniform(0.2, 1.0, shape),
        "qk_mean_dot": np.exp(rng.normal(0, 1.5, shape)),
        "qk_mean_cos": rng.uniform(-1, 1, shape),
        "shift_logit_std": rng.uniform(0.1, 2, shape),
        "logit_std": rng.uniform(2, 3, shape),
        "token_logit_std": rng.uniform(0.1, 2, shape),
        "lab_token_logit_std": rng.uniform(0.1, 2, shape),
        "q_mean_norm": rng.uniform(0, 5, shape),
        "k_mean_norm": rng.uniform(0, 5, shape),
        "q_rms": rng.uniform(0, 5, shape),
        "out_cos": rng.uniform(0, 1, (N_STEP, N_LAYER, 1, N_SEED)),
        "out_cos_within": rng.uniform(0, 1, (N_STEP, N_LAYER, 1, N_SEED)),
        "loss": rng.uniform(1, 5, (N_STEP, 1, 1, N_SEED)),
    }
    for n in ("lab_entropy_norms", "lab_entropy_aligned"):
        m[n] = np.clip(m["attn_entropy"] + rng.normal(0, 0.04, shape), 0, 1)
    axes = OrderedDict(step=steps, layer=np.arange(2.0), head=np.arange(3.0))
    cfg = dict(
        d_model=8, depth=2, n_heads=3, context=16, batch=2, steps=100, seeds=N_SEED,
        criteria=dataclasses.asdict(CRIT),
    )  # fmt: skip
    meta = {
        "config": cfg,
        "corpus": {"law": law, "task": "recall", "context_free_loss": cf, "loss_floor": floor,
                   "unigram_entropy": 4.0},
        "final_loss": rng.uniform(cf - 0.3, cf + 0.1, N_SEED).tolist(),
    }  # fmt: skip
    return Results(axes, m, meta)


def test_numbers_over_seeds_equal_numpy():
    res = fake_results(np.random.default_rng(0))
    s = report.summarize(res)
    for l in range(N_LAYER):
        row = s["layers"][l]
        e = res["attn_entropy"][-1, l].mean(0)
        assert row["entropy_last"]["seeds"] == pytest.approx(e.tolist())
        assert row["entropy_last"]["mean"] == pytest.approx(e.mean())
        assert row["entropy_last"]["std"] == pytest.approx(np.std(e, ddof=1))
        g = res["qk_mean_dot"][-1, l].mean(0) / res["qk_mean_dot"][0, l].mean(0)
        assert row["qk_mean_dot_growth"]["seeds"] == pytest.approx(g.tolist())
        c = np.abs(res["qk_mean_cos"][-1, l]).mean(0)
        assert row["abs_qk_mean_cos_last"]["seeds"] == pytest.approx(c.tolist())
        assert row["out_cos_max_over_run"]["seeds"] == pytest.approx(
            res["out_cos"][:, l, 0].max(0).tolist()
        )
        assert row["entropy_min_over_run"]["seeds"] == pytest.approx(
            res["attn_entropy"][:, l].mean(1).min(0).tolist()
        )
    final = np.array(res.meta["final_loss"])
    assert s["loss"]["below_context_free"]["seeds"] == pytest.approx((3.0 - final).tolist())


@pytest.mark.parametrize("seed", range(6))
def test_verdicts_follow_the_declared_criteria(seed):
    rng = np.random.default_rng(seed)
    res = fake_results(rng)
    if seed % 2:  # make one head meet the drift criterion in every seed
        res.metrics["qk_mean_dot"][-1, 1, 2] = 50 * res.metrics["qk_mean_dot"][0, 1, 2]
        res.metrics["qk_mean_cos"][-1, 1, 2] = -0.9
    v = report.summarize(res)["verdicts"]
    # the rule written out again, head by head (loops, not the report's vectorised form)
    drift, sharp, both = (np.zeros(N_SEED, bool) for _ in range(3))
    n_drift = np.zeros(N_SEED)
    for s in range(N_SEED):
        for l in range(N_LAYER):
            for h in range(N_HEAD):
                d0, d1 = res["qk_mean_dot"][0, l, h, s], res["qk_mean_dot"][-1, l, h, s]
                dh = d1 / d0 >= CRIT.drift_growth and abs(res["qk_mean_cos"][-1, l, h, s]) >= 0.8
                sh = res["attn_entropy"][-1, l, h, s] <= CRIT.sharp_entropy
                drift[s] |= dh
                sharp[s] |= sh
                both[s] |= dh and sh
                n_drift[s] += dh
    used = np.array(res.meta["final_loss"]) < 3.0 - CRIT.attention_margin
    summary = report.summarize(res)
    assert summary["heads"]["drift"]["seeds"] == n_drift.tolist()
    for key, flags in (
        ("drift", drift),
        ("sharpening", sharp),
        ("drift_and_sharpening_in_one_head", both),
        ("attention_used", used),
    ):
        k = int(flags.sum())
        want = "yes" if k == N_SEED else "no" if k == 0 else "inconsistent"
        assert v[key] == {"seeds": k, "of": N_SEED, "verdict": want}, key
    if seed % 2:
        assert v["drift"]["verdict"] == "yes"


def test_loop_cells_predicted_within_tolerance():
    res = fake_results(np.random.default_rng(1))
    rows = report.loop_table(res, CRIT.loop_tolerance)
    steps = res.axes["step"]
    assert [r["step"] for r in rows] == [32, 32, 64, 64, 100, 100]  # nearest to 25, 50, 100
    for r in rows:
        i, l = int(np.flatnonzero(steps == r["step"])[0]), r["layer"]
        err = res["lab_entropy_norms"][i, l].mean(0) - res["attn_entropy"][i, l].mean(0)
        assert r["error_norms"]["seeds"] == pytest.approx(err.tolist())
        assert r["predicts"] == bool(np.all(np.abs(err) <= CRIT.loop_tolerance))


def _summary(task, law, used, drift, sharp, last=(0.2, 0.1), change=(-0.1, -0.2)):
    return {
        "corpus": {"task": task, "law": law},
        "layers": [
            {"out_cos_last": {"mean": a}, "out_cos_end_minus_first": {"seeds": [d, d - 0.1]}}
            for a, d in zip(last, change)
        ],
        "verdicts": {
            "attention_used": {"verdict": used},
            "drift": {"verdict": drift},
            "sharpening": {"verdict": sharp},
        },
    }


@pytest.mark.parametrize(
    "summaries, want",
    [
        # (zipf twin, uniform variant) of one task: used, drift, sharpening
        ((("yes", "yes", "yes"), ("yes", "yes", "yes")), "supported"),
        ((("yes", "yes", "yes"), ("yes", "yes", "no")), "not supported"),
        ((("yes", "no", "no"), ("yes", "yes", "inconsistent")), "partly supported"),
        ((("yes", "yes", "yes"), ("no", "yes", "yes")), "undecided"),
        ((("yes", "yes", "yes"), ("yes", "no", "no")), "not supported"),
        ((("yes", "no", "no"), ("yes", "no", "no")), "undecided"),
        ((("no", "yes", "yes"), ("yes", "yes", "no")), "partly supported"),  # twin unused
    ],
)
def test_overall_verdict_table(summaries, want):
    z, u = summaries
    got = report.overall(
        {
            "recall_zipf": _summary("recall", "zipf", *z),
            "recall_uniform": _summary("recall", "uniform", *u),
            "text": _summary("text", "bytes", "yes", "yes", "yes"),  # never decides the claim
        }
    )
    assert got["not_only_long_tailed"] == want
    # the rule declared before the run: a uniform corpus using attention with both properties
    both = u == ("yes", "yes", "yes")
    assert got["declared"]["verdict"] == ("supported" if both else "not supported")
    assert (
        report.overall({"text": _summary("text", "bytes", "yes", "yes", "yes")})[
            "not_only_long_tailed"
        ]
        == "undecided"
    )


def test_anisotropy_comparison_zipf_vs_uniform():
    """Zipf above its uniform twin per layer, and "ends above its initial anisotropy" when any
    seed's end-minus-start change is positive."""
    z = _summary("recall", "zipf", "yes", "no", "no", last=(0.3, 0.05), change=(-0.2, -0.1))
    u = _summary("recall", "uniform", "yes", "no", "no", last=(0.1, 0.07), change=(-0.3, 0.02))
    a = report.overall({"recall_zipf": z, "recall_uniform": u})["anisotropy"]
    assert [r["zipf_above"] for r in a["zipf_vs_uniform_final"]["recall"]] == [True, False]
    assert a["zipf_above_uniform_everywhere"] is False
    assert a["max_end_minus_initial"]["recall_uniform"] == pytest.approx([-0.3, 0.02])
    assert a["any_model_ends_above_initial"] is True
    u["layers"][1]["out_cos_end_minus_first"]["seeds"] = [-0.01, -0.02]
    assert (
        report.overall({"recall_zipf": z, "recall_uniform": u})["anisotropy"][
            "any_model_ends_above_initial"
        ]
        is False
    )
