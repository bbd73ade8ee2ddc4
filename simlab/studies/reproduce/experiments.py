"""The experiments of `simlab reproduce`: which TOML files they are, their groups, their sweep
tables at full or [quick] sizes, their variant sweeps and the figures they declare.

An experiment is one TOML file in experiments/ (simlab.engine.config.experiments_dir): the
sweep (the full, paper-size protocol), a [quick] table of smaller sizes, an optional
`experiment = "<group>"` key (--only takes groups or single files) and the figures it draws, as
[[figures]] tables (simlab.studies.reproduce.figures).

Variants: static structure (d_model, a block field) cannot be a grid axis, so an experiment
may declare [variants]: dimension -> list of tables {name, label, block/inputs/knobs/sweep
overrides}; one sweep runs per combination (the product over dimensions, in order), into
OUT/data/<config>/<name>-<name>. A [quick] `variants` table replaces the lists it names.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from pathlib import Path

from simlab.engine.config import EXPERIMENT_KEYS, apply_quick, experiments_dir
from simlab.engine.tomlio import apply_overrides, read_config_toml
from simlab.errors import ConfigError

VARIANT_TABLES = ("block", "inputs", "knobs", "sweep")


@dataclasses.dataclass(frozen=True)
class Variant:
    """One sweep of an experiment with [variants]: its directory name, its label in each
    variant dimension (dimension -> label) and the table overrides it applies."""

    name: str
    labels: dict
    tables: dict


def _path(name: str, directory: Path | None) -> Path:
    """experiments/<name>.toml (or <directory>/<name>.toml)."""
    return (Path(directory) if directory is not None else experiments_dir()) / f"{name}.toml"


def experiment_files(directory: Path | None = None) -> dict[str, Path]:
    """Config name -> path of every experiments/*.toml that declares [[figures]]."""
    directory = Path(directory) if directory is not None else experiments_dir()
    return {p.stem: p for p in sorted(directory.glob("*.toml")) if "figures" in read_config_toml(p)}


def experiment_groups(files: dict[str, Path]) -> dict[str, list[str]]:
    """Group name (the `experiment` key, default the config's own name) -> config names. A group
    may not take another config's name (--only NAME would then be ambiguous)."""
    groups: dict[str, list[str]] = {}
    for name, path in files.items():
        groups.setdefault(read_config_toml(path).get("experiment", name), []).append(name)
    for group, names in groups.items():
        if group in files and names != [group]:
            raise ConfigError(
                f"{files[names[0]]}: experiment group {group!r} is also a config's name; "
                "rename the group"
            )
    return groups


def experiment_config(
    name: str,
    quick: bool,
    directory: Path | None = None,
    extra: dict | None = None,
    sets: tuple[str, ...] = (),
    variant: Variant | None = None,
) -> dict:
    """The sweep tables of experiments/<name>.toml; with quick, its [quick] overrides applied,
    then `extra` (same form; used by the tests to shrink every experiment further), then the
    variant's overrides (experiment_variants), then --set."""
    path = _path(name, directory)
    if not path.exists():
        raise ConfigError(
            f"{path}: experiment config not found (run from a clone of the "
            "simlab repository, installed with pip install -e ., or set "
            "SIMLAB_EXPERIMENTS)"
        )
    raw = read_config_toml(path)
    cfg = {k: v for k, v in raw.items() if k not in EXPERIMENT_KEYS}
    if quick:
        cfg = apply_quick(cfg, _no_variants(raw.get("quick")), f"{path}: quick")
    cfg = apply_quick(cfg, _no_variants(extra), "extra") if extra else cfg
    if variant is not None:
        cfg = apply_quick(cfg, variant.tables, f"{path}: variants {variant.name}")
    return apply_overrides(cfg, sets) if sets else cfg


def _no_variants(table: dict | None) -> dict | None:
    return None if table is None else {k: v for k, v in table.items() if k != "variants"}


def _check_variants(dims: dict, where: str) -> None:
    """Each dimension a non-empty list of tables with a name and known fields."""
    for dim, entries in dims.items():
        if not isinstance(entries, list) or not entries:
            raise ConfigError(f"{where}.{dim}: must be a non-empty list of tables")
        for i, e in enumerate(entries):
            at = f"{where}.{dim}[{i}]"
            if not isinstance(e, dict) or not re.fullmatch(r"[A-Za-z0-9_.]+", str(e.get("name"))):
                raise ConfigError(f"{at}.name: required, letters, digits, '_' or '.'")
            for k in e:
                if k not in ("name", "label", *VARIANT_TABLES):
                    raise ConfigError(
                        f"{at}.{k}: unknown field; allowed: name, label, "
                        + ", ".join(VARIANT_TABLES)
                    )


def experiment_variants(
    name: str, quick: bool, directory: Path | None = None, extra: dict | None = None
) -> list[Variant] | None:
    """The variant sweeps of experiments/<name>.toml (None when it declares no [variants]):
    the product over its dimensions, [quick] `variants` (with quick) and then `extra`'s
    replacing the lists of the dimensions they name (extra's other dimensions are ignored)."""
    path = _path(name, directory)
    raw = read_config_toml(path)
    dims = dict(raw.get("variants") or {})
    if not dims:
        return None
    _check_variants(dims, f"{path}: variants")
    quick_dims = dict((raw.get("quick") or {}).get("variants", {})) if quick else {}
    for dim in quick_dims:
        if dim not in dims:
            raise ConfigError(f"{path}: quick.variants.{dim}: not a dimension of [variants]")
    _check_variants(quick_dims, f"{path}: quick.variants")
    extra_dims = {k: v for k, v in ((extra or {}).get("variants") or {}).items() if k in dims}
    _check_variants(extra_dims, "extra.variants")
    dims.update(quick_dims)
    dims.update(extra_dims)
    out = []
    for combo in itertools.product(*dims.values()):
        tables: dict = {}
        for e in combo:
            for t in VARIANT_TABLES:
                tables[t] = {**tables.get(t, {}), **e.get(t, {})}
        labels = {d: str(e.get("label", e["name"])) for d, e in zip(dims, combo)}
        out.append(Variant("-".join(e["name"] for e in combo), labels, tables))
    return out


def figure_specs(name: str, directory: Path | None = None) -> list[dict]:
    """The [[figures]] tables of experiments/<name>.toml."""
    return list(read_config_toml(_path(name, directory)).get("figures", []))
