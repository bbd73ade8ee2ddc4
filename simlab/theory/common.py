"""The knob mapping every claim shares: how q_scale, k_scale, temperature and the projections
set the standard deviation of the logits (simlab.theory's module docstring, "How the knobs set
the size of the logits")."""

from __future__ import annotations

import math

import numpy as np

from simlab.errors import ConfigError


def projected_std(init_std: float, d_model: int, input_std: float = 1.0) -> float:
    """Per-coordinate std of x W for W with i.i.d. N(0, init_std^2) entries and tokens whose
    d_model coordinates have std input_std: init_std * sqrt(d_model) * input_std."""
    return float(init_std) * math.sqrt(d_model) * float(input_std)


def logit_std(q_scale=1.0, k_scale=1.0, temperature=1.0, *, q_std=1.0, k_std=1.0):
    """lambda = q_scale k_scale q_std k_std / temperature: the std of the logits
    l_ij = q.k / (sqrt(d_head) temperature) for queries and keys with i.i.d. coordinates of
    std q_std, k_std drawn independently (independent W_Q, W_K).  Broadcasts over arrays."""
    return np.asarray(q_scale) * np.asarray(k_scale) * q_std * k_std / np.asarray(temperature)


# What a closed form may need of a block's structure (simlab.core.structure.Structure, read
# duck-typed: theory sits beside core, not above it), each as (test, the field it names, why).
NEEDS = {
    "layernorm": (
        lambda s: not (s.attn_norm or s.mlp_norm) or s.norm == "layernorm",
        "norm",
        "its norms must be LayerNorms (a LayerNorm sets q = 1 and p = p / q)",
    ),
    "plain_mlp": (
        lambda s: s.mlp == "plain",
        "mlp_kind",
        "its MLP must be plain act(h W_1 + b_1) W_2 + b_2 (no gate)",
    ),
    "sequential": (
        lambda s: s.mlp_reads == "h",
        "kind",
        "its MLP must follow the attention branch (no parallel branches)",
    ),
    "no_pre_norm": (
        lambda s: "pre" not in s.attn_norm,
        "attn_norm",
        "its projections must see the tokens themselves (no norm before them)",
    ),
}


def require_structure(structure, needs, what: str, where: str = "block") -> None:
    """ConfigError naming the structure field, for the first of `needs` (keys of NEEDS) that
    `structure` lacks; `what` names the closed form in the message."""
    if structure is None:
        raise ConfigError(
            f"{where}.kind: {what} needs a block declared as data (a kind with a structure)"
        )
    for need in needs:
        test, field, why = NEEDS[need]
        if not test(structure):
            raise ConfigError(f"{where}.{field}: {what} does not cover this block: {why}")
