"""The metric registry, METRICS (name -> Metric), and the dimension registry, DIMS (name ->
Dim), both read live; `layer_metrics` evaluates the requested metrics of one layer.

A metric returns, per layer, an array whose dimensions it declares by name (`Metric.dims`,
default none: one number); each name is a `Dim` whose size is read from the block and input
specs (`head`: block.n_heads; `position`: inputs.length). The lab stacks a depth > 1 block's
layers along the dimension `layer` (STACK_DIM, also a Dim: block.depth) before the metric's
own. The engine, Results, plots and export read the names from the lab (`Lab.metric_dims`,
stored in meta.json's "dims") and treat every dimension alike; none of them knows a name.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp

from simlab.core.block import Layer
from simlab.core.metrics.shared import Shared
from simlab.errors import ConfigError
from simlab.registry import BUILTIN, Registry, require

# the dimension along which a depth > 1 lab stacks its layers' values (simlab.core.lab.Lab)
STACK_DIM = "layer"


@dataclasses.dataclass(frozen=True)
class Dim:
    """A named dimension of a metric's per-layer value: size(block, inputs) -> int, read from
    the specs (simlab.core.spec.BlockSpec, InputSpec), and what one index along it is."""

    name: str
    size: Callable[..., int]
    doc: str


@dataclasses.dataclass(frozen=True)
class Metric:
    """One metric: fn(Shared) -> array of the declared `dims` (registered Dim names; () = one
    number) per layer, the Layer fields it reads, its definition, and its exact mathematical
    range [low, high] (checked by simlab.testing on every path)."""

    name: str
    fn: Callable[[Shared], jax.Array]
    reads: tuple[str, ...]
    doc: str
    bounds: tuple[float, float] = (-math.inf, math.inf)
    default: bool = True  # computed when sweep.metrics is not given
    dims: tuple[str, ...] = ()


# what a Metric may read: the Layer's fields and the token ids of its inputs ("ids")
READABLE = (*Layer._fields, "ids")


def _check_dim(d: Dim) -> None:
    require(
        "dim",
        d.name,
        {
            "name": (isinstance(d.name, str) and d.name.isidentifier(), "must be an identifier"),
            "size": (callable(d.size), "must be callable (block, inputs) -> int"),
            "doc": (isinstance(d.doc, str) and bool(d.doc.strip()), "must be a non-empty string"),
        },
    )


# name -> Dim, read live (a plugin may register its own)
DIMS: Registry[Dim] = Registry("dim", Dim, _check_dim)


def register_dim(dim: Dim) -> Dim:
    """Add a dimension a metric may declare (validated; a duplicate name is an error)."""
    return DIMS.register(dim)


for _dim in (
    Dim(STACK_DIM, lambda block, inputs: block.depth, "the layers of a stack, from the bottom"),
    Dim("head", lambda block, inputs: block.n_heads, "an attention head of the layer"),
    Dim("position", lambda block, inputs: inputs.length, "a position of the sequence"),
):
    DIMS.register(_dim, source=BUILTIN)


def _check_metric(m: Metric) -> None:
    fields = READABLE
    lo, hi = m.bounds if isinstance(m.bounds, tuple) and len(m.bounds) == 2 else (None, None)
    bad = [f for f in m.reads if f not in fields] if isinstance(m.reads, tuple) else None
    dims_ok = isinstance(m.dims, tuple) and all(isinstance(d, str) for d in m.dims)
    unknown = [d for d in m.dims if d not in DIMS or d == STACK_DIM] if dims_ok else None
    require(
        "metric",
        m.name,
        {
            "fn": (callable(m.fn), "must be callable (Shared) -> array"),
            "reads": (
                isinstance(m.reads, tuple) and bool(m.reads) and not bad,
                f"must be a non-empty tuple of Layer fields {fields} (unknown: {bad})",
            ),
            "doc": (isinstance(m.doc, str) and bool(m.doc.strip()), "must be a non-empty string"),
            "bounds": (
                isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and lo < hi,
                f"must be (low, high) numbers with low < high, got {m.bounds!r}",
            ),
            "default": (isinstance(m.default, bool), "must be a bool"),
            "dims": (
                dims_ok and not unknown and len(set(m.dims)) == len(m.dims),
                f"must be a tuple of distinct registered dims other than {STACK_DIM!r} "
                f"({', '.join(d for d in DIMS if d != STACK_DIM)}; unknown: {unknown})",
            ),
        },
    )


# name -> Metric, read live (a plugin's metrics appear here once it is imported)
METRICS: Registry[Metric] = Registry("metric", Metric, _check_metric)
# the metrics of the centred covariance of all B*T tokens, which its rank (at most B*T - 1)
# bounds: cautioned when B*T <= d_model (simlab.engine.cautions); a plugin may add its own
RANK_BOUNDED: set[str] = set()

# Metrics whose definition changed: name -> (the name its old meaning has now, the last
# fingerprint rule under which the name was stored with its old meaning). A stored result made
# under that rule or an earlier one shows the values under the new name (simlab.engine.results.
# load), and its directory computes no further units of it (simlab.engine.plain.compute), so no
# array mixes two definitions (docs/metrics.md, "Renamed").
REDEFINED: dict[str, tuple[str, int]] = {
    f"{tag}_effective_rank": (f"{tag}_cov_effective_rank", 1) for tag in ("input", "out")
}  # effective_rank: the covariance's eigenvalues until rule 1, Roy & Vetterli's singular values


def redefined(names, rule: int) -> dict[str, str]:
    """The names among `names` that a record of fingerprint rule `rule` stored with their old
    definition (REDEFINED), each -> the name of that old meaning now."""
    return {n: REDEFINED[n][0] for n in names if n in REDEFINED and rule <= REDEFINED[n][1]}


def register_metric(metric: Metric) -> Metric:
    """Add a metric (validated; a duplicate name is an error): docs/extending.md."""
    return METRICS.register(metric)


def default_metrics() -> tuple[str, ...]:
    """The metrics a sweep computes when sweep.metrics is not given (Metric.default)."""
    return tuple(n for n, m in METRICS.items() if m.default)


def reads_ids(names) -> list[str]:
    """The requested metrics that read the token ids of the inputs."""
    return [n for n in names if "ids" in METRICS[n].reads]


def needs_full_weights(names) -> bool:
    """True when a requested metric reads the full attention weights (Layer.full)."""
    return any("full" in METRICS[n].reads for n in names)


def dim_sizes(name: str, block, inputs) -> tuple[int, ...]:
    """The per-layer shape of metric `name` for these specs: its declared dims' sizes."""
    return tuple(int(DIMS[d].size(block, inputs)) for d in METRICS[name].dims)


def layer_metrics(names, causal: bool, layer, ids=None, shapes=None) -> dict[str, jax.Array]:
    """The requested metrics of one layer (simlab.core.block.Layer; ids: its tokens' ids, for
    the metrics that read "ids"). shapes: metric -> its declared per-layer shape (`dim_sizes`;
    None: only the number of dims is checked). A metric whose value has another shape is
    refused while the sweep is traced (its preflight: nothing computed or written), naming the
    metric and the module that registered it."""
    shared = Shared(layer, causal, ids)
    out = {}
    for n in names:
        v = METRICS[n].fn(shared)
        dims = METRICS[n].dims
        want = None if shapes is None else tuple(shapes[n])
        got = tuple(jnp.shape(v))
        if (want is not None and got != want) or len(got) != len(dims):
            declared = ", ".join(dims) if dims else "none: one number"
            raise ConfigError(
                f"metric {n!r} (registered by {METRICS.source(n)}): returns shape {got} per "
                f"layer; its declared dims ({declared}) give "
                f"{want if want is not None else len(dims)} "
                "(simlab.core.metrics.Metric.dims)"
            )
        out[n] = v
    return out
