"""simlab: a JAX lab bench for attention sharpness vs anisotropy of Transformer blocks, untrained
(random weights) or read from trained checkpoints.

Layers (docs/design.md): simlab.core (the physics: specs, knobs, init, inputs, attention,
tiles, blocks, metrics, the Lab), simlab.checkpoints (the weight source: trained checkpoints
read into the lab's layout), simlab.engine (the sweep machinery: config, sweep, records,
results, compilation cache), simlab.studies (reproduce, check_theory, train_dynamics, bench), and
simlab.plot, simlab.theory, simlab.cli; simlab.registry and simlab.plugins (your own block kinds,
input kinds, metrics, knobs, attention patterns and theory claims, docs/extending.md),
simlab.testing (their conformance checks). `import simlab` stays light: the public names below
are imported on first use.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "run_sweep": "simlab.engine.sweep",
    "load": "simlab.engine.results",
    "Results": "simlab.engine.results",
    "from_xarray": "simlab.engine.results",
    "ConfigError": "simlab.errors",
    "ResultsError": "simlab.errors",
    "Lab": "simlab.core.lab",
    "BlockSpec": "simlab.core.spec",
    "InputSpec": "simlab.core.spec",
    "knob_arrays": "simlab.core.knobs",
    "LabProtocol": "simlab.core.lab",
    # registering your own entries (docs/extending.md): one registry per concept
    "BlockKind": "simlab.core.block",
    "register_block": "simlab.core.block",
    "InputKind": "simlab.core.inputs",
    "register_inputs": "simlab.core.inputs",
    "Metric": "simlab.core.metrics",
    "register_metric": "simlab.core.metrics",
    "Pattern": "simlab.core.patterns",
    "register_pattern": "simlab.core.patterns",
    "Knob": "simlab.core.knobs",
    "register_knob": "simlab.core.knobs",
    "Claim": "simlab.studies.check_theory.claim",
    "register_claim": "simlab.studies.check_theory.claim",
    "sweep_claim": "simlab.studies.check_theory.sweep_claim",
    "load_plugins": "simlab.plugins",
}
__all__ = sorted(_EXPORTS)


_RENAMED = {"register_claim": "register", "load_plugins": "load"}


def _version() -> str:
    """The installed simlab version (the package metadata, from pyproject's), or "unknown"
    outside an installation."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("simlab")
    except PackageNotFoundError:
        return "unknown"


def __getattr__(name: str):
    """Import an exported name from its module on first access; `__version__` is _version()."""
    if name == "__version__":
        return _version()
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), _RENAMED.get(name, name))
    raise AttributeError(f"module 'simlab' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS) | {"__version__"})
