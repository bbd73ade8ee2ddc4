"""`python -m benchmarks.refine`: R1, the refined paper map against the dense grid of its finest
lattice (simlab.studies.bench.refine): points per seed, their ratio, the boundaries' largest
distance in finest cells. Quick sizes by default (experiments/paper_refined.toml's [quick]
table, 3 levels: the 97 x 97 lattice); `--full` at the paper's sizes (a long run for a quiet
machine or a GPU). Prints the report and writes a JSON under benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from simlab.studies.bench import default_out_dir, machine_info
from simlab.studies.bench.refine import (
    format_report,
    paper_map,
    predicted_points,
    refine_vs_dense,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.refine", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--full", action="store_true", help="the paper's sizes (d 768, 16 x 512)")
    parser.add_argument(
        "--levels", type=int, default=3, help="refinement levels (3: the 97 x 97 lattice)"
    )
    parser.add_argument("--out", default=None, help="keep both sweeps in this directory")
    parser.add_argument("--out-dir", default=None, help="where the JSON goes")
    parser.add_argument("--no-json", action="store_true", help="print the report only")
    args = parser.parse_args(argv)
    cfg = paper_map(args.levels, quick=not args.full)
    res = refine_vs_dense(cfg, out=args.out, quiet=False)
    res["predicted_points_per_level"] = predicted_points(cfg)
    res["full_size_predicted_points_per_level"] = predicted_points(paper_map(args.levels, False))
    print(format_report(res))
    print(
        "  closed-form prediction at these sizes: "
        + " + ".join(map(str, res["predicted_points_per_level"]))
        + "; at the paper's: "
        + " + ".join(map(str, res["full_size_predicted_points_per_level"]))
    )
    if not args.no_json:
        out_dir = Path(args.out_dir) if args.out_dir else default_out_dir()
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"refine_{'full' if args.full else 'quick'}_L{args.levels}.json"
        res["machine"] = machine_info()
        path.write_text(json.dumps(res, indent=2, default=str))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
