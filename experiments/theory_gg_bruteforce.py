"""An independent oracle for claim 2's finite-(T, d) prediction (docs/theory.md, claim 2).

Plain numpy, float64, no JAX and none of check_theory's code: one softmax head on T
correlated Gaussian tokens x_j = sqrt(p) z_0 + sqrt(1 - p) z_j in d dimensions, W_Q, W_K ~
N(0, 1/d) of width d_head = d / 4, identity values, logits lambda q.k / sqrt(d_head) with
lambda = beta sqrt(ln T), all T tokens keys and the first n_query queries.  Per seed the
kernel cosine (sum over distinct query pairs of o_i . o_k) / (sum of |o_i|^2), scaled to
means; the mean over seeds with its standard error, against theory.gg_finite_cosine (with its
Monte Carlo standard error) and the d -> infinity formula theory.gg_output_cosine.

    python experiments/theory_gg_bruteforce.py [--T 256] [--d 128] [--seeds 3000]
        [--n-query 64] [--p 0.2 0.8] [--ratios 0.5 1 2 4]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from simlab import theory


def kernel_cosines(p, betas, *, T, d, n_query, seeds, rng):
    """(seeds, len(betas)) kernel cosines of independent draws of tokens and weights."""
    h = d // 4
    lam = np.asarray(betas, float) * math.sqrt(math.log(T))
    out = np.empty((seeds, lam.size))
    for s in range(seeds):
        x = math.sqrt(p) * rng.standard_normal(d) + math.sqrt(1 - p) * rng.standard_normal((T, d))
        wq, wk = (rng.standard_normal((d, h)) / math.sqrt(d) for _ in range(2))
        qk = (x[:n_query] @ wq) @ (x @ wk).T / math.sqrt(h)
        for b, lb in enumerate(lam):
            logits = lb * qk
            a = np.exp(logits - logits.max(1, keepdims=True))
            a /= a.sum(1, keepdims=True)
            o = a @ x
            tot, sq = o.sum(0), (o * o).sum()
            cross = (tot @ tot - sq) / (n_query * (n_query - 1))
            out[s, b] = cross / (sq / n_query)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, default=256)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--seeds", type=int, default=3000)
    ap.add_argument("--n-query", type=int, default=64)
    ap.add_argument("--p", type=float, nargs="+", default=[0.2, 0.8])
    ap.add_argument("--ratios", type=float, nargs="+", default=[0.5, 1.0, 2.0, 4.0])
    a = ap.parse_args(argv)
    rng = np.random.default_rng(12345)
    ratios = np.array(a.ratios)
    print(f"T={a.T} d_model={a.d} d_head={a.d // 4} n_query={a.n_query} seeds={a.seeds}")
    for p in a.p:
        betas = ratios * float(theory.gg_beta_c(p))
        t0 = time.time()
        ks = kernel_cosines(p, betas, T=a.T, d=a.d, n_query=a.n_query, seeds=a.seeds, rng=rng)
        mean, se = ks.mean(0), ks.std(0, ddof=1) / math.sqrt(a.seeds)
        fin, fin_se = theory.gg_finite_cosine(betas, p, a.T, a.d, a.d // 4)
        lim = theory.gg_output_cosine(betas, p)
        print(f"p={p} ({time.time() - t0:.0f} s)")
        for i, r in enumerate(ratios):
            print(
                f"  beta/beta_c={r:g}: brute force {mean[i]:.4f} +- {se[i]:.4f} | "
                f"gg_finite_cosine {fin[i]:.4f} +- {fin_se[i]:.4f} (diff {mean[i] - fin[i]:+.4f}) "
                f"| d -> inf formula {lim[i]:.4f} (diff {mean[i] - lim[i]:+.4f})"
            )


if __name__ == "__main__":
    main()
