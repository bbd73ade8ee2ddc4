"""The small labs the conformance checks run: a `Case` is a block spec, an input spec (and the
metrics), built small (`small_block`, `small_inputs`: d_model 16, 4 heads, depth 2, fan_in
init, 2 x 12 tokens); one list of cases per kind of registry entry (`block_cases`,
`input_cases`, `pattern_cases`, `metric_cases`, `covering_cases`), the knob points they run at
(POINTS) and the corners of the promised ranges (EXTREMES); `run_labs` runs many labs in one
compiled call, which compiles about twice as fast as one call per lab.
"""

from __future__ import annotations

import dataclasses
import itertools
import pathlib
from collections.abc import Iterable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from simlab.checkpoints.checkpoint import Weights
from simlab.core.block import BLOCKS
from simlab.core.inputs import INPUTS
from simlab.core.knobs import KNOBS, inert_knobs, knob_arrays
from simlab.core.lab import Lab
from simlab.core.metrics import METRICS
from simlab.core.patterns import PATTERNS
from simlab.core.spec import BlockSpec, InputSpec
from simlab.testing.checkpoint import SEED, weights_for

# knob points at which the paths are compared: the defaults, a point moving every common knob,
# and a sharp point
POINTS: tuple[dict[str, float], ...] = (
    {},
    dict(
        q_scale=4.0,
        k_scale=0.5,
        temperature=0.5,
        q_shift=1.5,
        k_shift=2.0,
        drift_norm=2.5,
        input_corr=0.3,
        attn_residual=0.5,
        mlp_residual=0.8,
        qk_norm_gain=2.0,
        attn_gain=0.7,
        mlp_gain=1.3,
        pattern_beta=1.5,
    ),
    dict(q_scale=30.0, k_scale=30.0, drift_norm=10.0, pattern_beta=6.0),
)
# the corners of the promised knob ranges (docs/config.md, "Numerics")
EXTREMES: dict[str, tuple[float, ...]] = dict(
    lam=(0.0, 1e6),
    temperature=(1e-6, 1e6),
    drift_norm=(0.0, 1e8),
    q_shift=(0.0, 1e8),
    qk_norm_gain=(1e-6, 1e6),
    pattern_beta=(0.0, 1e8),
)


@dataclasses.dataclass(frozen=True)
class Case:
    """One small lab: a block spec and an input spec (and the metrics to compute); weights: the
    trained layers it runs (for a trained input kind), else None (drawn weights)."""

    block: BlockSpec
    inputs: InputSpec
    metrics: tuple[str, ...] | None = None
    weights: Weights | None = None

    @property
    def name(self) -> str:
        b = self.block
        return (
            f"{b.kind}-{self.inputs.kind}-causal{b.causal}-{b.qk_norm}"
            + ("-nomlp" if not b.mlp else "")
            + ("-trained" if self.weights is not None else "")
        )

    def lab(self, **kw) -> Lab:
        return Lab(self.block, self.inputs, self.metrics, weights=self.weights, **kw)

    def knob_points(self, points: Sequence[Mapping[str, float]]) -> list[dict[str, float]]:
        """The points without the knobs this case ignores (an inert knob stays at its default)."""
        inert = inert_knobs(self.block, self.inputs, INPUTS[self.inputs.kind].knobs)
        return [{k: v for k, v in p.items() if k not in inert} for p in points]


def small_block(kind: str, **kw) -> BlockSpec:
    """A small block of `kind` with the kind's typical fields (BlockKind.typical: e.g. Llama's
    SiLU gate, grouped-query attention and rotary embeddings), then `kw`."""
    base = dict(kind=kind, d_model=16, n_heads=4, mlp_ratio=2, depth=2, init="fan_in")
    return BlockSpec(**{**base, **BLOCKS[kind].typical, **kw})


def small_inputs(kind: str, **kw) -> InputSpec:
    base = dict(kind=kind, batch=2, length=12, vocab=40, embed_std=1.0)
    if kind == "text":  # a small text that ships with simlab (the standard library's is large)
        base["corpus"] = str(SMALL_CORPUS)
    return InputSpec(**{**base, **kw})


# the corpus of the "text" kind's conformance cases: simlab's own docs of its configs
SMALL_CORPUS = pathlib.Path(__file__).resolve().parents[1] / "configs" / "default.toml"


def trained_case(kind: str, metrics: tuple[str, ...] | None = None) -> Case:
    """The case of a trained input kind: the checkpoint's own block (post-LN, not causal, no
    QK-norm: on trained layers only pattern and depth may be set) on weights_for(kind)."""
    w = weights_for(kind)
    return Case(w.checkpoint.block(2), small_inputs(kind), metrics, weights=w)


def block_cases(kinds: Iterable[str] | None = None) -> list[Case]:
    """Two cases per block kind: (not causal, no QK-norm, gaussian inputs) and (causal,
    LayerNorm QK-norm, embedding inputs)."""
    out = []
    for kind in BLOCKS if kinds is None else kinds:
        out.append(Case(small_block(kind), small_inputs("gaussian")))
        out.append(
            Case(small_block(kind, causal=True, qk_norm="layernorm"), small_inputs("embedding"))
        )
    return out


def input_cases(kinds: Iterable[str] | None = None) -> list[Case]:
    """Two cases per input kind: a post-LN block (hoisted and factored paths) and a causal
    pre-LN block (a norm before the projections: the plain path)."""
    out = []
    for kind in INPUTS if kinds is None else kinds:
        if INPUTS[kind].trained:  # one case: the trained layers' own block
            out.append(trained_case(kind))
            continue
        out.append(Case(small_block("post_ln"), small_inputs(kind)))
        out.append(Case(small_block("pre_ln", causal=True), small_inputs(kind)))
    return out


def covering_cases(metrics: Sequence[str] | None = None) -> list[Case]:
    """The fewest cases in which every block kind and every input kind appears: the block kinds
    and the input kinds each cycled, variants alternating between (not causal, no QK-norm) and
    (causal, LayerNorm QK-norm). A block kind whose turn fell on a trained input kind (those
    run the trained layers' own block) gets a case of its own at the end."""
    kinds, inputs = list(BLOCKS), list(INPUTS)
    n = max(len(kinds), len(inputs))
    plain = [k for k in inputs if not INPUTS[k].trained]
    out = []
    for i in range(n):
        variant = {} if i % 2 == 0 else dict(causal=True, qk_norm="layernorm")
        if INPUTS[inputs[i % len(inputs)]].trained:
            out.append(
                trained_case(inputs[i % len(inputs)], None if metrics is None else tuple(metrics))
            )
            continue
        out.append(
            Case(
                small_block(kinds[i % len(kinds)], **variant),
                small_inputs(inputs[i % len(inputs)]),
                None if metrics is None else tuple(metrics),
            )
        )
    seen = {c.block.kind for c in out}
    for i, kind in enumerate(k for k in kinds if k not in seen):
        variant = {} if i % 2 == 0 else dict(causal=True, qk_norm="layernorm")
        out.append(
            Case(
                small_block(kind, **variant),
                small_inputs(plain[i % len(plain)]),
                None if metrics is None else tuple(metrics),
            )
        )
    return out


def pattern_cases(names: Iterable[str] | None = None) -> list[Case]:
    """Two cases per attention pattern: a post-LN block with gaussian inputs (hoisted layer 0)
    and a causal pre-LN block with LayerNorm QK-norm and embedding inputs."""
    out = []
    for name in PATTERNS if names is None else names:
        out.append(Case(small_block("post_ln", pattern=name), small_inputs("gaussian")))
        out.append(
            Case(
                small_block("pre_ln", causal=True, qk_norm="layernorm", pattern=name),
                small_inputs("embedding"),
            )
        )
    return out


def metric_cases(names: Sequence[str]) -> list[Case]:
    """One case per block kind that can compute `names` (inputs rotating over the input kinds):
    a metric reading the MLP branch's output (`Metric.reads` "mlp") leaves out the kinds
    without token_wise_mlp, which the Lab refuses for it (a plugin's kind may have none); one
    reading the token ids ("ids") rotates over the input kinds that have them."""
    reads_mlp = any("mlp" in METRICS[n].reads for n in names)
    reads_ids = any("ids" in METRICS[n].reads for n in names)
    kinds = [k for k, b in BLOCKS.items() if not (reads_mlp and b.token_wise_mlp is None)]
    inputs = itertools.cycle(
        [k for k, i in INPUTS.items() if not i.trained and not (reads_ids and i.ids is None)]
    )
    return [Case(small_block(kind), small_inputs(next(inputs)), tuple(names)) for kind in kinds]


def _stacked(points: Sequence[Mapping[str, float]]) -> dict[str, jax.Array]:
    arrays = [knob_arrays(p) for p in points]
    return {k: jnp.stack([a[k] for a in arrays]) for k in KNOBS}


def run_labs(labs: Sequence[Lab], cases: Sequence[Case], points=POINTS) -> list[dict]:
    """Each lab at its case's knob points (vmapped), all in one compiled call."""
    return _run(labs, [c.knob_points(points) for c in cases])


def _run(labs: Sequence[Lab], points: Sequence[Sequence[Mapping[str, float]]]):
    """Every lab at its points (vmapped), all in one compiled call; metrics as float64 numpy."""
    states = [lab.seed_state(jax.random.PRNGKey(SEED)) for lab in labs]
    kns = [_stacked(p) for p in points]
    outs = jax.jit(
        lambda sts, ks: [
            jax.vmap(lab.point, in_axes=(None, 0))(st, k) for lab, st, k in zip(labs, sts, ks)
        ]
    )(states, kns)
    return [{k: np.asarray(v, np.float64) for k, v in o.items()} for o in outs]
