"""The README's numbers, printed from the data committed in the repo (no number typed by hand):

- "wall-times": how long the committed sweeps took, the sum of the `wall_time_s` their
  meta.json files record (a grown or refined sweep counted once, by its own meta.json, which
  sums its parts), for experiment 1 (figures/data/paper), for everything under figures/data
  (the paper's sizes) and under figures/quick/data (`--quick`);
- "performance": the PyTorch-peer workloads P1-P5 of the benchmark run the README cites
  (RUN, a JSON file of `simlab bench`), as simlab.studies.bench.report formats them;
- "performance-m1" (README.md, its verdict) and "m1-row" (docs/performance.md, its table): M1,
  the counterfactual sweep on a trained layer against the HF hooks peer, from its run (RUN_M1);
- "m2-row" (docs/performance.md): M2, the decoder study's counterfactual sweep against the HF
  hooks peer, from the run whose JSON that block names (`run_m2`; written there by
  `python -m benchmarks.m2 --write`, absent until then).

    python experiments/readme_numbers.py            rewrite the blocks in README.md and docs
    python experiments/readme_numbers.py --print    print them

tests/test_docs.py checks that the files carry them character for character.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# The benchmark run the README's performance table shows (a quiet machine: docs/performance.md).
RUN = ROOT / "benchmarks" / "results" / "cpu-20261207-033112.json"
# M1's run (simlab bench --only M1, a quiet machine)
RUN_M1 = ROOT / "benchmarks" / "results" / "cpu-20261207-060753.json"
PERFORMANCE = ROOT / "docs" / "performance.md"
PEERS = ("P1", "P2", "P3", "P4", "P5")
MARK = "(python experiments/readme_numbers.py; do not edit by hand)"


def _duration(s: float) -> str:
    """Seconds as "1 h 2 min", "21 min 41 s" or "5 s"."""
    s = round(s)
    h, m, sec = s // 3600, s % 3600 // 60, s % 60
    if h:
        return f"{h} h {m} min"
    return f"{m} min {sec} s" if m else f"{sec} s"


def wall_time(base: Path) -> tuple[float, int]:
    """(the summed wall_time_s, the number of sweeps) of the finished sweeps under `base`, a
    sweep's parts (OUT/parts/<k>/) left out: the sweep's own meta.json counts their time."""
    total, n = 0.0, 0
    for meta in sorted(base.rglob("meta.json")):
        if "parts" in meta.relative_to(base).parts:
            continue
        rec = json.loads(meta.read_text())
        if isinstance(rec.get("wall_time_s"), (int, float)) and "fingerprint" in rec:
            total += rec["wall_time_s"]
            n += 1
    return total, n


def wall_times(full: Path, quick: Path) -> str:
    paper, _ = wall_time(full / "paper")
    every, n = wall_time(full)
    fast, n_quick = wall_time(quick)
    return (
        f"- experiment 1 at the paper's size (`figures/data/paper`): {_duration(paper)} of "
        "sweeps on the CPU that made it\n"
        f"- every committed sweep at the paper's sizes ({n} sweeps under `figures/data`): "
        f"{_duration(every)}\n"
        f"- every quick sweep ({n_quick} under `figures/quick/data`): {_duration(fast)}\n"
    )


def performance(run: Path, names=PEERS) -> str:
    """The workloads `names` of a benchmark run's JSON as its table, under a line naming the
    command, the date, the machine and the versions (torch's where the HF peer ran)."""
    from simlab.studies.bench import report

    rec = json.loads(run.read_text())
    peers = [
        {k: v for k, v in w.items() if k != "stages"}
        for w in rec["workloads"]
        if w["name"] in names
    ]
    m = rec["machine"]
    torch = {w["hooks"]["torch"] for w in peers if w.get("hooks")}
    head = (
        f"`{rec['command']}`, {rec['date'][:10]}, {m['cpu']} ({m['cores']} cores), jax "
        f"{m['jax']}{''.join(f', torch {t}' for t in sorted(torch))}; JSON "
        f"`{run.relative_to(ROOT)}`:\n\n"
    )
    table = report.format_table({**rec, "workloads": peers}).strip("\n")
    while "\n\n\n" in table:
        table = table.replace("\n\n\n", "\n\n")
    return head + table + "\n"


def main(root: Path = ROOT) -> dict[str, str]:
    """Each README block's text (without its markers)."""
    return {
        "wall-times": wall_times(root / "figures" / "data", root / "figures" / "quick" / "data"),
        "performance": performance(RUN),
        "performance-m1": m1_summary(RUN_M1),
    }


def m1_summary(run: Path) -> str:
    """M1's verdict line from its run, with the times it compares (the README's short form of
    docs/performance.md's m1-row block)."""
    from simlab.studies.bench import report

    rec = json.loads(run.read_text())
    w = next(w for w in rec["workloads"] if w["name"] == "M1")
    return (
        f"`{rec['command']}`, {rec['date'][:10]}, JSON `{run.relative_to(ROOT)}`: simlab "
        f"{w['simlab']['steady_s']:.3g} s in steady state (compile {w['simlab']['compile_s']:.2g} "
        f"s), the HF hooks peer {w['hooks']['model_s']:.3g} s (whole model) and "
        f"{w['hooks']['layer_s']:.3g} s (layer only). {report._hooks_verdict(w)}\n"
    )


def run_m2(text: str) -> Path | None:
    """M2's run: the JSON that docs/performance.md's m2-row block (`text`: the doc) names, None
    while it names none (not measured yet)."""
    begin = text.index("<!-- m2-row:begin")
    found = re.search(
        r"JSON `(benchmarks/results/[^`]+\.json)`", text[begin : text.index("<!-- m2-row:end")]
    )
    return ROOT / found.group(1) if found else None


def docs_blocks() -> dict[str, str]:
    """docs/performance.md's printed blocks (without their markers); m2-row once measured."""
    blocks = {"m1-row": performance(RUN_M1, ("M1",))}
    run = run_m2(PERFORMANCE.read_text())
    if run is not None:
        blocks["m2-row"] = performance(run, ("M2",))
    return blocks


def render(text: str, blocks: dict[str, str], where: Path = README) -> str:
    """`text` (of the file `where`) with each block between its markers replaced."""
    from simlab.studies.table import replace_blocks

    return replace_blocks(text, blocks, MARK, where)


if __name__ == "__main__":
    files = {README: main(), PERFORMANCE: docs_blocks()}
    if "--print" in sys.argv[1:]:
        for blocks in files.values():
            for name, block in blocks.items():
                print(f"<!-- {name}:begin {MARK} -->\n{block}<!-- {name}:end -->")
    else:
        for path, blocks in files.items():
            path.write_text(render(path.read_text(), blocks, path))
