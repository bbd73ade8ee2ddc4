"""Reading a HF checkpoint's config.json and tensors with checks (every error names the field
or tensor and the file), and the helpers every architecture's mapping shares
(simlab.checkpoints.architectures: the registry; layernorm_family, llama_family: the mappings).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from simlab.core import attention
from simlab.errors import ConfigError

# HF's ACT2FN names -> simlab's activations (simlab.core.spec.ACTIVATIONS)
ACTIVATIONS = {
    "gelu": "gelu_exact",
    "gelu_new": "gelu",
    "gelu_pytorch_tanh": "gelu",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}


class Config:
    """config.json with checked reads: every error names the field and the file."""

    def __init__(self, cfg: Mapping, file: str):
        self.cfg, self.file = cfg, file

    def fail(self, field: str, why: str):
        raise ConfigError(f"{self.file}: {field}: {why}")

    def int(self, field: str, default=None, lo: int = 1) -> int:
        v = self.cfg.get(field, default)
        if v is None:
            self.fail(field, "missing")
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            self.fail(field, f"must be an integer >= {lo}, got {v!r}")
        return v

    def float(self, field: str, default=None) -> float:
        v = self.cfg.get(field, default)
        if v is None:
            self.fail(field, "missing")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            self.fail(field, f"must be a positive number, got {v!r}")
        return float(v)

    def expect(self, field: str, allowed: tuple, default=None):
        """The value of `field`, which must be one of `allowed` (what simlab computes)."""
        v = self.cfg.get(field, default)
        if v not in allowed:
            computes = " or ".join(map(repr, allowed))
            self.fail(field, f"{v!r} is not supported (simlab computes {computes})")
        return v

    def activation(self, field: str, default=None) -> str:
        v = self.cfg.get(field, default)
        if v not in ACTIVATIONS:
            supported = ", ".join(ACTIVATIONS)
            self.fail(field, f"activation {v!r} is not supported; supported: {supported}")
        return ACTIVATIONS[v]


class Tensors:
    """A checkpoint's tensors under one name prefix, read with their expected shapes."""

    def __init__(self, tensors: Mapping, origin: Mapping[str, str], prefix: str, folder):
        self.tensors, self.origin, self.prefix, self.folder = tensors, origin, prefix, folder

    def __call__(self, name: str, shape: tuple[int, ...], optional: bool = False):
        """The tensor `name` (a LayerNorm's weight/bias also as gamma/beta) as float numpy, or
        a ConfigError naming it and the file (missing, of another shape, not floating point,
        or holding NaN or Inf); optional: None when absent."""
        full = self.prefix + name
        for cand in (
            full,
            full.replace("LayerNorm.weight", "LayerNorm.gamma"),
            full.replace("LayerNorm.bias", "LayerNorm.beta"),
        ):
            if cand in self.tensors:
                a = self.tensors[cand]
                if tuple(a.shape) != tuple(shape):
                    raise ConfigError(
                        f"{self.folder / self.origin[cand]}: tensor {cand!r} has shape "
                        f"{tuple(a.shape)}, config.json implies {tuple(shape)}"
                    )
                if not np.issubdtype(a.dtype, np.floating):
                    raise ConfigError(
                        f"{self.folder / self.origin[cand]}: tensor {cand!r} is {a.dtype}, not "
                        "floating point"
                    )
                a = a if a.dtype in (np.float32, np.float64) else a.astype(np.float32)
                bad = int(np.size(a) - np.count_nonzero(np.isfinite(a)))
                if bad:
                    raise ConfigError(
                        f"{self.folder / self.origin[cand]}: tensor {cand!r} holds {bad} NaN or "
                        "Inf values; simlab never computes on non-finite weights"
                    )
                return a
        if optional:
            return None
        files = sorted(set(self.origin.values())) or ["(no weight file)"]
        raise ConfigError(f"{self.folder / files[0]}: tensor {full!r} is missing")


def heads(w_OD: np.ndarray, h: int) -> np.ndarray:
    """A torch Linear weight (out, in) with out = (h, k) -> the lab's (D, H, K)."""
    return w_OD.T.reshape(w_OD.shape[1], h, -1)


def zeros_if_none(a, shape):
    return np.zeros(shape, np.float32) if a is None else a


def layer_norm(x, g, b, eps):
    return attention.layer_norm(x, g, b, eps)


def ints(field: str, default=None):
    return lambda c: c.int(field, default)
