"""check_theory's own jnp building blocks: the reference computations the claims' simulations
are made of, written from the math and deliberately independent of simlab.core (they are the
oracles the engine is checked against, so they must not share its code).

Shapes (docs/design.md, "Shape letters"): N tokens (keys), M query rows, C query rows per
chunk, J chunks (M = J C), G scales evaluated in one call, T and S query and key positions,
D model width, K d_head, H heads; E is the second index of a D x D map ("hde").
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


def correlated_tokens(key, n: int, d: int, p, sigma=1.0):
    """x_i = sigma (sqrt(p) z_0 + sqrt(1 - p) z_i), z ~ N(0, I_d): (n, d)."""
    k0, k1 = jax.random.split(key)
    z0_D = jax.random.normal(k0, (d,))
    z_ND = jax.random.normal(k1, (n, d))
    return sigma * (jnp.sqrt(p) * z0_D + jnp.sqrt(1.0 - p) * z_ND)


def cos_sums(o_MD):
    """The sums from which the mean pairwise cosine and the kernel cosine of the rows of o follow
    exactly (cos_from_sums): sum of unit vectors u, sum |u|^2, sum of o, sum |o|^2 (a zero row
    contributes u = 0)."""
    nrm = jnp.linalg.norm(o_MD, axis=-1, keepdims=True)
    u_MD = jnp.where(nrm > 0, o_MD / jnp.where(nrm > 0, nrm, 1.0), 0.0)
    return {
        "su": u_MD.sum(0),
        "suu": jnp.sum(u_MD * u_MD),
        "so": o_MD.sum(0),
        "soo": jnp.sum(o_MD * o_MD),
    }


def cos_from_sums(s, n: int):
    """(mean pairwise cosine, kernel cosine) of n vectors from their cos_sums:
    (|sum u|^2 - sum |u|^2) / (n (n - 1)) and (|sum o|^2 - sum |o|^2) / (n (n - 1)) over
    sum |o|^2 / n (E[o_i . o_k] over distinct pairs, divided by E|o|^2)."""
    pairs = float(n) * (n - 1)  # float: n (n - 1) overflows int32 from n = 46342
    mean_cos = (jnp.sum(s["su"] ** 2) - s["suu"]) / pairs
    kernel_cos = ((jnp.sum(s["so"] ** 2) - s["soo"]) / pairs) / (s["soo"] / n)
    return mean_cos, kernel_cos


def mean_pairwise_cosine(x_ND):
    """simlab's anisotropy: (|sum u|^2 - sum |u|^2) / (n (n - 1)), u the unit rows."""
    return cos_from_sums(cos_sums(x_ND), x_ND.shape[0])[0]


def row_entropy(logits_TS):
    """Entropy (nats) of each softmax row, -sum_s a_s log a_s; exact zeros for one-hot rows."""
    lp = jax.nn.log_softmax(logits_TS, axis=-1)
    return -jnp.sum(jnp.exp(lp) * lp, axis=-1)


def attention_stats(q_MK, k_NK, v_ND, scale_G, chunk: int):
    """For each logit multiplier s in scale_G: rows softmax(s q_m . k_n) over n, outputs
    o_m = sum_n A_mn v_n.  Returns dict of (G,) arrays: mean_cos (simlab anisotropy of the M
    outputs), kernel_cos (E[o_i . o_k] / E|o|^2 over distinct pairs) and entropy (mean row
    entropy, nats).  Queries go in chunks of `chunk` rows (lax.map), so memory is chunk x N."""
    M, K = q_MK.shape
    C = min(chunk, M)
    if M % C:
        raise ValueError(f"n_query {M} must be a multiple of chunk {C}")
    q_JCK = q_MK.reshape(M // C, C, K)

    def per_scale(s):
        def per_chunk(q_CK):
            logits_CN = s * jnp.einsum("ck,nk->cn", q_CK, k_NK)
            lp_CN = jax.nn.log_softmax(logits_CN, axis=-1)
            a_CN = jnp.exp(lp_CN)
            ent = -jnp.sum(a_CN * lp_CN)
            o_CD = jnp.einsum("cn,nd->cd", a_CN, v_ND)
            return dict(cos_sums(o_CD), ent=ent)

        parts = jax.lax.map(per_chunk, q_JCK)
        tot = jax.tree.map(lambda a: a.sum(0), parts)
        mean_cos, kernel_cos = cos_from_sums(tot, M)
        return {"mean_cos": mean_cos, "kernel_cos": kernel_cos, "entropy": tot["ent"] / M}

    return jax.lax.map(per_scale, scale_G)


def multihead_attention(x_TD, w_qk_HDE, w_v_HDE, d_head: int):
    """Pure multi-head self-attention with each head's maps merged:
    sum_h softmax(X W_QK,h X^T / sqrt(d_head)) X W_V,h, W_QK,h = W_Q,h W_K,h^T and W_V,h the
    head's value-and-output map (both D x D); no normalisation, no skip."""
    logits_HTS = jnp.einsum("td,hde,se->hts", x_TD, w_qk_HDE, x_TD) / math.sqrt(d_head)
    return jnp.einsum("hts,sd,hde->te", jax.nn.softmax(logits_HTS, axis=-1), x_TD, w_v_HDE)


def rms_norm(x_TD):
    """x / sqrt(mean_d x_d^2) per token, no gain."""
    return x_TD / jnp.sqrt(jnp.mean(x_TD * x_TD, axis=-1, keepdims=True))


def relative_residual(x_TD):
    """||X - 1 xbar^T||_F / ||X||_F, xbar the mean token: 0 for rank-one (collapsed) X."""
    return jnp.linalg.norm(x_TD - x_TD.mean(0)) / jnp.linalg.norm(x_TD)


def composite_norm(a_TD):
    """Dong et al.'s composite norm sqrt(||A||_1 ||A||_inf) of a matrix (largest absolute
    column sum times largest absolute row sum), in jnp so that it can be differentiated
    (simlab.theory.composite_norm is the numpy one)."""
    a = jnp.abs(a_TD)
    return jnp.sqrt(a.sum(0).max() * a.sum(1).max())
