"""A referee's questions (docs/gallery.md, "A referee's questions"), answered from the committed
data of experiments/referee_depth.toml (a 12-layer BERT-init post-LN stack with a drift),
referee_blocks.toml (pre-LN, causal, GPT-style wirings at the answer's points) and
referee_branch_size.toml (the attention branch scaled up by attn_gain), beside the BERT block's
own numbers (decomposition_sharpness.toml); every number is a seed mean with its 95% interval,
its share of the room the input leaves and the verdict of the relative rule
(experiments/gallery_answer.py, experiments/gallery_geometry.py), differences paired by seed.

    python experiments/gallery_referee.py [figures/data]

tests/studies/test_gallery_answer.py checks that docs/gallery.md carries this output.
"""

import sys
from pathlib import Path

import numpy as np

import simlab

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gallery_answer import MATERIAL, cell, ci_text, resolution, room  # noqa: E402  (one rule)
from gallery_sharpness import REGIMES as ANSWER_REGIMES  # noqa: E402  (the answer's regimes)
from gallery_sharpness import _near  # noqa: E402

REGIMES = tuple((n, name) for name, n in ANSWER_REGIMES)


def _ends(res, metric, n, *index):
    """Per seed: metric at the first and the last lambda, at drift n (and further axis indices
    before the seed axis)."""
    x = res[metric][_near(res.axes["drift_norm"], n)]
    return x[(0, *index)], x[(-1, *index)]


def _say(res, a, b, scale) -> str:
    """The change b - a (paired by seed) with its share of the room and its verdict."""
    c, v = cell(b - a, scale, resolution(res, a, b))
    return f"{c} ({v})"


def _room(res, n, inputs_of=None) -> float:
    """The room the input leaves at drift n, mean(1 - input_cos): from the sweep's own
    input_cos, else from `inputs_of`, a sweep of the same seed stream and token sizes, whose
    inputs are the same sample (common random numbers: the tokens and the drift come from the
    seed's key alone, whatever the block)."""
    src = res if "input_cos" in res.metrics else inputs_of
    cfg, other = res.meta["config"], src.meta["config"]
    same = ("base_seed", "batch", "length", "vocab")
    flat = {**cfg["sweep"], **cfg["inputs"]}, {**other["sweep"], **other["inputs"]}
    assert all(flat[0][k] == flat[1][k] for k in same), "not the same input sample"
    return room(src, "out_cos_gain", _near(src.axes["drift_norm"], n))


def _sharpening(res, metric, n, *index, inputs_of=None) -> str:
    """Sharpening's change of an added anisotropy at drift n, judged against the room left."""
    a, b = _ends(res, metric, n, *index)
    return _say(res, a, b, _room(res, n, inputs_of))


def main(root: Path) -> str:
    depth = simlab.load(root / "referee_depth")
    blocks = {v: simlab.load(root / "referee_blocks" / v) for v in ("pre_ln", "causal", "gpt")}
    size = simlab.load(root / "referee_branch_size")
    bert = simlab.load(root / "decomposition_sharpness")
    lam = depth.axes["lambda"]
    n_layers = depth["out_cos"].shape[-1]
    lines = [
        f"Sizes: the answer's block and tokens (d_model {depth.meta['config']['block']['d_model']}"
        f", BERT init, {depth.meta['config']['inputs']['batch']} x "
        f"{depth.meta['config']['inputs']['length']} tokens), {depth.n_seeds} seeds; lambda "
        f"{lam[0]:g} against {lam[-1]:g} (differences paired by seed); each change also as a "
        "share of the room the input leaves (1 - input_cos of the stack's or block's input), "
        f"verdicts by the relative rule (material: {MATERIAL:.0%} of that scale; "
        "experiments/gallery_geometry.py).",
        "",
        f"**Depth** ({n_layers} post-LN layers at BERT init, a drift entering layer 0): the "
        f"anisotropy after the last layer (out_cos) and what sharpening (lambda {lam[-1]:g} minus "
        f"{lam[0]:g}) does to it; the attention entropy of the last layer at lambda {lam[-1]:g}.",
        "",
        "| regime | out_cos after layer "
        f"{n_layers}, lambda {lam[0]:g} | sharpening: change of out_cos | H / ln T, last layer |",
        "|---|---|---|---|",
    ]
    for n, name in REGIMES:
        i = _near(depth.axes["drift_norm"], n)
        # the stack's room: what its input (layer 0's) leaves; the centred gains: their scale
        # input_cos of layer 0 = out_cos - out_cos_gain there (the gain's definition)
        x0 = depth["out_cos"][i, 0, :, 0] - depth["out_cos_gain"][i, 0, :, 0]
        r = float(np.mean(1.0 - x0))
        base, top = depth["out_cos"][i, 0, :, -1], depth["out_cos"][i, -1, :, -1]
        h = float(np.mean(depth["attn_entropy"][i, -1, :, -1]))
        lines.append(
            f"| {name}, N = {n:g} | {ci_text(base)} | {_say(depth, base, top, r)} | {h:.3f} |"
        )
    lines += [
        "",
        f"**Other wirings** (the block's added global anisotropy, out_cos_gain: lambda "
        f"{lam[-1]:g} minus {lam[0]:g}; the BERT block's own beside them, both branches):",
        "",
        "| regime | BERT (post-LN) | pre-LN | post-LN, causal | pre-LN, causal (GPT) |",
        "|---|---|---|---|---|",
    ]
    for n, name in REGIMES:
        row = [_sharpening(bert, "out_cos_gain", n, 0)]
        row += [_sharpening(blocks[v], "out_cos_gain", n) for v in blocks]
        lines.append(f"| {name}, N = {n:g} | " + " | ".join(row) + " |")
    gains = size.axes["attn_gain"]
    lines += [
        "",
        "**A larger attention branch** (attn_gain g_A scales the attention update; its size "
        "against the skip is g_A ‖Attn‖ / ‖x‖, attn_residual_ratio times g_A, at lambda 1): "
        "sharpening, lambda "
        f"{size.axes['lambda'][-1]:g} minus {size.axes['lambda'][0]:g}, of out_cos_gain:",
        "",
        "| attn_gain | " + " | ".join(f"g_A ‖Attn‖ / ‖x‖, N = {n:g}" for n, _ in REGIMES) + " | "
        + " | ".join(f"{name}, N = {n:g}" for n, name in REGIMES) + " |",
        "|---|" + "---|" * (2 * len(REGIMES)),
    ]  # fmt: skip
    for k, g in enumerate(gains):
        ratios = [
            f"{g * float(np.mean(size['attn_residual_ratio'][_near(size.axes['drift_norm'], n), 0, k])):.3f}"  # noqa: E501
            for n, _ in REGIMES
        ]
        effects = [_sharpening(size, "out_cos_gain", n, k, inputs_of=bert) for n, _ in REGIMES]
        lines.append(f"| {g:g} | " + " | ".join(ratios + effects) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(main(Path(sys.argv[1] if len(sys.argv) > 1 else "figures/data")))
