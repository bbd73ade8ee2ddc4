"""experiments/gallery_sample_size.py: the covariance measures of docs/gallery.md's geometry
sections at their n and d. The new math against independent numpy: Wishart's moment ratio
against Gaussian samples drawn by numpy (a non-isotropic covariance), the population read off a
sample against a bisection root of the same equation, and the printed numbers (each measure over
its isotropic reference, the block at two sample sizes) recomputed from the committed arrays."""

import re
from pathlib import Path

import numpy as np
import pytest

import simlab

from conftest import doc_block, experiment_script

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "figures" / "data"


@pytest.fixture(scope="module")
def ss():
    return experiment_script("gallery_sample_size")


def _np_pr_iso(n, d):
    """(m d + 2) / (m + d + 1), m = n - 1 (docs/metrics.md, "Sample size"), in float64."""
    m = np.float64(n - 1)
    return (m * d + 2.0) / (m + d + 1.0)


def test_moment_ratio_is_wisharts_against_numpy_samples(ss):
    """E[tr C^2] / E[(tr C)^2] of n i.i.d. Gaussian tokens of a non-isotropic covariance (numpy
    draws, centred as simlab centres) is r(n - 1, p); the mean of the ratio, 1 / PR, is within
    the first-order gap of it; at p = d it is finite_sample's exact E[1 / PR]."""
    from simlab.core import finite_sample

    rng = np.random.default_rng(7)
    for n, d in ((60, 40), (200, 50), (20, 30)):
        lam = 0.9 ** np.arange(d)
        p = lam.sum() ** 2 / np.sum(lam**2)
        tr2, trsq, inv = [], [], []
        for _ in range(3000):
            x = rng.standard_normal((n, d)) * np.sqrt(lam)
            x -= x.mean(0)
            c = x.T @ x / n
            tr2.append(np.trace(c @ c))
            trsq.append(np.trace(c) ** 2)
            inv.append(tr2[-1] / trsq[-1])
        want = float(ss.inverse_pr_ratio(n, p))
        a, b = np.array(tr2), np.array(trsq)
        got = a.mean() / b.mean()
        # the ratio of means' Monte Carlo error (delta method, with their covariance): 6e-5
        # relative to 2e-4; r with m in place of m + 1, or 1/p + 1/m, misses by 8 to 20 of it
        cv = np.cov(a, b) / len(a)
        err = got * np.sqrt(
            cv[0, 0] / a.mean() ** 2
            + cv[1, 1] / b.mean() ** 2
            - 2 * cv[0, 1] / (a.mean() * b.mean())
        )
        assert abs(got - want) < 4 * err, (n, d, got, want, err)
        # the mean of the ratio, E[1 / PR]: to first order only, a gap of O(1 / (m p))
        assert abs(np.mean(inv) - want) / want < 3.0 / ((n - 1) * p)
        assert ss.inverse_pr_ratio(n, d) == pytest.approx(finite_sample.inverse_pr_mean(n, d))


def _bisect(f, lo, hi):
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(lo) * f(mid) > 0 else (lo, mid)
    return 0.5 * (lo + hi)


@pytest.mark.parametrize("n, pr", [(8192, 581.85), (2048, 479.97), (2048, 20.0), (300, 140.0)])
def test_population_is_the_root_of_the_moment_equation(ss, n, pr):
    """population_pr solves 1 / r(n - 1, p) = pr: against a bisection of that equation written
    out here; carrying to the same n returns pr; carrying changes PR as the equation says."""
    m = n - 1.0
    f = lambda p: ((m + 1.0) / p + 1.0) / (m + 2.0 / p) - 1.0 / pr  # noqa: E731
    p = _bisect(f, pr * (1 + 1e-12), 1e7)
    assert float(ss.population_pr(pr, n)) == pytest.approx(p, rel=1e-9)
    assert float(ss.carried_pr(pr, n, n)) == pytest.approx(pr, rel=1e-12)
    m2 = 1023.0
    want = (m2 + 2.0 / p) / ((m2 + 1.0) / p + 1.0)
    assert float(ss.carried_pr(pr, n, 1024)) == pytest.approx(want, rel=1e-9)


def _cells(block: str, row_start: str) -> list[str]:
    line = next(x for x in block.splitlines() if x.startswith(row_start))
    return [c.strip() for c in line.strip("|").split("|")]


def test_printed_references_recompute():
    """The answer's 'Against the isotropic reference' row of the participation ratio and IsoScore
    (closed forms, written out here in numpy) and the referee's 'of iso' cells of the BERT block
    are the committed seed means over the reference at each sweep's own n = batch x length."""
    text = (ROOT / "docs" / "gallery.md").read_text()
    geo, ref = doc_block(text, "geometry"), doc_block(text, "referee-geometry")
    n, d = 16 * 512, 768
    uni, zipf = (simlab.load(DATA / "answer_geometry" / v) for v in ("uniform", "zipf"))
    for metric, iso in (
        ("out_participation_ratio", _np_pr_iso(n, d)),
        ("out_isoscore", (_np_pr_iso(n, d) - 1.0) / (d - 1.0)),
    ):
        cells = next(
            [c.strip() for c in x.strip("|").split("|")]
            for x in geo.splitlines()
            if f"(`{metric}`) | " in x and "closed form" in x
        )
        assert float(cells[1].split()[0]) == pytest.approx(iso, rel=1e-5)
        want = [
            f"{np.mean(r[metric][i, 0], dtype=np.float64) / iso:.3f} -> "
            f"{np.mean(r[metric][i, -1], dtype=np.float64) / iso:.3f}"
            for r in (uni, zipf)
            for i in range(3)
        ]
        assert cells[2:] == want, metric
    bert = simlab.load(DATA / "referee_geometry" / "bert")
    iso2048 = _np_pr_iso(4 * 512, d)
    row = _cells(ref, "| BERT (post-LN) | 0.55 |")
    pr = bert["out_participation_ratio"][1].astype(np.float64).mean(-1)
    assert row[5].endswith(f"; {pr[0] / iso2048:.3f} -> {pr[1] / iso2048:.3f} of iso)")


def test_two_sample_sizes_recompute():
    """The 'One block at two sample sizes' table: each number recomputed from the committed
    per-seed participation ratios with numpy (PR_iso, the share of the lambda-1 value and of
    PR_iso, the population by bisection of the moment equation, the change carried to n = 2048
    seed by seed, its 95% Student-t half-width)."""
    from scipy import stats

    text = (ROOT / "docs" / "gallery.md").read_text()
    geo = doc_block(text, "geometry")
    big = simlab.load(DATA / "answer_geometry" / "uniform")["out_participation_ratio"][1]
    small = simlab.load(DATA / "referee_geometry" / "bert")["out_participation_ratio"][1]
    big, small = big[[0, -1]].astype(np.float64), small.astype(np.float64)

    def pop(pr, n):
        m = n - 1.0
        f = lambda p: ((m + 1.0) / p + 1.0) / (m + 2.0 / p) - 1.0 / pr  # noqa: E731
        return _bisect(f, pr * (1 + 1e-12), 1e7)

    def half(x):
        return stats.t.ppf(0.975, len(x) - 1) * np.std(x, ddof=1) / np.sqrt(len(x))

    row = _cells(geo, "| sharpening's change")
    for cell, pr, n in ((row[1], big, 8192), (row[2], small, 2048)):
        dm, iso = pr[1] - pr[0], _np_pr_iso(n, 768)
        want = (
            f"{dm.mean():+.2f} ± {half(dm):.2f} ({dm.mean() / pr[0].mean():+.2%}; "
            f"{dm.mean() / iso:+.2%})"
        )
        assert cell == want
    row = _cells(geo, "| population participation ratio")
    for cell, pr, n in ((row[1], big, 8192), (row[2], small, 2048)):
        p = np.array([[pop(x, n) for x in seeds] for seeds in pr])
        assert cell.startswith(f"{p[0].mean():.1f} ± {half(p[0]):.1f} -> {p[1].mean():.1f}")
    p = np.array([[pop(x, 8192) for x in seeds] for seeds in big])
    m2 = 2047.0
    carried = (m2 + 2.0 / p) / ((m2 + 1.0) / p + 1.0)
    dc = carried[1] - carried[0]
    row = _cells(geo, "| a pure sample-size effect")
    assert row[2] == (
        f"{carried[0].mean():.2f}; {dc.mean():+.2f} ± {half(dc):.2f} "
        f"({dc.mean() / carried[0].mean():+.2%})"
    )
    assert re.search(r"differ in inputs\.batch \(", geo)


def test_subset_participation_ratio_is_numpys():
    """experiments/gallery_sequences.py's measure of a (B, T, D) subset against numpy float64
    (centred covariance, (tr C)^2 / tr C^2 from its eigenvalues), and its subsets are the
    first sequences whole and the first positions of every sequence, n = B T / 4 each."""
    seq = experiment_script("gallery_sequences")
    y = np.random.default_rng(3).standard_normal((8, 16, 12)).astype(np.float32)
    y[:, :, 0] *= 5.0  # one direction of larger spread
    for _, _, b, t in seq.subsets(8, 16):
        x = y[:b, :t].reshape(-1, 12).astype(np.float64)
        lam = np.linalg.eigvalsh(np.cov(x.T, bias=True))
        want = lam.sum() ** 2 / np.sum(lam**2)
        assert float(seq.participation_ratio(y[:b, :t])) == pytest.approx(want, rel=1e-5)
    assert [(b, t) for *_, b, t in seq.subsets(16, 512)] == [(16, 512), (4, 512), (16, 128)]


@pytest.mark.slow
def test_sequence_subsets_run_on_the_committed_samples():
    """At the quick sizes, the all-token participation ratio of gallery_sequences' in-memory
    sweep is the committed quick sweep's, seed by seed (the same samples), and that of its
    first 4 sequences the committed quick referee_geometry BERT block's (the same tokens)."""
    seq = experiment_script("gallery_sequences")
    try:
        out = seq.main(2, quick=True)
    finally:
        seq.unregister()  # the diagnostic metrics stay out of the other tests' registry
    from simlab.core.metrics import METRICS

    assert "out_pr_first_positions" not in METRICS
    dev = float(out.split("committed sweep's to ")[1].split(" relative")[0])
    assert dev < 1e-6
    # the referee's BERT block is the answer's first 4 sequences (common random numbers)
    dev = float(out.split("geometry.toml) to ")[1].split(",")[0])
    assert dev < 1e-5
    assert "| every sequence, the first positions (16 x 16) | 256 | 16 |" in out
