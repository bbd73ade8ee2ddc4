"""simlab: a JAX lab bench for attention sharpness vs anisotropy of untrained Transformer blocks.

`import simlab` stays light: the public names below are imported on first use.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "run_sweep": "simlab.sweep",
    "load": "simlab.results",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    """Import an exported name from its module on first access."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'simlab' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
