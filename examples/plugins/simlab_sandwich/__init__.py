"""An example simlab plugin: one entry of each kind, registered without editing simlab.

  block kind "sandwich"   sandwich-LN (Ding et al. 2021, "CogView", sec. 2.4): a LayerNorm
                          before and after each sub-layer, inside the residual branch,
                              h = a x + LN(Attn(LN(x))),   y = m h + LN(MLP(LN(h))),
                          with parameter-free LayerNorms (gain 1, bias 0: a BERT-style init's
                          values), so it needs no weights beyond simlab's own.
  input kind "uniform"    i.i.d. coordinates U(-sqrt(3) sigma, sqrt(3) sigma): variance sigma^2,
                          bounded, flat; plus simlab's drift N u_b like every input kind.
  metric "out_mean_ratio" |mean_i y_i| / mean_i |y_i| over all B * T output tokens: the share of
                          the output that is one common vector, in [0, 1] (1 when every token
                          is the same vector; triangle inequality).
  claim "uniform_drift_cos"  the input cosine of drifted i.i.d. tokens, x_i = z_i + N u_b with
                          E z = 0 and E |z|^2 = d sigma^2:  cos -> N^2 / (N^2 + d sigma^2) as d
                          grows (x_i . x_j = N^2 + O(sqrt(d)) and |x_i|^2 = N^2 + d sigma^2 +
                          O(sqrt(d)), so the ratio's error is O(1/sqrt(d)) per pair and its mean
                          over many pairs converges like 1/d). Sizes and criterion in
                          theory_uniform_drift_cos.toml beside this file.
Installed (`pip install -e examples/plugins`), simlab finds it through the "simlab.plugins"
entry point; otherwise name it: `plugins = ["simlab_sandwich"]` in a config, or
`--plugin simlab_sandwich` on any command.
"""

from __future__ import annotations

import math
from pathlib import Path

import jax.numpy as jnp

import simlab
from simlab.core import attention
from simlab.core.block import mlp

__version__ = "0.1.0"
HERE = Path(__file__).resolve().parent


# ------------------------------------------------------------------------------ block kind
def _norm(spec, x_BTD):
    """A parameter-free LayerNorm over the features (statistics in float32)."""
    return attention.layer_norm(x_BTD, None, None, spec.ln_eps)


def _sandwich_attn_input(spec, p, x_BTD):
    return _norm(spec, x_BTD)


def _sandwich_token_wise(spec, p, x_BTD, attn_BTD, knobs):
    h_BTD = knobs["attn_residual"] * x_BTD + _norm(spec, attn_BTD)
    if not spec.mlp:
        return h_BTD
    return knobs["mlp_residual"] * h_BTD + _norm(spec, mlp(spec, p, _norm(spec, h_BTD)))


simlab.register_block(
    simlab.BlockKind(
        "sandwich",
        _sandwich_attn_input,
        _sandwich_token_wise,
        norm_before_projections=True,  # the projections see LN(x): no hoisting by linearity
        norm_after_attention=True,  # a norm after attention even without the MLP: tiled
        formula="h = a x + LN(Attn(LN(x))); y = m h + LN(MLP(LN(h)))  (sandwich-LN)",
    )
)


# ------------------------------------------------------------------------------ input kind
def _uniform_noise(spec, d: int) -> dict:
    return {"u": ((spec.batch, spec.length, d), "uniform")}


def _uniform(spec, d: int, noise: dict, t_key) -> dict:
    u = noise["u"]
    return {"x": (spec.sigma * math.sqrt(3.0)) * (2.0 * u - 1.0)}


simlab.register_inputs(
    simlab.InputKind(
        "uniform",
        _uniform_noise,
        _uniform,
        doc="i.i.d. U(-sqrt(3) sigma, sqrt(3) sigma) coordinates (variance sigma^2)",
    )
)


# ------------------------------------------------------------------------------ metric
def out_mean_ratio(y_BTD):
    """|mean_i y_i| / mean_i |y_i| over all tokens (0 when every y_i is 0); both norms after
    dividing by max |y| so that nothing overflows."""
    y = y_BTD.reshape(-1, y_BTD.shape[-1])
    m = jnp.max(jnp.abs(y))
    y = y / jnp.where(m > 0, m, 1.0)
    mean_norm = jnp.mean(jnp.linalg.norm(y, axis=-1))
    ratio = jnp.linalg.norm(jnp.mean(y, axis=0)) / jnp.where(mean_norm > 0, mean_norm, 1.0)
    return jnp.where(mean_norm > 0, ratio, 0.0)


simlab.register_metric(
    simlab.Metric(
        "out_mean_ratio",
        lambda c: out_mean_ratio(c.layer.y),
        ("y",),
        "|mean_i y_i| / mean_i |y_i| of the block output: its common part",
        bounds=(0.0, 1.0),
        default=False,  # computed when a sweep asks for it (sweep.metrics)
    )
)


def max_weight_per_head(row_max_BHT):
    """Per head (H,): the mean over all B T query rows of max_j w_ij (row_max: the attention's
    per-row maximum, simlab.core.block.Layer.row_max, (B, H, T))."""
    return jnp.mean(row_max_BHT, axis=(0, 2))


# A metric with a named dimension: one value per head (`dims`; its size, block.n_heads, is read
# from the spec). The engine, Results, `simlab info`, `simlab plot --select head=I` and
# `simlab export` handle it with no change to simlab.
simlab.register_metric(
    simlab.Metric(
        "attn_max_head",
        lambda c: max_weight_per_head(c.layer.row_max),
        ("row_max",),
        "per head, mean over rows of max_j w_ij",
        bounds=(0.0, 1.0),
        default=False,
        dims=("head",),
    )
)


# ------------------------------------------------------------------------------ theory claim
def predicted_input_cos(knobs, size):
    """N^2 / (N^2 + d sigma^2): the input cosine of drifted i.i.d. tokens as d grows."""
    n = knobs["drift_norm"]
    d = size["block"]["d_model"]
    sigma = size.get("inputs", {}).get("sigma", 1.0)
    return n**2 / (n**2 + d * sigma**2)


simlab.register_claim(
    simlab.sweep_claim(
        "uniform_drift_cos",
        "input cosine of drifted uniform tokens, N^2 / (N^2 + d sigma^2)",
        prediction=predicted_input_cos,
        metric="input_cos",
        config=HERE / "theory_uniform_drift_cos.toml",
    )
)
