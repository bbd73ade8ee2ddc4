"""Generic validation of config values: each check names the field (`where`, e.g.
"sweep.seeds" or "block.d_model") and the allowed range, and raises `ConfigError`, which the CLI
turns into exit code 2 before any compute. It knows no table and no physics: core (the specs),
engine (the sweep's tables, axes, [refine]) and the studies (the training config) all call it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from simlab.errors import ConfigError


def check_choice(where: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(map(repr, allowed))}")
    return value


def check_fields(where: str, table: Mapping[str, Any], allowed: Iterable[str]) -> None:
    """Refuse the first key of `table` not in `allowed`, naming it and listing `allowed`."""
    allowed = tuple(allowed)
    for k in table:
        if k not in allowed:
            raise ConfigError(f"{where}.{k}: unknown field; allowed: {', '.join(allowed)}")


def check_int(where: str, value: Any, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: must be an integer, got {value!r}")
    if value < lo or (hi is not None and value > hi):
        rng = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ConfigError(f"{where}: {value} is outside the allowed range {rng}")
    return value


def check_positive(where: str, value: Any, lo: float = 0.0, strict: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where}: must be a finite number, got {value!r}")
    if (value <= lo) if strict else (value < lo):
        raise ConfigError(f"{where}: {value!r} must be {'>' if strict else '>='} {lo:g}")
    return float(value)
