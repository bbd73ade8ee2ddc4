"""The theory overlays a figure may name, one registry per figure type: each turns a sweep's
results into a closed-form curve (x, y, label) from simlab.theory, or None where the closed form
does not apply to that sweep.

  THEORY          heatmap `theory = [...]`: name -> fn(results)
  CURVE_THEORY    curves with x = "layer", `theory = [...]`: name -> fn(results, metric, select)
  VARIANT_THEORY  variants, `theory = {metric = name}` (or a list of names): name ->
                  fn(results), per variant sweep
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from simlab import theory
from simlab.core.spec import BlockSpec, spec_from_dict
from simlab.engine.results import Results
from simlab.theory import gains

# Theory overlays a heatmap may name: name -> curve (x, y, label) from the sweep's results.
THEORY: dict[str, Callable[[Results], tuple]] = {
    "gg_boundary": lambda res: theory.gg_boundary_curve(
        res.meta["config"]["inputs"]["length"], p=np.linspace(0, 0.95, 100)
    ),
    # the finite-T entropy-0.5 line of the same diagram (the freezing line x s_0.5 / s_c)
    "gg_entropy_half": lambda res: theory.gg_iso_entropy_curve(
        res.meta["config"]["inputs"]["length"], 0.5, p=np.linspace(0, 0.95, 100)
    ),
    # claim 6 of check-theory: the predicted attn_entropy = 0.5 line, no free parameter
    "entropy_half_line": lambda res: theory.paper_iso_entropy_curve(
        res.meta["config"], n=res.axes["drift_norm"], structure=_block(res).structure
    ),
    # the REM freezing line proper (s^2 = 2 ln T), ~10% above the entropy-0.5 line at T = 512
    "freezing_line": lambda res: theory.paper_freezing_line_curve(
        res.meta["config"], n=res.axes["drift_norm"], structure=_block(res).structure
    ),
}


def _block(res: Results) -> BlockSpec:
    """The sweep's block spec (its structure and init variances, as the theory reads them)."""
    return spec_from_dict(BlockSpec, res.meta["config"]["block"], "block")


def signal_variances(block: BlockSpec) -> dict | None:
    """The layer recursion's var_w, var_v, var_b and w_o from a block's init data
    (theory.signal_propagation's docstring), or None where it has none: W_1 and W_2 of unequal
    variance, W_Q, W_K or W_O of variance other than 1, unequal biases, or biases on the
    queries or keys."""
    var = dict(block.init_var or ())
    bias = dict(block.bias_var or ())
    if var.get("w1", 1.0) != var.get("w2", 1.0) or any(
        var.get(n, 1.0) != 1.0 for n in "wq wk wo".split()
    ):
        return None
    if len(set(bias.values())) > 1 or "bq" in bias or "bk" in bias:
        return None
    var_b = next(iter(bias.values()), 0.0)
    return dict(var_w=var.get("w1", 1.0), var_v=var.get("wv", 1.0), var_b=var_b, w_o=block.w_o)


def _mlp_ratio(b: dict) -> float:
    """F / D of a stored [block] table: its MLP width as BlockSpec.mlp_width reads it (d_ff
    where set, else d_model * mlp_ratio, the defaults the spec's own)."""
    block = spec_from_dict(BlockSpec, b, "block")
    return block.mlp_width / block.d_model


def _mlp_mean_gain(res: Results):
    """Width figure: the closed-form gain of the MLP's shared output (theory.mlp_mean_gain), at
    the drifts well below the tokens' norm sqrt(d) embed_std where it applies."""
    b, i = res.meta["config"]["block"], res.meta["config"]["inputs"]
    if b["kind"] != "post_ln" or b["init"] != "bert" or i["kind"] != "embedding":
        return None
    n = res.axes["drift_norm"]
    n = n[n <= 0.2 * math.sqrt(b["d_model"]) * i["embed_std"]]
    ratio = _mlp_ratio(b)
    gain = 0.0 if b.get("mlp_center") else float(theory.mlp_mean_gain(b["d_model"], ratio))
    return n, np.full(n.shape, gain), "closed form (MLP mean output), small N"


def _signal_propagation(res: Results, metric: str, select: dict):
    """Depth figures: claim 7's per-layer cosine (theory.signal_propagation) for a stack of
    init = "fan_in" on Gaussian tokens at the selected temperature (None for other metrics or
    setups)."""
    b, i, kn = res.meta["config"]["block"], res.meta["config"]["inputs"], res.meta["config"]
    if metric not in ("out_cos", "out_cos_within") or b["init"] != "fan_in":
        return None
    block = _block(res)
    s, variances = block.structure, signal_variances(block)
    if s is None or variances is None or s.norm != "layernorm" or s.mlp != "plain":
        return None  # no layer recursion for this block (e.g. kind "llama": RMSNorm, a gate)
    if s.mlp_reads != "h":
        return None
    if b.get("activation", "gelu") not in ("gelu", "relu"):
        return None
    if i["kind"] != "gaussian" or "temperature" not in select:
        return None
    knobs = kn.get("knobs", {})
    if any(knobs.get(k, 0.0) != 0.0 for k in ("drift_norm", "q_shift")):
        return None
    pred = theory.signal_propagation(
        s,
        b["depth"],
        i["length"],
        i["batch"],
        knobs.get("q_scale", 1.0) * knobs.get("k_scale", 1.0) / float(select["temperature"]),
        mlp=b["mlp"],
        activation=b["activation"],
        attn_residual=knobs.get("attn_residual", 1.0),
        mlp_residual=knobs.get("mlp_residual", 1.0),
        p0=float(select.get("input_corr", knobs.get("input_corr", 0.0))),  # z_0 per sequence
        **variances,
    )[metric]
    return np.arange(1, b["depth"] + 1), pred, "predicted (claim 7: layer recursion)"


# Theory overlays of a `curves` figure with x = "layer": name -> fn(results, metric, select).
CURVE_THEORY: dict[str, Callable[[Results, str, dict], tuple | None]] = {
    "signal_propagation": _signal_propagation
}


# Theory overlays of a `variants` figure: name -> curve (x, y, label) or None, per variant sweep.
def mean_field_per_seed(res: Results, own_weights: bool = True) -> np.ndarray | None:
    """Claim 10's mean-field gain of a BERT-init post-LN block against N (theory.mean_field_gain:
    the attention branch under uniform attention, then the GELU MLP's shared and private
    outputs), (N, seeds): each seed with its own input cosine and, own_weights, its own weights'
    statistics (the covariates drift_vo, drift_vo_dot, mlp_shared, mlp_drift_dot, mlp_trace;
    else their expectations). None for the mean-removed MLP (the closed form keeps the shared
    output) and for results without the covariates."""
    b, i = res.meta["config"]["block"], res.meta["config"]["inputs"]
    if b["kind"] != "post_ln" or b["init"] != "bert" or i["kind"] != "embedding":
        return None
    if b.get("mlp_center") or b.get("activation", "gelu") != "gelu" or not b.get("mlp", True):
        return None
    names = ("drift_vo", "drift_vo_dot", "mlp_shared", "mlp_drift_dot", "mlp_trace")
    if any(n not in res.covariates for n in names) or len(res.axes) != 1:
        return None
    d, ratio = b["d_model"], _mlp_ratio(b)
    rho0 = np.asarray(res["input_cos"], float)  # (N, seeds)
    if not own_weights:
        return gains.mean_field_gain(rho0, gains.expected_drift_gain_factor(d), d, ratio)
    k, beta, shared, gamma, tau = (np.asarray(res.covariates[n], float)[:, 0] for n in names)
    return gains.mean_field_gain(
        rho0, 1.0 + 2.0 * beta + k, d, ratio, 0.02, ratio * d * shared, gamma, tau
    )


def _mean_field_gain(res: Results):
    """Width figure: mean_field_per_seed averaged over the seeds."""
    pred = mean_field_per_seed(res)
    if pred is None:
        return None
    return res.axes["drift_norm"], pred.mean(axis=1), "mean field (claim 10), seeds' own weights"


VARIANT_THEORY: dict[str, Callable[[Results], tuple | None]] = {
    "mlp_mean_gain": _mlp_mean_gain,
    "mean_field_gain": _mean_field_gain,
}
