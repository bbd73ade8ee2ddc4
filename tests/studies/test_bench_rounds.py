"""The rounds shared by the M1 and M2 hooks workloads (simlab.studies.bench.workers.run_rounds):
each round simlab's worker then the peer's, in that order, simlab's without the persistent
compilation cache; the medians, ratio ranges and floors run_hooks and run_decoder build from the
rounds, against sums written out by hand (a fake worker returns known timings: no checkpoint,
no torch)."""

from __future__ import annotations

import statistics

import pytest

from simlab.studies.bench import trained, trained_decoder, workers

STEADY = {"simlab": [2.0, 4.0, 3.0], "hooks": [5.0, 6.0, 12.0]}  # per round


@pytest.fixture
def fake_worker(monkeypatch):
    """run_worker replaced: round r's timings from STEADY; every call recorded."""
    calls = []

    def run(job, isolate, cache_dir=None):
        side = "hooks" if job["kind"] in ("hooks", "decoder_hooks") else "simlab"
        r = sum(1 for c in calls if c[1] == side)
        calls.append((job["kind"], side, cache_dir, dict(job)))
        t = STEADY[side][r]
        # M2's values may be NaN where a condition is undefined (on both sides); M1's never are
        last = float("nan") if job["kind"].startswith("decoder") else 0.25
        common = {"load_s": 1.0 + r, "steady_s": t, "values": [[0.5, last]]}
        if side == "simlab":
            times = dict.fromkeys(trained_decoder.SIMLAB_TIMES + trained.SIMLAB_TIMES, 0.25)
            return {
                **times,
                **common,
                "compile_s": 10.0,
                "layer": 3,
                "layers": [0, 1],
                "massive_dims": [3, 7],
                "flops_per_window": {"total": 4e9},
                "heads": [1.0],
            }
        modes = {
            m: {"steady_s": t * k, "values": [[0.5 + 1e-6, last]], "flops_per_window": 6e9}
            for m, k in (("model", 1.0), ("layer", 0.5))
        }
        return {
            **common,
            "values": [[0.5 + 2e-6, last]],
            "heads": [1.0 + 3e-6],
            "torch": "t",
            "transformers": "x",
            "threads": 2,
            "forwards_per_window": 6,
            "flops_per_window": 6e9,
            "modes": modes,
        }

    monkeypatch.setattr(workers, "run_worker", run)
    return calls


def test_rounds_run_simlab_cold_then_the_peer(fake_worker):
    logged = []
    runs = workers.run_rounds(
        "M2", ("decoder", "decoder_hooks"), lambda r: {"r": r}, 3, False, logged.append, True
    )
    assert [c[0] for c in fake_worker] == ["decoder", "decoder_hooks"] * 3
    assert [c[2] for c in fake_worker] == ["off", None] * 3  # simlab's compile is a cold one
    assert [c[3]["r"] for c in fake_worker] == [0, 0, 1, 1, 2, 2]
    assert [r["simlab"]["steady_s"] for r in runs] == STEADY["simlab"]
    assert logged[0] == "  M2 round 1/3: simlab ..." and len(logged) == 6
    fake_worker.clear()
    alone = workers.run_rounds(
        "M1", ("counterfactual", "hooks"), lambda r: {}, 2, False, lambda s: None, False
    )
    assert [c[0] for c in fake_worker] == ["counterfactual"] * 2
    assert all(r["hooks"] is None for r in alone)


def test_decoder_workload_medians_ratios_and_floor(fake_worker):
    out = trained_decoder.run_decoder("M2", True, False, log=lambda s: None, rounds=3, peak=8.0)
    assert [c[3]["count_flops"] for c in fake_worker if c[1] == "simlab"] == [True, False, False]
    ratios = [5.0 / 2.0, 6.0 / 4.0, 12.0 / 3.0]  # the peer's steady over simlab's, per round
    assert out["ratio"] == statistics.median(ratios) == 2.5
    assert out["ratio_range"] == [1.5, 4.0]
    assert out["ratio_with_compile"] == statistics.median([5 / 12, 6 / 14, 12 / 13])
    assert out["hooks"]["steady_s"] == 6.0 and out["hooks"]["load_s"] == 2.0
    # relative to max(|peer|, 1): the heads' 3e-6 leads; NaN on both sides counts as equal
    assert out["max_difference"] == pytest.approx(3e-6 / (1 + 3e-6), rel=1e-9)
    windows = out["config"]["windows"]
    assert out["simlab_floor_s"] == 4e9 * windows / 8e9
    assert out["ceiling"] == 6.0 / out["simlab_floor_s"]
    assert out["met"]["ratio"] == (2.5 >= out["target"]["ratio"])


def test_hooks_workload_medians_and_both_peers(fake_worker):
    out = trained.run_hooks("M1", True, False, log=lambda s: None, rounds=3, peak=8.0)
    assert out["ratio"] == 2.5 and out["ratio_range"] == [1.5, 4.0]
    assert out["ratio_layer"] == statistics.median([0.5 * x for x in (2.5, 1.5, 4.0)])
    assert out["hooks"]["model_s"] == 6.0 and out["hooks"]["layer_s"] == 3.0
    assert out["max_abs_diff"] == pytest.approx(1e-6, rel=1e-9)
    assert out["ceiling_layer"] == 3.0 / out["simlab_floor_s"]
