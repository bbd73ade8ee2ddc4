"""M2 of `simlab bench`: the decoder study's counterfactual sweep (experiments/
smollm2_counterfactual.py) on SmolLM2-135M (--quick: the tiny Llama GGUF fixture), simlab
(simlab.studies.bench.decoder: the study's own programs) against HF transformers with forward
hooks, a hooked whole-model forward per point (simlab.studies.bench.hf_decoder; the `bench` and
`models` extras), each in its own process, compile and steady state apart, the two sides' values
compared; the ratio is the peer's steady state / simlab's (docs/performance.md, "M2").

Its table (`table`), verdict line (`verdict`) and settings block (`settings`, the
docs/performance.md block "m2-settings") are here; simlab.studies.bench.report prints them.
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from simlab.studies import table as tables
from simlab.studies.bench.trained import workload_config
from simlab.studies.bench.workers import median_over, run_rounds
from simlab.studies.bench.workloads import HOOKS, TARGETS, hooks_config

SIMLAB_TIMES = ("load_s", "first_window_s", "compile_s", "steady_s", "inputs_s", "points_s")
KEYS = ("source", "layers", "massive", "batch", "length", "windows")


def run_decoder(
    name: str,
    quick: bool,
    isolate: bool,
    log=print,
    peer: bool = True,
    rounds: int = 1,
    repeats: int | None = None,
    peak: float | None = None,
) -> dict[str, Any]:
    """A decoder hooks workload (M2), `rounds` times: simlab's side (no persistent compilation
    cache: its compile is a cold one), then the HF hooks peer, each in its own process. Medians
    over rounds in the table, every round in the JSON; the ratio of the steady states with its
    range over rounds, the values' agreement, and with the matmul peak (GFLOP/s, the same run)
    simlab's FLOP floor and the largest ratio it allows."""
    cfg = workload_config(name, quick, repeats)
    spec = {**{k: cfg[k] for k in KEYS}, "repeats": cfg["repeats"]}

    def job(r):  # the FLOPs (the same every round) counted in the first round only
        return {**spec, "count_flops": r == 0}

    runs = run_rounds(name, ("decoder", "decoder_hooks"), job, rounds, isolate, log, peer)
    first = runs[0]["simlab"]
    out = {
        "name": name,
        "title": title(name, cfg, first["layers"]),
        "config": cfg,
        "layers": first["layers"],
        "massive_dims": first["massive_dims"],
        "rounds": runs,
        "simlab": {k: median_over(runs, lambda r, k=k: r["simlab"][k]) for k in SIMLAB_TIMES},
        "hooks": None,
        "target": {"ratio": TARGETS[name]["ratio"]},
        "met": {},
    }
    out["simlab"]["flops_per_window"] = first["flops_per_window"]
    if peer:
        add_peer(out, runs)
    if peak:
        add_floor(out, peak, peer)
    return out


def difference(a, b) -> float:
    """The largest |a - b| / max(|b|, 1) over the entries both define (NaN where a condition is
    not defined must be NaN on both sides: else inf)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return float("inf")
    ok = ~np.isnan(b)
    return float(np.max(np.abs(a[ok] - b[ok]) / np.maximum(np.abs(b[ok]), 1.0), initial=0.0))


def add_peer(out: dict[str, Any], runs: list) -> None:
    """The peer's side (in place): its medians, the ratio of its steady state to simlab's (median
    and range over rounds), the ratio with simlab's compile added, its FLOPs per window set and
    forwards, and the largest difference of the values and of the head statistics."""
    first = runs[0]["hooks"]
    out["hooks"] = {
        "load_s": median_over(runs, lambda r: r["hooks"]["load_s"]),
        "steady_s": median_over(runs, lambda r: r["hooks"]["steady_s"]),
        **{k: first[k] for k in ("torch", "transformers", "threads", "forwards_per_window")},
        "flops_per_window": first["flops_per_window"],
    }
    ratios = [r["hooks"]["steady_s"] / r["simlab"]["steady_s"] for r in runs]
    out["ratio"] = statistics.median(ratios)
    out["ratio_range"] = [min(ratios), max(ratios)]

    def with_compile(r):
        return r["hooks"]["steady_s"] / (r["simlab"]["compile_s"] + r["simlab"]["steady_s"])

    out["ratio_with_compile"] = median_over(runs, with_compile)
    out["max_difference"] = max(
        difference(r["simlab"][k], r["hooks"][k]) for r in runs for k in ("values", "heads")
    )
    out["met"]["ratio"] = out["ratio"] >= out["target"]["ratio"]


def add_floor(out: dict[str, Any], peak: float, peer: bool) -> None:
    """simlab's floor (in place): its counted FLOPs of every window set at the matmul peak, its
    executed share of the peak, and the largest ratio over the peer that floor allows."""
    flops = out["simlab"]["flops_per_window"]["total"] * out["config"]["windows"]
    out["simlab_floor_s"] = flops / (peak * 1e9)
    out["simlab_peak_fraction"] = out["simlab_floor_s"] / out["simlab"]["steady_s"]
    if peer:
        out["ceiling"] = out["hooks"]["steady_s"] / out["simlab_floor_s"]


def title(name: str, cfg: dict[str, Any], layers) -> str:
    source = cfg["source"].rstrip("/").rsplit("/", 1)[-1]
    return (
        f"{HOOKS[name]['title']} ({source}, layers {', '.join(map(str, layers))}): 6 conditions, "
        f"{cfg['windows']} window set{'s' * (cfg['windows'] > 1)} of {cfg['batch']} x "
        f"{cfg['length']} tokens"
    )


COLUMNS = (
    "workload",
    "HF hooked forwards per window set",
    "HF hooks steady s",
    "simlab steady s (layer inputs / points)",
    "simlab compile s",
    "ratio (target) [range over rounds]",
    "ratio incl. compile",
    "GFLOP per window set: simlab / HF",
    "simlab at the matmul peak: floor s (executed % of peak)",
    "largest ratio the floor allows",
    "max difference",
)


def _gf(x) -> str:
    return "-" if x is None else f"{x / 1e9:.3g}"


def row(w: dict) -> list[str]:
    """One decoder hooks workload's row (the columns above)."""
    sl, h = w["simlab"], w["hooks"]
    floor = "-"
    if "simlab_floor_s" in w:
        floor = f"{w['simlab_floor_s']:.3g} ({100 * w['simlab_peak_fraction']:.0f}%)"
    head = [
        f"{w['name']} {w['title']}",
        "-" if h is None else str(h["forwards_per_window"]),
        "-" if h is None else f"{h['steady_s']:.3g}",
        f"{sl['steady_s']:.3g} ({sl['inputs_s']:.3g} / {sl['points_s']:.3g})",
        f"{sl['compile_s']:.3g}",
    ]
    fl = sl["flops_per_window"]["total"]
    if h is None:
        return head + ["-", "-", f"{_gf(fl)} / -", floor, "-", "-"]
    tgt = w["target"]["ratio"]
    ratio = f"{w['ratio']:.2f}x (>= {tgt:g}x: {'met' if w['met']['ratio'] else 'NOT met'})"
    if len(w["rounds"]) > 1:
        ratio += f" [{w['ratio_range'][0]:.2f}-{w['ratio_range'][1]:.2f}]"
    return head + [
        ratio,
        f"{w['ratio_with_compile']:.2f}x",
        f"{_gf(fl)} / {_gf(h['flops_per_window'])}",
        floor,
        f"{w['ceiling']:.2f}x" if "ceiling" in w else "-",
        f"{w['max_difference']:.1e}",
    ]


def table(workloads: list[dict]) -> list[str]:
    """The decoder workloads' table and each one's verdict line."""
    out = [tables.format_table(COLUMNS, [row(w) for w in workloads], markdown=True)]
    return out + [line for w in workloads if w.get("hooks") for line in ("", verdict(w))]


def verdict(w: dict) -> str:
    """The target's verdict and what simlab's FLOP floor allows on this machine."""
    tgt = w["target"]["ratio"]
    met = "met" if w["met"]["ratio"] else "NOT met"
    lo, hi = w["ratio_range"]
    spread = f" [{lo:.2f}-{hi:.2f}]" if len(w["rounds"]) > 1 else ""
    line = (
        f"{w['name']} target (the HF hooks peer, a hooked whole-model forward per point, >= "
        f"{tgt:g}x simlab in steady state): {met}, {w['ratio']:.2f}x{spread}; with simlab's "
        f"compile counted {w['ratio_with_compile']:.2f}x."
    )
    if "ceiling" in w:
        reach = "within" if w["ceiling"] >= tgt else "out of"
        line += (
            f" simlab's counted FLOPs at this run's matmul peak would allow at most "
            f"{w['ceiling']:.2f}x, so {tgt:g}x is {reach} reach on this machine."
        )
    return line + f" The two sides' values differ by at most {w['max_difference']:.1e} (relative)."


def settings(name: str) -> str:
    """The settings of a decoder hooks workload and of its --quick run, from the registry (the
    docs/performance.md block "m2-settings")."""

    def sizes(c: dict) -> str:
        passes = f"the best of {c['repeats']} passes" if c["repeats"] > 1 else "one pass"
        dims = (
            "the study's calibrated massive dims (figures/data/smollm2_counterfactual/meta.json)"
            if c["massive"] == "study"
            else "massive dims declared "
            + ", ".join(f"layer {k}: {v}" for k, v in sorted(c["massive"].items()))
        )
        return (
            f"`{c['source']}`, layers {', '.join(map(str, c['layers']))}; the study's 6 "
            f"conditions, {dims}; {c['windows']} window set{'s' * (c['windows'] > 1)} of "
            f"{c['batch']} x {c['length']} token ids; steady state: {passes} over them"
        )

    return (
        f"- **{name}**: model {sizes(hooks_config(name))}; target: the HF hooks peer's steady "
        f"state >= {TARGETS[name]['ratio']:g}x simlab's.\n"
        f"- **{name} --quick**: the tiny Llama GGUF fixture "
        f"{sizes(hooks_config(name, quick=True))}.\n"
    )
