"""Confidence intervals of seed means (simlab.engine.results.seed_ci, Results.ci): the Student-t
interval against its formula and scipy, its coverage on simulated replicas, the bootstrap's
fixed seed, pairing by seed, and the edge cases."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
from scipy import stats

from simlab.engine.results import Results, seed_ci


def test_t_interval_formula_and_scipy():
    """mean -+ t_{0.975, n-1} s / sqrt(n) (ddof 1): for (1, 2, 3) that is 2 -+ 4.3027 / sqrt(3);
    and the interval scipy.stats.t.interval gives, at other levels and along another axis."""
    lo, hi = seed_ci(np.array([1.0, 2.0, 3.0]), 0)
    np.testing.assert_allclose(
        [lo, hi], [2 - 4.302652729911275 / 3**0.5, 2 + 4.302652729911275 / 3**0.5]
    )
    x = np.random.default_rng(0).standard_normal((4, 7, 5))  # seeds on axis 1
    for level in (0.5, 0.9, 0.99):
        lo, hi = seed_ci(x, 1, level)
        assert lo.shape == (4, 5)
        m, se = x.mean(1), stats.sem(x, axis=1)
        want = stats.t.interval(level, 6, loc=m, scale=se)
        np.testing.assert_allclose(lo, want[0], rtol=1e-12)
        np.testing.assert_allclose(hi, want[1], rtol=1e-12)


@pytest.mark.parametrize("n", [3, 5, 20])
def test_t_interval_covers_the_mean_at_its_level(n):
    """20,000 simulated experiments of n normal seeds: the 95% interval contains the true mean
    in 95% of them (binomial standard error 0.0015: tolerance 0.006)."""
    x = 0.3 + 2.0 * np.random.default_rng(n).standard_normal((20_000, n))
    lo, hi = seed_ci(x, 1, 0.95)
    assert abs(np.mean((lo <= 0.3) & (0.3 <= hi)) - 0.95) < 0.006


def test_bootstrap_is_fixed_and_close_to_t_with_many_seeds():
    """The percentile bootstrap uses a fixed RNG seed (the same interval twice); with 40 normal
    seeds it is within 10% of the t interval's width; with few seeds it is narrower."""
    x = np.random.default_rng(1).standard_normal((6, 40))
    a = seed_ci(x, 1, method="bootstrap")
    b = seed_ci(x, 1, method="bootstrap")
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    t = seed_ci(x, 1)
    np.testing.assert_allclose(a[1] - a[0], t[1] - t[0], rtol=0.1)
    assert np.all((a[0] < x.mean(1)) & (x.mean(1) < a[1]))
    few = x[:, :3]
    bt, tt = seed_ci(few, 1, method="bootstrap"), seed_ci(few, 1)
    assert np.all(bt[1] - bt[0] < tt[1] - tt[0])
    other = seed_ci(x, 1, method="bootstrap", rng_seed=7)
    assert not np.array_equal(other[0], a[0])


def test_edge_cases():
    """One seed: NaN bounds (no interval); a constant metric: a zero-width interval; a bad
    method or level: a ValueError naming it."""
    lo, hi = seed_ci(np.ones((3, 1)), 1)
    assert np.all(np.isnan(lo)) and np.all(np.isnan(hi))
    lo, hi = seed_ci(np.full((2, 4), 0.25), 1)
    np.testing.assert_array_equal(lo, 0.25)
    np.testing.assert_array_equal(hi, 0.25)
    with pytest.raises(ValueError, match="method 'z'"):
        seed_ci(np.ones(3), 0, method="z")
    with pytest.raises(ValueError, match="level 1.5"):
        seed_ci(np.ones(3), 0, level=1.5)


def _results():
    """Two axes (3 x 2), 6 seeds, a layer axis on one metric; metrics a and b = a + 0.1 share
    a large per-seed offset (what common random numbers give: the same weights and tokens)."""
    r = np.random.default_rng(2)
    a = 0.1 * r.standard_normal((3, 2, 6)) + 5.0 * r.standard_normal(6)
    axes = OrderedDict(x=np.arange(3.0), y=np.arange(2.0))
    metrics = {"a": a, "b": a + 0.1, "l": r.standard_normal((3, 2, 6, 4))}
    return Results(axes, metrics, {})


def test_results_ci_metric_or_array_paired_by_seed():
    """Results.ci takes a metric's name or any array with the seeds at seed_axis: the
    difference b - a is paired by seed, so its interval is the exact 0.1 (the seeds' common
    offset cancels) while the unpaired intervals are wide; a layer axis stays; ci_half_width
    is half of it."""
    res = _results()
    lo, hi = res.ci("a")
    assert lo.shape == (3, 2)
    np.testing.assert_allclose(np.stack(res.ci("a")), np.stack(seed_ci(res["a"], 2)))
    dlo, dhi = res.ci(res["b"] - res["a"])
    np.testing.assert_allclose(dlo, 0.1, atol=1e-12)
    np.testing.assert_allclose(dhi, 0.1, atol=1e-12)  # b - a: 0.1 in every seed
    blo, bhi = res.ci("b")
    assert np.all(bhi - blo > 1.0)
    assert res.ci("l")[0].shape == (3, 2, 4)
    np.testing.assert_allclose(res.ci_half_width("a"), (hi - lo) / 2)
    lo_b, _ = res.ci("a", method="bootstrap")
    assert lo_b.shape == (3, 2)


def test_info_lines_give_half_widths_and_covariates():
    """simlab info's interval lines: per metric the median and largest half-width over the
    grid; per covariate its seed mean +- half-width, per layer (first two and last of a deep
    stack) or as one number; one seed: no interval."""
    from simlab.engine.info import intervals

    res = _results()
    res.covariates = {"c": np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), "d": np.ones((6, 8))}
    res.meta["covariates"] = {"c": ["seed"], "d": ["seed", "layer"]}
    lines = intervals(res)
    h = res.ci_half_width("a")
    assert lines[0].strip().startswith("95% CI of the seed mean (Student t, 6 seeds)")
    assert f"    a: {np.median(h):.3g} / {h.max():.3g}" in lines
    half = stats.t.ppf(0.975, 5) * np.std(np.arange(1.0, 7.0), ddof=1) / 6**0.5
    assert f"  covariate c (seed mean \u00b1 95% CI): 3.5 \u00b1 {half:.2g}" in lines
    assert "layer 0 1 \u00b1 0, layer 1 1 \u00b1 0, layer 7 1 \u00b1 0" in lines[-1]
    one = Results(res.axes, {"a": res["a"][..., :1]}, {})
    assert "need 2 seeds" in intervals(one)[0]


def test_dims_are_the_labs_names_or_generic():
    """A metric's dims after "seed": the names the lab declares (records.metric_dims, stored
    in meta.json), else dim0, dim1, ...; Results.select fixes any of them by name."""
    from simlab.engine import records

    class Named:
        def metric_dims(self):
            return {"l": ["layer"], "a": [], "b": ["too", "many"]}

    res = _results()
    axes, m = res.axes, res.metrics
    assert records.metric_dims(axes, m, Named()) == {
        "a": ["x", "y", "seed"],
        "b": ["x", "y", "seed"],
        "l": ["x", "y", "seed", "layer"],
    }
    assert records.metric_dims(axes, m)["l"] == ["x", "y", "seed", "dim0"]
    assert res.dims("l") == ["x", "y", "seed", "dim0"] and res.metric_dims("a") == []
    named = Results(axes, m, {"dims": records.metric_dims(axes, m, Named())})
    assert named.metric_dims("l") == ["layer"]
    np.testing.assert_array_equal(named.select("l", layer=-1, y=1.0), m["l"][:, 1, :, 3])
    with pytest.raises(KeyError, match="not dimensions of 'l'"):
        named.select("l", head=0)
