"""The lab: a block spec plus an input spec, as the two pure functions a sweep needs.

  state = lab.seed_state(key)      once per seed: weights, input components, the random
                                   shift directions, and (hoisted) layer-0 projections
  out = lab.point(state, knobs)    per grid point: metric name -> array of its dims
                                   (lab.metric_dims(): `layer` for depth > 1, then the
                                   metric's own, e.g. `head`; none: a number)

Common random numbers (docs/design.md): everything random comes from `key`, so every grid point
of a seed sees the same weights, tokens and directions. Hoisting: the inputs are
x = sum_c coef_c(knobs) X_c (see simlab.core.inputs), so when no norm sits between x and the
projections (a block kind without `norm_before_projections`, simlab.core.block.BLOCKS), layer 0's
q, k, v are sum_c coef_c (X_c W) + b, with X_c W computed once per seed (`hoist`). Without
QK-norm the layer-0 logits further factor into per-seed matrices (`factor`,
simlab.core.factored). The attention runs in tiles (simlab.core.tiled; `Lab.tiling`, from the
sizes alone) on every engine path. Lab(hoist=False, factor=False, tiled=False) is the plain
path: the same math with nothing hoisted and the full attention weights (the oracle).

A clamped attention pattern (`BlockSpec.pattern`, simlab.core.patterns) has no logits to factor:
its layer 0 runs hoisted (projections per seed) with A V from the closed form, O(T D) a point.
Neither do rotary embeddings (the logits depend on the positions): the projections are still
hoisted (the rotation comes after them).

Trained weights (`Lab(..., weights=checkpoint.at(layers))`, simlab.checkpoints, the only way
in; the engine builds them from a [checkpoint] table): the layers' weights replace the draws,
the same for every seed; a seed then varies only the inputs (the token ids of a trained input
kind such as "tokens", or any other kind's draw) and the random directions (u_b, u_q, u_k).
Without `weights` nothing of this runs.

The protocol the sweep engine relies on is `LabProtocol` (seed_state, point, metric_names;
optionally identity, check_knobs, default_micro_batch, point_bytes, covariates): run_sweep(lab=...)
runs any object that has it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from simlab.core import attention, block, factored, inputs
from simlab.core.block import BLOCKS
from simlab.core.init import draws, init_params, param_shapes
from simlab.core.inputs import INPUTS, require_weights
from simlab.core.knobs import KNOBS, inert_knobs
from simlab.core.metrics import (  # noqa: F401  (RANK_BOUNDED, redefined: the engine's door)
    DIMS,
    METRICS,
    RANK_BOUNDED,
    STACK_DIM,
    default_metrics,
    dim_sizes,
    layer_metrics,
    needs_full_weights,
    reads_ids,
    redefined,
)
from simlab.core.patterns import PATTERNS
from simlab.core.spec import BlockSpec, InputSpec
from simlab.core.tiled import Tiling, choose_tiling
from simlab.errors import ConfigError
from simlab.registry import BUILTIN

# Working set of a micro-batch (Lab.default_micro_batch): large points run best one per call,
# tiny blocks need many points per call (docs/performance.md, "Findings cited in the code").
MICRO_BATCH_BYTES = 16 << 20


def dimension_names() -> tuple[str, ...]:
    """The registered metric dimensions (simlab.core.metrics.DIMS, read live): the names a
    metric's value may carry after the axes and "seed", which no axis may take."""
    return tuple(DIMS)


@runtime_checkable
class LabProtocol(Protocol):
    """What `run_sweep(lab=...)` needs of a model; simlab's `Lab` is one.

      metric_names: the metrics `point` returns (sweep.metrics keeps a subset);
      seed_state(key) -> state: everything one seed needs (weights, inputs, directions), from
          the PRNG key alone (common random numbers: every point of a seed sees the same);
      point(state, knobs) -> {metric: array}: one grid point; `knobs` holds every
          registered knob (simlab.core.knobs.KNOBS) as a scalar of the default float dtype.
          Pure and jit/vmap-able: the engine vmaps it over a micro-batch of points.
    Optional methods the engine uses when present:
      metric_dims() -> {metric: [dim names]}: the names of the dimensions of each metric's
          value at one point (stored in meta.json's "dims" after the axes and "seed"; without
          it, or for a metric it omits, they are named dim0, dim1, ...);
      covariate_dims() -> {covariate: [dim names]}: the same for `covariates` (after "seed");
      identity() -> dict (JSON-able): names the model and its settings. It enters the sweep's
          fingerprint, so a directory another lab wrote is refused instead of resumed or merged
          (without it, the class's qualified name and a sha256 of its module's source stand in);
      check_knobs(swept, fixed): raise ConfigError for knobs the model ignores;
      default_micro_batch() -> int and point_bytes() -> int: sizes for the chunk layout;
      metric_bounds() -> {metric: (low, high)}: declared ranges; stored values outside them,
          and every NaN or Inf, are reported on stderr and in meta.json ("numerics");
      covariates(state) -> {name: array}: per-seed statistics of a concrete seed state (e.g.
          of the weights, one value per layer; numpy is fine, it is not traced), computed once
          per seed at the merge and stored with the results as seed-only arrays
          (`Results.covariates`); not fingerprinted.
    """

    metric_names: tuple[str, ...]

    def seed_state(self, key) -> Any: ...

    def point(self, state, knobs: Mapping[str, jax.Array]) -> Mapping[str, jax.Array]: ...


class Lab:
    """A block spec and an input spec; `metrics` selects what `point` returns (None = all).
    hoist: layer-0 projections per seed (when no norm precedes them); factor: layer-0 logits
    from per-seed score matrices (needs hoist, no QK-norm); tiled: tiled attention (the fast
    paths need it; off when a requested metric reads the full weights); all False: the plain
    oracle. tile_elements: logits per tile (default simlab.core.tiled.TILE_ELEMENTS; tests use
    small tiles so that every tile loop runs)."""

    def __init__(
        self,
        block: BlockSpec,
        inputs: InputSpec,
        metrics: Iterable[str] | None = None,
        hoist: bool = True,
        factor: bool = True,
        tiled: bool = True,
        tile_elements: int | None = None,
        weights=None,
    ):
        self.block = block.validate()
        self.inputs = inputs.validate()
        self.weights = weights
        require_weights(self.inputs, weights)
        if weights is not None:
            weights.check(self.block, self.inputs)
        names = tuple(default_metrics() if metrics is None else metrics)
        for n in names:
            if n not in METRICS:
                raise ConfigError(
                    f"sweep.metrics: unknown metric {n!r}; allowed: {', '.join(METRICS)}"
                )
        if not names:
            raise ConfigError("sweep.metrics: must name at least one metric")
        self.metric_names = names
        self._shapes = {n: dim_sizes(n, block, inputs) for n in names}
        # unit-normalised tokens are not linear in the knobs: nothing to hoist
        self.hoist = hoist and not block.norm_before_projections and not inputs.normalize
        self.tiled = tiled and not needs_full_weights(names)
        self.factor = (
            factor
            and self.hoist
            and self.tiled
            and block.qk_norm == "none"
            and PATTERNS[block.pattern].reads_logits  # a clamp has no logits to factor
            and PATTERNS[block.pattern].keeps is None  # nor rows to mask (simlab.core.sinks)
            and block.scaled_head is None  # nor a head of its own (simlab.core.head_scale)
            and block.rotary_dims == 0  # rotary logits depend on the positions
        )
        # metrics reading the MLP branch's output (Layer.mlp) need a kind that exposes it
        mlp_readers = [n for n in names if "mlp" in METRICS[n].reads]
        self.keep_mlp = bool(mlp_readers)
        if mlp_readers and not block.mlp:
            raise ConfigError(
                f"sweep.metrics: {', '.join(mlp_readers)} read the MLP branch's output, and "
                "block.mlp is false"
            )
        if mlp_readers and BLOCKS[block.kind].token_wise_mlp is None:
            raise ConfigError(
                f"sweep.metrics: {', '.join(mlp_readers)} read the MLP branch's output, which "
                f"block.kind {block.kind!r} does not expose (BlockKind.token_wise_mlp)"
            )
        id_readers = reads_ids(names)
        self.keep_ids = bool(id_readers)
        if id_readers and INPUTS[inputs.kind].ids is None:
            with_ids = ", ".join(n for n, k in INPUTS.items() if k.ids is not None)
            raise ConfigError(
                f"sweep.metrics: {', '.join(id_readers)} split by token type, and inputs.kind "
                f"{inputs.kind!r} has no token ids (kinds with ids: {with_ids})"
            )
        self.tiling = (
            choose_tiling(inputs.batch, inputs.length, block.n_heads, inputs.length, tile_elements)
            if self.tiled
            else None
        )

    def metric_dims(self) -> dict[str, list[str]]:
        """Each metric's dimension names at one point: `layer` (the stack, for depth > 1),
        then the metric's own declared dims (simlab.core.metrics.Metric.dims)."""
        stack = [STACK_DIM] if self.block.depth > 1 else []
        return {n: stack + list(METRICS[n].dims) for n in self.metric_names}

    def metric_shapes(self) -> dict[str, tuple[int, ...]]:
        """Each metric's per-layer shape, its declared dims' sizes read from the specs."""
        return {n: dim_sizes(n, self.block, self.inputs) for n in self.metric_names}

    def covariate_dims(self) -> dict[str, list[str]]:
        """Each covariate's dimension names after "seed": one value per layer (`covariates`)."""
        names = ("drift_vo", "drift_vo_dot", "vo_iso", "vo_trace", "drift_q")
        mlp = ("mlp_shared", "mlp_drift_dot", "mlp_trace") if self.block.mlp else ()
        return {n: [STACK_DIM] for n in names + mlp}

    def check_metric_shapes(self) -> None:
        """Trace one point abstractly (jax.eval_shape, no compute) when a requested metric is a
        plugin's, so that one returning other than its declared shape is refused
        (simlab.core.metrics.layer_metrics) before a sweep writes anything; simlab's own
        metrics have their declared shapes by construction (tests/core/test_metrics.py)."""
        if all(METRICS.source(n) == BUILTIN for n in self.metric_names):
            return
        state = jax.eval_shape(self.seed_state, jax.random.PRNGKey(0))
        dtype = jnp.result_type(float)
        jax.eval_shape(self.point, state, {k: jax.ShapeDtypeStruct((), dtype) for k in KNOBS})

    def metric_bounds(self) -> dict[str, tuple[float, float]]:
        """Each metric's declared mathematical range (simlab.core.metrics.Metric.bounds): the
        engine reports stored values outside it (meta.json "numerics")."""
        return {n: METRICS[n].bounds for n in self.metric_names}

    def point_bytes(self) -> int:
        """Working set of one grid point, estimated from the sizes alone (float32 bytes): the
        logits of one tile three times over (scores, exponentials, their products) and a dozen
        (B, T, D) activations plus the MLP's two (B, T, F)."""
        b, t, d = self.inputs.batch, self.inputs.length, self.block.d_model
        tile = self.tiling if self.tiling is not None else Tiling(b, t, b, t)  # plain: all
        logits = tile.seqs * tile.rows * self.block.n_heads * t
        hidden = 2 * self.block.mlp_width if self.block.mlp else 0
        return 4 * (3 * logits + b * t * (12 * d + hidden))

    def default_micro_batch(self) -> int:
        """Points vmapped together when sweep.micro_batch is not given: the largest power of two
        <= 64 whose working set stays within MICRO_BATCH_BYTES (1 at the paper's size). Sizes
        only, never the machine, so the numbers stay reproducible (the micro-batch is part of
        the arithmetic)."""
        n = max(1, min(64, MICRO_BATCH_BYTES // self.point_bytes()))
        return 1 << (n.bit_length() - 1)

    def inert_knobs(self) -> dict[str, str]:
        """Knobs without effect for this spec (sweeping them is a user error) -> why."""
        return inert_knobs(self.block, self.inputs, INPUTS[self.inputs.kind].knobs)

    def check_knobs(self, swept: Iterable[str], fixed: Mapping[str, float]) -> None:
        """Refuse an axis or a non-default fixed value on a knob without effect."""
        inert = self.inert_knobs()
        for k in swept:
            if k in inert:
                raise ConfigError(
                    f"axes: knob {k!r} has no effect for this block/inputs ({inert[k]})"
                )
        for k, v in fixed.items():
            if k in inert and v != KNOBS[k].default:
                raise ConfigError(f"knobs.{k}: has no effect for this block/inputs ({inert[k]})")

    def seed_state(self, key) -> dict:
        """Everything per seed: params (stacked), input components, directions, projections."""
        spec = self.block
        shape = ((spec.depth, spec.n_heads, spec.d_head), "normal")
        kind = "uniform" if spec.init == "glorot" else "normal"
        drawn = param_shapes(spec) if self.weights is None else {}  # trained: no weight draws
        # one threefry call for every random number of the seed (simlab.core.init.draws)
        wanted = {
            **{f"p.{n}": (s, kind) for n, s in drawn.items()},
            "d.u_q": shape,
            "d.u_k": shape,
            **{f"x.{n}": s for n, s in inputs.noise_shapes(self.inputs, spec.d_model).items()},
        }
        z = draws(jax.random.fold_in(key, 0), wanted)

        def part(tag):
            return {n[2:]: v for n, v in z.items() if n[:2] == tag}

        dirs = part("d.")
        state = {
            "params": (
                init_params(spec, noise=part("p."))
                if self.weights is None
                else self.weights.params(z["d.u_q"].dtype)
            ),
            "comps": self._components(part("x."), jax.random.fold_in(key, 1)),
            **{k: v / jnp.linalg.norm(v, axis=-1, keepdims=True) for k, v in dirs.items()},
        }
        if self.keep_ids:  # the token ids, for the metrics that split by type
            state["ids"] = inputs.ids_of(
                self.inputs, part("x."), jax.random.fold_in(key, 1), self.weights
            )
        if self.weights is not None:
            # trained weights (and inputs from fixed ids) are constants of this program: the
            # barrier keeps XLA from constant-folding the hoisted projections and scores below
            # at compile time (seconds per dot at MiniLM's size); they run as data instead
            state["params"], state["comps"] = jax.lax.optimization_barrier(
                (state["params"], state["comps"])
            )
        if self.hoist:
            p0 = jax.tree.map(lambda a: a[0], state["params"])
            zero = jnp.zeros_like(p0["bq"])
            proj = {
                c: tuple(attention.project(p0[w], zero, x) for w in ("wq", "wk", "wv"))
                for c, x in state["comps"].items()
            }
            if self.factor:
                state["factored"] = factored.hoist(
                    p0, state["comps"], proj, state["u_q"][0], self.tiling, self._varying()
                )
            else:
                state["proj"] = proj
        return state

    def _components(self, noise, t_key) -> dict:
        """The input components of a seed (simlab.core.inputs.components; a trained kind gets
        the weights)."""
        return inputs.components(
            self.inputs, self.block.d_model, noise=noise, t_key=t_key, weights=self.weights
        )

    def identity(self) -> dict:
        """The block, the inputs and, on trained weights, the checkpoint's identity (its file
        hashes, the layers): what the sweep fingerprints."""
        import dataclasses

        out = {"block": dataclasses.asdict(self.block), "inputs": dataclasses.asdict(self.inputs)}
        if self.weights is not None:
            out["weights"] = self.weights.identity()
        return out

    def _varying(self) -> str:
        return INPUTS[self.inputs.kind].varying

    def inputs_of(self, state, knobs):
        """x = sum_c coef_c X_c, broadcast to (B, T, D); with inputs.normalize, x_i / |x_i|."""
        coefs = inputs.coefficients(self.inputs.kind, knobs)
        return inputs.assemble(self.inputs, self.block.d_model, state["comps"], coefs), coefs

    def point(self, state, knobs: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
        """Metrics at one grid point. knobs: every name of simlab.core.knobs.KNOBS -> scalar."""
        x, coefs = self.inputs_of(state, knobs)
        qkv0 = attention_fn0 = None
        p0 = jax.tree.map(lambda a: a[0], state["params"])
        if self.factor:

            def attention_fn0():
                return factored.attention(
                    state["factored"],
                    coefs,
                    knobs,
                    p0,
                    state["u_q"][0],
                    state["u_k"][0],
                    self.block.d_head,
                    self.block.causal,
                    self.tiling,
                    self._varying(),
                )
        elif self.hoist:
            qkv0 = tuple(
                jnp.broadcast_to(
                    sum(coefs[c] * state["proj"][c][i] for c in coefs) + p0[b],
                    x.shape[:2] + p0[b].shape,
                )
                for i, b in enumerate(("bq", "bk", "bv"))
            )
        _, obs = block.stack_apply(
            self.block,
            state["params"],
            x,
            knobs,
            state["u_q"],
            state["u_k"],
            observe=lambda layer: self._observe(layer, state.get("ids")),
            tiling=self.tiling,
            qkv0=qkv0,
            attention_fn0=attention_fn0,
            keep_mlp=self.keep_mlp,
        )
        return obs if self.block.depth > 1 else jax.tree.map(lambda a: a[0], obs)

    def covariates(self, state) -> dict[str, np.ndarray]:
        """Per-seed statistics of the weights that closed forms use, one value per layer
        (depth,), u_b the seed's unit drift direction (simlab.core.inputs):
          drift_vo   |u_b W_V W_O|^2 / |u_b|^2, W_V W_O = sum_h W_V,h W_O,h the value-output
                     map D -> D: how much of a drift N u_b the attention branch passes on
                     (rows of A sum to 1, so a common N u_b in every token gives the common
                     output N u_b W_V W_O);
          drift_vo_dot  u_b . (u_b W_V W_O): its component along the drift itself (random sign),
                     so |u_b + u_b W_V W_O|^2 = 1 + 2 drift_vo_dot + drift_vo;
          vo_iso     |W_V W_O|_F^2 / D: the same gain averaged over directions (a token's own
                     direction, for a pattern that copies one token into every output);
          vo_trace   tr(W_V W_O) / D: the overlap e . e W_V W_O / |e|^2 of a random direction
                     with its own image (random sign): what a token adds to its own norm when
                     it copies itself, and to a neighbour's inner product when that one
                     copies it (simlab.theory.gains.doubly_stochastic_cos);
          drift_q    |u_b W_Q|^2 summed over heads: the squared mean query per unit drift, whose
                     j-dependent logit term N (u_b W_Q) . k_j makes a shared pattern
                     (docs/design.md, "The physics in one paragraph");
          mlp_drift_dot  w^T A w with A = W_1 W_2 / 2 (the GELU's mean slope is 1/2) and w the unit
                     vector along u_b + u_b W_V W_O (where a drift points after a uniform
                     attention branch): how the MLP's linear part passes the drift on (random
                     sign; simlab.theory.gains.mean_field_gain);
          mlp_trace  tr(A) / D: the same for a random direction (the private parts); these
                     two are left out for a gated MLP (kind "llama": no linear part; ReLU's and
                     SiLU's mean slope is 1/2 as the GELU's, by symmetry);
          mlp_shared |1^T W_2|^2 / F (F hidden units; with the MLP only): a hidden activation
                     with mean gbar over the units gives every token gbar 1^T W_2, the shared
                     output of simlab.theory.mlp_mean_gain (c = 4 d^2 sigma_w^2 there is the
                     expectation of F mlp_shared).
        Computed in float64 numpy from a concrete seed state (not traced: a few products of
        the weights, so no program to compile)."""
        p = {
            k: np.asarray(state["params"][k], np.float64)
            for k in ("wq", "wv", "wo", "w2")
            if k in state["params"]
        }
        u_D = np.asarray(state["comps"]["u_b"], np.float64).reshape(-1)
        u_D = u_D / np.linalg.norm(u_D)
        n_l, d = p["wv"].shape[:2]
        # W_V W_O per layer as one BLAS product (D, H K) @ (H K, D), not a naive einsum loop
        vo_LDE = np.matmul(p["wv"].reshape(n_l, d, -1), p["wo"].reshape(n_l, -1, d))
        uvo_LD = np.einsum("d,lde->le", u_D, vo_LDE)
        out = {
            "drift_vo": np.sum(uvo_LD * uvo_LD, axis=-1),
            "drift_vo_dot": uvo_LD @ u_D,
            "vo_iso": np.sum(vo_LDE * vo_LDE, axis=(1, 2)) / vo_LDE.shape[1],
            "vo_trace": np.trace(vo_LDE, axis1=1, axis2=2) / vo_LDE.shape[1],
            "drift_q": np.sum(np.einsum("d,ldhk->lhk", u_D, p["wq"]) ** 2, axis=(1, 2)),
        }
        if self.block.mlp:
            w1 = np.asarray(state["params"]["w1"], np.float64)
            w2_LD = np.sum(p["w2"], axis=1)
            out["mlp_shared"] = np.sum(w2_LD * w2_LD, axis=-1) / p["w2"].shape[1]
            if self.block.gated_mlp:
                return out  # act(h W_1) * h W_3 has no linear part (quadratic near h = 0)
            a_LDE = 0.5 * np.matmul(w1, p["w2"])
            w_LD = u_D[None, :] + uvo_LD
            w_LD = w_LD / np.linalg.norm(w_LD, axis=-1, keepdims=True)
            aw_LD = np.matmul(a_LDE, w_LD[:, :, None])[:, :, 0]
            out["mlp_drift_dot"] = np.sum(w_LD * aw_LD, axis=-1)
            out["mlp_trace"] = np.trace(a_LDE, axis1=1, axis2=2) / a_LDE.shape[1]
        return out

    def _observe(self, layer: block.Layer, ids=None):
        return layer_metrics(self.metric_names, self.block.causal, layer, ids, self._shapes)
