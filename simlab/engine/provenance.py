"""Who wrote a stored result and whether this simlab knows its fields: the versions meta.json
records (`versions`), the config kinds this simlab can judge (CONFIG_KINDS: "sweep" here; a
study registers its own, e.g. "train-dynamics"), and the warning that a result comes from
another simlab version or holds fields this version does not know (`check_written_by`).
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.metadata
import platform
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from simlab.core.spec import BlockSpec, InputSpec
from simlab.engine import config as cfgmod


def versions(*extra: str) -> dict[str, str]:
    """Versions of simlab, jax, jaxlib, numpy and python, and of the `extra` distributions
    (e.g. "flax", "optax", "torch"; absent ones are left out): what meta.json records."""
    out = {"python": platform.python_version()}
    for name in ("simlab", "jax", "jaxlib", "numpy") + extra:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def sweep_unknown_fields(config: Mapping[str, Any]) -> list[str]:
    """Dotted names of a sweep config's fields that this version does not know."""
    known = {
        "block": {f.name for f in dataclasses.fields(BlockSpec)},
        "inputs": {f.name for f in dataclasses.fields(InputSpec)},
        "sweep": set(cfgmod.SWEEP_DEFAULTS),
    }
    tops = {*cfgmod.TABLES, cfgmod.PLUGINS_KEY, *cfgmod.DERIVED_KEYS}
    out = [k for k in config if k not in tops]
    for table, fields in known.items():
        t = config.get(table)
        if isinstance(t, Mapping):
            out += [f"{table}.{k}" for k in t if k not in fields]
    return out


# meta["kind"] (absent: "sweep") -> the function naming a stored config's unknown fields. A
# kind not registered here is not judged (its study registers it when imported).
CONFIG_KINDS: dict[str, Callable[[Mapping[str, Any]], list[str]]] = {"sweep": sweep_unknown_fields}


def register_config_kind(kind: str, unknown_fields: Callable[[Mapping[str, Any]], list[str]]):
    """Let `check_written_by` judge the configs of results of `kind` (meta["kind"])."""
    CONFIG_KINDS[kind] = unknown_fields


def unknown_fields(meta: Mapping[str, Any]) -> list[str]:
    """Dotted names of a stored result's config fields that this version does not know (none
    for a kind it cannot judge)."""
    judge = CONFIG_KINDS.get(meta.get("kind", "sweep"))
    return [] if judge is None else judge(meta.get("config") or {})


def simlab_version() -> str:
    """The installed simlab version (pyproject's), or "unknown" outside an installation."""
    try:
        return importlib.metadata.version("simlab")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


_WARNED: set = set()


def check_written_by(d: Path, meta: Mapping[str, Any]) -> None:
    """Warn (once per directory) when a result was written by another simlab version, naming
    both, and when its config has fields this version does not know (a newer simlab's)."""
    here = simlab_version()
    there = (meta.get("versions") or {}).get("simlab")
    unknown = unknown_fields(meta)
    key = (str(d), there, here, tuple(unknown))
    if key in _WARNED:
        return
    _WARNED.add(key)
    if unknown:
        warnings.warn(
            f"{d}: its config has fields this simlab ({here}) does not know: "
            f"{', '.join(unknown)} (written by simlab {there or 'unknown'}); read as it is",
            stacklevel=4,
        )
    elif there is not None and there != here:
        warnings.warn(f"{d}: written by simlab {there}; this is simlab {here}", stacklevel=4)
