"""`simlab series FOLDER --out TABLE.csv`: the trained-model quantities of a folder of
checkpoints (one per training step) as a table, on fixed ids or on windows of real text, and
optionally its figure (simlab.studies.series; docs/checkpoints.md, "A checkpoint series")."""

from __future__ import annotations


def add_arguments(parser) -> None:
    parser.add_argument("folder", help="a folder holding one checkpoint folder per step")
    parser.add_argument(
        "--out", required=True, metavar="TABLE", help="the table to write (.csv or .json)"
    )
    parser.add_argument(
        "--ids", default=None, metavar="FILE.npy", help="fixed token ids (batch, length)"
    )
    parser.add_argument(
        "--text",
        default=None,
        metavar="CORPUS",
        help="windows of real text instead: 'stdlib' or a text file or folder, through the "
        "first checkpoint's tokenizer.json and special tokens (the input kind 'text')",
    )
    parser.add_argument("--batch", type=int, default=8, help="--text: windows (default 8)")
    parser.add_argument("--length", type=int, default=128, help="--text: tokens (default 128)")
    parser.add_argument("--seed", type=int, default=0, help="--text: draws the windows")
    parser.add_argument("--figure", default=None, metavar="FILE", help="also draw it (.png)")


def cli_main(args) -> int:
    # deferred: jax (heavy), loaded only when a command runs: `simlab --help` answers at once
    from simlab.studies.series import command

    table = command(
        args.folder, args.out, args.ids, args.text, args.batch, args.length, args.seed, args.figure
    )
    print(f"wrote {args.out} ({len(table)} rows)" + (f" and {args.figure}" * bool(args.figure)))
    return 0
