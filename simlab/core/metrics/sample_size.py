"""Covariance measures at a stated sample size (docs/metrics.md, "Sample size" and "Renamed").

A covariance measure of n = B*T tokens in D dimensions depends on n as well as on the geometry:
an isotropic Gaussian sample's participation ratio is about n D / (n + D), not D. These
measures put each against its isotropic reference at the same n and D
(simlab.core.finite_sample), and name the effective rank of the covariance's eigenvalues for
what it is (`cov_effective_rank`; `effective_rank` is Roy & Vetterli's, of the singular values).

  cov_effective_rank:      exp(H(lambda / sum lambda)), lambda the eigenvalues of C;
  participation_ratio_rel: PR / ((m D + 2) / (m + D + 1)), m = n - 1: the closed-form
                           harmonic mean of PR over isotropic samples (E[1/PR] exact);
  effective_rank_rel:      effective_rank over its isotropic Monte Carlo mean (fixed seed);
  isoscore_star_identity:  IsoScore* (Rudman & Eickhoff 2023) of the n - 1 covariance
                           (torch.cov, as the authors' code) towards I: not scale-free.
Tests: tests/core/test_geometry.py, tests/core/test_finite_sample.py.
"""

from __future__ import annotations

import math

from simlab.core import finite_sample, geometry
from simlab.core.metrics.builtin import ISOSCORE_STAR_ZETA
from simlab.core.metrics.registry import METRICS, RANK_BOUNDED, Metric
from simlab.core.metrics.shared import Shared
from simlab.registry import BUILTIN


def _n_d(c: Shared, field: str) -> tuple[int, int]:
    """The tokens B*T and the width D of layer.<field> (static shapes)."""
    shape = getattr(c.layer, field).shape
    return math.prod(shape[:-1]), shape[-1]


def _sample_cov(c: Shared, field: str):
    """m2 / (n - 1) = C n / (n - 1): torch.cov's covariance, the authors'."""
    n, _ = _n_d(c, field)
    return c.covariance(field) * (n / max(n - 1, 1))


def _rows(field: str):
    g = geometry
    return (
        (
            "cov_effective_rank",
            lambda c: g.cov_effective_rank(c.spectrum(field)),
            "exp(entropy of C's eigenvalues / their sum): the effective rank of C, not of the "
            "tokens (named effective_rank before issue 50): in [1, rank C]",
            (0.0, math.inf),
        ),
        (
            "participation_ratio_rel",
            lambda c: (
                g.participation_ratio(c.covariance(field))
                / finite_sample.participation_ratio_iso(*_n_d(c, field))
            ),
            "the participation ratio over (m D + 2) / (m + D + 1), m = B*T - 1: its harmonic "
            "mean over isotropic Gaussian samples of the same size (simlab.core.finite_sample)",
            (0.0, math.inf),
        ),
        (
            "effective_rank_rel",
            lambda c: (
                g.effective_rank(c.spectrum(field))
                / finite_sample.isotropic_reference("effective_rank", *_n_d(c, field))
            ),
            "the effective rank over its mean over isotropic Gaussian samples of the same B*T "
            "and D (simlab.core.finite_sample, Monte Carlo at a fixed seed)",
            (0.0, math.inf),
        ),
        (
            "isoscore_star_identity",
            lambda c: g.isoscore_star(_sample_cov(c, field), ISOSCORE_STAR_ZETA),
            f"IsoScore* (Rudman & Eickhoff 2023), zeta {ISOSCORE_STAR_ZETA}, of the n - 1 "
            "covariance (torch.cov) towards I, as the authors' code: not scale-free",
            (0.0, 1.0),
        ),
    )


for _tag, _field, _what in (("input", "x", "the layer input"), ("out", "y", "the block output")):
    for _name, _fn, _doc, _bounds in _rows(_field):
        RANK_BOUNDED.add(f"{_tag}_{_name}")
        METRICS.register(
            Metric(f"{_tag}_{_name}", _fn, (_field,), f"{_doc} ({_what})", _bounds, False),
            source=BUILTIN,
        )
