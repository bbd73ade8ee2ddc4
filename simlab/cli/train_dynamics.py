"""`simlab train-dynamics [--quick] [--corpus ...]`: train small decoders and follow the mean
query/key drift, sharpness and anisotropy (simlab.studies.train_dynamics)."""

from __future__ import annotations

from pathlib import Path

from simlab.studies.train_dynamics import GROUPS, corpus


def add_arguments(parser) -> None:
    """`simlab train-dynamics` arguments."""
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small model, few steps (about 1 min on 2 CPU cores)",
    )
    parser.add_argument(
        "--corpus",
        nargs="+",
        choices=tuple(corpus.CORPORA) + tuple(g for g in GROUPS if g not in corpus.CORPORA),
        default=None,
        metavar="CORPUS",
        help="corpora to run: names ("
        + ", ".join(corpus.CORPORA)
        + "), a task ("
        + ", ".join(corpus.TASKS)
        + ") or all (default: train.corpora of the experiment TOML)",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="output directory: OUT/<corpus>/results.npz + meta.json, OUT/summary.json "
        "(default runs/train-dynamics[-quick])",
    )
    parser.add_argument(
        "--figures",
        default=None,
        help="figure directory (default: OUT/figures; the committed ones are redrawn with "
        "--out figures/data/train-dynamics --figures figures, docs/training.md)",
    )
    parser.add_argument("--no-figures", action="store_true", help="write no figures")
    parser.add_argument("--steps", type=int, default=None, help="override the number of steps")
    parser.add_argument("--seeds", type=int, default=None, help="training seeds (default 3)")
    parser.add_argument("--seed", type=int, default=None, help="base seed (default 0)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--plot-only",
        action="store_true",
        help="do not train: reload OUT/<corpus> and redraw the figures and summary",
    )


def cli_main(args) -> int:
    """Train (or reload with --plot-only), print the summaries and the overall verdict, draw
    the figures."""
    # deferred: jax (heavy), loaded only when a command runs: `simlab --help` answers at once
    from simlab.studies.train_dynamics import default_out, study

    overrides = {
        n: getattr(args, n) for n in ("steps", "seeds", "seed") if getattr(args, n) is not None
    }
    figures = None
    if not args.no_figures:
        figures = args.figures or Path(args.out or default_out(args.quick)) / "figures"
    study(
        args.quick,
        overrides,
        args.corpus,
        args.out,
        figures,
        args.quiet,
        args.plot_only,
        log=lambda s: print(s, flush=True),
    )
    return 0
