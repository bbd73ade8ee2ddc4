"""`python benchmarks/program_identity.py`: a sha256 of the lowered StableHLO of each P1-P5
workload's per-point program (vmapped over 4 points) and of its per-seed state, the programs the
engine compiles. Run it on two commits (e.g. `git worktree add /tmp/old REV`, then
`cd /tmp/old && PYTHONPATH=. python /path/to/benchmarks/program_identity.py`): equal hashes mean
the default path computes exactly as before, whatever a timing run on a shared machine says
(docs/performance.md, "Variance")."""

import hashlib
import json

import jax
import jax.numpy as jnp

from simlab.core.knobs import knob_arrays
from simlab.core.lab import Lab
from simlab.engine.config import load_config
from simlab.studies.bench.workloads import PEERS, peer_config


def hashes() -> dict[str, dict[str, str]]:
    out = {}
    for name in PEERS:
        cfg = load_config(peer_config(name))
        lab = Lab(cfg.block, cfg.inputs, cfg.sweep.metrics)
        key = jax.random.PRNGKey(0)
        state = jax.eval_shape(lab.seed_state, key)
        knobs = {k: jnp.stack([v] * 4) for k, v in knob_arrays({}).items()}
        point = jax.jit(jax.vmap(lab.point, in_axes=(None, 0))).lower(state, knobs).as_text()
        seed = jax.jit(lab.seed_state).lower(key).as_text()
        out[name] = {
            "point": hashlib.sha256(point.encode()).hexdigest()[:16],
            "seed_state": hashlib.sha256(seed.encode()).hexdigest()[:16],
        }
    return out


if __name__ == "__main__":
    print(json.dumps(hashes(), indent=1))
