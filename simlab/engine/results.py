"""The `Results` view of a finished sweep: axes, metric arrays (*axes, seeds, *dims), meta,
per-seed covariates, seed statistics and intervals, xarray; `save` and `load` go through the
files' one owner, simlab.engine.records (results.npz + meta.json).

Confidence intervals (`Results.ci`, `seed_ci`): seeds are independent replicas (every random
number of a seed comes from its own key; docs/design.md, "Random numbers: common random
numbers"), so a seed mean has the Student-t interval mean +- t_{(1+level)/2, n-1} s / sqrt(n)
(s the sample standard deviation, ddof 1). Within a seed every grid point sees the same
weights and tokens, so a difference of two metrics or of two points is paired by seed: its
interval is the interval of the per-seed differences (pass the array). docs/config.md,
"Confidence intervals".

A metric's dimensions after "seed" are the lab's (meta.json "dims": e.g. `layer` for a stack,
`head` for a per-head metric); every function here treats them alike: `mean` and `ci` keep
them, `select` fixes any of them at an index (and an axis at its nearest coordinate),
`to_xarray` gives each an integer coordinate.
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
import os
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from simlab.engine import records
from simlab.engine.select import nearest
from simlab.errors import ConfigError, ResultsError

XARRAY_COV_PREFIX = "cov_"  # netCDF names allow no ':'; attrs["simlab_covariates"] lists them
CI_METHODS = ("t", "bootstrap")
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0  # a fixed RNG seed: the same interval every time it is computed


def seed_ci(
    x,
    axis: int,
    level: float = 0.95,
    method: str = "t",
    resamples: int = BOOTSTRAP_RESAMPLES,
    rng_seed: int = BOOTSTRAP_SEED,
) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) of a `level` confidence interval for the mean over `axis` (the seeds).

    method "t": mean -+ t_{(1+level)/2, n-1} s / sqrt(n), s with ddof 1 (Student 1908): exact
    for normal replicas, and the honest width with few seeds (t_{0.975, 1} = 12.7 for 2 seeds).
    method "bootstrap": the percentile bootstrap of the mean, `resamples` resamples of the n
    seeds with replacement from np.random.default_rng(rng_seed) (Efron & Tibshirani 1993, ch.
    13); it assumes nothing about the shape but is too narrow with few seeds (n = 3 has 10
    distinct resamples). Fewer than 2 seeds: NaN bounds. NaNs propagate."""
    if method not in CI_METHODS:
        raise ValueError(f"ci: method {method!r} is not one of {', '.join(CI_METHODS)}")
    if not 0.0 < float(level) < 1.0:
        raise ValueError(f"ci: level {level!r} must be in (0, 1)")
    x = np.moveaxis(np.asarray(x, np.float64), axis, -1)
    n = x.shape[-1]
    mean = np.mean(x, axis=-1)
    if n < 2:
        nan = np.full(mean.shape, np.nan)
        return nan, nan.copy()
    if method == "t":
        from scipy import stats  # deferred: scipy.stats is heavy; only intervals need it

        half = stats.t.ppf(0.5 + level / 2.0, n - 1) * np.std(x, axis=-1, ddof=1) / np.sqrt(n)
        return mean - half, mean + half
    rng = np.random.default_rng(rng_seed)
    # resample weights: counts of each seed in each resample / n  -> (n, resamples)
    idx = rng.integers(0, n, (resamples, n))
    w = np.zeros((resamples, n))
    np.add.at(w, (np.arange(resamples)[:, None], idx), 1.0 / n)
    w = w.T
    flat = x.reshape(-1, n)
    lo, hi = np.empty(flat.shape[0]), np.empty(flat.shape[0])
    step = max(1, (1 << 22) // resamples)  # rows per block: ~32 MiB of resampled means
    q = [50.0 * (1.0 - level), 50.0 * (1.0 + level)]
    for i in range(0, flat.shape[0], step):
        lo[i : i + step], hi[i : i + step] = np.percentile(flat[i : i + step] @ w, q, axis=-1)
    return lo.reshape(mean.shape), hi.reshape(mean.shape)


@dataclasses.dataclass
class Results:
    """A finished sweep.

    axes: ordered name -> coordinates (1-D arrays), in the order of the metric array dims.
    metrics: name -> array of shape (*axes, seeds, *dims) (`dims(name)` names them).
    meta: the parsed meta.json.
    covariates: name -> seed-only array (seeds, *dims) of the lab's per-seed statistics
    (simlab.core.lab.Lab.covariates; empty for a lab without them and for older results).
    """

    axes: OrderedDict[str, np.ndarray]
    metrics: dict[str, np.ndarray]
    meta: dict[str, Any]
    path: Path | None = dataclasses.field(default=None, compare=False)
    covariates: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    @property
    def seed_axis(self) -> int:
        return len(self.axes)

    @property
    def n_seeds(self) -> int:
        return next(iter(self.metrics.values())).shape[self.seed_axis]

    def axis_space(self, name: str) -> str:
        """ "lin", "log" or "values" (explicit list) for an axis."""
        for a in self.meta.get("axes", []):
            if a["name"] == name:
                return a.get("space", "values")
        raise KeyError(name)

    def __getitem__(self, metric: str) -> np.ndarray:
        if metric not in self.metrics:
            raise KeyError(f"unknown metric {metric!r}; have: {', '.join(sorted(self.metrics))}")
        return self.metrics[metric]

    def mean(self, metric: str) -> np.ndarray:
        """Mean over seeds: shape (*axes, *dims)."""
        return np.mean(self[metric], axis=self.seed_axis)

    def std(self, metric: str, ddof: int = 1) -> np.ndarray:
        """Standard deviation over seeds (ddof=1; zeros when there is a single seed)."""
        x = self[metric]
        if x.shape[self.seed_axis] < 2:
            return np.zeros(np.delete(x.shape, self.seed_axis))
        return np.std(x, axis=self.seed_axis, ddof=ddof)

    def sem(self, metric: str) -> np.ndarray:
        """Standard error of the seed mean."""
        return self.std(metric) / np.sqrt(self.n_seeds)

    def ci(
        self, metric, level: float = 0.95, method: str = "t", **kw
    ) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) of the `level` confidence interval of the seed mean, shape
        (*axes, *dims) (`seed_ci`: Student t by default, or method="bootstrap").

        metric: a metric's name, or any array with the seed axis at `seed_axis` (a derived
        quantity, e.g. r["out_cos"] - r["input_cos"] or the difference of two grid points:
        paired by seed, since every point of a seed sees the same weights and tokens)."""
        x = self[metric] if isinstance(metric, str) else np.asarray(metric)
        return seed_ci(x, self.seed_axis, level, method, **kw)

    def ci_half_width(self, metric, level: float = 0.95, **kw) -> np.ndarray:
        """Half the width of `ci` (the +- of "mean +- half-width")."""
        lo, hi = self.ci(metric, level, **kw)
        return 0.5 * (hi - lo)

    # ------------------------------------------------------------------ how it shows itself
    def dims(self, metric: str) -> list[str]:
        """The dimension names of a metric: the axes, "seed", then meta.json's names of the
        further dims (the lab's, e.g. layer, head), else dim0, dim1, ..."""
        x = self[metric]
        named = self.meta.get("dims", {}).get(metric)
        if named is not None and len(named) == x.ndim:
            return list(named)
        return [*self.axes, "seed"] + [f"dim{i}" for i in range(x.ndim - len(self.axes) - 1)]

    def metric_dims(self, metric: str) -> list[str]:
        """The names of a metric's dimensions after "seed" (none for one number per point)."""
        return self.dims(metric)[len(self.axes) + 1 :]

    def select(self, metric: str, coords: Mapping[str, Any] | None = None, **kw) -> np.ndarray:
        """The metric's array with some dimensions fixed: an axis at its coordinate nearest the
        value (simlab.engine.select.nearest, on the axis's own scale), a further dimension
        (layer, head, ...) at an index (negative counts from the end). The seed dimension and
        every dimension not named stay. Names as keywords or as a dict (`coords`)."""
        both = {**dict(coords or {}), **kw}
        x = self[metric]
        names = self.dims(metric)
        unknown = [k for k in both if k not in names or k == "seed"]
        if unknown:
            raise KeyError(
                f"select: {unknown} are not dimensions of {metric!r}; have: "
                f"{', '.join(n for n in names if n != 'seed')}"
            )
        idx = []
        for name, n in zip(names, x.shape):
            if name not in both:
                idx.append(slice(None))
            elif name in self.axes:
                idx.append(nearest(self, name, float(both[name])))
            else:
                idx.append(dim_index(name, both[name], n, metric))
        return x[tuple(idx)]

    def summary(self) -> str:
        """A few lines: where from, the sizes and seeds, the axes, each metric's shape and range
        (what `simlab info` prints)."""
        cfg = self.meta.get("config", {})
        b, i = cfg.get("block", {}), cfg.get("inputs", {})
        lines = ["simlab Results" + (f" ({self.path})" if self.path else "")]
        if b:
            lines.append(
                f"  block: {b.get('kind')}, d_model {b.get('d_model')}, {b.get('n_heads')} heads, "
                f"depth {b.get('depth')}"
                + (", MLP" if b.get("mlp") else "")
                + (f", qk_norm {b['qk_norm']}" if b.get("qk_norm", "none") != "none" else "")
                + (", causal" if b.get("causal") else "")
            )
        if i:
            lines.append(f"  inputs: {i.get('kind')}, {i.get('batch')} x {i.get('length')} tokens")
        lines.append(f"  seeds: {self.n_seeds}")
        ck = cfg.get("checkpoint")
        if isinstance(ck, dict):
            first, depth = ck.get("layer", 0), b.get("depth", 1)
            lines.append(
                f"  weights: {ck.get('architecture')} checkpoint, layers {first}.."
                f"{first + depth - 1} ({ck.get('path')}); the same for every seed: seeds vary "
                "only the inputs"
            )
        for name, v in self.axes.items():
            v = np.asarray(v)
            lines.append(
                f"  axis {name}: {len(v)} values, {v[0]:.4g} .. {v[-1]:.4g}"
                f" ({self.axis_space(name) if self.meta.get('axes') else 'values'})"
            )
        for k, x in self.metrics.items():
            x = np.asarray(x)
            finite = x[np.isfinite(x)] if x.dtype.kind == "f" else x
            rng = f"{finite.min():.4g} .. {finite.max():.4g}" if finite.size else "no finite value"
            lines.append(
                f"  {k}: {' x '.join(map(str, x.shape))} ({', '.join(self.dims(k))}), {rng}"
            )
        for k, x in self.covariates.items():
            x = np.asarray(x)
            lines.append(
                f"  covariate {k}: {' x '.join(map(str, x.shape))} "
                f"({', '.join(self.covariate_dims(k))}), {x.min():.4g} .. {x.max():.4g}"
            )
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(self.summary())}</pre>"

    # ------------------------------------------------------------------ xarray
    def to_xarray(self):
        """An xarray.Dataset: one variable per metric, a coordinate per axis plus "seed" and each
        further dimension (an integer index: layer, head, ...), the knob coordinates of point
        sets and refined sweeps (`point_coordinates`), the meta (config, versions, ...) as JSON
        in attrs["simlab_meta"]. Needs the optional `xarray` extra
        (pip install 'simlab[xarray]')."""
        xr = _xarray()
        coords: dict[str, Any] = {k: np.asarray(v) for k, v in self.axes.items()}
        coords.update(point_coordinates(self.meta, self.axes))
        data = {}
        for k, x in self.metrics.items():
            dims = self.dims(k)
            for d, n in zip(dims, x.shape):
                if d not in coords:
                    coords[d] = np.arange(n, dtype=np.int32)
            data[k] = (dims, np.asarray(x))
        cov_vars = {}
        for k, x in self.covariates.items():  # seed-only variables
            dims = self.covariate_dims(k)
            for d, n in zip(dims, x.shape):
                if d not in coords:
                    coords[d] = np.arange(n, dtype=np.int32)
            cov_vars[XARRAY_COV_PREFIX + k] = k
            data[XARRAY_COV_PREFIX + k] = (dims, np.asarray(x))
        attrs = {
            "simlab_meta": json.dumps(self.meta, default=records.json_default),
            "simlab_axes": json.dumps(list(self.axes)),
        }
        if cov_vars:
            attrs["simlab_covariates"] = json.dumps(cov_vars)
        ds = xr.Dataset(data, coords=coords, attrs=attrs)
        describe(ds, self.meta)
        return ds

    def covariate_dims(self, name: str) -> list[str]:
        """The dimension names of a covariate: "seed", then meta.json's names (else dim0, ...)."""
        x = self.covariates[name]
        named = self.meta.get("covariates", {}).get(name)
        if named is not None and len(named) == x.ndim:
            return list(named)
        return ["seed"] + [f"dim{i}" for i in range(x.ndim - 1)]

    def sel(self, coords: Mapping[str, Any] | None = None, **kw):
        """xarray-style selection by coordinate (nearest): a Dataset (needs xarray). Axes as
        keywords (`res.sel(drift_norm=1)`) or as a dict, for names that are not identifiers or
        are Python keywords (`res.sel({"lambda": 1})`)."""
        both = {**dict(coords or {}), **kw}
        dims = {d for k in self.metrics for d in self.dims(k)}
        unknown = [a for a in both if a not in dims]
        if unknown:
            raise KeyError(
                f"sel: {unknown} are not axes or dimensions; have: {', '.join(sorted(dims))}"
            )
        for a, v in both.items():  # nearest needs numbers: say which value is not one
            if not all(isinstance(x, (int, float, np.number)) for x in np.ravel(v)):
                c = self.axes.get(a)
                on = "an index" if c is None else f"on its {len(c)} values {c.min():.4g} .. "
                raise ConfigError(
                    f"sel: {a}={v!r} must be a number or a list of numbers ({on}"
                    + ("" if c is None else f"{c.max():.4g}, e.g. sel({a}={c[0]:.4g})")
                    + ")"
                )
        return self.to_xarray().sel(both, method="nearest")


def dim_index(name: str, value, size: int, what: str) -> int:
    """An index along a metric's further dimension `name` of `size` (negative counts from the
    end), as a non-negative int; ConfigError naming the dimension when it is not an integer in
    range."""
    try:
        i = int(value)
        ok = i == float(value)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ConfigError(f"{name}={value!r}: an index along {name} of {what} must be an integer")
    if not -size <= i < size:
        raise ConfigError(f"{name} {i} out of range for {what} with {size} values along {name}")
    return i % size


def take_dims(x, names, select: Mapping[str, Any] | None, what: str):
    """x with its trailing dimensions `names` each fixed at the index select[name] (default: the
    last; for a stack's layers, the block output): (array, [(name, index), ...])."""
    x = np.asarray(x)
    names = list(names)
    select = dict(select or {})
    lead = x.ndim - len(names)
    chosen = [
        (n, dim_index(n, select.get(n, -1), x.shape[lead + k], what)) for k, n in enumerate(names)
    ]
    return x[(Ellipsis, *(i for _, i in chosen))] if chosen else x, chosen


def point_coordinates(meta: dict[str, Any], axes) -> dict[str, tuple[str, np.ndarray]]:
    """Coordinates beside the dimensions: along an axis that sets knobs by their own laws or
    lists (a point set), each knob's value (meta["axes"][i]["knob_values"]); along a refined
    sweep's "point" dimension, each refined axis's coordinate and the level that added the
    point ("refine_level")."""
    out: dict[str, tuple[str, np.ndarray]] = {}
    refined = meta.get("refine") if isinstance(meta.get("refine"), dict) else {}
    for a, v in (refined.get("coords") or {}).items():
        if a not in axes and "point" in axes:
            out[a] = ("point", np.asarray(v, np.float64))
    if refined and "point" in axes:
        out["refine_level"] = ("point", np.asarray(refined.get("point_level", []), np.int64))
    for a in meta.get("axes") or []:
        name = a.get("name") if isinstance(a, dict) else None
        if name not in axes:
            continue
        for k, v in (a.get("knob_values") or {}).items():
            if k not in axes and k not in out and len(v) == len(axes[name]):
                out[k] = (name, np.asarray(v, np.float64))
    return out


def save(
    out_dir: str | os.PathLike,
    axes: OrderedDict[str, np.ndarray],
    metrics: dict[str, np.ndarray],
    meta: dict[str, Any],
    covariates: dict[str, np.ndarray] | None = None,
) -> Results:
    """Write a finished sweep (simlab.engine.records.write_results) and return its view."""
    records.write_results(Path(out_dir), axes, metrics, meta, covariates)
    return Results(OrderedDict(axes), dict(metrics), meta, Path(out_dir), dict(covariates or {}))


def load(path: str | os.PathLike) -> Results:
    """Load a sweep written by `simlab sweep` / `simlab.run_sweep` (a directory or its npz)."""
    d, axes, metrics, meta, covariates = records.read_results(path)
    metrics, meta = renamed(metrics, meta, records.record_rule(d / "meta.json", meta))
    return Results(axes, metrics, meta, d, covariates)


def renamed(metrics: dict, meta: dict, rule: int) -> tuple[dict, dict]:
    """A stored result's metrics under the names their meaning has now: a metric whose
    definition changed after the record's fingerprint rule (simlab.core.metrics.REDEFINED) is
    shown under the name of its old meaning, and meta["renamed"] records old -> new."""
    from simlab.core.lab import redefined  # deferred: jax

    moved = redefined(metrics, rule)
    if not moved:
        return metrics, meta
    metrics = {moved.get(k, k): v for k, v in metrics.items()}
    meta = dict(meta, renamed=moved)
    for key in ("dims", "bounds"):
        if isinstance(meta.get(key), dict):
            meta[key] = {moved.get(k, k): v for k, v in meta[key].items()}
    if isinstance(meta.get("metrics"), list):
        meta["metrics"] = [moved.get(k, k) for k in meta["metrics"]]
    return metrics, meta


def _xarray():
    try:
        import xarray  # deferred: an optional dependency
    except ImportError:
        raise ImportError(
            "this needs xarray, an optional dependency: pip install 'simlab[xarray]'"
        ) from None
    return xarray


def from_xarray(ds) -> Results:
    """The Results a Dataset from `Results.to_xarray` (or a netCDF file of one, opened with
    xarray.open_dataset) holds: axes, metrics and meta as they were."""
    if "simlab_meta" not in ds.attrs:
        raise ResultsError("from_xarray: the Dataset has no simlab_meta attribute (not simlab's)")
    meta = json.loads(ds.attrs["simlab_meta"])
    names = json.loads(ds.attrs.get("simlab_axes", "[]"))
    axes = OrderedDict((n, np.asarray(ds[n].values, np.float64)) for n in names)
    cov_vars = json.loads(ds.attrs.get("simlab_covariates", "{}"))
    metrics = {k: np.asarray(v.values) for k, v in ds.data_vars.items() if k not in cov_vars}
    covariates = {name: np.asarray(ds[var].values) for var, name in cov_vars.items()}
    return Results(axes, metrics, meta, covariates=covariates)


def describe(ds, meta: dict) -> None:
    """Per-variable attributes (CF conventions), in place: each metric's `long_name`, its
    definition (`description`, the registry's simlab.core.metrics.METRICS) and `units` "1"
    (dimensionless) where its exact range is finite (cosines, shares, entropies; norms and
    variances, in the hidden states' own scale, carry none); each axis's knobs and their
    meanings (simlab.core.knobs.KNOBS); seed, layer and the covariates. The global JSON
    attributes stay (simlab.from_xarray reads those); these are for netCDF tools."""
    # deferred: jax; the metric registry through simlab.core.lab, the engine's door to it
    from simlab.core.knobs import KNOBS
    from simlab.core.lab import METRICS

    covariates = json.loads(ds.attrs.get("simlab_covariates", "{}"))  # variable -> name
    for name in ds.data_vars:
        if name in covariates:
            cov = covariates[name]
            ds[name].attrs.update(
                long_name=f"seed covariate {cov}",
                description=f"per-seed statistic {cov} of the seed's weights "
                "(docs/instruments.md, Seed covariates)",
            )
            continue
        m = METRICS.get(name)
        attrs = {"long_name": name}
        if m is not None:
            attrs["description"] = m.doc
            lo, hi = (float(b) for b in m.bounds)
            if math.isfinite(lo) and math.isfinite(hi):
                attrs["units"] = "1"
        ds[name].attrs.update(attrs)
    for a in meta.get("axes") or []:
        if isinstance(a, dict) and a.get("name") in ds.coords:
            knobs = a.get("knobs") or [a["name"]]
            meanings = [f"{k}: {KNOBS[k].meaning}" for k in knobs if k in KNOBS]
            ds[a["name"]].attrs.update(
                long_name=f"axis {a['name']} (knobs {', '.join(map(str, knobs))})",
                description="; ".join(meanings) or f"axis {a['name']}",
            )
    if "seed" in ds.coords:
        ds["seed"].attrs.update(
            long_name="seed",
            description="replica s: key fold_in(PRNGKey(sweep.base_seed), sweep.first_seed + s)",
        )
    if "layer" in ds.coords:
        ds["layer"].attrs.update(
            long_name="layer",
            description="layer of the stack, from 0 (with [checkpoint]: 0 is checkpoint.layer)",
        )
