"""The traced knobs: floats that a sweep varies without recompiling (docs/design.md,
"Vocabulary"), in one registry.

KNOBS: name -> Knob(default, allowed range, meaning, `inert`), read live; a plugin adds its
own with `register_knob`. `inert(block, inputs)` returns
why the knob has no effect for that block and input spec, or None when it has one; sweeping an
inert knob, or fixing it away from its default, is a user error (simlab.core.lab.Lab.check_knobs).
The names are part of the interface (TOML [knobs], axes, `knob_arrays`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from simlab.core.block import BLOCKS
from simlab.core.patterns import PATTERNS
from simlab.errors import ConfigError
from simlab.registry import BUILTIN, Registry, require


def _always(block, inputs) -> str | None:
    return None


def _has_mlp_skip(block, inputs) -> str | None:
    if not block.mlp:
        return "block.mlp is false"
    if not BLOCKS[block.kind].mlp_residual:
        return f"block.kind {block.kind!r} has no skip around the MLP alone"
    return None


def _has_qk_norm(block, inputs) -> str | None:
    return None if block.qk_norm != "none" else "block.qk_norm is 'none'"


def _pattern(block):
    """The block's entry of simlab.core.patterns.PATTERNS (None for a name not registered: the
    spec's validation reports it)."""
    return PATTERNS.get(getattr(block, "pattern", "softmax"))


def _reads_logits(block, inputs) -> str | None:
    pattern = _pattern(block)
    return (
        None
        if pattern is None or pattern.reads_logits
        else f"block.pattern {block.pattern!r} replaces the softmax of the logits"
    )


def _sharpens_a_pattern(block, inputs) -> str | None:
    pattern = _pattern(block)
    if pattern is None or pattern.sharpens:
        return None
    names = [repr(n) for n, p in PATTERNS.items() if p.sharpens]
    clamps = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
    return f"block.pattern is {pattern.name!r}; pattern_beta sets the {clamps} clamps"


def _scales_a_head(block, inputs) -> str | None:
    if getattr(block, "scaled_head", None) is None:
        return "block.scaled_head is not set (the head head_scale multiplies)"
    return _reads_logits(block, inputs)


def _has_mlp_gain(block, inputs) -> str | None:
    if not block.mlp:
        return "block.mlp is false"
    if not BLOCKS[block.kind].mlp_gain:
        return f"block.kind {block.kind!r} does not read mlp_gain"
    return None


@dataclasses.dataclass(frozen=True)
class Knob:
    """One traced knob: default, allowed range [low, high] ((low, high] when open_low)."""

    name: str
    default: float
    low: float
    high: float
    meaning: str
    open_low: bool = False
    inert: Callable[[Any, Any], str | None] = _always
    of_inputs: bool = False  # read only by input kinds that list it (InputKind.knobs)

    def check(self, value: Any, where: str = "knobs") -> float:
        """The value as a float; a ConfigError naming the field and the range otherwise."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}.{self.name}: must be a number, got {value!r}")
        v = float(value)
        ok = (
            math.isfinite(v)
            and (self.low < v if self.open_low else self.low <= v)
            and v <= self.high
        )
        if not ok:
            left = "(" if self.open_low else "["
            raise ConfigError(
                f"{where}.{self.name}: {value!r} is outside the allowed range "
                f"{left}{self.low:g}, {self.high:g}]"
            )
        return v


def _check_knob(k: Knob) -> None:
    numbers = all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in (k.default, k.low, k.high)
    )
    inside = (
        numbers
        and (k.low < k.default if k.open_low else k.low <= k.default)
        and (k.default <= k.high and math.isfinite(k.default))
    )
    require(
        "knob",
        k.name,
        {
            "name": (k.name not in ("seed", "layer"), "is reserved for the results' own dimension"),
            "default": (
                inside,
                f"must be a finite number inside [{k.low}, {k.high}], got {k.default!r}",
            ),
            "meaning": (isinstance(k.meaning, str) and bool(k.meaning.strip()), "must be text"),
            "inert": (callable(k.inert), "must be callable (block, inputs) -> reason or None"),
            "of_inputs": (isinstance(k.of_inputs, bool), "must be true or false"),
        },
    )


INF = math.inf
# name -> Knob, read live (a plugin's knobs appear here once it is imported)
KNOBS: Registry[Knob] = Registry("knob", Knob, _check_knob)


def register_knob(knob: Knob) -> Knob:
    """Add a traced knob (validated; a duplicate name is an error): docs/extending.md. Every
    Lab point receives it (its default unless a sweep sets it); `inert` says when it has no
    effect, so that sweeping it there is refused."""
    return KNOBS.register(knob)


def knob_defaults() -> dict[str, float]:
    """Every registered knob -> its default (read live)."""
    return {n: k.default for n, k in KNOBS.items()}


for _knob in (
    Knob("q_scale", 1.0, 0.0, INF, "multiplies every query (after QK-norm)"),
    Knob("k_scale", 1.0, 0.0, INF, "multiplies every key (after QK-norm)"),
    Knob("q_shift", 0.0, 0.0, INF, "norm of a common vector added to every query of a head"),
    Knob("k_shift", 0.0, 0.0, INF, "norm of a common vector added to every key of a head"),
    Knob(
        "temperature",
        1.0,
        0.0,
        INF,
        "logits = q.k / (sqrt(d_head) * temperature)",
        open_low=True,
        inert=_reads_logits,
    ),
    Knob("drift_norm", 0.0, 0.0, INF, "norm N of the common input bias b"),
    Knob(
        "input_corr",
        0.0,
        0.0,
        1.0,
        "within-sequence correlation p of the inputs",
        of_inputs=True,
    ),
    Knob("attn_residual", 1.0, -INF, INF, "skip strength a around attention"),
    Knob("mlp_residual", 1.0, -INF, INF, "skip strength m around the MLP", inert=_has_mlp_skip),
    Knob("qk_norm_gain", 1.0, 0.0, INF, "gain after QK-norm", inert=_has_qk_norm),
    Knob(
        "attn_gain",
        1.0,
        -INF,
        INF,
        "gain g_A of the attention branch: h = a x + g_A Attn(x) (0: the branch off)",
    ),
    Knob(
        "mlp_gain",
        1.0,
        -INF,
        INF,
        "gain g_M of the MLP branch: y = m h + g_M MLP(h) (0: the branch off)",
        inert=_has_mlp_gain,
    ),
    Knob(
        "pattern_beta",
        0.0,
        0.0,
        INF,
        "sharpness of a clamped pattern: weight e^beta / (e^beta + n - 1) on the target key",
        inert=_sharpens_a_pattern,
    ),
    Knob(
        "head_scale",
        1.0,
        0.0,
        INF,
        "multiplies head block.scaled_head's queries and keys: its logits by head_scale^2",
        inert=_scales_a_head,
    ),
):
    KNOBS.register(_knob, source=BUILTIN)


def check_knob(name: str, value: Any, where: str = "knobs") -> float:
    """Validate one knob value; return it as a float."""
    if name not in KNOBS:
        raise ConfigError(f"{where}.{name}: unknown knob; allowed: {', '.join(KNOBS)}")
    return KNOBS[name].check(value, where)


def resolve_knobs(fixed: Mapping[str, Any] | None, where: str = "knobs") -> dict[str, float]:
    """Defaults overridden by `fixed`, each validated."""
    out = knob_defaults()
    for k, v in (fixed or {}).items():
        out[k] = check_knob(k, v, where)
    return out


def inert_knobs(block, inputs, reads: tuple[str, ...]) -> dict[str, str]:
    """Knob -> why it has no effect for this block and input spec (only the inert ones);
    `reads`: the knobs the input kind reads (simlab.core.inputs.INPUTS[inputs.kind].knobs), so
    that a knob `of_inputs` it does not list is inert."""
    out = {}
    for n, k in KNOBS.items():
        why = k.inert(block, inputs)
        if why is None and k.of_inputs and n not in reads:
            why = f"inputs.kind {inputs.kind!r} has no {n}"
        if why is not None:
            out[n] = why
    return out


def knob_arrays(knobs: Mapping[str, float], dtype=None) -> dict[str, jax.Array]:
    """Defaults overridden by `knobs`, as scalars of `dtype` (None: jax's default float dtype,
    float64 under JAX_ENABLE_X64)."""
    dtype = jnp.result_type(float) if dtype is None else dtype
    full = dict(knob_defaults(), **knobs)
    return {k: jnp.asarray(v, dtype) for k, v in full.items()}
