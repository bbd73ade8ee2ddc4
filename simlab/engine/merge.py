"""`simlab merge DIR`: finish a sweep directory that workers filled (docs/design.md, "Work
units"): read its sweep.json, compute whatever no worker finished (verifying every chunk
file), merge, write results.npz + meta.json."""

from __future__ import annotations

from pathlib import Path

from simlab.engine import results
from simlab.engine.sweep import add_cache_argument, apply_cache_argument, run_sweep
from simlab.errors import ConfigError


def add_arguments(parser) -> None:
    parser.add_argument("dir", help="a sweep directory (holds sweep.json)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_cache_argument(parser)


def cli_main(args) -> int:
    apply_cache_argument(args)
    out = Path(args.dir)
    if not (out / "sweep.json").is_file():
        raise ConfigError(f"{out}: holds no sweep.json (not a sweep directory)")
    config = results.read_json(out / "sweep.json", "sweep.json of a sweep directory")
    if not isinstance(config.get("config"), dict):
        raise ConfigError(f"{out / 'sweep.json'}: has no config table")
    res = run_sweep(config["config"], out=out, quiet=args.quiet)
    print(
        f"merged {out}: results.npz + meta.json ({res.meta.get('chunks_computed', 0)} chunks "
        f"computed now, {res.meta.get('chunks_reused', 0)} reused)"
    )
    return 0
