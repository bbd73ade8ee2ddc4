"""The benchmark's tables (Markdown, also printed)."""

from __future__ import annotations

from typing import Any

from simlab.studies import table
from simlab.studies.bench import trained_decoder
from simlab.studies.bench.counterfactual import lambdas
from simlab.studies.bench.workloads import (
    CACHED_COMPILE_S,
    DECODERS,
    HOOKS,
    PEERS,
    TARGETS,
    hooks_config,
)


def _gf(x: float) -> float:
    return x / 1e9


def _fmt(x, spec=".3g"):
    return "-" if x is None else format(x, spec)


def format_table(report: dict[str, Any]) -> str:
    """The run as Markdown tables (also printed): the peers, the loops, W4's grids and the
    metric stages, each present when the run has it, then the machine's load."""
    peak = report["peak"]["gflops"]
    lines = [
        f"matmul peak (float32, {report['peak']['n']}^3, jitted): {peak:.1f} GFLOP/s "
        f"(median {report['peak']['gflops_median']:.1f})",
        "",
    ]
    peers = [w for w in report["workloads"] if w["name"] in PEERS]
    if peers:
        lines += [table.format_table(PEER_COLUMNS, [_peer_row(w) for w in peers], markdown=True)]
        cached = max(w["engine_warm"]["compile_s"] for w in peers)
        lines += [
            "",
            f"cached compile (warm cache, slowest workload): {cached:.2f} s (target <= "
            f"{CACHED_COMPILE_S:g} s: {'met' if cached <= CACHED_COMPILE_S else 'NOT met'})",
            "",
        ]
    loops = [w for w in report["workloads"] if w["name"] in ("W1", "W2", "W3")]
    if loops:
        lines += [table.format_table(LOOP_COLUMNS, [_loop_row(w) for w in loops], markdown=True)]
    for w in report["workloads"]:
        if w["name"] == "W4":
            lines += ["", _w4_table(w)]
    hooks = [w for w in report["workloads"] if w["name"] in HOOKS and w["name"] not in DECODERS]
    if hooks:
        lines += [
            "",
            table.format_table(HOOKS_COLUMNS, [_hooks_row(w) for w in hooks], markdown=True),
        ]
        lines += [line for w in hooks if "ceiling" in w for line in ("", _hooks_verdict(w))]
    decoders = [w for w in report["workloads"] if w["name"] in DECODERS]
    if decoders:
        lines += [""] + trained_decoder.table(decoders)
    staged = [w for w in report["workloads"] if w.get("stages")]
    if staged:
        rows = [_stage_row(w, label, st) for w in staged for label, st in w["stages"].items()]
        lines += ["", table.format_table(STAGE_COLUMNS, rows, markdown=True)]
    lines += _load_lines(report)
    return "\n".join(lines)


PEER_COLUMNS = (
    "workload",
    "points",
    "PyTorch loop s (ms/pt)",
    "engine wall s cold / warm (compile s cold / warm)",
    "ratio cold / warm (target) [range over rounds]",
    "engine ms/pt steady",
    "executed GFLOP/s (% peak)",
)
LOOP_COLUMNS = (
    "workload",
    "points x seeds",
    "engine pts/s",
    "engine s (compile s)",
    "GFLOP/pt engine / plain",
    "GFLOP/seed hoisted",
    "executed GFLOP/s (% peak)",
    "JAX loop s",
    "speed-up (target)",
    "peak RSS MiB engine / loop",
)
W4_COLUMNS = ("W4 grid", "points", "engine pts/s", "chunk points", "peak RSS MiB (base)")
STAGE_COLUMNS = (
    "stages (metric subsets)",
    "points",
    "engine ms/pt",
    "loop ms/pt",
    "speed-up",
    "GFLOP/pt engine / plain",
)


HOOKS_COLUMNS = (
    "workload",
    "points (window sets x (lambdas + clamp))",
    "HF hooks steady s: whole model / layer only",
    "simlab steady s (seed states / points)",
    "simlab compile s",
    "ratio, whole model (target) [range over rounds] / layer only [range]",
    "ratio incl. compile (whole model)",
    "GFLOP per window set: simlab / whole model / layer only",
    "simlab at the matmul peak: floor s (executed % of peak)",
    "largest ratio the floor allows: whole model / layer only",
    "max abs difference",
)


def _hooks_row(w: dict) -> list[str]:
    """A hooks workload (M1): the peer's steady state in both modes, simlab's (split into the
    seed states and the points) and its compile, the ratios, the counted FLOPs with the floor
    they set at the matmul peak, and the numbers' agreement."""
    sl, h = w["simlab"], w["hooks"]
    c = w["config"]
    fl = sl.get("flops_per_window", {}).get("total")
    row = [
        f"{w['name']} {w['title']}",
        f"{w['points']} ({c['windows']} x {c['lambdas'] + 1})",
        "-" if h is None else f"{h['model_s']:.3g} / {h['layer_s']:.3g}",
        f"{sl['steady_s']:.3g} ({sl['state_s']:.3g} / {sl['points_s']:.3g})",
        f"{sl['compile_s']:.3g}",
    ]
    if h is None:
        return row + ["-", "-", f"{_fmt(fl and _gf(fl))} / - / -", _floor(w), "-", "-"]
    tgt = w["target"]["ratio"]
    ratio = f"{w['ratio']:.2f}x (>= {tgt:g}x: {'met' if w['met']['ratio'] else 'NOT met'})"
    if "ratio_layer" not in w:  # a run before the whole-model target (its ratio: layer only)
        return row + [f"{ratio} (layer only)", "-", "-", "-", "-", f"{w['max_abs_diff']:.1e}"]
    layer = f"{w['ratio_layer']:.2f}x"
    if len(w["rounds"]) > 1:
        ratio += f" [{w['ratio_range'][0]:.2f}-{w['ratio_range'][1]:.2f}]"
        layer += f" [{w['ratio_layer_range'][0]:.2f}-{w['ratio_layer_range'][1]:.2f}]"
    hf = h["flops_per_window"]
    ceiling = "-"
    if "ceiling" in w:
        ceiling = f"{w['ceiling']:.2f}x / {w['ceiling_layer']:.2f}x"
    return row + [
        f"{ratio} / {layer}",
        f"{w['ratio_with_compile']:.2f}x",
        f"{_fmt(fl and _gf(fl))} / {_gf(hf['model']):.3g} / {_gf(hf['layer']):.3g}",
        _floor(w),
        ceiling,
        f"{w['max_abs_diff']:.1e}",
    ]


def _hooks_verdict(w: dict) -> str:
    """The target's verdict and what the FLOP floor allows against the layer-only peer."""
    tgt = w["target"]["ratio"]
    met = "met" if w["met"]["ratio"] else "NOT met"
    lo, hi = w["ratio_range"]
    spread = f" [{lo:.2f}-{hi:.2f}]" if len(w["rounds"]) > 1 else ""
    reach = "within" if w["ceiling_layer"] >= tgt else "out of"
    return (
        f"{w['name']} target (the whole-model peer >= {tgt:g}x simlab): {met}, "
        f"{w['ratio']:.2f}x{spread}. Against the layer-only peer "
        f"{w['ratio_layer']:.2f}x; "
        f"simlab's counted FLOPs at this run's matmul peak would allow at most "
        f"{w['ceiling_layer']:.2f}x there, so {tgt:g}x over the layer-only peer is {reach} reach "
        "on this machine."
    )


def _floor(w: dict) -> str:
    if "simlab_floor_s" not in w:
        return "-"
    return f"{w['simlab_floor_s']:.3g} ({100 * w['simlab_peak_fraction']:.0f}%)"


def hooks_settings(name: str) -> str:
    """The settings of a hooks workload and of its --quick run, from the registry (the
    docs/performance.md block "m1-settings")."""

    def sizes(c: dict) -> str:
        lam = lambdas(c["lambdas"])
        passes = f"the best of {c['repeats']} passes" if c["repeats"] > 1 else "one pass"
        layer = "its last layer" if c["layer"] is None else f"layer {c['layer']}"
        return (
            f"`{c['source']}`, {layer}; {c['lambdas']} values of lambda, log-spaced over "
            f"{lam[0]:g} .. {lam[-1]:g}, and "
            f"the uniform clamp; {c['windows']} window sets of {c['batch']} x {c['length']} "
            f"token ids; steady state: {passes} over them"
        )

    return (
        f"- **{name}**: model {sizes(hooks_config(name))}; target: the whole-model hooks "
        f"peer's steady state >= {TARGETS[name]['ratio']:g}x simlab's (the layer-only peer's "
        "ratio reported beside it).\n"
        f"- **{name} --quick**: the tiny BERT fixture {sizes(hooks_config(name, quick=True))}.\n"
    )


def _peer_row(w: dict) -> list[str]:
    """A PyTorch-peer workload: wall times cold and warm, the ratio to the peer (with its
    range over rounds and the target), the steady per-point time and the executed rate."""
    c, wm, t = w["engine_cold"], w["engine_warm"], w["torch"]
    tgt = w["target"]["ratio"]
    if t is None:
        peer, ratio = "-", "-"
    else:
        peer = f"{t['total_s']:.3g} ({t['ms_per_point']:.3g})"
        ratio = f"{w['ratio_cold']:.2f}x / {w['ratio_warm']:.2f}x"
        if len(w.get("rounds", ())) > 1:
            rc, rw = w["ratio_range"]["cold"], w["ratio_range"]["warm"]
            ratio += f" [{rc[0]:.2f}-{rc[1]:.2f} / {rw[0]:.2f}-{rw[1]:.2f}]"
        if tgt is not None:
            ratio += (
                f" (>= {tgt:g}x: {'met' if w['met']['ratio_cold'] else 'NOT met'} / "
                f"{'met' if w['met']['ratio_warm'] else 'NOT met'})"
            )
    return [
        f"{w['name']} {w['title']}",
        w["points"],
        peer,
        f"{c['wall_s']:.3g} / {wm['wall_s']:.3g} ({c['compile_s']:.2f} / {wm['compile_s']:.2f})",
        ratio,
        f"{w['engine_ms_per_point']:.3g}",
        f"{w['engine_gflops']:.3g} ({100 * w['peak_fraction']:.0f}%)",
    ]


def _loop_row(w: dict) -> list[str]:
    """A workload against the plain JAX loop: rates, FLOPs, the speed-up and its target."""
    e, lo, fl = w["engine"], w["loop"], w["flops"]
    loop_s = ("~" if lo["extrapolated"] else "") + f"{lo['total_s']:.3g}"
    if lo["extrapolated"]:
        loop_s += f" ({lo['timed_points']}/{w['points']} pts)"
    tgt = w["target"]["speedup"]
    met = "met" if w["met"]["speedup"] else "NOT met"
    frac = f"{w['engine_gflops']:.3g} ({100 * w['peak_fraction']:.0f}%"
    if "peak_fraction" in w["target"]:
        frac += f"; target {100 * w['target']['peak_fraction']:.0f}%: " + (
            "met" if w["met"]["peak_fraction"] else "NOT met"
        )
    frac += ")"
    return [
        f"{w['name']} ({fl['path']})",
        f"{w['points']} x {w['seeds']}",
        f"{w['points_per_s']:.4g}",
        f"{e['compute_s']:.3g} ({e['compile_s']:.2g})",
        f"{_gf(fl['engine_per_point']):.3g} / {_gf(fl['plain_per_point']):.3g}",
        f"{_gf(fl['engine_per_seed']):.3g}",
        frac,
        loop_s,
        f"{w['speedup']:.2f}x (>= {tgt:g}x: {met})",
        f"{e['rss_peak_mb']:.0f} / {lo['rss_peak_mb']:.0f}",
    ]


def _w4_table(w: dict) -> str:
    """W4's grids (memory against grid size) and its peak-memory ratio."""
    rows = []
    for label, g in w["grids"].items():
        e = g["engine"]
        rows.append(
            [
                label,
                g["points"],
                f"{g['points_per_s']:.4g}",
                e["layout"]["chunk_points"],
                f"{e['rss_peak_mb']:.0f} ({e['rss_base_mb']:.0f})",
            ]
        )
    tgt = w["target"]["memory_ratio"]
    return "\n".join(
        [
            table.format_table(W4_COLUMNS, rows, markdown=True),
            f"\nW4 peak-memory ratio ({w['memory']}, largest / smallest grid): "
            f"{w['memory_ratio']:.3f} "
            f"(target <= {tgt:g}: {'met' if w['met']['memory_ratio'] else 'NOT met'}); "
            f"above the jax-initialised baseline: {_fmt(w['memory_ratio_net'])}",
        ]
    )


def _stage_row(w: dict, label: str, st: dict) -> list[str]:
    return [
        f"{w['name']}: {label}",
        st["points"],
        f"{1e3 * st['engine_s_per_point']:.3g}",
        f"{1e3 * st['loop_s_per_point']:.3g}",
        f"{st['speedup']:.2f}x",
        f"{_gf(st['flops']['engine_per_point']):.3g} / {_gf(st['flops']['plain_per_point']):.3g}",
    ]


def _load_lines(report: dict) -> list[str]:
    """The load average around the run and the CPU other processes took during it."""
    la = report["load_average"]
    lines = [
        f"\nload average (1 min) before / after: {la['before'][0]:.2f} / {la['after'][0]:.2f}"
        f" on {report['machine']['cores']} cores (the benchmark's own load included)"
    ]
    fc = report.get("foreign_cpu")
    if fc:
        lines.append(
            f"CPU used by other processes during the run: {fc['cpu_s']:.1f} s "
            f"({100 * fc['share']:.1f}% of {report['machine']['cores']} cores x "
            f"{report['wall_s']:.0f} s); hypervisor steal {fc['steal_s']:.1f} s"
        )
    return lines
