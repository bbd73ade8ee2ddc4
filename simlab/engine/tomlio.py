"""TOML text in and out of a config: read a config file (every failure a ConfigError naming the
file) and apply `--set KEY=VALUE` overrides to its tables before it is validated
(simlab.engine.config.load_config)."""

from __future__ import annotations

import copy
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from simlab.errors import ConfigError


def read_toml(path: str | os.PathLike) -> dict[str, Any]:
    """Parse a TOML file; a missing or unreadable file, text that is not UTF-8 and a syntax
    error each become a ConfigError naming the file."""
    p = Path(path)
    if str(path) == "":
        raise ConfigError("config: empty file name")
    if not p.exists():
        raise ConfigError(f"{p}: no such config file")
    if not p.is_file():
        raise ConfigError(f"{p}: is not a file (a TOML config file is needed)")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{p}: is not UTF-8 text (byte {e.start}); a config is a TOML text file"
        ) from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot be read ({e.strerror})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: invalid TOML: {e}") from None


# fields of a config that name files: a relative one is relative to the config file's folder
PATH_FIELDS = {"checkpoint": ("path", "ids"), "inputs": ("corpus",)}
# values of a PATH_FIELDS field that name no path (inputs.corpus = "stdlib", "kjv":
# simlab.checkpoints.corpus.NAMED, tested equal)
NOT_PATHS = {("inputs", "corpus"): ("stdlib", "kjv")}


def read_config_toml(path: str | os.PathLike) -> dict[str, Any]:
    """The one reader of a config file (`simlab sweep` with and without --set, `run_sweep(path)`,
    `simlab reproduce`, check-theory, train-dynamics): read_toml, with every relative path of
    PATH_FIELDS made relative to the file's folder (as pytest and ruff read theirs;
    docs/config.md, "Paths"), in the top-level tables, in an experiment's [quick] tables and in
    each of its [variants] entries: the config runs from any directory. A `--set` applied
    afterwards stays relative to the current directory."""
    raw = read_toml(path)
    base = Path(path).resolve().parent
    _resolve_paths(raw, base)
    quick = raw.get("quick")
    if isinstance(quick, dict):
        _resolve_paths(quick, base)
    variants = raw.get("variants")
    for entries in variants.values() if isinstance(variants, dict) else ():
        for e in entries if isinstance(entries, list) else ():
            if isinstance(e, dict):
                _resolve_paths(e, base)
    return raw


def _resolve_paths(tables: dict[str, Any], base: Path) -> None:
    """Each relative PATH_FIELDS value of `tables` (in place) made relative to `base`."""
    for table, fields in PATH_FIELDS.items():
        t = tables.get(table)
        if not isinstance(t, dict):
            continue
        for f in fields:
            v = t.get(f)
            if v in NOT_PATHS.get((table, f), ()):
                continue
            if isinstance(v, str) and v and not v.startswith("~") and not Path(v).is_absolute():
                t[f] = os.path.normpath(base / v)


def parse_override(text: str) -> tuple[list[str], Any]:
    """ "block.d_model=128" -> (["block", "d_model"], 128): the value is read as a TOML value
    (numbers, true/false, "strings", [lists], {tables}); a bare word is a string."""
    key, sep, value = text.partition("=")
    path = [p for p in key.strip().split(".")]
    if not sep or not all(path):
        raise ConfigError(
            f"--set: {text!r} is not KEY=VALUE with a dotted key, e.g. block.d_model=128"
        )
    try:
        v = tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        v = value.strip()
    return path, v


def apply_overrides(raw: Mapping[str, Any], sets: list[str] | tuple[str, ...]) -> dict:
    """The config tables with each --set KEY=VALUE applied (dotted keys; a number indexes a
    list, e.g. axes.0.num=9). Unknown tables and fields are left for load_config to refuse,
    so an override is validated exactly like the file."""
    out = copy.deepcopy(dict(raw))
    for text in sets or ():
        path, value = parse_override(text)
        node: Any = out
        for i, part in enumerate(path[:-1]):
            nxt = path[i + 1]
            if isinstance(node, list):
                node = _index(node, part, text)
                continue
            if part not in node or node[part] is None:
                node[part] = [] if nxt.isdigit() else {}
            node = node[part]
            if not isinstance(node, (dict, list)):
                raise ConfigError(f"--set {text}: {'.'.join(path[: i + 1])} is not a table")
        last = path[-1]
        if isinstance(node, list):
            idx = int(last) if last.isdigit() else None
            if idx is None or not 0 <= idx < len(node):
                raise ConfigError(f"--set {text}: index {last} is outside 0..{len(node) - 1}")
            node[idx] = value
        else:
            node[last] = value
    return out


def _index(node: list, part: str, text: str):
    if not part.isdigit() or not 0 <= int(part) < len(node):
        raise ConfigError(f"--set {text}: {part!r} is not an index in 0..{len(node) - 1}")
    return node[int(part)]
