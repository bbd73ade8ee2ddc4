"""Input token sequences (batch x length x d_model) and the drift direction, from a key, in one
registry of input kinds (INPUTS).

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
  rademacher:  i.i.d. +-sigma with probability 1/2 each (bounded, maximally non-Gaussian
               marginals; the worked example of docs/extending.md).
  tokens:      (registered by simlab.checkpoints, a trained kind) a checkpoint's own
               embeddings of token ids, through its layers below the first one studied.
  text:        (the same) windows of real text (inputs.corpus) through the checkpoint's own
               tokenizer and special tokens, then as "tokens".
Then every token gets the drift b = drift_norm * u_b, u_b a random unit vector per seed
(Godey et al. 2024, section on untrained blocks: "a common bias term b of norm N").

An input kind (`InputKind`) declares the random numbers it needs (`noise`), how it builds its
components from them (`components`), their traced coefficients (`coefficients`), which of its
components varies with the position (`varying`: the factored attention path needs it) and the
knobs it reads besides drift_norm (`knobs`: any other input knob is inert for it), and whether
it is the input of trained layers (`trained`: its components also get the weights).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from simlab.core.init import draws
from simlab.core.knobs import KNOBS
from simlab.core.linalg import unit_vectors
from simlab.errors import ConfigError
from simlab.registry import BUILTIN, Registry, require

if TYPE_CHECKING:  # annotations only: spec validates names against this registry
    from simlab.core.spec import InputSpec


def zipf_ids(key, shape, vocab: int, s: float, u=None) -> jax.Array:
    """Token ids with P(k) proportional to (k + 1)^-s, by inverse CDF (no V-wide sample) of
    uniforms `u` (drawn from `key` if not given)."""
    logp = -s * jnp.log(jnp.arange(1, vocab + 1, dtype=jnp.float32))
    cdf = jnp.cumsum(jax.nn.softmax(logp))
    if u is None:
        u = draws(key, {"u": (tuple(shape), "uniform")}, jnp.float32)["u"]
    return jnp.minimum(
        jnp.searchsorted(cdf, u.astype(jnp.float32) * cdf[-1], side="right"), vocab - 1
    )


def token_ids(spec: InputSpec, key=None, noise=None) -> jax.Array:
    """Token ids (B, T): uniform over the vocabulary or Zipf (from `noise["ids"]` if given)."""
    if noise is None:
        noise = draws(key, {"ids": embedding_noise(spec, 1)["ids"]})
    if spec.token_dist == "zipf":
        return zipf_ids(None, (spec.batch, spec.length), spec.vocab, spec.zipf_s, noise["ids"])
    return noise["ids"]


# ------------------------------------------------------------------------------ the kinds
def embedding_noise(spec: InputSpec, d: int) -> dict:
    ids = (
        ((spec.batch, spec.length), "uniform")
        if spec.token_dist == "zipf"
        else ((spec.batch, spec.length), spec.vocab)
    )
    return {"table": ((spec.vocab, d), "normal"), "ids": ids}


def _embedding(spec: InputSpec, d: int, z: dict, t_key) -> dict:
    return {"x": (spec.embed_std * z["table"])[token_ids(spec, noise=z)]}


def _gaussian_noise(spec: InputSpec, d: int) -> dict:
    return {"z": ((spec.batch, spec.length + 1, d), "normal")}


def _gaussian(spec: InputSpec, d: int, z: dict, t_key) -> dict:
    return {"z0": spec.sigma * z["z"][:, :1], "z": spec.sigma * z["z"][:, 1:]}


def _gaussian_coefficients(knobs) -> dict:
    p = knobs["input_corr"]
    return {"z0": jnp.sqrt(p), "z": jnp.sqrt(1.0 - p)}


def _anisotropic_noise(spec: InputSpec, d: int) -> dict:
    return {"z": ((d + spec.batch * spec.length, d), "normal")}


def _anisotropic(spec: InputSpec, d: int, z: dict, t_key) -> dict:
    dtype = z["z"].dtype
    lam = jnp.arange(1, d + 1, dtype=dtype) ** (-spec.alpha)
    lam = lam * (spec.sigma**2 * d / jnp.sum(lam))
    rot_DE, _ = jnp.linalg.qr(z["z"][:d])  # E: the eigen-directions of the covariance
    g_BTE = z["z"][d:].reshape(spec.batch, spec.length, d) * jnp.sqrt(lam)
    return {"x": jnp.einsum("bte,de->btd", g_BTE, rot_DE)}


def _student_t(spec: InputSpec, d: int, z: dict, t_key) -> dict:
    scale = spec.sigma * math.sqrt((spec.nu - 2.0) / spec.nu)
    x = jax.random.t(t_key, spec.nu, (spec.batch, spec.length, d), jnp.float32)
    return {"x": scale * x.astype(z["u_b"].dtype)}


def _rademacher_noise(spec: InputSpec, d: int) -> dict:
    return {"u": ((spec.batch, spec.length, d), "uniform")}


def _rademacher(spec: InputSpec, d: int, z: dict, t_key) -> dict:
    return {"x": spec.sigma * jnp.where(z["u"] < 0.5, -1.0, 1.0).astype(z["u"].dtype)}


def _one(knobs) -> dict:
    return {"x": jnp.ones_like(knobs["drift_norm"])}


@dataclasses.dataclass(frozen=True)
class InputKind:
    """One input distribution (see the module docstring)."""

    name: str
    noise: Callable[[InputSpec, int], dict]  # name -> (shape, kind) for init.draws
    components: Callable[..., dict]  # (spec, d, noise, t_key), and weights= if trained
    coefficients: Callable[[Mapping[str, jax.Array]], dict] = _one
    varying: str = "x"  # the component that changes with position
    knobs: tuple[str, ...] = ()  # knobs read besides drift_norm
    doc: str = ""
    trained: bool = False  # the inputs of trained layers: components(..., weights=) gets them
    # the token ids (B, T) of a kind whose tokens have types, from (spec, noise, t_key, weights)
    # as its components get them; the metrics that split by token type read them
    # (simlab.core.metrics, "ids"); None: no types
    ids: Callable[..., jax.Array] | None = None
    # (spec, weights) -> None: a trained kind's refusals of what its weights cannot run, called
    # by Weights.check before any compute (None: nothing to check)
    check: Callable | None = None


def _check_kind(k: InputKind) -> None:
    unknown = [n for n in k.knobs if n not in KNOBS] if isinstance(k.knobs, tuple) else []
    require(
        "input kind",
        k.name,
        {
            "noise": (callable(k.noise), "must be callable (spec, d) -> {name: (shape, kind)}"),
            "components": (
                callable(k.components),
                "must be callable (spec, d, noise, t_key) -> {name: array}",
            ),
            "coefficients": (callable(k.coefficients), "must be callable (knobs) -> {name: coef}"),
            "varying": (isinstance(k.varying, str) and bool(k.varying), "must name a component"),
            "knobs": (
                isinstance(k.knobs, tuple) and not unknown,
                f"must be a tuple of registered knob names (unknown: {unknown})",
            ),
            "trained": (isinstance(k.trained, bool), "must be true or false"),
            "ids": (k.ids is None or callable(k.ids), "must be None or a function of the noise"),
            "check": (k.check is None or callable(k.check), "must be None or callable"),
        },
    )


# name -> InputKind, read live (a plugin's kinds appear here once it is imported)
INPUTS: Registry[InputKind] = Registry("input kind", InputKind, _check_kind)


def register_inputs(kind: InputKind) -> InputKind:
    """Add an input kind (validated; a duplicate name is an error): docs/extending.md."""
    return INPUTS.register(kind)


for _kind in (
    InputKind(
        "embedding",
        embedding_noise,
        _embedding,
        doc="rows of a table E ~ N(0, embed_std^2) at uniform or Zipf token ids",
        ids=lambda spec, z, t_key, weights=None: token_ids(spec, noise=z),
    ),
    InputKind(
        "gaussian",
        _gaussian_noise,
        _gaussian,
        _gaussian_coefficients,
        varying="z",
        knobs=("input_corr",),
        doc="x_i = sqrt(p) z_0 + sqrt(1 - p) z_i, z ~ N(0, sigma^2 I), p = input_corr",
    ),
    InputKind(
        "anisotropic",
        _anisotropic_noise,
        _anisotropic,
        doc="covariance spectrum lambda_k ~ k^-alpha (trace sigma^2 D) in a random basis",
    ),
    InputKind(
        "student_t",
        lambda spec, d: {},
        _student_t,
        doc="i.i.d. Student-t, nu dof, variance sigma^2",
    ),
    InputKind(
        "rademacher",
        _rademacher_noise,
        _rademacher,
        doc="i.i.d. +-sigma with probability 1/2 each",
    ),
):
    INPUTS.register(_kind, source=BUILTIN)


# ------------------------------------------------------------------------------ components
def noise_shapes(spec: InputSpec, d_model: int) -> dict[str, tuple]:
    """The random numbers one draw of the inputs needs: name -> (shape, kind) for
    simlab.core.init.draws (the drift direction u_b and the kind's own)."""
    return {"u_b": ((1, 1, d_model), "normal"), **INPUTS[spec.kind].noise(spec, d_model)}


def require_weights(spec: InputSpec, weights) -> InputKind:
    """The spec's input kind; a trained kind (`InputKind.trained`) without weights is refused."""
    kind = INPUTS[spec.kind]
    if kind.trained and weights is None:
        raise ConfigError(
            f"inputs.kind: {spec.kind!r} are a checkpoint's own inputs (its embeddings); give a "
            "[checkpoint] table (docs/checkpoints.md)"
        )
    return kind


def components(
    spec: InputSpec, d_model: int, key=None, dtype=None, noise=None, t_key=None, weights=None
) -> dict[str, jax.Array]:
    """Per-seed arrays, each 3-D and broadcastable to (B, T, D): the drift direction "u_b"
    (1, 1, D) and the base components of x (the kind's: "x", or "z0" (B, 1, D) and "z" for
    gaussian). Randomness: `noise` (from noise_shapes, drawn by the caller with
    simlab.core.init.draws) and, for student_t, `t_key`; if not given, both come from `key`.
    dtype None: jax's default float dtype. Every random number is drawn in float32 and then
    cast, so float64 runs see the same sample. A trained kind (`InputKind.trained`, e.g.
    "tokens" of simlab.checkpoints) also gets the trained weights (`weights`, what
    Lab(weights=...) holds), and without them is refused."""
    kind = require_weights(spec, weights)
    dtype = jnp.result_type(float) if dtype is None else dtype
    if noise is None:
        kn, t_key = jax.random.split(key)
        noise = draws(kn, noise_shapes(spec, d_model), dtype)
    z = {k: v.astype(dtype) if k != "ids" else v for k, v in noise.items()}
    own = (
        kind.components(spec, d_model, z, t_key, weights=weights)
        if kind.trained
        else kind.components(spec, d_model, z, t_key)
    )
    return {"u_b": z["u_b"] / jnp.linalg.norm(z["u_b"]), **own}


def ids_of(
    spec: InputSpec, noise: Mapping[str, jax.Array], t_key=None, weights=None
) -> jax.Array | None:
    """The token ids (B, T) of the spec's inputs, from the same noise and key as its components
    (`InputKind.ids`), or None for a kind whose tokens have no types."""
    kind = INPUTS[spec.kind]
    return None if kind.ids is None else kind.ids(spec, noise, t_key, weights)


def coefficients(kind: str, knobs: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
    """The traced coefficients of each component: x = sum_c coef_c * X_c + drift_norm * u_b."""
    return {**INPUTS[kind].coefficients(knobs), "u_b": knobs["drift_norm"]}


def combine(comps: Mapping[str, jax.Array], coefs: Mapping[str, jax.Array]) -> jax.Array:
    """sum_c coef_c * comps[c] (broadcast to the largest component's shape)."""
    return sum(coefs[c] * comps[c] for c in coefs)


def assemble(
    spec: InputSpec, d_model: int, comps: Mapping[str, jax.Array], coefs: Mapping[str, jax.Array]
) -> jax.Array:
    """The input batch (B, T, D): combine(comps, coefs) broadcast, then x_i / |x_i| if
    spec.normalize (unit tokens).  The one place both Lab and sample build inputs."""
    x = jnp.broadcast_to(combine(comps, coefs), (spec.batch, spec.length, d_model))
    if spec.normalize:
        x = unit_vectors(x)
    return x


def sample(
    spec: InputSpec, d_model: int, key, knobs: Mapping[str, float], weights=None
) -> jax.Array:
    """One input batch (B, T, D) for the given knobs (convenience for tests and scripts);
    weights: the trained layers a trained kind needs."""
    comps = components(spec, d_model, key, weights=weights)
    dtype = jnp.result_type(float)
    coefs = coefficients(spec.kind, {k: jnp.asarray(v, dtype) for k, v in knobs.items()})
    return assemble(spec, d_model, comps, coefs)
