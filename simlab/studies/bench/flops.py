"""dot_general FLOPs counted from the traced programs (jaxprs), never from hand formulas:
tests/test_bench.py checks the counts against hand formulas at the paper's size."""

from __future__ import annotations

import math
from typing import Any

from simlab.core.knobs import knob_arrays
from simlab.core.lab import Lab
from simlab.engine.config import load_config
from simlab.studies.bench.workloads import _log_axis


# ----------------------------------------------------------------------------- FLOP counts
def dot_flops(jaxpr) -> int:
    """2 * batch * contracted * free sizes of every dot_general of a jaxpr, recursing into
    sub-jaxprs; a scan body (lax.map, fori_loop with static bounds) counts `length` times. A
    while loop holding a dot_general is an error (its trip count is not static)."""
    total = 0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
            ls, rs = eqn.invars[0].aval.shape, eqn.invars[1].aval.shape
            free_l = [n for i, n in enumerate(ls) if i not in lc and i not in lb]
            free_r = [n for i, n in enumerate(rs) if i not in rc and i not in rb]
            total += (
                2
                * math.prod(ls[i] for i in lb)
                * math.prod(ls[i] for i in lc)
                * math.prod(free_l)
                * math.prod(free_r)
            )
            continue
        subs = []
        for v in eqn.params.values():
            for x in v if isinstance(v, (tuple, list)) else (v,):
                j = getattr(x, "jaxpr", x)
                if hasattr(j, "eqns"):
                    subs.append(j)
        inner = sum(dot_flops(j) for j in subs)
        if name == "scan":
            inner *= eqn.params["length"]
        elif name == "while" and inner:
            raise ValueError("dot_general inside a while loop of unknown trip count")
        total += inner
    return total


def live_flops(f, *args) -> int:
    """dot_general FLOPs of f(*args) traced, after dead-code elimination (what XLA runs)."""
    import jax
    from jax._src.interpreters import partial_eval as pe

    jaxpr = jax.make_jaxpr(f)(*args).jaxpr
    return dot_flops(pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars))[0])


def traced_flops(lab) -> tuple[int, int]:
    """(per point, per seed) dot_general FLOPs of lab.point (after dead-code elimination: what
    XLA runs) and of lab.seed_state, from the traced programs."""
    import jax

    key = jax.random.PRNGKey(0)
    state = jax.eval_shape(lab.seed_state, key)
    seed = jax.make_jaxpr(lab.seed_state)(key).jaxpr
    return live_flops(lab.point, state, knob_arrays({})), dot_flops(seed)


def flop_counts(config: dict) -> dict[str, Any]:
    """Traced FLOPs of a workload's engine Lab and of the plain Lab the per-point loops run:
    {"path", "engine_per_point", "engine_per_seed", "plain_per_point", "plain_per_seed"}."""

    cfg = load_config({**config, "axes": config.get("axes") or [_log_axis("q_scale", 1, 2, 2)]})
    engine = Lab(cfg.block, cfg.inputs, cfg.sweep.metrics)
    plain = Lab(cfg.block, cfg.inputs, cfg.sweep.metrics, hoist=False, factor=False, tiled=False)
    (ep, es), (pp, ps) = traced_flops(engine), traced_flops(plain)
    path = "factored" if engine.factor else "hoisted" if engine.hoist else "tiled"
    return {
        "path": path,
        "engine_per_point": ep,
        "engine_per_seed": es,
        "plain_per_point": pp,
        "plain_per_seed": ps,
    }
