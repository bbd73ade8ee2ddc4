"""JAX's persistent compilation cache for sweeps: a second sweep of the same shapes (or a
resumed one) loads its compiled programs from disk instead of compiling them again.

Where the cache lives, in order:
  * off when SIMLAB_COMPILE_CACHE is "0", "off", "false" or "no" (or `simlab ... --no-cache`);
  * the directory jax is already configured with (jax_compilation_cache_dir), left alone;
  * the path in SIMLAB_COMPILE_CACHE;
  * $XDG_CACHE_HOME/simlab/jax, else ~/.cache/simlab/jax (per user).
Every program is cached whatever its compile time (jax's default skips those under 1 s, which
is all of a small sweep's). The cache is trusted code: keep it private to the user (jax's
warning, jax.experimental.compilation_cache).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ENV = "SIMLAB_COMPILE_CACHE"
OFF = ("0", "off", "false", "no")


def cache_dir() -> Path | None:
    """The directory simlab would use (None when switched off)."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() in OFF:
        return None
    if value:
        return Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "simlab" / "jax"


_SET_BY_US: list[str] = []  # the directory enable() configured jax with, if any


def enable() -> str | None:
    """Switch the cache on (idempotent); returns the directory in use, or None if off."""
    import jax  # deferred: jax is heavy; the CLI enables the cache before it needs jax

    current = jax.config.jax_compilation_cache_dir
    if current and current not in _SET_BY_US:
        return current  # the user's own jax configuration wins
    path = cache_dir()
    if path is None:
        disable()
        return None
    if current == str(path):
        return current
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        probe = path / f".probe.{os.getpid()}"
        probe.write_bytes(b"")  # a directory that exists but cannot be written is unusable too
        probe.unlink()
    except OSError as e:
        _warn_once(path, e)
        return None  # compile as without a cache
    _set(str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return str(path)


_WARNED: set[str] = set()


def _warn_once(path: Path, e: OSError) -> None:
    """One line on stderr per unusable directory (the sweep goes on without the cache)."""
    if str(path) in _WARNED:
        return
    _WARNED.add(str(path))
    print(
        f"simlab: warning: compilation cache {path} is unusable ({e.strerror or e}); compiling "
        f"without it (set {ENV}=DIR to another directory, or {ENV}=off)",
        file=sys.stderr,
    )


def disable() -> None:
    """Stop using a cache that enable() switched on (a directory the user set stays)."""
    import jax  # deferred: jax is heavy; the CLI enables the cache before it needs jax

    if jax.config.jax_compilation_cache_dir in _SET_BY_US:
        _set(None)


def _set(path: str | None) -> None:
    import jax  # deferred: jax is heavy; the CLI enables the cache before it needs jax
    from jax._src import compilation_cache  # deferred: as jax

    jax.config.update("jax_compilation_cache_dir", path)
    compilation_cache.reset_cache()  # re-read the directory at the next compile
    _SET_BY_US[:] = [path] if path else []
