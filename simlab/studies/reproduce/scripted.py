"""The figure kind "script" of `simlab reproduce`: figures an experiment script draws from data
committed under figures/data (a study that `simlab sweep` does not run, e.g. the counterfactual
studies of a trained model: experiments/minilm_counterfactual.toml).

  script   experiments/<script>.py's `figures(data, out, only)` draws into the reproduce output
           folder from the committed data folder (figures/data beside experiments/, or `data`
           relative to the checkout); `only`: the names of the files to draw (each [[figures]]
           table names one, so the declared count is the drawn count). No sweep runs: an
           experiment whose figures are all of this kind has no sweep table to validate.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from simlab.engine.config import experiments_dir
from simlab.errors import ConfigError
from simlab.studies.reproduce.experiments import figure_specs
from simlab.studies.reproduce.figures import FIGURE_TYPES

if TYPE_CHECKING:
    from simlab.studies.reproduce.run import Run


def _module(folder: Path, name: str):
    path = folder / f"{name}.py"
    if not path.is_file():
        raise ConfigError(f"figures.script: {path} not found; name a script in {folder}")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def script(r: Run, name: str, fig: dict) -> list[Path]:
    """Kind "script": the files `fig["file"]` drawn by `fig["script"]` from committed data."""
    folder = r.directory if r.directory is not None else experiments_dir()
    data = folder.parent / fig.get("data", "figures/data")
    if not data.is_dir():
        raise ConfigError(f"{name}.toml: figures.data: {data} is not a folder of committed data")
    r.out.mkdir(parents=True, exist_ok=True)
    return list(_module(folder, fig["script"]).figures(data, r.out, only=[fig["file"]]))


def scripted_only(name: str, directory: Path | None = None) -> bool:
    """Whether every figure of experiments/<name>.toml is of kind "script" (no sweep)."""
    specs = figure_specs(name, directory)
    return bool(specs) and all(f.get("kind") == "script" for f in specs)


FIGURE_TYPES["script"] = script
