"""simlab.core.geometry against float64 numpy oracles written from the papers' definitions
(IsoScore's Algorithm 1 step by step, Mu & Viswanath's Z(c) as explicit sums of exponentials,
the covariance by numpy), closed forms (data spread equally over k of d directions; the mean
pairwise cosine of unit vectors from their mean), and exact invariants (streamed moments equal
one batch bit for bit; within + between = the variance). Each in float32 and under x64 on the
same sample: float32 within a few hundred ulp of the oracle (1e-5 relative), float64 within
1e-10.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from simlab.core import geometry as g
from simlab.core import metrics

F32, F64 = 2e-5, 1e-10


def rng(seed=0):
    return np.random.default_rng(seed)


def cloud(seed=0, shape=(3, 10, 6), drift=0.0, aniso=True):
    """Tokens with an uneven spectrum (and a common drift)."""
    x = rng(seed).standard_normal(shape)
    if aniso:
        x = x * np.linspace(2.0, 0.2, shape[-1])
    return x + drift * np.linspace(1.0, -1.0, shape[-1])


# ------------------------------------------------------------------------------ numpy oracles
def np_cov(x_ND):
    return np.cov(x_ND.T, bias=True)


def np_isoscore_algorithm(x_ND):
    """Rudman et al. 2022, Algorithm 1, literally: PCA-reorient (centre, rotate onto the
    principal axes), the variance vector of the rotated points (np.cov's diagonal, ddof 1 as
    the authors' code), normalise to norm sqrt(d), the isotropy defect, k(X), phi(X), iota."""
    c = x_ND - x_ND.mean(0)
    _, _, vt = np.linalg.svd(c, full_matrices=False)
    pca = c @ vt.T
    d = x_ND.shape[1]
    var = np.zeros(d)
    var[: pca.shape[1]] = np.diag(np.atleast_2d(np.cov(pca.T)))
    var_hat = np.sqrt(d) * var / np.linalg.norm(var)
    delta = np.linalg.norm(var_hat - 1) / np.sqrt(2 * (d - np.sqrt(d)))
    k = (d - delta**2 * (d - np.sqrt(d))) ** 2 / d  # the number of dimensions used
    phi = k / d  # their fraction
    return (d * phi - 1) / (d - 1)


def np_isoscore_star(c, zeta, c0):
    """Rudman & Eickhoff 2023's steps on the singular values of the shrunk covariance."""
    s = np.linalg.svd((1 - zeta) * c + zeta * c0, compute_uv=False)
    d = c.shape[0]
    s_hat = s * np.sqrt(d) / np.linalg.norm(s)
    delta = np.linalg.norm(s_hat - 1) / np.sqrt(2 * (d - np.sqrt(d)))
    return ((d - delta**2 * (d - np.sqrt(d))) ** 2 - d) / (d * (d - 1))


def np_partition(x_ND, centred):
    """min_c Z(c) / max_c Z(c), Z(c) = sum_i exp(c . x_i), c = +- each eigenvector of X^T X."""
    x = x_ND - x_ND.mean(0) if centred else x_ND
    _, vecs = np.linalg.eigh(x.T @ x)
    z = [np.sum(np.exp(x @ (s * vecs[:, j]))) for j in range(x.shape[1]) for s in (1, -1)]
    return min(z) / max(z)


def np_spectrum(x_ND):
    return np.sort(np.linalg.eigvalsh(np_cov(x_ND)))[::-1].clip(0)


def np_entropy_rank(w):
    p = w / w.sum()
    p = p[p > 0]
    return float(np.exp(-np.sum(p * np.log(p))))


def np_effective_rank(x_ND):
    """Roy & Vetterli 2007 on the singular values of the centred data (numpy's SVD)."""
    return np_entropy_rank(np.linalg.svd(x_ND - x_ND.mean(0), compute_uv=False))


def np_cov_effective_rank(lam):
    """The same on the covariance's eigenvalues (simlab's effective_rank before issue 50)."""
    return np_entropy_rank(lam)


def np_rank_one_residual(x_BTD):
    r = [np.linalg.norm(x - x.mean(0)) / np.linalg.norm(x) for x in x_BTD]
    return float(np.mean(r))


def both_precisions(fn, *arrays):
    """fn on the arrays in float32, and under x64 on the same (float64) sample."""
    f32 = float(jax.jit(fn)(*(jnp.asarray(a, jnp.float32) for a in arrays)))
    with jax.enable_x64(True):
        f64 = float(jax.jit(fn)(*(jnp.asarray(a, jnp.float64) for a in arrays)))
    return f32, f64


def check(fn, want, *arrays):
    f32, f64 = both_precisions(fn, *arrays)
    np.testing.assert_allclose(f32, want, rtol=F32, atol=F32)
    np.testing.assert_allclose(f64, want, rtol=F64, atol=F64)


# ------------------------------------------------------------------------------ moments
def test_streamed_moments_equal_one_batch_bit_for_bit_and_numpy():
    x = cloud(1, (6, 9, 5), drift=4.0).astype(np.float32)
    step = jax.jit(g.moments)
    whole = step(jnp.asarray(x))
    for cut in (1, 2, 5):
        part = step(jnp.asarray(x[cut:]), step(jnp.asarray(x[:cut])))
        for a, b in zip(whole, part):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    x64 = x.astype(np.float64).reshape(-1, 5)
    np.testing.assert_allclose(np.asarray(g.covariance(whole)), np_cov(x64), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(whole.mean), x64.mean(0), rtol=1e-6, atol=1e-6)
    assert float(whole.n) == 54


def test_moments_keep_float32_accuracy_under_a_large_drift():
    """The pairwise update centres each sequence first: a drift 1e3 times the spread costs no
    digits of the covariance (a one-pass E[x x^T] - xbar xbar^T would lose ~6 of 7)."""
    x = cloud(2, (4, 16, 6), aniso=True)
    x_big = (x + 1e3 * np.ones(6)).astype(np.float32)
    got = np.asarray(g.covariance(jax.jit(g.moments)(jnp.asarray(x_big))))
    want = np_cov(x_big.astype(np.float64).reshape(-1, 6))
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())


# ------------------------------------------------------------------------------ spectrum
@pytest.mark.parametrize("seed,shape", [(3, (2, 12, 7)), (4, (3, 4, 9)), (5, (1, 30, 4))])
def test_spectral_measures_vs_numpy(seed, shape):
    """PR, effective rank, top-k shares and IsoScore against numpy's eigenvalues and the
    IsoScore algorithm run step by step (also n - 1 < d: a rank-deficient covariance)."""
    x = cloud(seed, shape, drift=1.5)
    flat = x.reshape(-1, shape[-1])
    lam = np_spectrum(flat)

    def cov(x_BTD):
        return g.covariance(g.moments(x_BTD))

    check(lambda a: g.participation_ratio(cov(a)), lam.sum() ** 2 / np.sum(lam**2), x)
    check(lambda a: g.effective_rank(g.spectrum(cov(a))), np_effective_rank(flat), x)
    check(lambda a: g.cov_effective_rank(g.spectrum(cov(a))), np_cov_effective_rank(lam), x)
    for k in (1, 3, 10):
        check(lambda a, k=k: g.top_share(g.spectrum(cov(a)), k), lam[:k].sum() / lam.sum(), x)
    check(lambda a: g.isoscore_of(cov(a)), np_isoscore_algorithm(flat), x)


def test_isoscore_is_the_participation_ratio_rescaled():
    """k(X) = PR exactly, so IsoScore = (PR - 1)/(d - 1): the algorithm and the identity agree
    on clouds from one direction to isotropic."""
    for seed, spread in enumerate((np.r_[1.0, 0, 0, 0, 0], np.r_[3, 2, 1, 0.5, 0.1], np.ones(5))):
        x = rng(seed).standard_normal((400, 5)) * spread
        lam = np_spectrum(x)
        pr = lam.sum() ** 2 / np.sum(lam**2)
        np.testing.assert_allclose(np_isoscore_algorithm(x), (pr - 1) / 4, atol=1e-12)


@pytest.mark.parametrize("k,d", [(1, 6), (3, 6), (6, 6), (4, 9)])
def test_equal_spread_over_k_of_d_directions(k, d):
    """Tokens +-e_j for j < k (equal counts): C = (1/k) on k directions, so PR = effective rank
    = k, IsoScore = (k - 1)/(d - 1), the top-k share 1, the top share 1/k; the centred
    partition isotropy is 1 only when k = d (Z(e_j) = Z(-e_j) = 2 cosh 1 + 2 (k - 1) for
    j < k, 2 k for j >= k)."""
    eye = np.eye(d)[:k]
    x = np.concatenate([eye, -eye])[None]
    cov = np.zeros((d, d))
    cov[range(k), range(k)] = 1.0 / k

    def c(a):
        return g.covariance(g.moments(a))

    check(lambda a: g.participation_ratio(c(a)), float(k), x)
    check(lambda a: g.effective_rank(g.spectrum(c(a))), float(k), x)
    check(lambda a: g.cov_effective_rank(g.spectrum(c(a))), float(k), x)
    check(lambda a: g.isoscore_of(c(a)), (k - 1) / (d - 1), x)
    check(lambda a: g.top_share(g.spectrum(c(a)), k), 1.0, x)
    check(lambda a: g.top_share(g.spectrum(c(a)), 1), 1.0 / k, x)
    z_in, z_out = 2 * np.cosh(1.0) + 2 * (k - 1), 2.0 * k
    want = 1.0 if k == d else z_out / z_in
    check(lambda a: g.partition_isotropy(a[0], True), want, x)
    np.testing.assert_allclose(np_partition(x[0], True), want, rtol=1e-12)


def test_isoscore_star_vs_the_authors_steps_and_zeta_zero_is_isoscore():
    x = cloud(6, (1, 40, 6), drift=0.5)[0]
    c = np_cov(x)
    c0 = np_cov(cloud(7, (1, 400, 6), aniso=False)[0])
    for zeta in (0.0, 0.2, 0.9):
        check(lambda a, b, z=zeta: g.isoscore_star(a, z, b), np_isoscore_star(c, zeta, c0), c, c0)
        eye = np.eye(6)
        check(lambda a, z=zeta: g.isoscore_star(a, z), np_isoscore_star(c, zeta, eye), c)
    check(lambda a: g.isoscore_star(a, 0.0), np_isoscore_algorithm(x), c)


def test_zero_covariance_uses_no_direction_and_nan_stays_nan():
    x = np.ones((2, 5, 4)) * np.r_[1.0, -2.0, 0.5, 3.0]
    c = g.covariance(g.moments(jnp.asarray(x, jnp.float32)))
    lam = g.spectrum(c)
    for v in (g.participation_ratio(c), g.effective_rank(lam), g.cov_effective_rank(lam)):
        assert float(v) == 0.0
    for v in (g.top_share(lam, 1),):
        assert float(v) == 0.0
    assert float(g.isoscore_of(c)) == 0.0
    assert float(g.rank_one_residual(jnp.asarray(x))) == 0.0
    bad = cloud(8, (2, 5, 4)).astype(np.float32)
    bad[1, 2, 3] = np.nan
    c = g.covariance(g.moments(jnp.asarray(bad)))
    for v in (
        g.participation_ratio(c),
        g.isoscore_of(c),
        g.common_share(jnp.asarray(bad.reshape(-1, 4))),
    ):
        assert np.isnan(float(v))
    assert np.isnan(float(g.partition_isotropy(jnp.asarray(bad.reshape(-1, 4)))))
    assert np.isnan(float(g.effective_rank(g.spectrum(c))))
    assert np.isnan(float(g.rank_one_residual(jnp.asarray(bad))))


# ------------------------------------------------------------------------------ partition
@pytest.mark.parametrize("centred", [False, True])
@pytest.mark.parametrize("drift", [0.0, 0.8])
def test_partition_isotropy_vs_explicit_sums(centred, drift):
    x = 0.5 * cloud(9, (1, 50, 5), drift=drift)[0]
    check(lambda a: g.partition_isotropy(a, centred), np_partition(x, centred), x)


def test_partition_isotropy_falls_with_scale_and_does_not_overflow():
    """I is not scale-free (Z(c) = sum exp(c . x)): it falls as the cloud is scaled up, and at
    |x| ~ 1e3 (exp overflows float32 and float64) it is still computed in log space."""
    x = cloud(10, (1, 30, 4))[0]
    vals = [float(g.partition_isotropy(jnp.asarray(s * x, jnp.float32))) for s in (0.1, 1, 3)]
    assert vals[0] > vals[1] > vals[2] > 0
    big = float(jax.jit(g.partition_isotropy)(jnp.asarray(1e3 * x, jnp.float32)))
    assert np.isfinite(big) and 0.0 <= big < 1e-30


# ------------------------------------------------------------------------------ norms
def test_mean_variance_split_and_unit_vector_cosine_identity():
    """mean |x|^2 = |xbar|^2 + variance; for unit vectors the mean pairwise cosine is
    (n |ubar|^2 - 1)/(n - 1), so the common share of unit vectors gives it exactly."""
    x = cloud(11, (1, 25, 6), drift=2.0)[0]
    mean_sq = float(np.sum(x.mean(0) ** 2))
    var = float(np.mean(np.sum((x - x.mean(0)) ** 2, 1)))
    check(lambda a: g.mean_variance(a)[0], mean_sq, x)
    check(lambda a: g.mean_variance(a)[1], var, x)
    np.testing.assert_allclose(mean_sq + var, np.mean(np.sum(x**2, 1)), rtol=1e-12)
    check(g.common_share, mean_sq / (mean_sq + var), x)
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    n = len(u)
    pair = (np.sum(u @ u.T) - n) / (n * (n - 1))
    check(lambda a: (n * g.common_share(a) - 1) / (n - 1), pair, u)
    check(metrics.mean_pairwise_cos, pair, u)


def test_registered_isoscore_star_vs_the_authors_steps_and_its_closed_form():
    """The registered IsoScore* (zeta metrics.ISOSCORE_STAR_ZETA, C0 = (tr C / d) I) equals the
    authors' steps on that shrunk covariance, the closed form 1 / PR* = a / PR + (1 - a) / d
    (a = (1 - zeta)^2), and is scale-free (the identity as C0 would not be)."""
    zeta = metrics.ISOSCORE_STAR_ZETA
    x = cloud(8, (1, 60, 6), drift=1.5)[0]
    c = np_cov(x)
    d = c.shape[0]
    c0 = np.eye(d) * np.trace(c) / d
    want = np_isoscore_star(c, zeta, c0)
    pr = np.trace(c) ** 2 / np.sum(c * c)
    a = (1 - zeta) ** 2
    np.testing.assert_allclose(want, (1 / (a / pr + (1 - a) / d) - 1) / (d - 1), rtol=1e-12)

    def star(a_, s_=1.0):
        return metrics._isoscore_star(a_ * s_, zeta)

    check(star, want, c)
    check(lambda a_: star(a_, 1e4), want, c)  # scale-free
    assert abs(np_isoscore_star(1e4 * c, zeta, np.eye(d)) - want) > 0.05  # the identity is not
    assert abs(want - np_isoscore_algorithm(x)) > 0.01  # the shrinkage moves it
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    assert f"zeta = {zeta:g} (`metrics.ISOSCORE_STAR_ZETA`)" in page  # the docs say the value


def test_type_split_through_layer_metrics_with_sparse_large_ids():
    """input_/out_variance_within_type and _between_type through layer_metrics, ids from a
    large vocabulary (renumbered by a sort, no vocabulary-sized array), against numpy; they
    add up to the variance metric."""
    from simlab.core.block import Layer

    r = rng(21)
    vocab = 30522
    ids = r.choice(vocab, 9, replace=False)[r.integers(0, 9, (3, 8))]
    table = r.standard_normal((vocab, 6)).astype(np.float32)  # only 9 rows are read
    x = table[ids] + 0.3 * r.standard_normal((3, 8, 6))
    y = np.tanh(x) + 0.1 * r.standard_normal((3, 8, 6))
    z = jnp.zeros((3, 2, 8), jnp.float32)
    layer = Layer(
        jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32), jnp.asarray(y, jnp.float32),
        z, z, jnp.zeros((2, 3)), jnp.zeros((2, 3)), None,
    )  # fmt: skip
    names = tuple(
        f"{t}_{m}"
        for t in ("input", "out")
        for m in ("variance_within_type", "variance_between_type", "variance")
    )
    out = jax.jit(metrics.layer_metrics, static_argnums=(0, 1))(
        names, False, layer, jnp.asarray(ids)
    )
    for tag, a in (("input", x), ("out", y)):
        flat, i = np.asarray(a, np.float64).reshape(-1, 6), ids.reshape(-1)
        within = sum(np.sum((flat[i == t] - flat[i == t].mean(0)) ** 2) for t in np.unique(i))
        between = sum(
            (i == t).sum() * np.sum((flat[i == t].mean(0) - flat.mean(0)) ** 2)
            for t in np.unique(i)
        )
        n = flat.shape[0]
        for part, want in (("within", within / n), ("between", between / n)):
            np.testing.assert_allclose(float(out[f"{tag}_variance_{part}_type"]), want, rtol=F32)
        total = float(out[f"{tag}_variance_within_type"] + out[f"{tag}_variance_between_type"])
        np.testing.assert_allclose(total, float(out[f"{tag}_variance"]), rtol=F32)
    assert float(out["input_variance_between_type"]) > 5 * float(
        out["input_variance_within_type"]
    )  # the types carry most of the input's variance: the split can tell


def test_type_split_refused_without_token_ids_and_exact_in_a_lab():
    """A Lab on inputs without token ids refuses the type split, naming the metrics and the
    kinds that have ids. On embedding inputs (vocabulary 10, so types repeat) tokens of one id
    are the same vector before the block: the input's variance is all between types (numpy on
    the Lab's own inputs), within is 0; the block mixes each sequence's context into its tokens
    (and, without positions, only that), so one id in two sequences differs at the output: its
    output has variance within types, and within + between is its variance."""
    from simlab.core.knobs import knob_arrays
    from simlab.core.lab import Lab
    from simlab.core.spec import BlockSpec, InputSpec
    from simlab.errors import ConfigError

    block = BlockSpec(d_model=16, n_heads=4)
    names = tuple(
        f"{t}_{m}"
        for t in ("input", "out")
        for m in ("variance_within_type", "variance_between_type", "variance")
    )
    with pytest.raises(ConfigError, match="split by token type.*'gaussian' has no token ids.*"):
        Lab(block, InputSpec(kind="gaussian", batch=2, length=8), names)
    lab = Lab(block, InputSpec(kind="embedding", batch=6, length=4, vocab=10), names)
    state = lab.seed_state(jax.random.PRNGKey(3))
    knobs = knob_arrays({"drift_norm": 0.4, "attn_gain": 50.0})  # a branch that shows
    out = {k: float(v) for k, v in jax.jit(lab.point)(state, knobs).items()}
    x = np.asarray(lab.inputs_of(state, knobs)[0], np.float64).reshape(-1, 16)
    ids = np.asarray(state["ids"]).reshape(-1)
    assert len(np.unique(ids)) < ids.size
    var = np.mean(np.sum((x - x.mean(0)) ** 2, 1))
    assert abs(out["input_variance_within_type"]) <= 1e-6 * var
    np.testing.assert_allclose(out["input_variance_between_type"], var, rtol=F32)
    assert out["out_variance_within_type"] > 1e-3 * out["out_variance"]
    np.testing.assert_allclose(
        out["out_variance_within_type"] + out["out_variance_between_type"],
        out["out_variance"],
        rtol=F32,
    )


def test_variance_by_type_is_the_law_of_total_variance():
    r = rng(12)
    x = r.standard_normal((40, 5)) + 3.0 * r.standard_normal((6, 5))[r.integers(0, 6, 40)]
    ids = r.integers(0, 7, 40)  # type 6 may be absent: counts 0 must not divide
    types = np.unique(ids)
    within = sum(np.sum((x[ids == t] - x[ids == t].mean(0)) ** 2) for t in types) / 40
    between = sum((ids == t).sum() * np.sum((x[ids == t].mean(0) - x.mean(0)) ** 2) for t in types)

    def split(a, i):
        return g.variance_by_type(a, i, 7)

    for idx, want in ((0, within), (1, between / 40)):
        f32 = float(jax.jit(split)(jnp.asarray(x, jnp.float32), jnp.asarray(ids))[idx])
        np.testing.assert_allclose(f32, want, rtol=F32)
        with jax.enable_x64(True):
            f64 = float(jax.jit(split)(jnp.asarray(x), jnp.asarray(ids))[idx])
        np.testing.assert_allclose(f64, want, rtol=F64)
    var = np.mean(np.sum((x - x.mean(0)) ** 2, 1))
    np.testing.assert_allclose(within + between / 40, var, rtol=1e-12)
    assert within > 0.05 * var and between / 40 > 0.05 * var  # both parts present


def test_rank_one_residual_vs_numpy_and_collapse():
    x = cloud(13, (3, 8, 5), drift=1.0)
    check(g.rank_one_residual, np_rank_one_residual(x), x)
    one = np.broadcast_to(rng(14).standard_normal(5), (2, 8, 5))
    check(g.rank_one_residual, 0.0, one)
    huge = (1e25 * x).astype(np.float32)  # |x|^2 overflows float32: rescaled first
    got = float(jax.jit(g.rank_one_residual)(jnp.asarray(huge)))
    np.testing.assert_allclose(got, np_rank_one_residual(x), rtol=1e-5)


# ------------------------------------------------------------------------------ registry
def test_registered_geometry_metrics_read_the_right_fields():
    """Through layer_metrics, every geometry metric of the input and the output equals the
    geometry function on that field (and the input's differ from the output's)."""
    from simlab.core.block import Layer

    r = rng(15)
    x = jnp.asarray(cloud(16, (2, 6, 8), drift=0.7), jnp.float32)
    y = jnp.asarray(r.standard_normal((2, 6, 8)) * np.geomspace(1, 30, 8), jnp.float32)
    z = jnp.zeros((2, 2, 6), jnp.float32)
    layer = Layer(x, y, y, z, z, jnp.zeros((2, 4)), jnp.zeros((2, 4)), None)
    names = tuple(n for n in metrics.METRICS if n.startswith(("input_", "out_")))
    names = tuple(n for n in names if n.split("_", 1)[1] in GEOMETRY)
    assert len(names) == 2 * len(GEOMETRY)
    out = jax.jit(metrics.layer_metrics, static_argnums=(0, 1))(names, False, layer)
    for tag, a in (("input", x), ("out", y)):
        flat = np.asarray(a, np.float64).reshape(-1, 8)
        lam = np_spectrum(flat)
        want = {
            "participation_ratio": lam.sum() ** 2 / np.sum(lam**2),
            "effective_rank": np_effective_rank(flat),
            "cov_effective_rank": np_cov_effective_rank(lam),
            "isoscore_star_identity": np_isoscore_star(
                np.cov(flat.T), metrics.ISOSCORE_STAR_ZETA, np.eye(8)
            ),
            "pc1_share": lam[0] / lam.sum(),
            "pc10_share": 1.0,
            "isoscore": np_isoscore_algorithm(flat),
            "isoscore_star": np_isoscore_star(
                np_cov(flat), metrics.ISOSCORE_STAR_ZETA, np.eye(8) * np.trace(np_cov(flat)) / 8
            ),
            "partition_iso": np_partition(flat, False),
            "partition_iso_centred": np_partition(flat, True),
            "mean_sq_norm": np.sum(flat.mean(0) ** 2),
            "variance": np.mean(np.sum((flat - flat.mean(0)) ** 2, 1)),
            "common_share": np.sum(flat.mean(0) ** 2) / np.mean(np.sum(flat**2, 1)),
            "rank1_residual": np_rank_one_residual(np.asarray(a, np.float64)),
        }
        assert set(want) == set(GEOMETRY)
        for m, v in want.items():
            np.testing.assert_allclose(float(out[f"{tag}_{m}"]), v, rtol=F32, atol=F32, err_msg=m)
    assert abs(float(out["input_isoscore"]) - float(out["out_isoscore"])) > 0.05


GEOMETRY = (
    "participation_ratio",
    "effective_rank",
    "cov_effective_rank",
    "isoscore_star_identity",
    "pc1_share",
    "pc10_share",
    "isoscore",
    "isoscore_star",
    "partition_iso",
    "partition_iso_centred",
    "mean_sq_norm",
    "variance",
    "common_share",
    "rank1_residual",
)


def test_vmapped_eigh_decomposes_one_matrix_at_a_time_with_the_same_numbers():
    """Under vmap (twice) geometry.eigh calls LAPACK on single matrices in sequence (the batched
    call can deadlock XLA:CPU's thread pool: docs/metrics.md, "Cost"), and gives what
    jnp.linalg.eigh gives matrix by matrix."""
    a = rng(17).standard_normal((2, 3, 5, 5)).astype(np.float32)
    a = jnp.asarray(a + np.swapaxes(a, -1, -2))
    jaxpr = jax.make_jaxpr(jax.vmap(jax.vmap(g.eigh)))(a)
    shapes = []

    def walk(jx):
        for eqn in jx.eqns:
            if eqn.primitive.name == "eigh":
                shapes.append(eqn.invars[0].aval.shape)
            for p in eqn.params.values():
                for j in p if isinstance(p, (list, tuple)) else (p,):
                    inner = getattr(j, "jaxpr", None)
                    if inner is not None:
                        walk(getattr(inner, "jaxpr", inner))

    walk(jaxpr.jaxpr)
    assert shapes and all(s == (5, 5) for s in shapes), shapes
    w, v = jax.jit(jax.vmap(jax.vmap(g.eigh)))(a)
    for i in range(2):
        for j in range(3):
            w0, v0 = jnp.linalg.eigh(a[i, j])
            np.testing.assert_allclose(np.asarray(w[i, j]), np.asarray(w0), rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(
                np.abs(np.asarray(v[i, j])), np.abs(np.asarray(v0)), rtol=1e-5, atol=1e-5
            )
