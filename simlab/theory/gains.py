"""Gains: the anisotropy a BERT-init block adds to drifted inputs, branch by branch.

Derived here (docs/theory.md, "Claims 8-10"). Tokens x_i = e_i + N u_b: a private part e_i
(E|e_i|^2 = E, e.g. d embed_std^2) and the drift N u_b (unit u_b), so the input's pairwise cosine
is rho0 = N^2 / (N^2 + E) for large d (cross terms average out). The value-output map
M = sum_h W_V,h W_O,h (D x D) enters through per-seed statistics of the weights
(simlab.core.lab.Lab.covariates): k = |u_b M|^2, beta = u_b . (u_b M) and k_iso = |M|_F^2 / D.

Uniform attention: a_i = mean_j x_j M = (e_bar + N u_b) M, the same for every token of a
sequence, so h_i = x_i + a_i = e_i + N (u_b + u_b M) + e_bar M: the drift grows by the factor
g = |u_b + u_b M|^2 = 1 + 2 beta + k while the private parts stay (|e_bar|^2 = E / T is left
out). Hence rho_h = rho0 g / (1 + rho0 (g - 1)) and the gain (`drift_gain_uniform`)

    rho_h - rho0 = rho0 (1 - rho0) (g - 1) / (1 + rho0 (g - 1)),

largest near rho0 = 1/2, i.e. a drift about the tokens' norm; beta has a random sign per seed.
A LayerNorm after the residual (post-LN) keeps cosines up to its mean removal, O(1/d).

A shared pattern: every query of a sequence puts weight p on one key j* and (1 - p)/(T - 1) on
each other (simlab.core.patterns, p = e^beta / (e^beta + T - 1)). At N = 0 the common part of a
sequence's outputs is a = p e_j* M (+ O((1 - p) |e_bar M|)), so the within-sequence cosine is
(`shared_within_gain`) p^2 k_iso / (1 + p^2 k_iso) (its direction is the token j*'s, averaged
over tokens: k_iso), and the global cosine, whose pairs are within a sequence for a fraction
(T - 1) / (B T - 1) of them, that fraction of it (`shared_global_gain`): sharing, not
sharpness, makes the gain (a token-specific pattern of the same p adds none).

The MLP (`mean_field_gain`): after LN1, h_i has |h_i|^2 = d and a common part of fraction
rho_h; each pre-activation z = h W_1 column is N(0, s^2), s^2 = d init_std^2, a common value
c ~ N(0, rho_h s^2) per unit plus a private N(0, (1 - rho_h) s^2). The MLP's output is a shared
vector m = sum_f phi(c_f) W_2[f] (phi(c) = E GELU(c + private)) and a private r_i:
E|m|^2 = gbar^2 |1^T W_2|^2 + (Phi2 - gbar^2) C and E|r_i|^2 = (G2 - Phi2) C, with gbar = E
GELU(z), Phi2 = E phi(c)^2, G2 = E GELU(z)^2 and C = F d init_std^2 = E|1^T W_2|^2. The output
cosine is then (rho_h d + |m|^2) / (d + |m|^2 + |r|^2): the mean-field curve of the block's
gain against N, attention branch and MLP mean output together; at N -> 0 it is
simlab.theory.width.mlp_mean_gain (with |1^T W_2|^2 at its expectation C). Per seed, the
seed's own k, beta and |1^T W_2|^2 (= F mlp_shared) replace the expectations, and so do the
random-sign terms of the MLP's linear part (GELU's mean slope 1/2: A = W_1 W_2 / 2), which
carry most of the seed-to-seed spread once the input has a drift: gamma = w^T A w along the
drift's direction w after the attention branch and tau = tr(A) / d.

Clamped patterns at any drift (`CLAMP_COS`, one function per pattern; docs/theory.md, "Claim 11").
For the attention branch alone (block kind "attention", no MLP, a = 1, no LayerNorm) and any
row-stochastic weights A (T x T, the same in every head) h_i = x_i + sum_j A_ij x_j M
= N w + r_i with w = u_b (I + M) and r_i = e_i + sum_j A_ij e_j M: every row sums to one, so
every pattern passes the drift on identically, |w|^2 = g = 1 + 2 beta + k. What a pattern
changes is the private part r_i. With e_i independent, E e_i^T e_i = (E / D) I, and
tau = tr(M) / D (random sign, |tau| ~ D^-1/2 |beta|), the expected Gram matrix of one sequence is
exactly (`row_stochastic_cos`)

    G_ij = N^2 g + E [delta_ij + tau (A_ij + A_ji) + k_iso (A A^T)_ij],

and N^2 g between tokens of different sequences; the cosine is G_ij / sqrt(G_ii G_jj) up to
O(D^-1/2) fluctuations of the norms (O(1/D) in the mean), and only the ratio rho0 = N^2 / (N^2 +
E) enters. The clamps (simlab.core.patterns; n = T keys, no causal mask) put p = e^beta /
(e^beta + T - 1) on a target t_i and o = (1 - p) / (T - 1) on every other key; every row has the
same squared norm s2 = sum_j A_ij^2 = p^2 + (T - 1) o^2. Below, G is divided by N^2 + E (so N^2 ->
rho0, E -> 1 - rho0):
  uniform (p = o = 1/T), token (t_i = i: each query copies itself) and other (t_i = i - 1,
    cyclic: each query copies the token before it) are doubly stochastic (columns sum to one
    too), so sum_{i != j} (A A^T)_ij = T (1 - s2) and sum_{i != j} A_ij = T (1 - a) with a the
    diagonal weight (1/T, p, o). Every G_ii is the same,
        G_d = rho0 g + (1 - rho0) (1 + 2 a tau + s2 k_iso),
    and the mean over a sequence's pairs of G_ij is
        G_w = rho0 g + (1 - rho0) (2 (1 - a) tau + (1 - s2) k_iso) / (T - 1),
    so the within-sequence cosine is G_w / G_d and the global one f G_w / G_d + (1 - f) rho0 g /
    G_d with f = (T - 1) / (B T - 1) the share of pairs within a sequence (`doubly_stochastic_cos`).
    The private part grows from E to E (1 + 2 a tau + s2 k_iso): by p^2 k_iso for the token and
    the other clamp alike (s2 ~ p^2), which lowers the cosine at any N > 0. Copying oneself adds
    the trace term 2 p tau to every norm, |e_i (I + p M)|^2 ~ |e_i|^2 (1 + 2 p tau + p^2 k_iso);
    copying the token before puts it on the T pairs (i, i - 1) instead, e_i . p e_i M = p tau
    E on each: those pairs are 2 / (T - 1) of a sequence's pairs (2 / (B T - 1) of all) and add
    2 (p - o) tau (1 - rho0) / ((T - 1) G_d) to the within-sequence mean. Self and other differ
    by the tau terms only, which average to zero over seeds: at equal beta, "copy yourself" and
    "copy another token" give the same gain. Uniform: the 1/T terms are those of e_bar M that
    `drift_gain_uniform` leaves out; at T -> infinity it is that function.
  shared (t_i = 0 for every query): every row is the same, so (A A^T)_ij = s2 for all i, j: the
    sequence shares a part of squared norm s2 k_iso E. Token 0 (the target) has a diagonal
    2 p tau, the others 2 o tau, pairs with token 0 (p + o) tau, the rest 2 o tau;
    `shared_clamp_cos` averages the exact cosines over those pair classes. At N = 0 and
    T -> infinity the within-sequence cosine is claim 9's p^2 k_iso / (1 + p^2 k_iso); with a
    drift the private part grows as for the token clamp, and within a sequence the shared part
    adds back s2 k_iso (1 - rho0) / G_d.

Sharp softmax (`logit_parts`, `sharp_softmax_cos`). Without biases (BERT init) head h's logit of
query i and key j is x_i B_h x_j^T / (sqrt(K) temperature) times q_scale k_scale, B_h = W_Q,h
W_K,h^T. Over the keys j only x_i B_h e_j^T varies: a token-specific part e_i B_h e_j^T
(variance sigma_e^4 |B_h|_F^2 over i != j) and the drift's part N u_b B_h e_j^T, the same for
every query (variance N^2 sigma_e^2 |u_b B_h|^2): at BERT init their ratio is N^2 / E, one at N ~
|x|. The query's own key has no systematic advantage: e_i B_h e_i^T has mean sigma_e^2 tr(B_h), a
fraction tr(B_h) / |B_h|_F ~ D^-1/2 of the token part's spread. At large lambda each head copies
its argmax key j_h(i), so A is one-hot per head (s2 = 1): the private part grows by
sum_h |M_h|_F^2 / D ~ k_iso, M_h = W_V,h W_O,h (the token clamp at p = 1, self or other alike),
and two queries of a sequence share head h's copy with the probability pi_h that their argmaxes
collide, which puts pi k_iso E on their inner product (pi the heads' mean): G_d = rho0 g +
(1 - rho0)(1 + k_iso), G_w = rho0 g + (1 - rho0) pi k_iso. Left out: the cross-head terms
tr(M_h M_h'^T) and the tau terms (mean zero), and what the selection does to the copied keys
(an argmax key has an atypically large component along u_b B_h, of relative size ~ 2 ln T / D).
"""

from __future__ import annotations

import math

import numpy as np


def drift_fraction_after(rho0, g) -> np.ndarray:
    """rho_h = rho0 g / (1 + rho0 (g - 1)): the drift's share of the pairwise cosine after the
    drift is multiplied by sqrt(g) and the private parts are not."""
    rho0, g = np.asarray(rho0, float), np.asarray(g, float)
    return rho0 * g / (1.0 + rho0 * (g - 1.0))


def drift_gain_uniform(rho0, g) -> np.ndarray:
    """out_cos - input_cos of h = x + Attn(x) under uniform attention: rho0 (1 - rho0) (g - 1)
    / (1 + rho0 (g - 1)), g = |u_b + u_b M|^2 = 1 + 2 beta + k (module docstring)."""
    return drift_fraction_after(rho0, g) - np.asarray(rho0, float)


def shared_weight(beta, n) -> np.ndarray:
    """p = e^beta / (e^beta + n - 1): the weight a clamped pattern of sharpness beta puts on its
    target among n keys (simlab.core.patterns), computed without overflow."""
    beta, n = np.asarray(beta, float), np.asarray(n, float)
    return 1.0 / (1.0 + (n - 1.0) * np.exp(-beta))


def shared_within_gain(k_iso, p) -> np.ndarray:
    """Within-sequence cosine a shared pattern of weight p adds at N = 0: p^2 k / (1 + p^2 k)."""
    q = np.asarray(p, float) ** 2 * np.asarray(k_iso, float)
    return q / (1.0 + q)


def shared_global_gain(k_iso, p, batch: int, length: int) -> np.ndarray:
    """The global cosine it adds: the within-sequence gain times the share (T - 1) / (B T - 1)
    of all pairs that lie within one sequence (pairs across sequences share nothing)."""
    return shared_within_gain(k_iso, p) * (length - 1.0) / (batch * length - 1.0)


def gelu_mean_field(rho, s2, n: int = 64) -> tuple[float, float, float]:
    """(gbar, Phi2, G2) for GELU (tanh form) with z = c + private, c ~ N(0, rho s2), private ~
    N(0, (1 - rho) s2): gbar = E GELU(z), Phi2 = E_c (E_private GELU(z))^2, G2 = E GELU(z)^2; by
    n x n Gauss-Hermite quadrature (exact to rounding for this smooth integrand at n = 64)."""
    x, w = np.polynomial.hermite_e.hermegauss(n)
    w = w / w.sum()
    rho = float(np.clip(rho, 0.0, 1.0))
    z = math.sqrt(rho * s2) * x[:, None] + math.sqrt((1.0 - rho) * s2) * x[None, :]
    g = 0.5 * z * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z**3)))
    phi = g @ w  # E over the private part, per common value
    return float(phi @ w), float((phi * phi) @ w), float(w @ (g * g) @ w)


def mean_field_gain(
    rho0,
    g,
    d_model: int,
    mlp_ratio: int = 4,
    init_std: float = 0.02,
    ones_w2=None,
    gamma=0.0,
    tau=0.0,
) -> np.ndarray:
    """out_cos - input_cos of a BERT-init post-LN block with its GELU MLP under uniform
    attention (module docstring): rho_h from the attention branch, then the MLP's shared and
    private outputs. Per seed: ones_w2 = |1^T W_2|^2 (F mlp_shared; default its expectation
    C = F d init_std^2), and the MLP's linear part A = W_1 W_2 / 2, whose random-sign terms
    h . MLP(h) add 2 rho_h d gamma (gamma = w^T A w along the drift, mlp_drift_dot) to the
    common part and 2 d (rho_h gamma + (1 - rho_h) tau) (tau = tr(A) / d, mlp_trace) to the
    squared norm; both have mean 0 over seeds. Broadcasts over every array argument."""
    d = float(d_model)
    s2 = d * init_std**2
    c = mlp_ratio * d * d * init_std**2
    rho0, g, ones, gamma, tau = np.broadcast_arrays(
        *(np.asarray(v, float) for v in (rho0, g, c if ones_w2 is None else ones_w2, gamma, tau))
    )
    rho_h = drift_fraction_after(rho0, g)
    out = np.empty(rho0.shape)
    for i in np.ndindex(rho0.shape):
        gbar, phi2, g2 = gelu_mean_field(rho_h[i], s2)
        m2 = gbar**2 * ones[i] + (phi2 - gbar**2) * c
        num = rho_h[i] * d * (1.0 + 2.0 * gamma[i]) + m2
        cross = 2.0 * d * (rho_h[i] * gamma[i] + (1.0 - rho_h[i]) * tau[i])
        out[i] = num / (d + cross + m2 + (g2 - phi2) * c) - rho0[i]
    return out


def expected_drift_gain_factor(d_model: int, init_std: float = 0.02) -> float:
    """E g = 1 + E k = 1 + d^2 init_std^4 (beta has mean 0) at BERT init: the average seed's
    factor, for overlays drawn without the seeds' own weights."""
    return 1.0 + float(d_model) ** 2 * init_std**4


# ------------------------------------------------------------------ clamped patterns, any drift
def clamp_weights(beta, n) -> tuple[np.ndarray, np.ndarray]:
    """(p, o): the target's weight and each other key's, p = e^beta / (e^beta + n - 1) and
    o = (1 - p) / (n - 1) = 1 / (e^beta + n - 1) (simlab.core.patterns), without overflow."""
    beta, n = np.asarray(beta, float), np.asarray(n, float)
    e = np.exp(-beta)
    r = (n - 1.0) * e
    return 1.0 / (1.0 + r), e / (1.0 + r)


def row_stochastic_cos(a_TT, rho0, g, k_iso, tau=0.0, batch: int = 1):
    """(global, within-sequence) mean pairwise cosine of h_i = x_i + sum_j A_ij x_j M for any
    row-stochastic A (T x T, the same for each of `batch` sequences), from the expected Gram
    matrix G_ij = rho0 g + (1 - rho0) (delta_ij + tau (A_ij + A_ji) + k_iso (A A^T)_ij) (and
    rho0 g across sequences), each pair's cosine G_ij / sqrt(G_ii G_jj) (module docstring).
    O(T^3): the general statement, against which the per-pattern closed forms are tested.
    Scalar arguments only."""
    a = np.asarray(a_TT, float)
    t = a.shape[0]
    eps = 1.0 - rho0
    gram = rho0 * g + eps * (np.eye(t) + tau * (a + a.T) + k_iso * (a @ a.T))
    inv = 1.0 / np.sqrt(np.diag(gram))
    cos = gram * inv[:, None] * inv[None, :]
    within = (cos.sum() - np.trace(cos)) / (t * (t - 1.0))
    n = batch * t
    if batch == 1:
        return within, within
    cross = rho0 * g * inv.sum() ** 2  # the sum over pairs (i in one sequence, j in another)
    total = batch * (cos.sum() - np.trace(cos)) + batch * (batch - 1) * cross
    return total / (n * (n - 1.0)), within


def doubly_stochastic_cos(rho0, g, k_iso, a, s2, length: int, batch: int, tau=0.0):
    """(global, within) cosine for a pattern whose rows and columns sum to one with the same
    diagonal weight a = A_ii and row norm s2 = sum_j A_ij^2 (module docstring):
    G_d = rho0 g + (1 - rho0)(1 + 2 a tau + s2 k_iso), within = G_w / G_d with
    G_w = rho0 g + (1 - rho0)(2 (1 - a) tau + (1 - s2) k_iso) / (T - 1), global = f within +
    (1 - f) rho0 g / G_d, f = (T - 1) / (B T - 1). Broadcasts."""
    rho0, g, k_iso, a, s2, tau = (np.asarray(v, float) for v in (rho0, g, k_iso, a, s2, tau))
    t = float(length)
    eps = 1.0 - rho0
    g_d = rho0 * g + eps * (1.0 + 2.0 * a * tau + s2 * k_iso)
    g_w = rho0 * g + eps * (2.0 * (1.0 - a) * tau + (1.0 - s2) * k_iso) / (t - 1.0)
    f = (t - 1.0) / (batch * t - 1.0)
    within = g_w / g_d
    return f * within + (1.0 - f) * rho0 * g / g_d, within


def uniform_clamp_cos(rho0, g, k_iso, beta, length: int, batch: int, tau=0.0):
    """Uniform weights 1/T: every token adds the sequence mean e_bar M (the terms 1/T that
    drift_gain_uniform leaves out): a = s2 = 1/T in doubly_stochastic_cos. beta is ignored (the
    argument keeps the signature of every CLAMP_COS entry)."""
    a = 1.0 / float(length)
    return doubly_stochastic_cos(rho0, g, k_iso, a, a, length, batch, tau)


def token_clamp_cos(rho0, g, k_iso, beta, length: int, batch: int, tau=0.0):
    """The token clamp (each query its own key, weight p): a = p, s2 = p^2 + (T - 1) o^2; the
    private part grows to E (1 + 2 p tau + s2 k_iso), |e_i (I + p M)|^2 at leading order."""
    p, o = clamp_weights(beta, length)
    return doubly_stochastic_cos(
        rho0, g, k_iso, p, p * p + (length - 1.0) * o * o, length, batch, tau
    )


def other_clamp_cos(rho0, g, k_iso, beta, length: int, batch: int, tau=0.0):
    """The other-token clamp (query i puts p on key i - 1, cyclic): a = o, the same s2 as the
    token clamp; the private part e_i + p e_{i-1} M has |.|^2 ~ E (1 + p^2 k_iso), no cross
    term, and the consecutive pairs share p tau E (module docstring). length >= 2."""
    p, o = clamp_weights(beta, length)
    return doubly_stochastic_cos(
        rho0, g, k_iso, o, p * p + (length - 1.0) * o * o, length, batch, tau
    )


def shared_clamp_cos(rho0, g, k_iso, beta, length: int, batch: int, tau=0.0):
    """The shared clamp (every query puts p on key 0): all rows equal, so every pair of a
    sequence shares s2 k_iso (1 - rho0). Exact mean over the pair classes (module docstring):
    token 0 has G_0 = rho0 g + (1 - rho0)(1 + 2 p tau + s2 k), the others G_1 = rho0 g +
    (1 - rho0)(1 + 2 o tau + s2 k); pairs (0, j) have rho0 g + (1 - rho0)((p + o) tau + s2 k),
    the others rho0 g + (1 - rho0)(2 o tau + s2 k); across sequences rho0 g / sqrt(G_a G_b)."""
    rho0, g, k_iso, tau = (np.asarray(v, float) for v in (rho0, g, k_iso, tau))
    p, o = clamp_weights(beta, length)
    t = float(length)
    eps = 1.0 - rho0
    s2 = p * p + (t - 1.0) * o * o
    base = rho0 * g + eps * s2 * k_iso
    g0, g1 = base + eps * (1.0 + 2.0 * p * tau), base + eps * (1.0 + 2.0 * o * tau)
    c01, c11 = base + eps * (p + o) * tau, base + eps * 2.0 * o * tau
    within = (2.0 * c01 / np.sqrt(g0 * g1) + (t - 2.0) * c11 / g1) / t
    m = (1.0 / np.sqrt(g0) + (t - 1.0) / np.sqrt(g1)) / t  # mean of G_ii^-1/2 over a sequence
    f = (t - 1.0) / (batch * t - 1.0)
    return f * within + (1.0 - f) * rho0 * g * m * m, within


CLAMP_COS = {
    "uniform": uniform_clamp_cos,
    "shared": shared_clamp_cos,
    "token": token_clamp_cos,
    "other": other_clamp_cos,
}


def clamp_gain(
    pattern: str, rho0, g, k_iso, beta, length: int, batch: int, tau=0.0, within: bool = False
):
    """out_cos - input_cos (within: the within-sequence cosines) of the attention branch under
    a clamp (CLAMP_COS), rho0 the input's cosine of the same kind, g = 1 + 2 beta_vo + k."""
    cos = CLAMP_COS[pattern](rho0, g, k_iso, beta=beta, length=length, batch=batch, tau=tau)
    return cos[1 if within else 0] - np.asarray(rho0, float)


# ------------------------------------------------------------------ sharp softmax
def logit_parts(wq_HDK, wk_HDK, u_D, drift_norm, embed_std) -> dict[str, np.ndarray]:
    """Per head (H,), the key-dependent parts of the logit x_i B_h x_j^T, B_h = W_Q,h W_K,h^T,
    for tokens x_i = e_i + N u_b (e_i ~ N(0, embed_std^2 I); module docstring), in units of the
    logit's scale: "token" the variance of e_i B_h e_j^T over i != j, sigma_e^4 |B_h|_F^2;
    "shared" the variance over j of the drift's part N u_b B_h e_j^T, N^2 sigma_e^2 |u_b B_h|^2
    (the same for every query); "self" the mean advantage of the query's own key,
    sigma_e^2 tr(B_h). At BERT init shared / token ~ N^2 / (D sigma_e^2) and self / sqrt(token)
    ~ D^-1/2."""
    b_HDD = np.einsum("hdk,hek->hde", np.asarray(wq_HDK, float), np.asarray(wk_HDK, float))
    u = np.asarray(u_D, float)
    u = u / np.linalg.norm(u)
    s2 = float(embed_std) ** 2
    ub_HD = np.einsum("d,hde->he", u, b_HDD)
    return {
        "token": s2 * s2 * np.sum(b_HDD * b_HDD, axis=(1, 2)),
        "shared": float(drift_norm) ** 2 * s2 * np.sum(ub_HD * ub_HD, axis=1),
        "self": s2 * np.trace(b_HDD, axis1=1, axis2=2),
    }


def sharp_softmax_cos(rho0, g, k_iso, collision, length: int, batch: int):
    """(global, within) cosine of the attention branch when every head attends to one key (the
    lambda -> infinity limit of the softmax): s2 = 1, and two queries of a sequence share a
    target with probability `collision` (module docstring): G_d = rho0 g + (1 - rho0)(1 +
    k_iso), within = (rho0 g + (1 - rho0) collision k_iso) / G_d, global as for the clamps.
    collision -> 0 is the token (or other) clamp at p = 1, collision = 1 the shared one."""
    rho0, g, k_iso, pi = (np.asarray(v, float) for v in (rho0, g, k_iso, collision))
    t = float(length)
    eps = 1.0 - rho0
    g_d = rho0 * g + eps * (1.0 + k_iso)
    within = (rho0 * g + eps * pi * k_iso) / g_d
    f = (t - 1.0) / (batch * t - 1.0)
    return f * within + (1.0 - f) * rho0 * g / g_d, within
