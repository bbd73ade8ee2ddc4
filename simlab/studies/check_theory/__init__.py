"""`simlab check-theory`: simulate the seven claims of simlab.theory and compare.

Claims 1-5 have a simulation written directly in jnp (pure functions, explicit einsums; no
dependency on simlab's blocks; claim 3 also runs through simlab.run_sweep); claims 6 and 7 run
through simlab.run_sweep. Each has a check that
turns simulation + prediction into one table row (sizes, predicted, simulated, error, whether
the error shrinks with size, verdict) plus detail rows, and a figure theory_<claim>.png
(in figures/, or figures/quick/ for --quick) with the prediction overlaid.

Sizes come from experiments/theory_<claim>.toml alone ([full] and [quick] tables). One module
per claim (rem_entropy, gg_attention, chen_scaling, zhai_bound, dong_collapse,
freezing_line, signal_propagation), each with
`check(cfg)` and `figure(result, path)`; CLAIMS is the registry. Runs:

    simlab check-theory [--quick] [--figures-dir DIR] [--no-figures] [--json FILE]

Simulation conventions (simlab's, see simlab.theory): logits q'.k' / (sqrt(d_head) temperature),
Gaussian tokens x_i = sqrt(p) z_0 + sqrt(1 - p) z_i, anisotropy = mean pairwise cosine
computed exactly from sums of unit vectors.  For long sequences only the first `n_query`
tokens are used as queries (all tokens are keys): the tokens are exchangeable, so the mean
pairwise cosine of those outputs is an unbiased estimate of the mean over all outputs, and no
T x T matrix is ever formed (queries are processed in chunks with lax.map).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from simlab.engine.store import check_writable
from simlab.errors import ConfigError
from simlab.studies import table
from simlab.studies.check_theory import (
    chen_scaling,
    dong_collapse,
    freezing_line,
    gg_attention,
    rem_entropy,
    signal_propagation,
    zhai_bound,
)
from simlab.studies.check_theory.common import ClaimResult, load_config

# The claims, in table order: name -> module with check(cfg) and figure(result, path).
CLAIMS = {
    "rem_entropy": rem_entropy,
    "gg_attention": gg_attention,
    "chen_scaling": chen_scaling,
    "zhai_bound": zhai_bound,
    "dong_collapse": dong_collapse,
    "freezing_line": freezing_line,
    "signal_propagation": signal_propagation,
}


COLUMNS = (
    ("claim", 16),
    ("sizes", 22),
    ("predicted", 34),
    ("simulated", 26),
    ("error", 24),
    ("shrinks", 16),
    ("verdict", 44),
)


def format_table(results: list[ClaimResult]) -> str:
    """Fixed-width table, one row per claim (cells longer than the column are wrapped)."""
    rows = [[getattr(r, name) for name, _ in COLUMNS] for r in results]
    return table.format_table(COLUMNS, rows)


def format_details(results: list[ClaimResult]) -> str:
    lines = []
    for r in results:
        lines.append(f"[{r.claim}] {r.title}  ({r.seconds:.1f} s)")
        for name, val in r.details:
            lines.append(f"    {name:<52} {val}")
    return "\n".join(lines)


def run_checks(
    profile: str = "full",
    claims=tuple(CLAIMS),
    *,
    figures_dir: str | Path | None = "figures",
    config_dir: str | Path | None = None,
    overrides: dict[str, dict] | None = None,
    log=print,
) -> list[ClaimResult]:
    """Run the named claims at the sizes of `profile` (claim -> overrides on top); write
    figures/theory_<claim>.png unless figures_dir is None. Every claim's config is read and
    the figure directory checked before the first simulation (a bad one fails at once)."""
    if config_dir is not None and not Path(config_dir).is_dir():
        raise ConfigError(f"--config-dir: {config_dir} is not a directory")
    if figures_dir is not None:
        check_writable(figures_dir, "--figures-dir")
    configs = {
        name: load_config(name, profile, config_dir, (overrides or {}).get(name)) for name in claims
    }
    results = []
    for name, cfg in configs.items():
        t0 = time.perf_counter()
        r = CLAIMS[name].check(cfg)
        if figures_dir is not None:
            CLAIMS[name].figure(r, Path(figures_dir) / f"theory_{name}.png")
        r.seconds = time.perf_counter() - t0
        if log is not None:
            log(f"  {r.claim:<16} {r.verdict}  ({r.seconds:.1f} s)")
        results.append(r)
    return results


def results_from_json(path) -> list[ClaimResult]:
    """ClaimResults saved by --json."""
    with open(path) as f:
        payload = json.load(f)
    out = []
    for c in payload["claims"]:
        c = dict(c)
        c["details"] = [tuple(d) for d in c.get("details", [])]
        out.append(ClaimResult(**c))
    return out


def _json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)
