"""One registry per concept (block kinds, input kinds, metrics, knobs, theory claims), read live.

A `Registry` maps names to entries of one type. `register(entry)` checks the entry (its type, a
non-empty name not taken, the fields the concept needs) and adds it; simlab's built-in entries
are registered with the same call, so nothing is special about them. Every reader looks names up
at the time it needs them (`name in BLOCKS`, `tuple(METRICS)`), never from a copy taken at
import, so an entry registered later (a plugin, a notebook) is seen everywhere at once.

Each entry remembers where it came from (`source(name)`): "simlab" for the built-ins, else the
plugin module being imported when it was registered (simlab.plugins), else the module of the
code that registered it. The sources of the entries a sweep uses enter its fingerprint
(simlab.plugins.used), so a changed plugin does not resume old chunks.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

from simlab.errors import ConfigError

T = TypeVar("T")
BUILTIN = "simlab"

# The plugin module being imported (set by simlab.plugins while it imports one): the source of
# whatever it registers.
_loading: contextvars.ContextVar[str | None] = contextvars.ContextVar("_loading", default=None)


@contextlib.contextmanager
def loading(module: str):
    """Entries registered inside this block come from the plugin `module`."""
    token = _loading.set(module)
    try:
        yield
    finally:
        _loading.reset(token)


class Registry(Mapping[str, T], Generic[T]):
    """name -> entry of `kind` (a class with a `name` field), in the order of registration.

    concept: what an entry is, for messages ("block kind"); check(entry): raises ConfigError
    naming the field when an entry is malformed."""

    def __init__(self, concept: str, kind: type, check: Callable[[T], None] | None = None):
        self.concept, self.kind, self._check = concept, kind, check
        self._entries: dict[str, T] = {}
        self._sources: dict[str, str] = {}

    def register(self, entry: T, *, source: str | None = None) -> T:
        """Check `entry` and add it; returns it. A duplicate name is an error."""
        if not isinstance(entry, self.kind):
            raise ConfigError(
                f"register {self.concept}: expected a {self.kind.__name__}, got "
                f"{type(entry).__name__} {entry!r}"
            )
        name = getattr(entry, "name", None)
        if not isinstance(name, str) or not name.strip() or name != name.strip():
            raise ConfigError(
                f"register {self.concept}: name must be a non-empty string, got {name!r}"
            )
        if name in self._entries:
            raise ConfigError(
                f"register {self.concept} {name!r}: the name is taken (registered by "
                f"{self._sources[name]}); choose another name"
            )
        if self._check is not None:
            self._check(entry)
        self._entries[name] = entry
        self._sources[name] = source or _loading.get() or _caller_module(entry)
        return entry

    def unregister(self, name: str) -> T:
        """Remove an entry (tests, notebooks re-registering a changed entry)."""
        if name not in self._entries:
            raise ConfigError(f"unregister {self.concept}: {name!r} is not registered")
        self._sources.pop(name)
        return self._entries.pop(name)

    def source(self, name: str) -> str:
        """Where the entry came from: "simlab" (built in), or a module name."""
        return self._sources[name]

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.concept}: {', '.join(self._entries)})"


def _caller_module(entry) -> str:
    """The module of the entry's first function (where a notebook or script defined it)."""
    for value in vars(entry).values() if hasattr(entry, "__dict__") else ():
        if callable(value) and getattr(value, "__module__", None):
            return value.__module__
    return type(entry).__module__


def require(concept: str, name: str, checks: Mapping[str, tuple[bool, str]]) -> None:
    """Raise a ConfigError naming the first failed field: checks = field -> (ok, what)."""
    for field, (ok, what) in checks.items():
        if not ok:
            raise ConfigError(f"register {concept} {name!r}: {field} {what}")
