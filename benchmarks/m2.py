"""`python -m benchmarks.m2 [--write]`: benchmark M2 (docs/performance.md, "M2: the decoder
study's counterfactual sweep, against HF hooks"), the one command that measures it.

Runs `simlab bench --only M2` (the matmul peak, then 3 rounds of simlab's side and the HF hooks
peer, each in its own process), writes its JSON under benchmarks/results/ and prints
docs/performance.md's m2-row block from it (experiments/readme_numbers.py's `performance`, the
printer tests/test_docs.py checks the block against); `--write` puts the block into
docs/performance.md. Run it on a quiet machine, then commit the JSON and the doc.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from simlab.studies.bench import default_out_dir, format_table, run_bench

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.m2", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--write", action="store_true", help="write the m2-row block into docs/performance.md"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds of simlab / peer (default 3)")
    args = parser.parse_args(argv)
    report, path = run_bench(["M2"], out_dir=default_out_dir(), rounds=args.rounds)
    print(format_table(report))
    sys.path.insert(0, str(ROOT / "experiments"))
    import readme_numbers

    block = readme_numbers.performance(path, ("M2",))
    print(f"\n<!-- m2-row:begin {readme_numbers.MARK} -->\n{block}<!-- m2-row:end -->")
    if args.write:
        doc = readme_numbers.PERFORMANCE
        doc.write_text(readme_numbers.render(doc.read_text(), {"m2-row": block}, doc))
        print(f"written: {doc.relative_to(ROOT)} (m2-row), {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
