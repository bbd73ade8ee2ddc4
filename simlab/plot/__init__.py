"""One look for every figure: phase diagrams (heatmaps) and curves, with theory overlays.

Modules: axes (the shared look: size, resolution, heatmap cell edges, theory overlays, atomic
PNG saving), phase (`phase_diagram`), lines (`curves`), refined (`refined_phase_diagram`,
`plot_refined`: a refined sweep's cells, boundary and band), from_results (`plot_results`: a
finished sweep -> a figure, what `simlab plot` draws; the command is simlab.cli.plot).
Whether an axis is logarithmic, and which coordinate a selected value picks, is one rule for
every figure (simlab.engine.select).
"""

from simlab.engine.select import is_log_spaced
from simlab.plot.axes import (
    DPI,
    FIGSIZE,
    THEORY_COLORS,
    cell_edges,
    centred_colormap,
    overlay_theory,
    save_figure,
)
from simlab.plot.from_results import plot_results, sizes_label
from simlab.plot.lines import curves, factored_legend, mark_linear_band
from simlab.plot.phase import phase_diagram
from simlab.plot.refined import plot_refined, refined_phase_diagram

# The name simlab.studies.check_theory.zhai_bound uses.
_overlay_theory = overlay_theory

__all__ = [
    "centred_colormap",
    "DPI",
    "FIGSIZE",
    "THEORY_COLORS",
    "cell_edges",
    "curves",
    "factored_legend",
    "mark_linear_band",
    "is_log_spaced",
    "overlay_theory",
    "phase_diagram",
    "plot_refined",
    "plot_results",
    "refined_phase_diagram",
    "save_figure",
    "sizes_label",
]
