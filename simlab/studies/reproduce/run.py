"""`reproduce()`: the named experiments (all by default) swept, or reloaded, and drawn; `Run`:
where and at which sizes, and the sweep of one experiment or variant.

The sweep data is saved beside the figures (OUT/data/<config>/results.npz + meta.json):
`simlab plot` redraws any panel without recomputing, and a re-run only draws (finished sweeps
reload).
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path
from typing import Any

from simlab import plot
from simlab.engine.config import load_config
from simlab.engine.results import Results
from simlab.engine.store import check_writable
from simlab.engine.sweep import run_sweep
from simlab.errors import ConfigError
from simlab.studies.reproduce.experiments import (
    Variant,
    experiment_config,
    experiment_files,
    experiment_groups,
    experiment_variants,
)
from simlab.studies.reproduce.figures import draw
from simlab.studies.reproduce.scripted import scripted_only


@dataclasses.dataclass(frozen=True)
class Run:
    """Where and at which sizes a reproduction runs."""

    out: Path
    quick: bool = False
    quiet: bool = False
    extra: dict | None = None
    directory: Path | None = None
    sets: tuple[str, ...] = ()

    def sweep(self, name: str, variant: Variant | None = None) -> Results:
        """Run (or reload) the sweep of experiments/<name>.toml into out/data/<name> (a variant:
        out/data/<name>/<variant name>)."""

        if variant is None and self.variants(name) is not None:
            raise ConfigError(f"{name}.toml declares [variants]: draw it with kind = 'variants'")
        data = self.out / "data" / name / (variant.name if variant else "")
        cfg = experiment_config(name, self.quick, self.directory, self.extra, self.sets, variant)
        res = run_sweep(cfg, out=data, quiet=self.quiet)
        # results.npz holds everything (a grown or refined sweep: each part's)
        for chunks in [data / "chunks", *(data / "parts").glob("*/chunks")]:
            shutil.rmtree(chunks, ignore_errors=True)
        return res

    def variants(self, name: str) -> list[Variant] | None:
        return experiment_variants(name, self.quick, self.directory, self.extra)

    def title(self, res: Results, what: str, meta: dict | None = None, others: tuple = ()) -> str:
        """`what`, the sizes (of `meta`, default the sweep's) and the number of seeds (a range
        "2-3 seeds (per line)" when the lines' sweeps, `res` and `others`, differ)."""
        ns = sorted({r.n_seeds for r in (res, *others)})
        tag = " [quick sizes]" if self.quick else ""
        sizes = plot.sizes_label(res.meta if meta is None else meta)
        if len(ns) > 1:
            return f"{what}{tag}\n{sizes}, {ns[0]}-{ns[-1]} seeds (per line)"
        return f"{what}{tag}\n{sizes}, {ns[0]} seed{'s' * (ns[0] != 1)}"


def _configs(names, files: dict[str, Path]) -> list[str]:
    """The configs of the named groups or configs (every group when names is empty)."""
    groups = experiment_groups(files)
    configs = []
    for n in names or groups:
        if n not in groups and n not in files:
            raise ConfigError(
                f"--only: unknown experiment {n!r}; allowed: experiments "
                f"{', '.join(groups)}, or configs {', '.join(files)}"
            )
        configs += [c for c in groups.get(n, [n]) if c not in configs]
    return configs


def reproduce(
    names=None,
    out: str | Path | None = None,
    quick: bool = False,
    quiet: bool = False,
    extra: dict | None = None,
    directory: str | Path | None = None,
    sets: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Run the named experiment groups or configs (all by default); returns config -> (files,
    seconds). `extra`: overrides applied on top of every config (like [quick]); `sets`:
    --set KEY=VALUE overrides (simlab.engine.tomlio.apply_overrides) applied last."""
    configs = _configs(names, experiment_files(directory))
    out = check_writable(
        out if out is not None else Path("figures") / ("quick" if quick else ""), "--out"
    )
    for n in configs:  # every sweep validated before the first one runs
        if scripted_only(n, None if directory is None else Path(directory)):
            continue  # drawn from committed data (simlab.studies.reproduce.scripted)
        for v in experiment_variants(n, quick, directory, extra) or [None]:
            load_config(experiment_config(n, quick, directory, extra, tuple(sets), v))
    done = {}
    r = Run(out, quick, quiet, extra, None if directory is None else Path(directory), tuple(sets))
    for i, n in enumerate(configs, 1):
        if not quiet:
            print(
                f"[{i}/{len(configs)}] {n} ({'quick' if quick else 'full'} sizes) -> {out}",
                flush=True,
            )
        t0 = time.perf_counter()
        drawn = draw(r, n)
        done[n] = (drawn, time.perf_counter() - t0)
        if not quiet:
            print(f"      {len(drawn)} figures in {done[n][1]:.1f} s", flush=True)
    return done
