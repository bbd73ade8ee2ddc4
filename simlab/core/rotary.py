"""Rotary position embeddings (RoPE; Su et al. 2021, "RoFormer", eq. 34), GPT-NeoX's convention.

On the first n = rotary dims of each head (the rest passes unchanged), with half = n / 2 and
pairs (x_i, x_{i + half}), i < half, each pair of a token at position t is rotated by the angle
theta_{t,i} = t * base^(-2 i / n):
  x_i'        = x_i cos theta_{t,i} - x_{i+half} sin theta_{t,i}
  x_{i+half}' = x_{i+half} cos theta_{t,i} + x_i sin theta_{t,i}
which is HF's `x * cos + rotate_half(x) * sin` with rotate_half(x) = (-x_2, x_1) (Black et al.
2022, GPT-NeoX-20B; Biderman et al. 2023, Pythia: n = int(d_head * rotary_pct), rotary_pct
0.25). Rotating queries and keys by their positions makes q_i' . k_j' depend on the keys through
j - i only (the rotations compose), so the logits of a rotary block depend on positions.
"""

from __future__ import annotations

import jax.numpy as jnp


def n_dims(d_head: int, rotary_pct: float) -> int:
    """The rotated dimensions of a head: int(d_head * rotary_pct), HF's rounding."""
    return int(d_head * rotary_pct)


def angles(length: int, n: int, base: float, dtype) -> jnp.ndarray:
    """theta_{t,i} = t * base^(-2 i / n) for t < length, i < n / 2: (T, n / 2)."""
    inv_freq = base ** (-jnp.arange(0, n, 2, dtype=dtype) / n)
    return jnp.arange(length, dtype=dtype)[:, None] * inv_freq[None, :]


def rotate(x_BTHK, n: int, base: float):
    """x with its first n dims of every head rotated by the token's position t (axis 1)."""
    if n == 0:
        return x_BTHK
    half = n // 2
    th_T1I = angles(x_BTHK.shape[1], n, base, x_BTHK.dtype)[:, None, :]
    cos, sin = jnp.cos(th_T1I), jnp.sin(th_T1I)
    x1, x2 = x_BTHK[..., :half], x_BTHK[..., half:n]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin, x_BTHK[..., n:]], axis=-1)
