"""The knob mapping every claim shares: how q_scale, k_scale, temperature and the projections
set the standard deviation of the logits (simlab.theory's module docstring, "How the knobs set
the size of the logits")."""

from __future__ import annotations

import math

import numpy as np


def projected_std(init_std: float, d_model: int, input_std: float = 1.0) -> float:
    """Per-coordinate std of x W for W with i.i.d. N(0, init_std^2) entries and tokens whose
    d_model coordinates have std input_std: init_std * sqrt(d_model) * input_std."""
    return float(init_std) * math.sqrt(d_model) * float(input_std)


def logit_std(q_scale=1.0, k_scale=1.0, temperature=1.0, *, q_std=1.0, k_std=1.0):
    """lambda = q_scale k_scale q_std k_std / temperature: the std of the logits
    l_ij = q.k / (sqrt(d_head) temperature) for queries and keys with i.i.d. coordinates of
    std q_std, k_std drawn independently (independent W_Q, W_K).  Broadcasts over arrays."""
    return np.asarray(q_scale) * np.asarray(k_scale) * q_std * k_std / np.asarray(temperature)
