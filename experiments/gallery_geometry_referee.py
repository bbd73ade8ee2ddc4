"""docs/gallery.md's "The referee's questions, by geometry": the referee's wirings, branch sizes
and 12-layer stack (experiments/referee_geometry.toml, referee_geometry_depth.toml) at the ends
of the sharpness range, judged by the declared rule and in the words of
experiments/gallery_geometry.py (its docstring), the covariance measures at their n and d
against their isotropic references (experiments/gallery_sample_size.py).

    python experiments/gallery_geometry.py --referee [figures/data]

tests/studies/test_gallery_geometry.py and tests/test_docs.py check that docs/gallery.md carries
this output on the committed data, character for character.
"""

import sys
from pathlib import Path

import simlab

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gallery_sample_size as sample_size  # noqa: E402
from gallery_geometry import (  # noqa: E402  (one rule, one set of words)
    REGIMES,
    VARIANTS,
    _and,
    _direction,
    _i,
    _views,
    effect,
    fmt,
)

# experiments/referee_geometry.toml's wirings and branch sizes, in its [variants] order
WIRINGS = (
    ("bert", "BERT (post-LN)"),
    ("pre_ln", "pre-LN"),
    ("causal", "post-LN, causal"),
    ("gpt", "pre-LN, causal (GPT)"),
    ("gain8", "attn_gain 8"),
    ("gain32", "attn_gain 32"),
    ("gain64", "attn_gain 64"),
)
COLUMNS = {  # REFEREE_ROWS' words, for the summary
    "out_cos_gain": "the cosine gain",
    "out_mean_sq_norm": "the common part",
    "out_variance": "the private parts",
    "out_participation_ratio": "the participation ratio",
    "out_pc1_share": "the top direction's share",
}
REFEREE_ROWS = (
    "out_cos_gain",
    "out_mean_sq_norm",
    "out_variance",
    "out_participation_ratio",
    "out_pc1_share",
)


def _row(res, i: int, layer: int | None = None) -> tuple[list[str], str, int, int]:
    """The cells of one case (sharpening's effect on each REFEREE_ROWS metric: the cosine gain
    as a share of the room left, the rest relative to lambda 1, each with its verdict; a
    covariance measure also over its isotropic reference at the sweep's n and d, at lambda 1
    and 1000), how the cosine's and the participation ratio's directions compare, and the
    participation ratio's and the top direction's share's directions (+1 more anisotropic)."""
    e = {m: effect(res, m, i, layer) for m in REFEREE_ROWS}
    cells = []
    for m in REFEREE_ROWS:
        if m == "out_cos_gain":  # its scale is the room its input leaves (effect)
            size = f"{e[m]['mean'] / e[m]['scale']:+.1%} of the room"
        else:
            size = f"{e[m]['rel']:+.1%}"
        iso = ""
        if m in sample_size.REFERENCED:
            ref = sample_size.reference(m, *sample_size.n_d(res))
            iso = f"; {e[m]['at1'] / ref:.3f} -> {(e[m]['at1'] + e[m]['mean']) / ref:.3f} of iso"
        cells.append(f"{fmt(e[m]['mean'])} ({size}, {e[m]['verdict']}{iso})")
    cos = _direction("out_cos_gain", e["out_cos_gain"]["verdict"])
    cov = _direction("out_participation_ratio", e["out_participation_ratio"]["verdict"])
    top = _direction("out_pc1_share", e["out_pc1_share"]["verdict"])
    said = {"raises": "raises", "lowers": "lowers"}
    material = [
        f"{COLUMNS[m]} ({said[e[m]['verdict']]})" for m in REFEREE_ROWS if e[m]["verdict"] in said
    ]
    return cells, _views(cos, cov), (cov, top, cos, material)


def _covariance_count(tops: list) -> list[str]:
    """The summary lines on the top direction's share against the participation ratio, and on
    the cases whose cosine gain does not move materially: what else the table rates material.
    `tops`: per case, the participation ratio's and the top share's directions (+1 more
    anisotropic), the cosine's, the material columns, the case's name."""
    both = [(c, t, case) for c, t, _, _, case in tops if c and t]
    opposite = [case for c, t, case in both if c != t]
    alone = [case for c, t, _, _, case in tops if t and not c]
    quiet = [(case, m) for _, _, cos, m, case in tops if not cos]
    return [
        f"- the top direction's share, the other covariance measure above: where both it and "
        f"the participation ratio move materially ({len(both)} cases) they read the same "
        f"direction in {len(both) - len(opposite)}, opposite directions in {len(opposite)}"
        + (f" ({', '.join(opposite)})" if opposite else "")
        + f"; it alone moves materially in {len(alone)}"
        + (f" ({', '.join(alone)})" if alone else "")
        + f", the participation ratio alone in {sum(bool(c and not t) for c, t, *_ in tops)}.",
        f"- where the cosine gain does not move materially ({len(quiet)} cases), the table rates "
        "material: "
        + "; ".join(f"{case}: {_and(m) if m else 'nothing'}" for case, m in quiet)
        + ".",
    ]


def referee(root: Path) -> str:
    """docs/gallery.md's "A referee's questions, by geometry": experiments/referee_geometry.toml
    (the wirings and branch sizes) and referee_geometry_depth.toml (the 12-layer stack), the
    effect of sharpening (lambda 1000 minus 1, paired by seed) by the declared rule above."""
    data = {v: simlab.load(root / "referee_geometry" / v) for v, _ in WIRINGS}
    depth = simlab.load(root / "referee_geometry_depth")
    answer = simlab.load(root / "answer_geometry" / VARIANTS[0][0])
    first = data[WIRINGS[0][0]]
    cfg, lam = first.meta["config"], first.axes["lambda"]
    head = (
        "| case | N | out_cos_gain (share of the room) | common part ‖ybar‖² | private parts "
        "(variance) | participation ratio (and lambda 1 -> 1000 over its isotropic "
        "reference) | top direction's share (and the same) | cosine vs participation ratio |"
    )
    lines = [
        f"Sizes: the answer's block and tokens ({cfg['block']['kind']}, d_model "
        f"{cfg['block']['d_model']}, {cfg['inputs']['batch']} x {cfg['inputs']['length']} "
        f"tokens), {first.n_seeds} seeds (stream {cfg['sweep']['base_seed']}, paired with "
        f"referee_blocks and referee_branch_size; the stack: stream "
        f"{depth.meta['config']['sweep']['base_seed']}, paired with referee_depth); effect = "
        f"lambda {lam[-1]:g} minus lambda {lam[0]:g}, paired by seed: the change, then (its "
        "share of the room left for the cosine gain; relative to lambda 1 for the rest, and "
        "the verdict of the rule above). The covariance measures here are of "
        f"{sample_size.sizes(first)} (every case, and every layer of the stack), read against "
        "their isotropic references at that n and d (simlab.core.finite_sample: "
        + ", ".join(
            f"{m.removeprefix('out_')} {sample_size.reference(m, *sample_size.n_d(first)):.6g}"
            for m in REFEREE_ROWS
            if m in sample_size.REFERENCED
        )
        + f"); the answer's sweep has n = {sample_size.n_d(answer)[0]}, and the BERT block is "
        'compared at both n in "The answer, by geometry" ("One block at two sample sizes").',
        "",
        "**Other wirings and a larger attention branch**:",
        "",
        head,
        "|---|---|---|---|---|---|---|---|",
    ]
    seen, tops = [], []  # every case's "cosine vs participation ratio"; PR's and top's signs
    for v, label in WIRINGS:
        res = data[v]
        for _, nn in REGIMES:
            cells, views, signs = _row(res, _i(res.axes["drift_norm"], nn))
            seen.append(views)
            tops.append((*signs, f"{label} at N {nn:g}"))
            lines.append(f"| {label} | {nn:g} | " + " | ".join(cells) + f" | {views} |")
    n_layers = depth["out_cos"].shape[-1]
    shown = sorted({0, n_layers // 2 - 1, n_layers - 1})
    lines += [
        "",
        f"**Depth** ({n_layers} post-LN layers at BERT init, sharpened in every layer; what "
        "layer L adds, at layers " + ", ".join(str(k + 1) for k in shown) + "):",
        "",
        head.replace("| case |", "| layer |"),
        "|---|---|---|---|---|---|---|---|",
    ]
    for _, nn in REGIMES:
        for k in shown:
            cells, views, signs = _row(depth, _i(depth.axes["drift_norm"], nn), k)
            seen.append(views)
            tops.append((*signs, f"layer {k + 1} at N {nn:g}"))
            lines.append(f"| {k + 1} | {nn:g} | " + " | ".join(cells) + f" | {views} |")
    lines += ["", "**Read off the verdicts:**", ""]
    total = len(seen)
    agree = seen.count("the two views agree")
    opposite = seen.count("the two views point opposite ways")
    cos_only = seen.count("only the cosine moves materially")
    cov_only = seen.count("only the participation ratio moves materially")
    none = total - agree - opposite - cos_only - cov_only
    lines.append(
        f"- of the {total} cases above, the cosine gain and the participation ratio read the "
        f"same direction in {agree}, opposite directions in {opposite}; only the cosine moves "
        f"materially in {cos_only}, only the participation ratio in {cov_only}"
        + (f", neither in {none}" if none else "")
        + "."
    )
    lines += _covariance_count(tops)
    return "\n".join(lines) + "\n"
