"""Input token sequences (batch x length x d_model) and the drift direction, from a key.

Every distribution is returned as *components*: x = sum_c coef_c(knobs) * X_c, with X_c
arrays that broadcast to (B, T, D) and coefficients that depend only on traced knobs. This
is what lets the sweep hoist the projections by linearity ((sum_c a_c X_c) W = sum_c a_c
(X_c W)) and vary `input_corr` and `drift_norm` without redrawing anything (common random
numbers, docs/design.md).

  embedding:   X = E[ids], E ~ N(0, embed_std^2) of shape (V, D); ids uniform over V or
               Zipf: P(id = k) proportional to (k + 1)^-s, k = 0..V-1.
  gaussian:    x_i = sqrt(p) z_0 + sqrt(1 - p) z_i, z ~ N(0, sigma^2 I), z_0 one per sequence
               (p = input_corr), so cos(x_i, x_j) -> p for large d.
  anisotropic: x = (z * sqrt(lambda)) R^T, lambda_k proportional to k^-alpha (k = 1..D),
               normalised so sum_k lambda_k = sigma^2 D; R a random rotation (QR of a Gaussian).
  student_t:   i.i.d. Student-t with nu > 2 dof, scaled to variance sigma^2 per coordinate.
Then every token gets the drift b = drift_norm * u_b, u_b a random unit vector per seed
(Godey et al. 2024, section on untrained blocks: "a common bias term b of norm N").
"""
from __future__ import annotations

import math
from typing import Mapping

import jax
import jax.numpy as jnp

from simlab.init import draws
from simlab.spec import InputSpec


def zipf_ids(key, shape, vocab: int, s: float, u=None) -> jax.Array:
    """Token ids with P(k) proportional to (k + 1)^-s, by inverse CDF (no V-wide sample) of
    uniforms `u` (drawn from `key` if not given)."""
    logp = -s * jnp.log(jnp.arange(1, vocab + 1, dtype=jnp.float32))
    cdf = jnp.cumsum(jax.nn.softmax(logp))
    if u is None:
        u = draws(key, {"u": (tuple(shape), "uniform")}, jnp.float32)["u"]
    return jnp.minimum(jnp.searchsorted(cdf, u.astype(jnp.float32) * cdf[-1], side="right"),
                       vocab - 1)


def noise_shapes(spec: InputSpec, d_model: int) -> dict[str, tuple]:
    """The random numbers one draw of the inputs needs: name -> (shape, kind) for
    simlab.init.draws (student_t draws its own, from a key)."""
    B, T, D = spec.batch, spec.length, d_model
    out = {"u_b": ((1, 1, D), "normal")}
    if spec.kind == "embedding":
        out["table"] = ((spec.vocab, D), "normal")
        out["ids"] = ((B, T), "uniform") if spec.token_dist == "zipf" else ((B, T), spec.vocab)
    elif spec.kind == "gaussian":
        out["z"] = ((B, T + 1, D), "normal")
    elif spec.kind == "anisotropic":
        out["z"] = ((D + B * T, D), "normal")
    return out


def token_ids(spec: InputSpec, key=None, noise=None) -> jax.Array:
    """Token ids (B, T): uniform over the vocabulary or Zipf (from `noise["ids"]` if given)."""
    if noise is None:
        noise = draws(key, {k: v for k, v in noise_shapes(spec, 1).items() if k == "ids"})
    if spec.token_dist == "zipf":
        return zipf_ids(None, (spec.batch, spec.length), spec.vocab, spec.zipf_s, noise["ids"])
    return noise["ids"]


def components(spec: InputSpec, d_model: int, key=None, dtype=None, noise=None,
               t_key=None) -> dict[str, jax.Array]:
    """Per-seed arrays, each 3-D and broadcastable to (B, T, D): the drift direction "u_b"
    (1, 1, D) and the base components of x ("x", or "z0" (B, 1, D) and "z" for gaussian).
    Randomness: `noise` (from noise_shapes, drawn by the caller with simlab.init.draws) and,
    for student_t, `t_key`; if not given, both come from `key`. dtype None: jax's default
    float dtype. Every random number is drawn in float32 and then cast, so float64 runs see
    the same sample."""
    dtype = jnp.result_type(float) if dtype is None else dtype
    if noise is None:
        kn, t_key = jax.random.split(key)
        noise = draws(kn, noise_shapes(spec, d_model), dtype)
    B, T, D = spec.batch, spec.length, d_model
    z = {k: v.astype(dtype) if k != "ids" else v for k, v in noise.items()}
    out = {"u_b": z["u_b"] / jnp.linalg.norm(z["u_b"])}
    if spec.kind == "embedding":
        out["x"] = (spec.embed_std * z["table"])[token_ids(spec, noise=noise)]
    elif spec.kind == "gaussian":
        out["z0"] = spec.sigma * z["z"][:, :1]
        out["z"] = spec.sigma * z["z"][:, 1:]
    elif spec.kind == "anisotropic":
        lam = jnp.arange(1, D + 1, dtype=dtype) ** (-spec.alpha)
        lam = lam * (spec.sigma ** 2 * D / jnp.sum(lam))
        rot, _ = jnp.linalg.qr(z["z"][:D])
        g = z["z"][D:].reshape(B, T, D) * jnp.sqrt(lam)
        out["x"] = jnp.einsum("btk,dk->btd", g, rot)
    else:  # student_t
        scale = spec.sigma * math.sqrt((spec.nu - 2.0) / spec.nu)
        out["x"] = scale * jax.random.t(t_key, spec.nu, (B, T, D), jnp.float32).astype(dtype)
    return out


def coefficients(kind: str, knobs: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
    """The traced coefficients of each component: x = sum_c coef_c * X_c + drift_norm * u_b."""
    n = knobs["drift_norm"]
    if kind == "gaussian":
        p = knobs["input_corr"]
        return {"z0": jnp.sqrt(p), "z": jnp.sqrt(1.0 - p), "u_b": n}
    return {"x": jnp.ones_like(n), "u_b": n}


def combine(comps: Mapping[str, jax.Array], coefs: Mapping[str, jax.Array]) -> jax.Array:
    """sum_c coef_c * comps[c] (broadcast to the largest component's shape)."""
    return sum(coefs[c] * comps[c] for c in coefs)


def sample(spec: InputSpec, d_model: int, key, knobs: Mapping[str, float]) -> jax.Array:
    """One input batch (B, T, D) for the given knobs (convenience for tests and scripts)."""
    comps = components(spec, d_model, key)
    dtype = jnp.result_type(float)
    coefs = coefficients(spec.kind, {k: jnp.asarray(v, dtype) for k, v in knobs.items()})
    x = combine(comps, coefs)
    return jnp.broadcast_to(x, (spec.batch, spec.length, d_model))
