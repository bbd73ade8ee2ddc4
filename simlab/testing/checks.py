"""The conformance assertions, each on the outputs of `simlab.testing.cases`' labs: the paths
agree with the plain oracle (`assert_paths_agree`), float64 agrees with float32
(`assert_x64_agrees`, `assert_really_float64`), every metric is finite and in its bounds at the
extremes (`assert_finite_and_in_bounds`), sweeps are bit-identical across chunk sizes and
device counts (`assert_sweeps_identical`); and two checks of one entry's own law: the drift of
an input kind (`assert_drift_is_common_shift`), a clamp's closed forms
(`assert_clamp_closed_forms`).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from simlab.core import inputs, patterns
from simlab.core.inputs import INPUTS
from simlab.core.knobs import KNOBS, inert_knobs, knob_arrays
from simlab.core.metrics import METRICS
from simlab.core.patterns import PATTERNS
from simlab.engine.sweep import run_sweep
from simlab.testing.cases import EXTREMES, POINTS, Case, _run, small_inputs
from simlab.testing.checkpoint import SEED, weights_for

PATH_TOL = 2e-5  # absolute and relative: ~20x the float32 reassociation measured on these sizes
X64_TOL = 1e-4  # float64 vs float32 on the same sample (absolute, values of order 1)
X64_RTOL = 1e-6  # and relative: ~8 float32 ulp, for metrics of large magnitude (a norm ~1e3)
BOUND_TOL = 1e-5  # a metric may pass its exact bound by a few float32 ulp


# ----------------------------------------------------------------------------------------- paths
# the plain oracle and the default Lab (hoisted projections and factored logits where the block
# allows, tiles of 2 query rows x 4 heads x 12 keys so that every tile loop runs)
PATHS = {
    "plain": dict(hoist=False, factor=False, tiled=False),
    "default": dict(tile_elements=2 * 4 * 12),
}


def path_outputs(cases: Sequence[Case], points=POINTS) -> list[dict[str, dict]]:
    """Per case: path name -> metric -> (points, depth) array (one compiled call for all)."""
    return path_and_extreme_outputs(cases, points, extremes=False)[0]


def path_and_extreme_outputs(
    cases: Sequence[Case], points=POINTS, extremes: bool = True
) -> tuple[list[dict[str, dict]], list[dict] | None]:
    """path_outputs and, from the same compiled call, extreme_outputs: the default path's Lab
    runs its case's knob points followed by its extreme points (one program per Lab instead of
    two: the compile is most of a conformance check's time)."""
    labs, pts, split = [], [], []
    for c in cases:
        for name, kw in PATHS.items():
            labs.append(c.lab(**kw))
            p = c.knob_points(points)
            split.append(len(p))
            pts.append(p + extreme_points(c) if extremes and name == "default" else p)
    outs = _run(labs, pts)
    n = len(PATHS)
    paths, ext = [], []
    for i in range(len(cases)):
        per = outs[i * n : (i + 1) * n]
        cut = [{m: a[: split[i * n + j]] for m, a in o.items()} for j, o in enumerate(per)]
        paths.append(dict(zip(PATHS, cut)))
        d = per[list(PATHS).index("default")]
        ext.append({m: a[split[i * n] :] for m, a in d.items()})
    return paths, (ext if extremes else None)


def assert_paths_agree(case: Case, out: Mapping[str, dict], tol: float = PATH_TOL) -> None:
    """Every path equals the plain oracle within tol (abs and rel), on points that differ."""
    plain = out["plain"]
    for path, got in out.items():
        assert set(got) == set(plain), (case.name, path)
        for m, arr in got.items():
            np.testing.assert_allclose(
                arr, plain[m], rtol=tol, atol=tol, err_msg=f"{case.name}: {path} vs plain, {m}"
            )
    pattern = PATTERNS[case.block.pattern]
    if "attn_entropy" in plain and (pattern.reads_logits or pattern.sharpens):
        # not vacuous: the knob points move the attention (a fixed clamp's rows never move)
        # the first entry of each point (layer 0 of a stack; a one-layer block has no layer axis)
        h = np.asarray(plain["attn_entropy"]).reshape(len(plain["attn_entropy"]), -1)[:, 0]
        assert np.ptp(h) > 1e-3, f"{case.name}: points do not differ"


# --------------------------------------------------------------------------------------- float64
def x64_outputs(cases: Sequence[Case], points=POINTS) -> list[dict]:
    """Metrics of each case's default Lab at the points under `jax.enable_x64(True)`, the same
    seed (compare with path_outputs(...)["default"], the float32 run)."""
    with jax.enable_x64(True):
        return _run(
            [c.lab(**PATHS["default"]) for c in cases], [c.knob_points(points) for c in cases]
        )


def assert_x64_agrees(case: Case, f32: Mapping, f64: Mapping, tol: float = X64_TOL) -> None:
    assert set(f32) == set(f64), case.name
    for m in f32:
        np.testing.assert_allclose(
            f64[m], f32[m], rtol=X64_RTOL, atol=tol, err_msg=f"{case.name}: {m}"
        )


def assert_really_float64(case: Case) -> None:
    """Under x64 the seed state, the knobs and the metrics are float64 (not silently float32)."""
    with jax.enable_x64(True):
        lab = case.lab()
        state = jax.eval_shape(lab.seed_state, jax.random.PRNGKey(SEED))
        out = jax.eval_shape(lab.point, state, knob_arrays({}))
        dts = {str(a.dtype) for a in jax.tree.leaves((state, out)) if a.dtype.kind == "f"}
    assert dts == {"float64"}, (case.name, dts)


# -------------------------------------------------------------------------------------- extremes
def extreme_points(case: Case) -> list[dict[str, float]]:
    """Every corner of EXTREMES (lam drives q_scale and k_scale) the case's knobs allow, plus
    a mid-range point."""
    inert = inert_knobs(case.block, case.inputs, INPUTS[case.inputs.kind].knobs)
    names = [n for n in EXTREMES if n == "lam" or n not in inert]
    out = []
    for values in itertools.product(*(EXTREMES[n] for n in names)):
        p = dict(zip(names, values))
        lam = p.pop("lam")
        out.append(dict(p, q_scale=lam, k_scale=lam))
    return out + [dict(q_scale=3.0, k_scale=3.0, temperature=0.3, drift_norm=2.0)]


def extreme_outputs(cases: Sequence[Case]) -> list[dict]:
    """Per case: metric -> (extreme points, depth) of its default-path Lab (PATHS["default"]:
    tiles small enough that every tile loop runs)."""
    return _run([c.lab(**PATHS["default"]) for c in cases], [extreme_points(c) for c in cases])


def assert_finite_and_in_bounds(case: Case, out: Mapping[str, np.ndarray]) -> None:
    """Every metric finite at every extreme point and inside its Metric.bounds."""
    pts = extreme_points(case)
    for m, arr in out.items():
        flat = arr.reshape(len(pts), -1)
        bad = [pts[i] for i in np.nonzero(~np.isfinite(flat).all(1))[0]]
        assert not bad, f"{case.name}: {m} not finite at {bad[:3]}"
        lo, hi = METRICS[m].bounds
        assert np.all(arr >= lo - BOUND_TOL) and np.all(arr <= hi + BOUND_TOL), (
            f"{case.name}: {m} outside its bounds [{lo}, {hi}]: {arr.min()}..{arr.max()}"
        )


# -------------------------------------------------------------------------------------- identity
def sweep_config(case: Case) -> dict:
    """A small sweep of the case: drift N x lambda (3 x 5 points), 2 seeds, micro-batch 2."""
    cfg = dict(
        block=dataclasses.asdict(case.block),
        inputs=dataclasses.asdict(case.inputs),
        axes=[
            dict(name="drift_norm", values=[0.0, 1.0, 10.0]),
            dict(name="lambda", knobs=["q_scale", "k_scale"], values=[0.3, 1.0, 3.0, 10.0, 30.0]),
        ],
        sweep=dict(seeds=2, micro_batch=2),
    )
    if case.metrics is not None:
        cfg["sweep"]["metrics"] = list(case.metrics)
    return cfg


def assert_sweeps_identical(case: Case, devices: Sequence[int] | None = None) -> None:
    """run_sweep bit-identical for chunks of 1, 2 and 8 micro-batches and on each device count
    in `devices` (default 1 and 2, or 1 alone in a process with one device; force CPU devices
    with jax's `jax_num_cpu_devices` or XLA_FLAGS=--xla_force_host_platform_device_count)."""

    if devices is None:
        devices = (1, 2) if jax.local_device_count() >= 2 else (1,)
    cfg = sweep_config(case)
    lab = None if case.weights is None else case.lab()  # trained layers: given to the sweep
    ref = run_sweep(cfg, lab=lab, out=None, quiet=True, chunk_size=4, devices=1).metrics
    # chunks of 1, 2 and 8 micro-batches of 2 points on one device; 2 per device on several
    # (each device's program then has the shape of the one-device run's: compiled once each)
    runs = [(2, 1), (16, 1)] + [(4 * d, d) for d in devices if d > 1]
    for chunk, dev in runs:
        got = run_sweep(cfg, lab=lab, out=None, quiet=True, chunk_size=chunk, devices=dev).metrics
        for m in ref:
            np.testing.assert_array_equal(
                got[m], ref[m], err_msg=f"{case.name}: {m}, chunk {chunk}, {dev} devices"
            )


# ---------------------------------------------------------------------------- an entry's own law
def assert_drift_is_common_shift(kind: str) -> None:
    """The input kind's draw plus the drift: x(N) - x(0) = N u_b (unit u_b) for every token,
    the other knobs fixed (float32 rounding of the sum)."""

    spec = small_inputs(kind)
    comps = inputs.components(spec, 16, jax.random.PRNGKey(SEED), weights=weights_for(kind))
    knobs = {n: jnp.asarray(k.default, jnp.float32) for n, k in KNOBS.items()}
    x0 = inputs.assemble(spec, 16, comps, inputs.coefficients(kind, knobs))
    n = 3.0
    xn = inputs.assemble(
        spec, 16, comps, inputs.coefficients(kind, {**knobs, "drift_norm": jnp.float32(n)})
    )
    u = np.asarray(comps["u_b"], np.float64).reshape(-1)
    assert abs(np.linalg.norm(u) - 1) < 1e-6, kind
    diff = np.asarray(xn, np.float64) - np.asarray(x0, np.float64)
    scale = 1 + float(np.max(np.abs(np.asarray(x0))))
    np.testing.assert_allclose(diff, np.broadcast_to(n * u, diff.shape), atol=1e-5 * scale)


def assert_clamp_closed_forms(name: str, t: int = 7) -> None:
    """A clamp's targets and closed forms in float64, T = S = t, causal and not, beta in
    {0, 0.7, 5, 1e8}: every target t_i is a key in [0, S), attended (t_i <= i) under the causal
    mask; the full weights (simlab.core.patterns.weights) equal numpy's p_i at t_i and o_i at
    the other attended keys (0 where masked), and each row sums to 1; the closed-form entropy
    and maximum equal -sum_j w log w and max_j w of those weights; the O(T D) A V W_O
    (simlab.core.patterns.attend) equals (w V) W_O."""

    entry = PATTERNS[name]
    r = np.random.default_rng(SEED)
    b, h, k, d = 2, 2, 3, 5
    v = r.standard_normal((b, t, h, k))
    wo = r.standard_normal((h, k, d))
    with jax.enable_x64(True):
        for causal in (False, True):
            n = np.arange(1, t + 1) if causal else np.full(t, t)
            if entry.target is not None:
                tgt = np.asarray(entry.target(t, t, causal))
                assert tgt.shape == (t,) and tgt.dtype.kind in "iu", (name, tgt)
                assert np.all((tgt >= 0) & (tgt < n)), (name, causal, tgt)
            for beta in (0.0, 0.7, 5.0, 1e8):
                e = np.exp(-beta) if entry.sharpens else 1.0
                o, p = e / (1.0 + (n - 1) * e), 1.0 / (1.0 + (n - 1) * e)
                want = np.where(np.arange(t)[None, :] < n[:, None], o[:, None], 0.0)
                if entry.target is not None:
                    want[np.arange(t), tgt] = p
                b64 = jnp.float64(beta)
                w = np.asarray(patterns.weights(name, b64, 1, 1, t, t, causal, jnp.float64))[0, 0]
                np.testing.assert_allclose(w, want, rtol=1e-13, atol=0, err_msg=f"{name} weights")
                np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-13)
                out, h_T, max_T = patterns.attend(name, b64, v, wo, causal)
                ent = -(w * np.log(np.where(w > 0, w, 1.0))).sum(-1)
                np.testing.assert_allclose(h_T, ent, rtol=1e-12, atol=1e-13, err_msg=name)
                np.testing.assert_allclose(max_T, w.max(-1), rtol=1e-13, err_msg=name)
                np.testing.assert_allclose(
                    out,
                    np.einsum("ts,bshk,hkd->btd", w, v, wo),
                    rtol=1e-12,
                    atol=1e-12,
                    err_msg=f"{name}: closed-form A V",
                )
