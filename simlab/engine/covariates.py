"""Per-seed covariates of a sweep: statistics of each seed's state (e.g. of its weights) that
closed forms use, computed once per seed when the sweep is merged and stored with the results
as seed-only arrays (`results.npz` keys "cov:<name>", `Results.covariates`).

A lab provides them with an optional `covariates(state) -> {name: array}` method
(simlab.core.lab.LabProtocol; simlab's Lab: one value per layer, simlab.core.lab.Lab.covariates;
their dimension names: lab.covariate_dims()).
They are derived from the seed keys alone (the same keys as the sweep's, key_s =
fold_in(PRNGKey(base_seed), s)), so they are not part of the fingerprint: a directory written
before they existed reloads as it was, with no covariates.
"""

from __future__ import annotations

import jax
import numpy as np


def seed_covariates(
    lab, base_seed: int, seeds: int, precision: str = "highest", state_fn=None, first_seed: int = 0
) -> dict:
    """name -> array (seeds, ...) of lab.covariates(lab.seed_state(key_s)) for the seeds
    s = first_seed .. first_seed + seeds - 1 (sweep.first_seed: a grown sweep's parts); {} for a
    lab without covariates. state_fn: the sweep's compiled seed_state when it has one, else
    jax.jit(lab.seed_state). The covariates themselves run on the concrete state."""
    if not callable(getattr(lab, "covariates", None)):
        return {}
    state_fn = jax.jit(lab.seed_state) if state_fn is None else state_fn
    base = jax.random.PRNGKey(base_seed)
    with jax.default_matmul_precision(precision):
        per_seed = [
            {
                k: np.asarray(v)
                for k, v in lab.covariates(state_fn(jax.random.fold_in(base, s))).items()
            }
            for s in range(first_seed, first_seed + seeds)
        ]
    return {k: np.stack([c[k] for c in per_seed]) for k in per_seed[0]} if per_seed else {}


def covariate_dims(covariates: dict, lab=None) -> dict[str, list[str]]:
    """meta.json's "covariates": name -> dimension names ("seed", then the names the lab
    declares, `lab.covariate_dims()`, or dim0, dim1, ... where it declares none)."""
    declared = lab.covariate_dims() if hasattr(lab, "covariate_dims") else {}
    out = {}
    for k, v in covariates.items():
        named = list(declared.get(k, ()))
        out[k] = ["seed"] + (
            named if len(named) == v.ndim - 1 else [f"dim{i}" for i in range(v.ndim - 1)]
        )
    return out
