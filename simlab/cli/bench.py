"""`simlab bench [--quick] [--only LIST]` (also `python -m benchmarks.sweep`): the sweep engine
against its peers (simlab.studies.bench)."""

from __future__ import annotations

from simlab.studies.bench.workloads import HOOKS, PEERS, WORKLOADS


def add_arguments(parser) -> None:
    """`simlab bench` / `python -m benchmarks.sweep` arguments."""
    parser.add_argument(
        "--quick", action="store_true", help="small sizes (seconds; a smoke run, used by the tests)"
    )
    parser.add_argument(
        "--only",
        default=None,
        help="comma-separated workloads (default all: "
        f"{','.join(list(PEERS) + list(WORKLOADS) + list(HOOKS))}; M1 and M2 where their "
        "models are installed)",
    )
    parser.add_argument(
        "--out-dir",
        default=None,
        help="where the JSON goes (default: benchmarks/results of the checkout)",
    )
    parser.add_argument("--no-json", action="store_true", help="print the table only")
    parser.add_argument(
        "--loop-points",
        type=int,
        default=None,
        help="time the per-point loop on this many points per seed and extrapolate "
        "(0: all; default: all for W1, 8 for W2/W3)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="engine runs per workload (the first compiles; best of the rest)",
    )
    parser.add_argument(
        "--peak-n", type=int, default=None, help="matmul size for the peak (default 2048)"
    )
    parser.add_argument(
        "--tag", default=None, help="file name prefix of the JSON (default: backend)"
    )
    parser.add_argument(
        "--stages",
        default=None,
        help="comma-separated workloads (of W1-W3) to also time with metric subsets "
        "left out (engine and loop per point; a few minutes)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="rounds of engine cold / PyTorch / engine warm per P workload; the "
        "table shows medians (default 3, 1 with --quick)",
    )
    parser.add_argument(
        "--torch-device",
        default="cpu",
        help="device of the PyTorch peer loop (P1-P5): cpu or cuda; 'none' skips it (and the "
        "HF hooks peers of M1 and M2, which run on the CPU)",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run every measurement in this process (peak memory then not separable)",
    )


def cli_main(args) -> int:
    """Run the benchmark, print the table, write the JSON."""
    only = None if args.only is None else [s.strip() for s in args.only.split(",") if s.strip()]
    stages = () if not args.stages else [s.strip() for s in args.stages.split(",") if s.strip()]
    # deferred: jax (heavy), loaded only when a command runs: `simlab --help` answers at once
    from simlab.studies.bench import default_out_dir, format_table, run_bench

    report, path = run_bench(
        only,
        args.quick,
        not args.in_process,
        None if args.no_json else (args.out_dir or default_out_dir()),
        args.loop_points,
        args.repeats,
        args.peak_n,
        args.tag,
        stages=stages,
        torch_device=None if args.torch_device == "none" else args.torch_device,
        rounds=args.rounds,
    )
    print()
    print(format_table(report))
    if path is not None:
        print(f"\nwrote {path}")
    return 0
