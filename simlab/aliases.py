"""Old import paths of public names that moved: each keeps working for a release, with a
DeprecationWarning naming the new path (docs/design.md, "Layout of the package").

  moved_module(old, new)          `import old`, `from old import x` and `from package import
                                  name` give the module `new` (a finder on sys.meta_path)
  moved_names(module, {old: new}) a module-level __getattr__ for names that left `module`,
                                  each new path written "package.module:name"

The new module is imported by name when the old path is used (importlib), so an alias never
makes a low layer import a high one (tests/test_layers.py). Each alias is registered in the
package that lost the name; MOVED lists them all, old path -> new path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from collections.abc import Callable, Mapping

# old dotted module path -> new dotted module path (moved_module)
MOVED: dict[str, str] = {}


def _warn(old: str, new: str) -> None:
    """The DeprecationWarning, attributed to the line that used the old path (warnings skips
    importlib's frames), so that Python's default filter shows it for a script's own import."""
    warnings.warn(
        f"{old} moved to {new}; the old name is deprecated and goes in the next release",
        DeprecationWarning,
        stacklevel=3,
    )


class _Alias(importlib.abc.Loader):
    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec):
        _warn(spec.name, self.new)
        module = importlib.import_module(self.new)
        self.spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        # the new module ran already; importlib gave it the old path's spec: give its own back
        module.__spec__ = self.spec


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(new))


_FINDER = _Finder()


def moved_module(old: str, new: str) -> None:
    """Let `old` (a module path that no longer exists) import the module `new`, warning."""
    MOVED[old] = new
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)  # after the real finders: only a path nobody else has


def moved_names(module: str, moved: Mapping[str, str]) -> Callable[[str], object]:
    """A module-level __getattr__ for `module` (`__getattr__ = moved_names(__name__, {...})`):
    each old name gives the object at its new path ("package.module:name"), warning."""

    def __getattr__(name: str):
        if name not in moved:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        where, _, attr = moved[name].partition(":")
        _warn(f"{module}.{name}", moved[name])
        return getattr(importlib.import_module(where), attr or name)

    return __getattr__
