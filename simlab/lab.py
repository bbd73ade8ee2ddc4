"""The lab: a block spec plus an input spec, as the two pure functions a sweep needs.

  state = lab.seed_state(key)      once per seed: weights, input components, the random
                                   shift directions, and (hoisted) layer-0 projections
  out = lab.point(state, knobs)    per grid point: metric name -> () or (depth,) array

Common random numbers (DESIGN.md): everything random comes from `key`, so every grid point
of a seed sees the same weights, tokens and directions. Hoisting: the inputs are
x = sum_c coef_c(knobs) X_c (see simlab.inputs), so when no norm sits between x and the
projections (kinds "attention" and "post_ln"), layer 0's q, k, v are
sum_c coef_c (X_c W) + b, with X_c W computed once per seed (`hoist`). Without QK-norm the
layer-0 logits further factor into per-seed matrices (`factor`, simlab.factored).
Lab(hoist=False) is the plain path: the same math with nothing hoisted (the oracle).
"""
from __future__ import annotations

from typing import Iterable, Mapping

import jax
import jax.numpy as jnp

from simlab import attention as A
from simlab import block as B
from simlab import factored as F
from simlab import inputs as I
from simlab.init import draws, init_params
from simlab.metrics import METRIC_NAMES, layer_metrics
from simlab.spec import KNOB_DEFAULTS, BlockSpec, ConfigError, InputSpec


class Lab:
    """A block spec and an input spec; `metrics` selects what `point` returns (None = all)."""

    def __init__(self, block: BlockSpec, inputs: InputSpec, metrics: Iterable[str] | None = None,
                 hoist: bool = True, factor: bool = True):
        self.block = block.validate()
        self.inputs = inputs.validate()
        names = tuple(METRIC_NAMES if metrics is None else metrics)
        for n in names:
            if n not in METRIC_NAMES:
                raise ConfigError(f"sweep.metrics: unknown metric {n!r}; allowed: "
                                  f"{', '.join(METRIC_NAMES)}")
        if not names:
            raise ConfigError("sweep.metrics: must name at least one metric")
        self.metric_names = names
        self.hoist = hoist and block.kind != "pre_ln"
        self.factor = factor and self.hoist and block.qk_norm == "none"

    def inert_knobs(self) -> set[str]:
        """Knobs that have no effect for this spec (sweeping them is a user error)."""
        inert = set()
        if self.inputs.kind != "gaussian":
            inert.add("input_corr")
        if self.block.qk_norm == "none":
            inert.add("qk_norm_gain")
        if not self.block.mlp:
            inert.add("mlp_residual")
        return inert

    def check_knobs(self, swept: Iterable[str], fixed: Mapping[str, float]) -> None:
        """Refuse an axis or a non-default fixed value on a knob without effect."""
        inert = self.inert_knobs()
        for k in swept:
            if k in inert:
                raise ConfigError(f"axes: knob {k!r} has no effect for this block/inputs "
                                  f"({self._why(k)})")
        for k, v in fixed.items():
            if k in inert and v != KNOB_DEFAULTS[k]:
                raise ConfigError(f"knobs.{k}: has no effect for this block/inputs ({self._why(k)})")

    def _why(self, k: str) -> str:
        return {"input_corr": "only gaussian inputs have input_corr",
                "qk_norm_gain": "block.qk_norm is 'none'",
                "mlp_residual": "block.mlp is false"}[k]

    def seed_state(self, key) -> dict:
        """Everything per seed: params (stacked), input components, directions, projections."""
        spec = self.block
        kw, kx, kd = jax.random.split(key, 3)
        shape = (spec.depth, spec.n_heads, spec.d_head)
        dirs = draws(kd, {"u_q": shape, "u_k": shape}, jnp.result_type(float))
        state = {"params": init_params(spec, kw),
                 "comps": I.components(self.inputs, spec.d_model, kx),
                 **{k: v / jnp.linalg.norm(v, axis=-1, keepdims=True) for k, v in dirs.items()}}
        if self.hoist:
            p0 = jax.tree.map(lambda a: a[0], state["params"])
            zero = jnp.zeros_like(p0["bq"])
            proj = {c: tuple(A.project(p0[w], zero, x) for w in ("wq", "wk", "wv"))
                    for c, x in state["comps"].items()}
            if self.factor:
                state["factored"] = F.hoist(p0, state["comps"], proj, state["u_q"][0])
                proj = {c: (None, None, v) for c, (_, _, v) in proj.items()}
            state["proj"] = proj
        return state

    def inputs_of(self, state, knobs):
        """x = sum_c coef_c X_c, broadcast to (B, T, D)."""
        coefs = I.coefficients(self.inputs.kind, knobs)
        x = I.combine(state["comps"], coefs)
        shape = (self.inputs.batch, self.inputs.length, self.block.d_model)
        return jnp.broadcast_to(x, shape), coefs

    def point(self, state, knobs: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
        """Metrics at one grid point. knobs: every name of spec.KNOB_NAMES -> scalar."""
        x, coefs = self.inputs_of(state, knobs)
        qkv0 = attn_fn0 = None
        p0 = jax.tree.map(lambda a: a[0], state["params"])
        if self.hoist:
            qkv0 = tuple(None if state["proj"]["u_b"][i] is None else jnp.broadcast_to(
                sum(coefs[c] * state["proj"][c][i] for c in coefs) + p0[b], x.shape[:2] +
                p0[b].shape) for i, b in enumerate(("bq", "bk", "bv")))
        if self.factor:
            attn_fn0 = lambda q, k: F.weights(  # noqa: E731
                state["factored"], coefs, knobs, self.block.d_head, self.block.causal,
                p0["bq"], p0["bk"], state["u_q"][0], state["u_k"][0])
        _, obs = B.stack_apply(self.block, state["params"], x, knobs, state["u_q"], state["u_k"],
                               self._observe, qkv0, attn_fn0)
        return obs if self.block.depth > 1 else jax.tree.map(lambda a: a[0], obs)

    def _observe(self, layer: B.Layer):
        return layer_metrics(self.metric_names, self.block.causal, layer.x, layer.attn, layer.y,
                             layer.w, layer.q, layer.k)


def knob_arrays(knobs: Mapping[str, float], dtype=None) -> dict[str, jax.Array]:
    """Defaults overridden by `knobs`, as scalars of `dtype` (None: jax's default float dtype,
    float64 under JAX_ENABLE_X64)."""
    dtype = jnp.result_type(float) if dtype is None else dtype
    full = dict(KNOB_DEFAULTS, **knobs)
    return {k: jnp.asarray(v, dtype) for k, v in full.items()}
