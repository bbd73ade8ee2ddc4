"""The report of a training-dynamics run: per-corpus numbers over seeds (mean, std and the
per-seed values), the verdicts computed against the declared criteria (config.Criteria;
docs/training.md, "Verdicts: the criteria") and the printed table (the figures:
simlab.studies.train_dynamics.figures)."""

from __future__ import annotations

import numpy as np

from simlab.engine.results import Results
from simlab.studies.train_dynamics.loop import TABLE_FRACTIONS


def table_steps(res: Results) -> list[int]:
    """The checkpoints nearest to TABLE_FRACTIONS of the run."""
    steps = res.axes["step"]
    return sorted({int(steps[np.argmin(np.abs(steps - f * steps[-1]))]) for f in TABLE_FRACTIONS})


def over_seeds(x) -> dict:
    """{"mean", "std" (ddof 1; 0 for one seed), "seeds": the per-seed values}."""
    x = np.asarray(x, np.float64).ravel()
    std = float(np.std(x, ddof=1)) if len(x) > 1 else 0.0
    return {"mean": float(np.mean(x)), "std": std, "seeds": x.tolist()}


def count_verdict(flags) -> dict:
    """{"seeds": how many seeds meet the criterion, "of": seeds, "verdict": "yes" (all),
    "no" (none) or "inconsistent"}."""
    flags = [bool(f) for f in flags]
    k, n = sum(flags), len(flags)
    return {"seeds": k, "of": n, "verdict": "yes" if k == n else "no" if k == 0 else "inconsistent"}


def head_mean(res: Results, name: str, i: int, layer: int) -> np.ndarray:
    """(seed,) head mean of metric `name` at checkpoint index i and `layer`."""
    return res[name][i, layer].mean(0)


def per_layer(res: Results) -> list[dict]:
    """Per layer, over seeds: the drift and sharpening statistics at step 0 and the end."""
    out = []
    for l in range(res["attn_entropy"].shape[1]):
        dot0, dot1 = head_mean(res, "qk_mean_dot", 0, l), head_mean(res, "qk_mean_dot", -1, l)
        abs_cos = np.abs(res["qk_mean_cos"][-1, l]).mean(0)
        ent = res["attn_entropy"][:, l].mean(1)  # (step, seed) head mean
        share = res["shift_logit_std"][-1, l] ** 2 / np.maximum(res["logit_std"][-1, l] ** 2, 1e-30)
        row = {
            "qk_mean_dot_first": over_seeds(dot0),
            "qk_mean_dot_last": over_seeds(dot1),
            "qk_mean_dot_growth": over_seeds(dot1 / np.maximum(dot0, 1e-30)),
            "abs_qk_mean_cos_last": over_seeds(abs_cos),
            "entropy_last": over_seeds(ent[-1]),
            "entropy_min_over_run": over_seeds(ent.min(0)),
            "entropy_sharpest_head_last": over_seeds(res["attn_entropy"][-1, l].min(0)),
            "shift_share_last": over_seeds(share.mean(0)),
        }
        for n in ("q_mean_norm", "k_mean_norm", "q_rms"):
            row[f"{n}_first"] = over_seeds(head_mean(res, n, 0, l))
            row[f"{n}_last"] = over_seeds(head_mean(res, n, -1, l))
        for n in ("out_cos", "out_cos_within"):
            row[f"{n}_first"] = over_seeds(res[n][0, l, 0])
            row[f"{n}_last"] = over_seeds(res[n][-1, l, 0])
            row[f"{n}_max_over_run"] = over_seeds(res[n][:, l, 0].max(0))
        row["out_cos_end_minus_first"] = over_seeds(
            res["out_cos"][-1, l, 0] - res["out_cos"][0, l, 0]
        )
        out.append(row)
    return out


def loop_table(res: Results, tol: float) -> list[dict]:
    """Per table checkpoint and layer: measured and lab entropies (head means) over seeds, the
    errors lab - measured, and whether the lab predicts the cell (|error| <= tol, every seed)."""
    steps, rows = res.axes["step"], []
    for s in table_steps(res):
        i = int(np.argmin(np.abs(steps - s)))
        for l in range(res["attn_entropy"].shape[1]):
            meas = head_mean(res, "attn_entropy", i, l)
            row = {"step": s, "layer": l, "measured": over_seeds(meas)}
            for n in ("lab_entropy_norms", "lab_entropy_aligned"):
                lab = head_mean(res, n, i, l)
                row[n] = over_seeds(lab)
                row[f"error_{n.split('_')[-1]}"] = over_seeds(lab - meas)
            row["token_logit_std"] = over_seeds(head_mean(res, "token_logit_std", i, l))
            row["lab_token_logit_std"] = over_seeds(head_mean(res, "lab_token_logit_std", i, l))
            row["predicts"] = bool(np.all(np.abs(row["error_norms"]["seeds"]) <= tol))
            rows.append(row)
    return rows


def head_flags(res: Results, crit: dict) -> dict[str, np.ndarray]:
    """Per (layer, head, seed), the criteria of config.Criteria: "drift" (|mq . mk| grown by
    >= drift_growth x since step 0 and |cos(mq, mk)| >= drift_cos at the end), "sharp" (final
    normalised entropy <= sharp_entropy) and "both"."""
    dot, cos = res["qk_mean_dot"], np.abs(res["qk_mean_cos"][-1])
    drift = (dot[-1] >= crit["drift_growth"] * dot[0]) & (cos >= crit["drift_cos"])
    sharp = res["attn_entropy"][-1] <= crit["sharp_entropy"]
    return {"drift": drift, "sharp": sharp, "both": drift & sharp}


def summarize(res: Results) -> dict:
    """Everything the report states about one corpus, with the verdicts computed against
    meta["config"]["criteria"] (config.Criteria): a seed shows drift (sharpening) when one of
    its heads does; the counts of such heads are reported per seed."""
    cfg, c = res.meta["config"], res.meta["corpus"]
    crit = cfg["criteria"]
    final = np.asarray(res.meta["final_loss"], np.float64)
    layers = per_layer(res)
    flags = head_flags(res, crit)
    heads = {k: over_seeds(v.sum((0, 1))) for k, v in flags.items()}
    loop = loop_table(res, crit["loop_tolerance"])
    return {
        "corpus": {k: v for k, v in c.items()},
        "sizes": {
            k: cfg[k] for k in ("d_model", "depth", "n_heads", "context", "batch", "steps", "seeds")
        },
        "loss": {
            "first": over_seeds(res["loss"][0, 0, 0]),
            "last_tracked": over_seeds(res["loss"][-1, 0, 0]),
            "final": over_seeds(final),
            "below_context_free": over_seeds(c["context_free_loss"] - final),
            "above_floor": None if c["loss_floor"] is None else over_seeds(final - c["loss_floor"]),
        },
        "layers": layers,
        "n_heads": cfg["n_heads"],
        "heads": heads,
        "verdicts": {
            "attention_used": count_verdict(
                final < c["context_free_loss"] - crit["attention_margin"]
            ),
            "drift": count_verdict(flags["drift"].any((0, 1))),
            "sharpening": count_verdict(flags["sharp"].any((0, 1))),
            "drift_and_sharpening_in_one_head": count_verdict(flags["both"].any((0, 1))),
            "lab_predicts": {"cells": sum(r["predicts"] for r in loop), "of": len(loop)},
        },
        "criteria": crit,
        "loop": loop,
        "train_time_s": res.meta.get("train_time_s"),
        "loop_time_s": res.meta.get("loop_time_s"),
    }


PROPERTIES = ("drift", "sharpening")


def overall(summaries: dict[str, dict]) -> dict:
    """The study's verdict on "drift and sharpening are not only a product of long-tailed
    cross-entropy" (docs/training.md, "Verdicts: the criteria"). Per property P (drift,
    sharpening), over the corpora with a uniform unigram law whose model uses attention:
      "supported"      one of them shows P in every seed;
      "not supported"  none does, but the Zipf variant of one of their tasks (its model using
                       attention too) does: P came with the long-tailed law only;
      "undecided"      otherwise (no uniform corpus uses attention, or P shows in neither
                       variant).
    The claim is "supported" when both properties are, "not supported" when either is not,
    "partly supported" when one is supported and the other undecided, else "undecided". That
    combining rule was revised after the full run and is exploratory; the rule declared before
    it (`declared`) is: "supported" when one uniform corpus whose model uses attention shows
    drift and sharpening (each in every seed), else "not supported". The text corpus (bytes) is
    reported beside it.

    `anisotropy` states the quantity the paper's claim is about, per task with both laws and per
    layer: the final anisotropy (seed mean) of the Zipf and the uniform variant and whether the
    Zipf one is above; and per corpus and layer whether any seed ends above its step-0 value."""

    def yes(s, k):
        return s["verdicts"][k]["verdict"] == "yes"

    def used(law):
        return {
            s["corpus"]["task"]: n
            for n, s in summaries.items()
            if s["corpus"]["law"] == law and yes(s, "attention_used")
        }

    uniform, zipf = used("uniform"), used("zipf")
    parts = {}
    for prop in PROPERTIES:
        shown = [n for n in uniform.values() if yes(summaries[n], prop)]
        twins = [zipf[t] for t in uniform if t in zipf and yes(summaries[zipf[t]], prop)]
        parts[prop] = {
            "verdict": "supported" if shown else "not supported" if twins else "undecided",
            "uniform_corpora_showing_it": shown,
            "zipf_twins_showing_it": twins,
        }
    v = [parts[p]["verdict"] for p in PROPERTIES]
    if all(x == "supported" for x in v):
        verdict = "supported"
    elif "not supported" in v:
        verdict = "not supported"
    elif "supported" in v:
        verdict = "partly supported"
    else:
        verdict = "undecided"
    rows = {
        n: {k: s["verdicts"][k]["verdict"] for k in ("attention_used", *PROPERTIES)}
        for n, s in summaries.items()
    }
    both = [n for n in uniform.values() if all(yes(summaries[n], p) for p in PROPERTIES)]
    declared = {
        "rule": "supported when one uniform corpus whose model uses attention shows drift and "
        "sharpening (each in every seed), else not supported (declared before the run)",
        "verdict": "supported" if both else "not supported",
        "uniform_corpora_showing_both": both,
    }
    return {
        "declared": declared,
        "anisotropy": anisotropy_comparison(summaries),
        "not_only_long_tailed": verdict,
        "by_property": parts,
        "uniform_corpora_using_attention": list(uniform.values()),
        "verdicts": rows,
    }


def anisotropy_comparison(summaries: dict[str, dict]) -> dict:
    """Final anisotropy (mean pairwise cosine of a layer's output, seed mean) of each task's Zipf
    variant against its uniform twin, per layer; and per corpus and layer, the largest per-seed
    end-minus-start change (any seed above its initial anisotropy when it is > 0)."""
    by_task: dict[str, dict] = {}
    for n, s in summaries.items():
        by_task.setdefault(s["corpus"]["task"], {})[s["corpus"]["law"]] = n
    pairs = {}
    for task, laws in by_task.items():
        if "zipf" not in laws or "uniform" not in laws:
            continue
        z, u = (summaries[laws[k]]["layers"] for k in ("zipf", "uniform"))
        pairs[task] = [
            {
                "layer": l,
                "zipf": zl["out_cos_last"]["mean"],
                "uniform": ul["out_cos_last"]["mean"],
                "zipf_above": zl["out_cos_last"]["mean"] > ul["out_cos_last"]["mean"],
            }
            for l, (zl, ul) in enumerate(zip(z, u))
        ]
    ends = {
        n: [max(r["out_cos_end_minus_first"]["seeds"]) for r in s["layers"]]
        for n, s in summaries.items()
    }
    return {
        "zipf_vs_uniform_final": pairs,
        "zipf_above_uniform_everywhere": all(
            r["zipf_above"] for rows in pairs.values() for r in rows
        ),
        "max_end_minus_initial": ends,
        "any_model_ends_above_initial": any(x > 0 for v in ends.values() for x in v),
    }


def _pm(d: dict, fmt: str = ".3f") -> str:
    return f"{d['mean']:{fmt}} +- {d['std']:{fmt}}"


def format_summary(name: str, s: dict) -> str:
    c, z, v = s["corpus"], s["sizes"], s["verdicts"]
    floor = "unknown" if c["loss_floor"] is None else f"{c['loss_floor']:.3f}"
    lines = [
        f"[{name}] d_model {z['d_model']}, depth {z['depth']}, context {z['context']}, "
        f"{z['steps']} steps, {z['seeds']} seeds: held-out loss at step 0 "
        f"{_pm(s['loss']['first'])}, final {_pm(s['loss']['final'])} nats "
        f"(floor {floor}, context-free {c['context_free_loss']:.3f}, unigram entropy "
        f"{c['unigram_entropy']:.3f})",
        f"  attention used: {v['attention_used']['verdict']} "
        f"({v['attention_used']['seeds']}/{v['attention_used']['of']} seeds; "
        f"{_pm(s['loss']['below_context_free'])} nats below context-free)   drift: "
        f"{v['drift']['verdict']} ({v['drift']['seeds']}/{v['drift']['of']})   sharpening: "
        f"{v['sharpening']['verdict']} ({v['sharpening']['seeds']}/{v['sharpening']['of']})"
        f"   lab predicts {v['lab_predicts']['cells']}/{v['lab_predicts']['of']} cells",
        f"  heads (of {z['depth'] * s['n_heads']}) drifting {_pm(s['heads']['drift'], '.1f')}, "
        f"sharp {_pm(s['heads']['sharp'], '.1f')}, both {_pm(s['heads']['both'], '.1f')}",
    ]
    for l, r in enumerate(s["layers"]):
        lines.append(
            f"  layer {l}: |mq.mk| {_pm(r['qk_mean_dot_first'], '.3g')} -> "
            f"{_pm(r['qk_mean_dot_last'], '.3g')} (x {_pm(r['qk_mean_dot_growth'], '.3g')})  "
            f"|cos| {_pm(r['abs_qk_mean_cos_last'], '.2f')}  entropy "
            f"{_pm(r['entropy_last'], '.3f')} (sharpest head "
            f"{_pm(r['entropy_sharpest_head_last'], '.3f')})"
            f"  anisotropy {_pm(r['out_cos_first'], '.2f')} -> {_pm(r['out_cos_last'], '.2f')}"
        )
    lines.append(
        "  closing the loop:  step layer  measured (mean +- std over seeds)  lab[norms]  "
        "error  lab[aligned]  predicts"
    )
    for r in s["loop"]:
        lines.append(
            f"    {r['step']:5d} {r['layer']:3d}  {_pm(r['measured'])}  "
            f"{_pm(r['lab_entropy_norms'])}  {r['error_norms']['mean']:+.3f}  "
            f"{_pm(r['lab_entropy_aligned'])}  {'yes' if r['predicts'] else 'no'}"
        )
    return "\n".join(lines)


def format_overall(o: dict) -> str:
    parts = "; ".join(
        f"{p}: {d['verdict']} (uniform corpora showing it: "
        f"{', '.join(d['uniform_corpora_showing_it']) or 'none'}; Zipf twins: "
        f"{', '.join(d['zipf_twins_showing_it']) or 'none'})"
        for p, d in o["by_property"].items()
    )
    d, a = o["declared"], o["anisotropy"]
    pairs = "; ".join(
        f"{t} " + ", ".join(f"L{r['layer']} {r['zipf']:.2f} vs {r['uniform']:.2f}" for r in rows)
        for t, rows in a["zipf_vs_uniform_final"].items()
    )
    return (
        f"'not only long-tailed', declared rule: {d['verdict']} (uniform corpora using attention "
        f"with drift and sharpening: {', '.join(d['uniform_corpora_showing_both']) or 'none'})\n"
        f"  exploratory (revised) rule: {o['not_only_long_tailed']} (uniform corpora using "
        f"attention: {', '.join(o['uniform_corpora_using_attention']) or 'none'}; {parts})\n"
        f"  final anisotropy, Zipf vs uniform: {pairs}; Zipf above everywhere: "
        f"{'yes' if a['zipf_above_uniform_everywhere'] else 'no'}; any model ends above its "
        f"initial anisotropy: {'yes' if a['any_model_ends_above_initial'] else 'no'}"
    )
