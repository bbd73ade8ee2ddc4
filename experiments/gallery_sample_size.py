"""Covariance measures at a stated sample size, for the geometry sections of docs/gallery.md ("The
answer, by geometry" at 16 x 512 tokens, "The referee's questions, by geometry" at 4 x 512):
each measure's finite-sample reference, and one block read at the two sizes (issue 50, item 6;
docs/metrics.md, "Sample size").

A covariance measure of n tokens in d dimensions reads the sample as well as the geometry: an
isotropic Gaussian sample's participation ratio is PR_iso = (m d + 2) / (m + d + 1), m = n - 1
(simlab.core.finite_sample), 702.09 at n = 8192 and 558.27 at n = 2048 (d = 768). The committed
sweeps store the measures, not their `_rel` forms; the reference depends on n and d alone for
the spectrum measures (participation ratio, IsoScore, the covariance's effective rank, the top
direction shares), so `measure / reference` is computed here from the stored values. The
partition isotropies are not scale-free (their reference reads the points' scale too): they get
no n-and-d reference. At one n, dividing by a constant changes no relative change and no verdict
of the declared rule (experiments/gallery_geometry.py): the reference tells a reader how far the
sample sits from an isotropic one of its size, and makes two sizes comparable.

Carrying a participation ratio from one n to another (`carried_pr`): for n i.i.d. Gaussian
tokens of covariance S (population participation ratio p = (tr S)^2 / tr S^2), with m = n - 1
and m C ~ W_d(m, S), Wishart's moments E[tr (mC)^2] = m (m + 1) tr S^2 + m (tr S)^2 and
E[(tr mC)^2] = m^2 (tr S)^2 + 2 m tr S^2 give the ratio of expectations

    r(m, p) = E[tr C^2] / E[(tr C)^2] = ((m + 1) / p + 1) / (m + 2 / p),

exact for an isotropic S (p = d: (m + d + 1) / (m d + 2), finite_sample.inverse_pr_mean, whose
numerator and denominator are independent) and first-order otherwise (the mean of the ratio
differs by O(1 / (m p)); tests/studies/test_gallery_sample_size.py checks both against numpy).
Solving r = 1 / PR for p gives the population read off a sample, p = (m + 1 - 2 r) / (r m - 1)
(`population_pr`), and 1 / r(m', p) the participation ratio the same population shows at n'
tokens. The carried change is what a pure sample-size effect would do to the measured one: if
the measured change at n' differs from it, the tokens are not the i.i.d. draws the model
assumes (the block's tokens share their sequence's attention), or the population differs.
"""

import numpy as np

from simlab.core import finite_sample
from simlab.engine.results import seed_ci

# metric -> its simlab.core.finite_sample measure (its isotropic reference depends on n and d)
REFERENCED = {
    "out_participation_ratio": "participation_ratio",
    "out_cov_effective_rank": "cov_effective_rank",
    "out_isoscore": "isoscore",
    "out_pc1_share": "pc1_share",
    "out_pc10_share": "pc10_share",
}
SCALED = ("out_partition_iso", "out_partition_iso_centred")  # reference reads the scale too


def n_d(res) -> tuple[int, int]:
    """The tokens pooled at a point (inputs.batch x inputs.length) and the width d_model."""
    cfg = res.meta["config"]
    return cfg["inputs"]["batch"] * cfg["inputs"]["length"], cfg["block"]["d_model"]


def sizes(res) -> str:
    """'n = 8192 tokens (16 x 512), d = 768' for a sweep."""
    cfg = res.meta["config"]
    n, d = n_d(res)
    return f"n = {n} tokens ({cfg['inputs']['batch']} x {cfg['inputs']['length']}), d = {d}"


def reference(metric: str, n: int, d: int) -> float:
    """The metric's expected value over isotropic Gaussian samples of n tokens in d dimensions
    (finite_sample.isotropic_reference: closed form or Monte Carlo at its fixed seed)."""
    return finite_sample.isotropic_reference(REFERENCED[metric], n, d)


def how(metric: str) -> str:
    m = REFERENCED[metric]
    return "closed form" if m in finite_sample.CLOSED_FORM else "Monte Carlo"


def inverse_pr_ratio(n, p):
    """r(m, p) = ((m + 1) / p + 1) / (m + 2 / p), m = n - 1: E[tr C^2] / E[(tr C)^2] for n
    i.i.d. Gaussian tokens of population participation ratio p (module docstring)."""
    m = np.asarray(n, np.float64) - 1.0
    p = np.asarray(p, np.float64)
    return ((m + 1.0) / p + 1.0) / (m + 2.0 / p)


def population_pr(pr, n):
    """The population participation ratio p with 1 / r(n - 1, p) = pr: (m + 1 - 2 r) / (r m - 1),
    r = 1 / pr."""
    m = np.asarray(n, np.float64) - 1.0
    r = 1.0 / np.asarray(pr, np.float64)
    return (m + 1.0 - 2.0 * r) / (r * m - 1.0)


def carried_pr(pr, n_from: int, n_to: int):
    """The participation ratio that the population read off `pr` (measured at n_from tokens)
    shows at n_to tokens, if the tokens were i.i.d. Gaussian: 1 / r(n_to - 1, p)."""
    return 1.0 / inverse_pr_ratio(n_to, population_pr(pr, n_from))


def _change(a, b) -> tuple[float, float, float]:
    """Seed means of a and of b - a, and the 95% half-width of b - a."""
    lo, hi = (float(v) for v in seed_ci(b - a, -1))
    return float(np.mean(a)), float(np.mean(b - a)), (hi - lo) / 2


def _mean_half(x) -> str:
    lo, hi = (float(v) for v in seed_ci(x, -1))
    return f"{float(np.mean(x)):.1f} ± {(hi - lo) / 2:.1f}"


def differences(a, b) -> list[str]:
    """The block and inputs fields in which two sweeps' configs differ ('inputs.batch'); a field
    one of them leaves out reads as None."""
    out = []
    for part in ("block", "inputs"):
        x, y = a.meta["config"][part], b.meta["config"][part]
        out += [f"{part}.{k}" for k in sorted({*x, *y}) if x.get(k) != y.get(k)]
    return out


def two_sizes(big, i_big: int, small, i_small: int, effect, drifts=()) -> list[str]:
    """One block's sharpening (first minus last lambda, paired by seed) read at two sweeps' own
    n: each participation ratio against its isotropic reference, the declared rule's material
    size and verdict at each n, the top direction's share, the population participation ratio
    read off each sample (population_pr, seed by seed), and the change a pure sample-size effect
    would carry from the larger n to the smaller (carried_pr). `effect` is
    gallery_geometry.effect (the declared rule); `drifts`, (N, index in big, index in small)
    triples, adds the population read off both samples at each."""
    (n1, d), (n2, _) = n_d(big), n_d(small)
    pr, top = "out_participation_ratio", "out_pc1_share"
    cols = []
    for res, i, n in ((big, i_big, n1), (small, i_small, n2)):
        a, b = res[pr][i, 0], res[pr][i, -1]
        at1, dm, half = _change(a, b)
        e, t, ref = effect(res, pr, i), effect(res, top, i), reference(pr, n, d)
        cols.append(
            (
                f"{ref:.2f}",
                f"{at1:.2f} ({at1 / ref:.3f})",
                f"{dm:+.2f} ± {half:.2f} ({dm / at1:+.2%}; {dm / ref:+.2%})",
                f"{0.01 * abs(at1):.2f}: {e['verdict']}",
                f"{t['rel']:+.1%} ({t['verdict']})",
                f"{_mean_half(population_pr(a, n))} -> {_mean_half(population_pr(b, n))} "
                f"(change {_mean_half(population_pr(b, n) - population_pr(a, n))})",
            )
        )
    ca = carried_pr(big[pr][i_big, 0], n1, n2)
    cb = carried_pr(big[pr][i_big, -1], n1, n2)
    c1, cm, chalf = _change(ca, cb)
    rows = (
        f"isotropic reference PR_iso(n, {d})",
        "participation ratio at lambda 1 (over PR_iso)",
        "sharpening's change (of the lambda-1 value; of PR_iso)",
        "the rule's material size, 1% of the lambda-1 value, and its verdict",
        "top direction's share: change (verdict)",
        "population participation ratio read off the sample as i.i.d. Gaussian tokens (Wishart's "
        "moments), lambda 1 -> 1000",
    )
    diff = differences(big, small)
    lines = [
        f"| {big.n_seeds} seeds each, d = {d} | the answer above: n = {n1} "
        f"({big.meta['config']['inputs']['batch']} x {big.meta['config']['inputs']['length']}) "
        f'| "The referee\'s questions, by geometry": n = {n2} '
        f"({small.meta['config']['inputs']['batch']} x "
        f"{small.meta['config']['inputs']['length']}) |",
        "|---|---|---|",
    ]
    lines += [f"| {r} | {x} | {y} |" for r, x, y in zip(rows, *cols)]
    lines += [
        f"| a pure sample-size effect: the n = {n1} sample carried to n = {n2} as i.i.d. "
        f"Gaussian tokens, at lambda 1; sharpening's change | (the source) | {c1:.2f}; "
        f"{cm:+.2f} ± {chalf:.2f} ({cm / c1:+.2%}) |",
        "",
        f"The two sweeps' block and inputs differ in {', '.join(diff) or 'nothing'} (the seed "
        f"stream is the same, {big.meta['config']['sweep']['base_seed']}). The rule's material "
        "size is 1% of the measure's own lambda-1 value, and that value moves with n: an "
        f"isotropic sample's falls from {reference(pr, n1, d):.2f} to "
        f"{reference(pr, n2, d):.2f}. The population participation ratio read off each "
        f"sample, lambda 1 -> {big.axes['lambda'][-1]:g} (n = {n1} | n = {n2}): "
        + "; ".join(
            f"N {nn:g} "
            + " | ".join(
                f"{np.mean(population_pr(r[pr][j, 0], n)):.1f} -> "
                f"{np.mean(population_pr(r[pr][j, -1], n)):.1f}"
                for r, j, n in ((big, jb, n1), (small, js, n2))
            )
            for nn, jb, js in drifts
        )
        + ".",
    ]
    return lines


def reference_table(data: dict, variants, regimes, index, rows) -> list[str]:
    """Each referenced covariance measure over its isotropic reference at the sweeps' n and d,
    at the first and the last lambda (seed means), per variant and drift; `index(res, N)` is
    the drift's index, `rows` gallery_geometry.ROWS (the measures' words)."""
    first = data[variants[0][0]]
    n, d = n_d(first)
    assert all(n_d(data[v]) == (n, d) for v, _ in variants)
    lam = first.axes["lambda"]
    what = {m: w for m, w, _ in rows}
    lines = [
        f"**Against the isotropic reference**, at {sizes(first)}: each covariance measure over "
        "its expected value for isotropic Gaussian samples of the same n and d "
        "(simlab.core.finite_sample: the closed form, or the Monte Carlo mean of "
        f"{finite_sample.REFERENCE_DRAWS} draws at seed {finite_sample.REFERENCE_SEED}), seed "
        f"means at lambda {lam[0]:g} -> {lam[-1]:g} (1 reads as an isotropic sample of this "
        "size; at one n the division changes no relative change and no verdict above):",
        "",
        "| measure | reference | "
        + " | ".join(f"{lab.split(' (')[0]}, N = {nn:g}" for _, lab in variants for _, nn in
                     regimes)
        + " |",
        "|---|---|" + "---|" * (len(variants) * len(regimes)),
    ]  # fmt: skip
    for m in REFERENCED:
        ref = reference(m, n, d)
        cells = []
        for v, _ in variants:
            res = data[v]
            for _, nn in regimes:
                i = index(res, nn)
                cells.append(
                    f"{float(np.mean(res[m][i, 0])) / ref:.3f} -> "
                    f"{float(np.mean(res[m][i, -1])) / ref:.3f}"
                )
        lines.append(f"| {what[m]} (`{m}`) | {ref:.6g} ({how(m)}) | " + " | ".join(cells) + " |")
    lines += [
        "",
        "The partition isotropies (" + ", ".join(f"`{m}`" for m in SCALED) + ") are not "
        "scale-free: their isotropic reference reads the points' scale as well as n and d "
        '(docs/metrics.md, "Sample size"), so they are read at this n only.',
    ]
    return lines
