"""Plugins: Python modules that register their own block kinds, input kinds, metrics, knobs and
theory claims (simlab.registry) without editing simlab.

Found three ways, all imported before any config is validated:
  * `plugins = ["module", ...]` at the top of a config file (simlab.engine.config.load_config);
  * `--plugin module` on every `simlab` command (simlab.cli);
  * the entry-point group "simlab.plugins" of installed packages (`load_entry_points`): a package
    declares `[project.entry-points."simlab.plugins"] name = "module"` and registers itself.
A plugin that cannot be imported, or fails while importing, is a ConfigError naming it (the CLI:
exit 2 before any output).

What a sweep records of its plugins (`used`): for every entry it uses that a plugin registered,
the plugin module, its version (the installed distribution's, if any) and a sha256 of the
module's source file (of the entry's code objects when there is no file). This
enters the sweep's resolved config, so meta.json shows it and the fingerprint changes with it:
a changed plugin does not resume, or merge with, chunks an older one wrote.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import inspect
import marshal
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from simlab.core.block import BLOCKS
from simlab.core.inputs import INPUTS
from simlab.core.knobs import KNOBS
from simlab.core.metrics import METRICS
from simlab.core.patterns import PATTERNS
from simlab.errors import ConfigError
from simlab.registry import BUILTIN, loading

ENTRY_POINT_GROUP = "simlab.plugins"
_loaded: dict[str, str] = {}  # module -> how it was found ("config", "--plugin", "entry point")


def load(modules: Iterable[str], where: str = "plugins") -> list[str]:
    """Import each plugin module (once per process); a ConfigError naming `where` and the
    module when it is not a name, cannot be found, or raises while importing."""
    load_entry_points()
    out = []
    for i, name in enumerate(modules):
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{where}[{i}]: must be a module name, got {name!r}")
        _import(name.strip(), f"{where}[{i}]" if where == "plugins" else where)
        out.append(name.strip())
    return out


def _import(module: str, where: str) -> None:
    if module in _loaded:
        return
    try:
        with loading(module):
            importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and module.startswith(e.name):
            raise ConfigError(
                f"{where}: plugin {module!r} not found (no module {e.name!r} on the path; "
                "install it or add its folder to PYTHONPATH)"
            ) from None
        raise ConfigError(f"{where}: plugin {module!r} failed to import: {e}") from None
    except ConfigError as e:
        raise ConfigError(f"{where}: plugin {module!r}: {e}") from None
    except Exception as e:  # a plugin's own bug: name it, with its message
        raise ConfigError(
            f"{where}: plugin {module!r} failed to import: {type(e).__name__}: {e}"
        ) from None
    _loaded[module] = where


@functools.cache
def load_entry_points() -> tuple[str, ...]:
    """Import every plugin of the "simlab.plugins" entry-point group (once per process)."""
    names = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        _import(ep.value.split(":")[0], f"entry point {ep.name!r} ({ENTRY_POINT_GROUP})")
        names.append(ep.value.split(":")[0])
    return tuple(names)


def loaded() -> dict[str, str]:
    """Plugin module -> how it was found, for every plugin imported so far."""
    return dict(_loaded)


def describe(module: str, entry: Any = None) -> dict[str, Any]:
    """{"module", "version", "sha256"}: the version of the installed distribution that holds
    the module (None when it is not installed) and a sha256 of the module's source file (of
    the entry's code objects when there is no file), so that an edited plugin of an unchanged
    version (an editable install) still counts as changed."""
    version = _version(module.split(".")[0])
    return {"module": module, "version": version, "sha256": _source_hash(module, entry)}


@functools.cache
def _version(top: str) -> str | None:
    """ "<distribution> <version>" of the installed distribution holding the top-level module
    `top` (None when none does); once per process (reading every distribution's file list
    takes ~0.5 s)."""
    for dist in importlib.metadata.packages_distributions().get(top, []):
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _source_hash(module: str, entry: Any) -> str:
    mod = sys.modules.get(module)
    try:
        text = inspect.getsource(mod) if mod is not None else None
    except (OSError, TypeError):
        text = None
    h = hashlib.sha256()
    if text is not None:
        h.update(text.encode())
        return h.hexdigest()
    # no source file (a notebook, __main__ of an interactive session): the entry's code objects
    for value in sorted(vars(entry).items()) if hasattr(entry, "__dict__") else ():
        code = getattr(value[1], "__code__", None)
        h.update(value[0].encode())
        h.update(marshal.dumps(code) if code is not None else repr(value[1]).encode())
    return h.hexdigest()


def used(entries: Mapping[str, Iterable[str]]) -> list[dict[str, Any]]:
    """The plugins behind the entries a sweep uses: entries = registry name ("block", "inputs",
    "metrics", "knobs", "pattern") -> entry names. One record per entry that is not built in:
    {"registry", "entry", "module", "version", "sha256"}, sorted; [] when all are built in."""
    registries = {
        "block": BLOCKS,
        "inputs": INPUTS,
        "metrics": METRICS,
        "knobs": KNOBS,
        "pattern": PATTERNS,
    }
    out = []
    for reg, names in entries.items():
        registry = registries[reg]
        for name in sorted(set(names)):
            src = registry.source(name)
            if src != BUILTIN:
                out.append({"registry": reg, "entry": name, **describe(src, registry[name])})
    return out
