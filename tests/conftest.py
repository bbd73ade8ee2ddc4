"""Shared test helpers: a tiny toy model with the simlab.lab.Lab protocol."""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp


def _cos(x_BTD):
    """Mean pairwise cosine of all B*T vectors: (|sum u|^2 - n) / (n (n - 1))."""
    u = x_BTD.reshape(-1, x_BTD.shape[-1])
    u = u / jnp.linalg.norm(u, axis=-1, keepdims=True)
    n = u.shape[0]
    return (jnp.sum(jnp.sum(u, 0) ** 2) - n) / (n * (n - 1))


class ToyLab:
    """One random attention head on gaussian tokens plus a drift: metrics "entropy" () and
    "cos" (2,) = (input cosine, output cosine), the latter standing in for a layer axis."""
    metric_names = ("entropy", "cos")

    def __init__(self, d: int = 8, batch: int = 2, length: int = 6):
        self.d, self.batch, self.length = d, batch, length

    def seed_state(self, key):
        kx, kq, kk, ku = jax.random.split(key, 4)
        d = self.d
        u = jax.random.normal(ku, (d,))
        return {"x": jax.random.normal(kx, (self.batch, self.length, d)),
                "wq": jax.random.normal(kq, (d, d)) / jnp.sqrt(d),
                "wk": jax.random.normal(kk, (d, d)) / jnp.sqrt(d),
                "u": u / jnp.linalg.norm(u)}

    def point(self, state, knobs):
        x = state["x"] + knobs["drift_norm"] * state["u"]
        q = knobs["q_scale"] * x @ state["wq"]
        k = knobs["k_scale"] * x @ state["wk"]
        logits = jnp.einsum("btd,bsd->bts", q, k) / (jnp.sqrt(self.d) * knobs["temperature"])
        p = jax.nn.softmax(logits, axis=-1)
        entropy = -jnp.sum(p * jnp.log(p + 1e-30), axis=-1).mean()
        y = knobs["attn_residual"] * x + jnp.einsum("bts,bsd->btd", p, x)
        return {"entropy": entropy, "cos": jnp.stack([_cos(x), _cos(y)])}


# Tests compile hermetically: no persistent compilation cache unless a test sets its own
# (subprocesses inherit this).
os.environ.setdefault("SIMLAB_COMPILE_CACHE", "off")
