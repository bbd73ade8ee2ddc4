"""`simlab check-theory`: simulate the claims of simlab.theory and score them.

Each claim is a `Claim` (check_theory.claim): simulate(cfg) -> data, compare(cfg, data) ->
Comparison, verdict(cfg, comparison) and figure(result, path), registered in CLAIMS with
`register`; the driver `check(claim, cfg)` turns them into one row of the table (sizes,
predicted, simulated, error, whether the error shrinks with size, verdict) plus detail rows,
and the figure theory_<claim>.png (in --figures-dir, default runs/check-theory[-quick]/) draws
the prediction over the simulation.  The eleven claims of simlab.theory, in table order:
rem_entropy, gg_attention, chen_scaling, zhai_bound, dong_collapse (with dong_constant),
freezing_line, signal_propagation (one module each), uniform_gain, shared_gain, mean_field_gain
(branch_gains) and clamp_gains.  Claims 1-5 simulate directly in jnp with the reference
computations of check_theory.reference (no dependency on simlab's blocks; claim 3 also runs
through simlab.run_sweep); claims 6-11 run through simlab.run_sweep.

Sizes and criteria come from experiments/theory_<claim>.toml alone ([full] and [quick]
tables).  Runs:

    simlab check-theory [--quick] [--figures-dir DIR] [--no-figures] [--json FILE]
    simlab check-theory --from-json FILE     (score a saved run again: compare, verdict, figure)

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

from simlab.engine.store import check_writable
from simlab.errors import ConfigError
from simlab.registry import BUILTIN
from simlab.studies import table
from simlab.studies.check_theory import (
    branch_gains,
    chen_scaling,
    clamp_gains,
    dong_collapse,
    freezing_line,
    gg_attention,
    rem_entropy,
    signal_propagation,
    zhai_bound,
)
from simlab.studies.check_theory.claim import (
    CLAIMS,
    Claim,
    ClaimResult,
    Comparison,
    check,
    json_default,
    lookup,
    ordered,
    register,
    score,
)
from simlab.studies.check_theory.common import load_config

__all__ = [
    "CLAIMS",
    "COLUMNS",
    "Claim",
    "ClaimResult",
    "Comparison",
    "check",
    "format_details",
    "format_table",
    "json_payload",
    "load_config",
    "ordered",
    "register",
    "rescore_json",
    "run_checks",
    "score",
    "write_json",
]

# the claims of simlab.theory, registered like any other, in the table's order (the
# number in the table's first column is the place in CLAIMS)
for _module in (
    rem_entropy,
    gg_attention,
    chen_scaling,
    zhai_bound,
    dong_collapse,
    freezing_line,
    signal_propagation,
):
    CLAIMS.register(_module.CLAIM, source=BUILTIN)
for _claim in (*branch_gains.CLAIMS, clamp_gains.CLAIM):  # claims 8-11
    CLAIMS.register(_claim, source=BUILTIN)

COLUMNS = (
    ("claim", 20),
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
    claims=None,
    *,
    figures_dir: str | Path | None = "figures",
    config_dir: str | Path | None = None,
    overrides: dict[str, dict] | None = None,
    log=print,
) -> list[ClaimResult]:
    """Run the named claims (default: every registered one) at the sizes of `profile` (claim
    -> overrides on top); write figures/theory_<claim>.png unless figures_dir is None. Every
    claim's config is read and the figure directory checked before the first simulation (a bad
    one fails at once)."""
    if config_dir is not None and not Path(config_dir).is_dir():
        raise ConfigError(f"--config-dir: {config_dir} is not a directory")
    if figures_dir is not None:
        check_writable(figures_dir, "--figures-dir")
    names = ordered() if claims is None else list(claims)
    configs = {
        name: load_config(name, profile, config_dir, (overrides or {}).get(name)) for name in names
    }
    results = []
    for name, cfg in configs.items():
        t0 = time.perf_counter()
        r = check(name, cfg)
        if figures_dir is not None:
            CLAIMS[name].figure(r, Path(figures_dir) / f"theory_{name}.png")
        r.seconds = time.perf_counter() - t0
        if log is not None:
            log(f"  {r.claim:<16} {r.verdict}  ({r.seconds:.1f} s)")
        results.append(r)
    return results


STORED = ("claim", "name", "title", "sizes", "predicted", "simulated", "error", "shrinks")
STORED += ("verdict", "details", "seconds", "config", "simulation")


def json_payload(results: list[ClaimResult], profile: str, wall_seconds: float) -> dict:
    """What --json writes: the table, and per claim its row, details, seconds, config and
    simulation data (enough to score it again: rescore_json)."""
    return {
        "profile": profile,
        "wall_seconds": wall_seconds,
        "table": format_table(results),
        "claims": [{k: getattr(r, k) for k in STORED} for r in results],
    }


def write_json(path: str | Path, payload: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        json.dump(payload, f, indent=1, default=json_default)


def rescore_json(
    path: str | Path, claims=None, *, figures_dir: str | Path | None = None
) -> list[ClaimResult]:
    """Score a run saved by --json again, without simulating: for each stored claim (those
    named in `claims`, default all) compare and verdict on its stored config and simulation
    data, with the code as it is now, and redraw its figure unless figures_dir is None.  The
    stored seconds (the simulation's) are kept."""
    with open(path) as f:
        payload = json.load(f)
    results = []
    for entry in payload["claims"]:
        missing = [k for k in ("name", "config", "simulation") if k not in entry]
        if missing:
            raise ConfigError(
                f"--from-json {path}: claim {entry.get('claim', '?')!r} has no {missing} "
                "(a file written before check-theory stored its simulations; run it again)"
            )
        if claims is not None and entry["name"] not in claims:
            continue
        claim = lookup(entry["name"])
        r = score(claim, entry["config"], entry["simulation"])
        r.seconds = entry.get("seconds", 0.0)
        if figures_dir is not None:
            claim.figure(r, Path(figures_dir) / f"theory_{claim.name}.png")
        results.append(r)
    return results
