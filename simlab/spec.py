"""Static structure (specs) and traced knobs, with validation.

A spec is hashable and decides what is compiled; knobs are floats that a sweep varies
without recompiling (docs/design.md, "Vocabulary").  Every check names the field and the allowed
range and raises `ConfigError`, which the CLI turns into exit code 2 before any compute.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping


class ConfigError(ValueError):
    """A user error in a config: the message names the field and what is allowed."""


# The traced knobs, their defaults and allowed ranges (closed unless noted).  Names are part
# of the interface.
KNOB_DEFAULTS: dict[str, float] = {
    "q_scale": 1.0,       # multiplies every query (after QK-norm)
    "k_scale": 1.0,       # multiplies every key (after QK-norm)
    "q_shift": 0.0,       # norm of a common vector added to every query of a head
    "k_shift": 0.0,       # norm of a common vector added to every key of a head
    "temperature": 1.0,   # logits = q.k / (sqrt(d_head) * temperature)
    "drift_norm": 0.0,    # norm N of the common input bias b
    "input_corr": 0.0,    # within-sequence correlation p of gaussian inputs
    "attn_residual": 1.0,  # skip strength a around attention
    "mlp_residual": 1.0,  # skip strength m around the MLP
    "qk_norm_gain": 1.0,  # gain after QK-norm
}
KNOB_RANGES: dict[str, tuple[float, float, str]] = {
    # name: (low, high, "closed" | "open-low")
    "q_scale": (0.0, math.inf, "closed"),
    "k_scale": (0.0, math.inf, "closed"),
    "q_shift": (0.0, math.inf, "closed"),
    "k_shift": (0.0, math.inf, "closed"),
    "temperature": (0.0, math.inf, "open-low"),
    "drift_norm": (0.0, math.inf, "closed"),
    "input_corr": (0.0, 1.0, "closed"),
    "attn_residual": (-math.inf, math.inf, "closed"),
    "mlp_residual": (-math.inf, math.inf, "closed"),
    "qk_norm_gain": (0.0, math.inf, "closed"),
}
KNOB_NAMES: tuple[str, ...] = tuple(KNOB_DEFAULTS)


def check_knob(name: str, value: Any, where: str = "knobs") -> float:
    """Validate one knob value; return it as a float."""
    if name not in KNOB_DEFAULTS:
        raise ConfigError(f"{where}.{name}: unknown knob; allowed: {', '.join(KNOB_NAMES)}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}.{name}: must be a number, got {value!r}")
    v = float(value)
    lo, hi, kind = KNOB_RANGES[name]
    ok = math.isfinite(v) and (lo < v if kind == "open-low" else lo <= v) and v <= hi
    if not ok:
        left = "(" if kind == "open-low" else "["
        raise ConfigError(f"{where}.{name}: {value!r} is outside the allowed range "
                          f"{left}{lo:g}, {hi:g}]")
    return v


def _choice(where: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(map(repr, allowed))}")
    return value


def _int(where: str, value: Any, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: must be an integer, got {value!r}")
    if value < lo or (hi is not None and value > hi):
        rng = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ConfigError(f"{where}: {value} is outside the allowed range {rng}")
    return value


def _pos(where: str, value: Any, lo: float = 0.0, strict: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where}: must be a finite number, got {value!r}")
    if (value <= lo) if strict else (value < lo):
        raise ConfigError(f"{where}: {value!r} must be {'>' if strict else '>='} {lo:g}")
    return float(value)


@dataclasses.dataclass(frozen=True)
class BlockSpec:
    """Static structure of a block (or a depth-`depth` stack of independent blocks).

    kind: "attention" (y = a*x + Attn(x), no norm, no MLP unless mlp=True),
          "post_ln" (BERT: h = LN(a*x + Attn(x)); y = LN(m*h + MLP(h))),
          "pre_ln"  (h = a*x + Attn(LN(x)); y = m*h + MLP(LN(h))).
    `attn_only_output`: for kind="attention", the residual is included; set
    attn_residual = 0 to study the bare attention sub-layer.
    """
    kind: str = "post_ln"
    d_model: int = 768
    n_heads: int = 12
    mlp: bool = True
    mlp_ratio: int = 4
    activation: str = "gelu"
    causal: bool = False
    qk_norm: str = "none"          # "none" | "layernorm" | "rmsnorm" (per head, on q and k)
    depth: int = 1
    init: str = "bert"             # "bert" | "glorot" | "fan_in"
    init_sigma: float = 1.0        # for init = "fan_in": N(0, sigma^2 / fan_in)
    ln_eps: float = 1e-12          # BERT's LayerNorm epsilon

    KINDS = ("attention", "post_ln", "pre_ln")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def has_mlp(self) -> bool:
        return self.mlp

    def validate(self, where: str = "block") -> "BlockSpec":
        _choice(f"{where}.kind", self.kind, self.KINDS)
        _int(f"{where}.d_model", self.d_model, 1, 1 << 16)
        _int(f"{where}.n_heads", self.n_heads, 1, self.d_model)
        if self.d_model % self.n_heads:
            raise ConfigError(f"{where}.n_heads: {self.n_heads} must divide d_model={self.d_model}")
        if not isinstance(self.mlp, bool):
            raise ConfigError(f"{where}.mlp: must be true or false, got {self.mlp!r}")
        _int(f"{where}.mlp_ratio", self.mlp_ratio, 1, 64)
        _choice(f"{where}.activation", self.activation, ("gelu", "relu"))
        if not isinstance(self.causal, bool):
            raise ConfigError(f"{where}.causal: must be true or false, got {self.causal!r}")
        _choice(f"{where}.qk_norm", self.qk_norm, ("none", "layernorm", "rmsnorm"))
        _int(f"{where}.depth", self.depth, 1, 256)
        _choice(f"{where}.init", self.init, ("bert", "glorot", "fan_in"))
        _pos(f"{where}.init_sigma", self.init_sigma)
        _pos(f"{where}.ln_eps", self.ln_eps)
        return self


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """Static description of the input distribution (shape batch x length x d_model).

    kind: "embedding" (rows of a table E ~ N(0, embed_std^2), V = vocab; ids uniform or
          Zipf(zipf_s)), "gaussian" (N(0, sigma^2) per coordinate with the input_corr knob),
          "anisotropic" (covariance spectrum lambda_k ~ k^-alpha, trace = sigma^2 d),
          "student_t" (i.i.d. Student-t with nu dof, scaled by sigma).
    Every kind then gets the drift b = drift_norm * u_b (unit u_b per seed).
    """
    kind: str = "embedding"
    batch: int = 16
    length: int = 512
    vocab: int = 30522
    embed_std: float = 0.02
    token_dist: str = "uniform"    # "uniform" | "zipf"
    zipf_s: float = 1.1
    sigma: float = 1.0
    alpha: float = 1.0
    nu: float = 3.0

    KINDS = ("embedding", "gaussian", "anisotropic", "student_t")

    def validate(self, where: str = "inputs") -> "InputSpec":
        _choice(f"{where}.kind", self.kind, self.KINDS)
        _int(f"{where}.batch", self.batch, 1, 1 << 16)
        _int(f"{where}.length", self.length, 2, 1 << 20)
        _int(f"{where}.vocab", self.vocab, 2, 1 << 24)
        _pos(f"{where}.embed_std", self.embed_std)
        _choice(f"{where}.token_dist", self.token_dist, ("uniform", "zipf"))
        _pos(f"{where}.zipf_s", self.zipf_s)
        _pos(f"{where}.sigma", self.sigma)
        _pos(f"{where}.alpha", self.alpha, strict=False)
        _pos(f"{where}.nu", self.nu, lo=2.0)
        return self


def spec_from_dict(cls, d: Mapping[str, Any] | None, where: str):
    """Build a frozen spec from a TOML table, refusing unknown fields."""
    d = dict(d or {})
    names = {f.name for f in dataclasses.fields(cls)}
    for k in d:
        if k not in names:
            raise ConfigError(f"{where}.{k}: unknown field; allowed: {', '.join(sorted(names))}")
    return cls(**d).validate(where)


def resolve_knobs(fixed: Mapping[str, Any] | None, where: str = "knobs") -> dict[str, float]:
    """Defaults overridden by `fixed`, each validated."""
    out = dict(KNOB_DEFAULTS)
    for k, v in (fixed or {}).items():
        out[k] = check_knob(k, v, where)
    return out
