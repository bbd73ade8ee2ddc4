"""The tables docs/training.md shows, printed from a run's summary.json (`simlab train-dynamics`
writes OUT/summary.json; the full run's is committed as figures/data/train-dynamics/summary.json):

    python experiments/training_numbers.py [figures/data/train-dynamics/summary.json]

tests/studies/test_training_numbers.py checks that docs/training.md carries this output between
its markers, character for character. "a ± b": mean and standard deviation (ddof 1) over the
training seeds; verdicts "yes / no / inconsistent (seeds meeting the criterion / seeds)" as
computed by simlab.studies.train_dynamics.report against the declared criteria."""

import json
import sys
from pathlib import Path

LOSS_HEAD = (
    "| corpus | loss floor | context-free loss | final held-out loss | below context-free "
    "| attention used | drift | sharpening | drift and sharpening in one head "
    "| lab predicts (cells) |\n|---|---|---|---|---|---|---|---|---|---|"
)
LAYER_HEAD = (
    "| corpus, layer | \\|mq · mk\\| step 0 → end | growth | \\|cos(mq, mk)\\| end | entropy end "
    "| sharpest head end | anisotropy step 0 → max → end | heads drifting / sharp / both |\n"
    "|---|---|---|---|---|---|---|---|"
)


def pm(d: dict, fmt: str = ".3f") -> str:
    return f"{d['mean']:{fmt}} ± {d['std']:{fmt}}"


def label(name: str, s: dict) -> str:
    return f"{name} (markov)" if s["corpus"]["task"] == "markov" else name


def loss_row(name: str, s: dict) -> str:
    c, v = s["corpus"], s["verdicts"]
    floor = "unknown" if c["loss_floor"] is None else f"{c['loss_floor']:.3f}"
    if c.get("loss_floor_se") is not None:
        floor += f" ± {c['loss_floor_se']:.3f}"

    def count(k):
        return f"{v[k]['verdict']} ({v[k]['seeds']}/{v[k]['of']})"

    cells = [
        label(name, s),
        floor,
        f"{c['context_free_loss']:.3f}",
        pm(s["loss"]["final"]),
        pm(s["loss"]["below_context_free"]),
        count("attention_used"),
        count("drift"),
        count("sharpening"),
        count("drift_and_sharpening_in_one_head"),
        f"{v['lab_predicts']['cells']}/{v['lab_predicts']['of']}",
    ]
    return "| " + " | ".join(cells) + " |"


def heads(s: dict) -> str:
    parts = []
    for k in ("drift", "sharp", "both"):
        d = s["heads"][k]
        parts.append("0" if max(d["seeds"]) == 0 else pm(d, ".1f"))
    return " / ".join(parts)


def layer_rows(name: str, s: dict) -> list[str]:
    rows = []
    for i, r in enumerate(s["layers"]):
        first, peak = r["out_cos_first"], r["out_cos_max_over_run"]
        at_init = all(a == b for a, b in zip(first["seeds"], peak["seeds"]))
        aniso = (
            f"{first['mean']:.2f} → {'(init)' if at_init else format(peak['mean'], '.3g')} → "
            f"{pm(r['out_cos_last'], '.2f')}"
        )
        cells = [
            f"{label(name, s).replace(' (markov)', '')} L{i}",
            f"{pm(r['qk_mean_dot_first'], '.2g')} → {pm(r['qk_mean_dot_last'], '.3g')}",
            pm(r["qk_mean_dot_growth"], ".3g"),
            pm(r["abs_qk_mean_cos_last"], ".2f"),
            pm(r["entropy_last"]),
            pm(r["entropy_sharpest_head_last"]),
            aniso,
            heads(s) if i == 0 else "",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def main(path) -> dict[str, str]:
    """{"losses": the per-corpus table, "layers": the per-layer table}, as markdown."""
    summary = json.loads(Path(path).read_text())
    corpora = {n: s for n, s in summary.items() if isinstance(s, dict) and "corpus" in s}
    losses = [LOSS_HEAD] + [loss_row(n, s) for n, s in corpora.items()]
    layers = [LAYER_HEAD] + [row for n, s in corpora.items() for row in layer_rows(n, s)]
    return {"losses": "\n".join(losses) + "\n", "layers": "\n".join(layers) + "\n"}


if __name__ == "__main__":
    out = main(sys.argv[1] if len(sys.argv) > 1 else "figures/data/train-dynamics/summary.json")
    print(out["losses"])
    print(out["layers"], end="")
