"""A theory claim from a prediction and a sweep: the shape most user claims take.

    claim = sweep_claim(
        "my_claim", "what it says",
        prediction=lambda knobs, size: ...,   # knob name -> values at every grid point, and the
                                              # size (a [[sizes]] entry) -> predicted metric
        metric="out_cos",                     # the simulated quantity (seed mean) it predicts
        config="theory_my_claim.toml",        # sweep tables, size path and criterion (below)
    )
    simlab.register_claim(claim)              # then: simlab check-theory --plugin my_module

The claim's TOML has a [full] and a [quick] table, each with
  sweep = { ... }      the sweep's tables (block, inputs, knobs, axes, sweep), as in a config file;
  sizes = [{...}, ...] the size path, smallest first: each a table of overrides of those tables
                       (e.g. { block = { d_model = 64 } }) and an optional `name`;
  tol, lead_tol, min_shrink   the criterion, declared before the run (common.verdict_from: the
                       largest size's error <= tol agrees; <= lead_tol with the error shrunk by
                       min_shrink from the smallest size agrees to leading order).
simulate runs `simlab.run_sweep` at every size; compare evaluates the prediction at the grid's
knob values and takes the error as the largest |seed mean - prediction| over the grid; the figure
draws the simulation (markers, +- the seeds' standard error) and the prediction (lines) against
the first axis, one colour per size. Everything else is the Claim API (claim.py).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

import simlab
from simlab.errors import ConfigError
from simlab.studies.check_theory.claim import Claim, ClaimResult, Comparison
from simlab.studies.check_theory.common import shrink_cell, verdict_from

Prediction = Callable[[Mapping[str, np.ndarray], Mapping[str, Any]], np.ndarray]


def _size_name(size: Mapping[str, Any], i: int) -> str:
    if "name" in size:
        return str(size["name"])
    parts = [f"{k}={v}" for t in ("block", "inputs") for k, v in size.get(t, {}).items()]
    return ",".join(parts) or f"size{i}"


def _tables(cfg: Mapping[str, Any], size: Mapping[str, Any]) -> dict:
    """The sweep's tables with one size's overrides applied."""
    sweep = cfg.get("sweep")
    if not isinstance(sweep, Mapping):
        raise ConfigError("sweep claim: the config needs a `sweep` table (the sweep's tables)")
    out = copy.deepcopy(dict(sweep))
    for table, over in size.items():
        if table == "name":
            continue
        if not isinstance(over, Mapping):
            raise ConfigError(f"sizes: {table} must be a table of overrides, got {over!r}")
        out[table] = {**out.get(table, {}), **over}
    out.setdefault("sweep", {})
    return out


def sweep_claim(
    name: str,
    title: str,
    *,
    prediction: Prediction,
    metric: str,
    config: str | Path | None = None,
    label: str | None = None,
) -> Claim:
    """A Claim whose simulation is `metric` of a simlab sweep at each size of the path and
    whose prediction is `prediction(knobs, size)` (module docstring)."""
    if not callable(prediction):
        raise ConfigError(f"sweep claim {name!r}: prediction must be callable (knobs, size)")

    def simulate(cfg: dict) -> dict:

        runs = {}
        for i, size in enumerate(cfg["sizes"]):
            tables = _tables(cfg, size)
            tables["sweep"] = {**tables["sweep"], "metrics": [metric]}
            res = simlab.run_sweep(tables, out=None, quiet=True)
            runs[_size_name(size, i)] = {
                "axes": {a: np.asarray(c).tolist() for a, c in res.axes.items()},
                "knobs": {a["name"]: a["knobs"] for a in res.meta["axes"]},
                "mean": res.mean(metric).tolist(),
                "sem": res.sem(metric).tolist(),
                "seeds": res.n_seeds,
            }
        return {"runs": runs}

    def compare(cfg: dict, data: dict) -> Comparison:
        errors, preds = [], {}
        for (key, run), size in zip(data["runs"].items(), cfg["sizes"]):
            coords = np.meshgrid(*(np.asarray(c) for c in run["axes"].values()), indexing="ij")
            knobs = {k: c for c, ks in zip(coords, run["knobs"].values()) for k in ks}
            pred = np.broadcast_to(np.asarray(prediction(knobs, size), float), coords[0].shape)
            mean = np.asarray(run["mean"], float)
            if mean.shape != pred.shape:
                raise ConfigError(
                    f"sweep claim {name!r}: {metric} has shape {mean.shape} (a layer axis?), "
                    f"the prediction {pred.shape}"
                )
            preds[key] = pred.tolist()
            errors.append(float(np.max(np.abs(mean - pred))))
        keys = list(data["runs"])
        big = data["runs"][keys[-1]]
        return Comparison(
            sizes=" ".join(keys),
            predicted="/".join(f"{v:.3g}" for v in np.ravel(preds[keys[-1]])[:3]),
            simulated="/".join(f"{v:.3g}" for v in np.ravel(big["mean"])[:3]),
            error=f"max {errors[-1]:.3g}"
            + (f" ({keys[0]}: {errors[0]:.3g})" if len(keys) > 1 else ""),
            shrinks=shrink_cell(errors[-1], errors[0], cfg["min_shrink"])
            if len(keys) > 1
            else "n/a",
            details=[
                (f"{k}: max |{metric} - prediction| over the grid", f"{e:.4g}")
                for k, e in zip(keys, errors)
            ],
            scores={"errors": errors},
            data={"runs": data["runs"], "predicted": preds, "metric": metric},
        )

    def verdict(cfg: dict, comparison: Comparison):
        v, rule = verdict_from(comparison.scores["errors"], 0, cfg)
        return v, ("criterion", rule)

    def figure(result: ClaimResult, path: Path) -> None:
        from matplotlib.figure import Figure

        # deferred: matplotlib (heavy), loaded only when a figure is drawn
        from simlab import plot

        fig = Figure(figsize=plot.FIGSIZE)
        ax = fig.add_subplot()
        for i, (key, run) in enumerate(result.data["runs"].items()):
            x_name = next(iter(run["axes"]))
            x = np.asarray(run["axes"][x_name])
            mean = np.asarray(run["mean"]).reshape(len(x), -1)[:, 0]
            sem = np.asarray(run["sem"]).reshape(len(x), -1)[:, 0]
            pred = np.asarray(result.data["predicted"][key]).reshape(len(x), -1)[:, 0]
            ax.errorbar(x, mean, yerr=sem, fmt="o", color=f"C{i}", label=f"simulated {key}")
            ax.plot(x, pred, "-", color=f"C{i}", label=f"predicted {key}")
            ax.set_xlabel(x_name)
            if np.all(x > 0) and x.max() / x.min() > 20:
                ax.set_xscale("log")
        ax.set(ylabel=result.data["metric"], title=f"{result.claim}: {result.verdict}")
        ax.legend(fontsize=7)
        plot.save_figure(fig, path)

    return Claim(name, title, simulate, compare, verdict, figure, config=config, label=label)
