"""A theory claim as four functions, the registry of claims, and the driver that runs one.

A claim (`Claim`) is what `simlab check-theory` needs to turn a closed form of simlab.theory
into one row of its table:

    simulate(cfg) -> dict                  the simulation only, as JSON-able data (what --json
                                           stores, so that a saved run can be scored again);
    compare(cfg, data) -> Comparison       predictions against that data along the sizes: the
                                           table's cells, the detail rows, the numbers the
                                           verdict reads (`scores`) and what the figure draws;
    verdict(cfg, comparison) -> str        the verdict, from the criterion the claim's TOML
        or (str, (name, value))            declares; with the criterion's detail row where the
                                           claim has one;
    figure(result, path)                   the figure of a ClaimResult.

`register(claim)` adds a claim to CLAIMS (simlab.registry: read live; the eleven claims of
simlab.theory are registered with the same call, in check_theory/__init__.py, and come first
in the table, then a plugin's in the order of registration)
and `check(claim, cfg)` runs simulate -> compare -> verdict into a ClaimResult;
`score(claim, cfg, data)` is the same without the simulation (`simlab check-theory
--from-json`).
docs/extending.md, "Add a theory claim".
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from simlab.engine.config import experiments_dir
from simlab.errors import ConfigError
from simlab.registry import BUILTIN, Registry, require


@dataclasses.dataclass
class ClaimResult:
    """One row of the table, detail rows, and everything the figure and --json need: `data`
    is what the figure draws, `config` and `simulation` what a re-scoring starts from."""

    claim: str
    title: str
    sizes: str
    predicted: str
    simulated: str
    error: str
    shrinks: str
    verdict: str
    details: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    data: dict[str, Any] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    name: str = ""
    config: dict[str, Any] = dataclasses.field(default_factory=dict)
    simulation: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Comparison:
    """What compare(cfg, data) finds: the table's cells (the sizes, the predicted and simulated
    values at the probe points, the error, whether it shrank with size), the detail rows, the
    numbers the verdict reads (`scores`, e.g. the errors along the size path) and what the
    figure draws (`data`).  The verdict's criterion row, if it has one, is inserted among the
    details at index `criterion_at`."""

    sizes: str
    predicted: str
    simulated: str
    error: str
    shrinks: str
    details: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    scores: dict[str, Any] = dataclasses.field(default_factory=dict)
    data: dict[str, Any] = dataclasses.field(default_factory=dict)
    criterion_at: int = 0


Verdict = str | tuple[str, tuple[str, str]]


@dataclasses.dataclass(frozen=True)
class Claim:
    """A claim of `simlab check-theory`: its name (the key of CLAIMS, of --claims and of its
    TOML), its title, its four functions (module docstring), `config` (its TOML file: None for
    theory_<name>.toml in the config directory, experiments/ by default; a relative path is
    taken in that directory) and `label` (the name in the table's first column; default the
    name)."""

    name: str
    title: str
    simulate: Callable[[dict], dict]
    compare: Callable[[dict, dict], Comparison]
    verdict: Callable[[dict, Comparison], Verdict]
    figure: Callable[[ClaimResult, Path], None]
    config: str | Path | None = None
    label: str | None = None

    def config_path(self, config_dir: str | Path | None = None) -> Path:
        """The TOML file this claim's sizes and criterion are read from."""

        folder = Path(config_dir if config_dir is not None else experiments_dir())
        return folder / (self.config if self.config is not None else f"theory_{self.name}.toml")


FUNCTIONS = ("simulate", "compare", "verdict", "figure")


def _check_claim(claim: Claim) -> None:
    require(
        "theory claim",
        claim.name,
        {
            "title": (
                isinstance(claim.title, str) and bool(claim.title.strip()),
                "must be a non-empty string",
            ),
            **{f: (callable(getattr(claim, f)), "must be callable") for f in FUNCTIONS},
        },
    )


# name -> Claim, read live: simlab's own (check_theory/__init__.py) and the plugins'
CLAIMS: Registry[Claim] = Registry("theory claim", Claim, _check_claim)


def register(claim: Claim) -> Claim:
    """Add `claim` to CLAIMS, after checking it: a name not taken, a non-empty title and the
    four functions callable (a ConfigError naming the claim and the field otherwise). Returns
    the claim. The table lists simlab's claims first, then the others in the order of
    registration."""
    return CLAIMS.register(claim)


def ordered() -> list[str]:
    """The claims in the table's order: simlab's own, then the plugins', each in the order of
    registration."""
    names = list(CLAIMS)
    return [n for n in names if CLAIMS.source(n) == BUILTIN] + [
        n for n in names if CLAIMS.source(n) != BUILTIN
    ]


def lookup(claim: Claim | str) -> Claim:
    """The registered claim of that name (a Claim is returned as it is)."""
    if isinstance(claim, Claim):
        return claim
    if claim not in CLAIMS:
        raise ConfigError(f"unknown claim {claim!r}; registered: {', '.join(CLAIMS)}")
    return CLAIMS[claim]


def label(claim: Claim) -> str:
    """The table's first column: "<number> <label>", the number its place in the table."""
    names = ordered()
    short = claim.label or claim.name
    return f"{names.index(claim.name) + 1} {short}" if claim.name in names else short


def check(claim: Claim | str, cfg: dict) -> ClaimResult:
    """simulate -> compare -> verdict: one claim at the sizes of cfg."""
    claim = lookup(claim)
    return score(claim, cfg, jsonable(claim.simulate(cfg), claim.name))


def score(claim: Claim | str, cfg: dict, simulation: dict) -> ClaimResult:
    """compare -> verdict on a simulation already run (e.g. read back from --json)."""
    claim = lookup(claim)
    comparison = claim.compare(cfg, simulation)
    text, row = _verdict(claim.verdict(cfg, comparison))
    details = [tuple(d) for d in comparison.details]
    if row is not None:
        details.insert(comparison.criterion_at, row)
    return ClaimResult(
        claim=label(claim),
        title=claim.title,
        sizes=comparison.sizes,
        predicted=comparison.predicted,
        simulated=comparison.simulated,
        error=comparison.error,
        shrinks=comparison.shrinks,
        verdict=text,
        details=details,
        data=comparison.data,
        name=claim.name,
        config=cfg,
        simulation=simulation,
    )


def _verdict(v: Verdict) -> tuple[str, tuple[str, str] | None]:
    if isinstance(v, str):
        return v, None
    text, (name, value) = v
    return text, (str(name), str(value))


def jsonable(data: dict, name: str = "") -> dict:
    """The data as it reads back from JSON (numpy arrays and scalars as lists and numbers,
    tuples as lists), so that a run and a re-scoring of its saved data compare the same
    numbers; anything else is an error naming the claim."""
    try:
        return json.loads(json.dumps(data, default=json_default))
    except (TypeError, ValueError) as e:
        raise ConfigError(f"claim {name!r}: simulate must return JSON-able data ({e})") from e


def json_default(o):
    """numpy scalars, numpy and jax arrays for json.dump; anything else is a TypeError."""
    if isinstance(o, (np.floating, np.integer, np.bool_)):
        return o.item()
    if isinstance(o, np.ndarray) or hasattr(o, "__array__"):  # numpy and jax arrays
        return np.asarray(o).tolist()
    raise TypeError(f"{type(o).__name__} is not JSON-able")
