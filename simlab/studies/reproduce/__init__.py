"""`simlab reproduce`: every experiment of the untrained-block study, sweeps then figures.

An experiment is one TOML file in experiments/: the sweep, a [quick] table of smaller sizes and
the [[figures]] it draws, so a new experiment is one file. Modules:
  experiments  which files, their groups, their sweep tables (full or [quick]) and [variants]
  figures      the figure types (heatmap, curves, variants; FIGURE_TYPES) and `draw`
  overlays     the theory overlays a figure may name (THEORY, CURVE_THEORY, VARIANT_THEORY)
  scripted     the kind "script": figures an experiment script draws from committed data
  run          `reproduce()` and `Run` (where, at which sizes, the sweep of one experiment)
The command is simlab.cli.reproduce.
"""

from simlab.studies.reproduce.experiments import (
    VARIANT_TABLES,
    Variant,
    experiment_config,
    experiment_files,
    experiment_groups,
    experiment_variants,
    figure_specs,
)
from simlab.studies.reproduce.figures import (
    FIGURE_TYPES,
    LINE_STYLES,
    curves,
    draw,
    heatmap,
    select_indices,
    variants,
)
from simlab.studies.reproduce.overlays import CURVE_THEORY, THEORY, VARIANT_THEORY
from simlab.studies.reproduce.run import Run, reproduce
from simlab.studies.reproduce.scripted import script, scripted_only

__all__ = [
    "CURVE_THEORY",
    "FIGURE_TYPES",
    "LINE_STYLES",
    "THEORY",
    "VARIANT_TABLES",
    "VARIANT_THEORY",
    "Run",
    "Variant",
    "curves",
    "draw",
    "experiment_config",
    "experiment_files",
    "experiment_groups",
    "experiment_variants",
    "figure_specs",
    "heatmap",
    "reproduce",
    "script",
    "scripted_only",
    "select_indices",
    "variants",
]
