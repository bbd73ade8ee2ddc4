"""`python -m benchmarks.sweep`: the sweep-engine benchmark, the same as `simlab bench`.

Runs the matmul peak and workloads W1-W4 (simlab.studies.bench), prints the table and writes a JSON
under benchmarks/results/. `--quick` for a smoke run, `--only W1,W2` for a subset.
"""

from __future__ import annotations

import argparse

from simlab.cli import bench


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.sweep", description=__doc__.split("\n")[0]
    )
    bench.add_arguments(parser)
    return bench.cli_main(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
