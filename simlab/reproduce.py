"""`simlab reproduce`: every experiment of the untrained-block study, sweeps then figures.

Each experiment is one or more TOML configs in experiments/ (the full, paper-size protocol,
with a [quick] table of smaller sizes) and a function that draws its figures. The sweep data
is saved beside the figures (OUT/data/<config>/results.npz + meta.json), so `simlab plot`
redraws any panel without recomputing, and a re-run only draws (finished sweeps reload).

Experiments (Godey, de la Clergerie & Sagot 2024, "Anisotropy Is Inherent to Self-Attention
in Transformers", section on untrained blocks, and the mechanism of docs/design.md):
  paper      drift N x joint q/k scale lambda, BERT block: phase diagrams + a 1-D cut at lambda=1
  mechanism  q_shift x lambda (attention-only and BERT); k_shift's exact null effect; drift
  temp_corr  inverse temperature x input correlation, with the freezing boundary of theory
  qknorm     drift N x temperature with and without QK-norm
  depth      12-layer stacks (attention-only, post-LN, pre-LN) at three temperatures
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from simlab import plot
from simlab.config import read_toml
from simlab.results import Results
from simlab.spec import ConfigError

EXPERIMENTS_DIR = Path(__file__).resolve().parent.parent / "experiments"
ISO_ENTROPY = [0.5]  # attn_entropy level drawn over the cosine maps


def experiment_config(name: str, quick: bool, directory: Path = EXPERIMENTS_DIR,
                      extra: dict | None = None) -> dict:
    """The tables of experiments/<name>.toml; with quick, its [quick] overrides applied, then
    `extra` (same form; used by the tests to shrink every experiment further)."""
    path = directory / f"{name}.toml"
    if not path.exists():
        raise FileNotFoundError(f"{path}: experiment config not found (run from a clone of the "
                                "simlab repository, installed with pip install -e .)")
    raw = read_toml(path)
    q = raw.pop("quick", {})
    cfg = override(raw, q, f"{path}: quick") if quick else raw
    return override(cfg, extra, "extra") if extra else cfg


def override(cfg: dict, q: dict, where: str) -> dict:
    """q.num sets num on every lin/log axis; q.block/inputs/sweep/knobs update those tables."""
    unknown = set(q) - {"block", "inputs", "sweep", "knobs", "num"}
    if unknown:
        raise ConfigError(f"{where}.{sorted(unknown)[0]}: unknown field; allowed: "
                          "block, inputs, sweep, knobs, num")
    cfg = copy.deepcopy(cfg)
    for table in ("block", "inputs", "sweep", "knobs"):
        if table in q:
            cfg[table] = {**cfg.get(table, {}), **q[table]}
    if "num" in q:
        for a in cfg.get("axes", []):
            if "num" in a:
                a["num"] = q["num"]
    return cfg


@dataclasses.dataclass(frozen=True)
class Run:
    """Where and at which sizes a reproduction runs."""
    out: Path
    quick: bool = False
    quiet: bool = False
    extra: dict | None = None

    def sweep(self, name: str) -> Results:
        """Run (or reload) the sweep of experiments/<name>.toml into out/data/<name>."""
        from simlab.sweep import run_sweep
        data = self.out / "data" / name
        cfg = experiment_config(name, self.quick, extra=self.extra)
        res = run_sweep(cfg, out=data, quiet=self.quiet)
        shutil.rmtree(data / "chunks", ignore_errors=True)  # results.npz holds everything
        return res

    def title(self, res: Results, what: str) -> str:
        n = res.n_seeds
        tag = " [quick sizes]" if self.quick else ""
        return f"{what}{tag}\n{plot.sizes_label(res.meta)}, {n} seed{'s' * (n != 1)}"


# ------------------------------------------------------------------------------ experiments
# One function per config: it runs (or reloads) that sweep and draws its figures.
def _maps(r: Run, name: str, x: str, y: str, metrics, what: str, contour=True) -> list[Path]:
    """Phase diagrams of `metrics` over (x, y), with the iso-entropy contour on the others."""
    res, files = r.sweep(name), []
    for m in metrics:
        c = contour and m != "attn_entropy"
        f = r.out / f"{name}_{m}.png"
        plot.plot_results(res, x=x, y=y, metric=m, contour="attn_entropy" if c else None,
                          contour_levels=ISO_ENTROPY if c else None,
                          title=r.title(res, f"{m}: {what}"), out=f)
        files.append(f)
    return files


def fig_paper(r: Run) -> list[Path]:
    files = _maps(r, "paper", "drift_norm", "lambda", ("input_cos", "attn_cos", "attn_cos_within",
                                                      "out_cos", "attn_entropy"),
                  "drift N x q/k scale lambda")
    res = r.sweep("paper")
    lam = res.axes["lambda"]
    i = int(np.argmin(np.abs(np.log(lam))))
    series = {m: (res.mean(m)[:, i], res.std(m)[:, i])
              for m in ("input_cos", "attn_cos", "attn_cos_within", "out_cos", "attn_entropy")}
    fig, _ = plot.curves(res.axes["drift_norm"], series, x_label="drift_norm N",
                         y_label="value (seed mean +- 1 std)",
                         title=r.title(res, f"cut at lambda = {lam[i]:.3g} (BERT init)"))
    return files + [plot.save_figure(fig, r.out / "paper_vs_drift.png")]


def fig_mechanism_map(name: str):
    def draw(r: Run) -> list[Path]:
        return _maps(r, name, "q_shift", "lambda", ("attn_entropy", "out_cos_within"),
                     "query shift x q/k scale")
    return draw


def fig_kshift(r: Run) -> list[Path]:
    ks = r.sweep("mechanism_kshift")
    ent, std = ks.mean("attn_entropy"), ks.std("attn_entropy")       # (q_shift, k_shift)
    spread = float(np.max(np.abs(ks["attn_entropy"] - ks["attn_entropy"][:, :1])))
    label = "attn_entropy (seed mean +- 1 std)"
    fig, ax = plot.curves(ks.axes["k_shift"], {"k_shift sweep (q_shift = min)": (ent[0], std[0])},
                          x_label="shift norm (q_shift or k_shift)", y_label=label,
                          title=r.title(ks, f"k_shift: max |change| of entropy = {spread:.1e}"))
    plot.curves(ks.axes["q_shift"], {"q_shift sweep (k_shift = min)": (ent[:, 0], std[:, 0])},
                x_label="shift norm (q_shift or k_shift)", y_label=label, ax=ax)
    return [plot.save_figure(fig, r.out / "mechanism_kshift.png")]


def fig_drift_as_shift(r: Run) -> list[Path]:
    """Entropy against the measured mean-query norm, for the q_shift and the drift sweeps."""
    ks, dr = r.sweep("mechanism_kshift"), r.sweep("mechanism_drift")
    fig, ax = plot.curves(ks.mean("q_mean_norm")[:, 0],
                          {"q_shift sweep": (ks.mean("attn_entropy")[:, 0], None)},
                          x_label="measured mean-query norm |mean q'| (per head, after q_scale)",
                          y_label="attn_entropy (seed mean)",
                          title=r.title(dr, "drift N acts through the mean query N u_b W_Q"))
    plot.curves(dr.mean("q_mean_norm"), {"drift_norm sweep": (dr.mean("attn_entropy"), None)},
                x_label="measured mean-query norm |mean q'| (per head, after q_scale)",
                y_label="attn_entropy (seed mean)", ax=ax)
    return [plot.save_figure(fig, r.out / "mechanism_drift_as_shift.png")]


def fig_temp_corr(r: Run) -> list[Path]:
    from simlab import theory
    res = r.sweep("temp_corr")
    T = res.meta["config"]["inputs"]["length"]
    boundary = theory.gg_boundary_curve(T, p=np.linspace(0, 0.95, 100))
    files = []
    for m in ("out_cos_within", "attn_entropy"):
        c = m != "attn_entropy"
        fig, _ = plot.phase_diagram(
            1.0 / res.axes["temperature"], res.axes["input_corr"], res.mean(m),
            x_label="inverse temperature 1/temperature", y_label="input_corr p",
            z_label=f"{m} (seed mean)", x_log=True, y_log=False,
            contour=res.mean("attn_entropy") if c else None,
            contour_levels=ISO_ENTROPY if c else None, contour_label="attn_entropy" if c else None,
            theory=[boundary], title=r.title(res, f"{m}: inverse temperature x input correlation"))
        files.append(plot.save_figure(fig, r.out / f"temp_corr_{m}.png"))
    return files


def fig_qknorm(name: str):
    def draw(r: Run) -> list[Path]:
        return _maps(r, name, "drift_norm", "temperature", ("attn_entropy", "attn_cos", "out_cos"),
                     f"drift N x temperature, QK-norm {name.split('_')[1]}")
    return draw


def fig_depth(kind: str):
    def draw(r: Run) -> list[Path]:
        res, files = r.sweep(f"depth_{kind}"), []
        for m in ("out_cos", "attn_entropy"):
            mean, std = res.mean(m), res.std(m)          # (temperature, layer)
            series = {f"temperature = {t:g}": (mean[i], std[i])
                      for i, t in enumerate(res.axes["temperature"])}
            fig, _ = plot.curves(np.arange(1, mean.shape[-1] + 1), series, x_label="layer",
                                 y_label=f"{m} (seed mean +- 1 std)", x_log=False,
                                 title=r.title(res, f"{m} per layer, {kind} stack"))
            files.append(plot.save_figure(fig, r.out / f"depth_{kind}_{m}.png"))
        return files
    return draw


FIGURES: dict[str, Callable[[Run], list[Path]]] = {
    "paper": fig_paper,
    "mechanism_attention": fig_mechanism_map("mechanism_attention"),
    "mechanism_bert": fig_mechanism_map("mechanism_bert"),
    "mechanism_kshift": fig_kshift,
    "mechanism_drift": fig_drift_as_shift,
    "temp_corr": fig_temp_corr,
    "qknorm_off": fig_qknorm("qknorm_off"), "qknorm_on": fig_qknorm("qknorm_on"),
    **{f"depth_{k}": fig_depth(k) for k in ("attention", "post_ln", "pre_ln")},
}
# The experiments of the study, each a group of configs; --only takes groups or configs.
EXPERIMENTS: dict[str, tuple[str, ...]] = {
    "paper": ("paper",),
    "mechanism": ("mechanism_attention", "mechanism_bert", "mechanism_kshift", "mechanism_drift"),
    "temp_corr": ("temp_corr",),
    "qknorm": ("qknorm_off", "qknorm_on"),
    "depth": ("depth_attention", "depth_post_ln", "depth_pre_ln"),
}


def reproduce(names=None, out: str | Path | None = None, quick: bool = False,
              quiet: bool = False, extra: dict | None = None) -> dict[str, Any]:
    """Run the named experiments or configs (all by default); returns config -> (files, s).
    `extra`: overrides applied on top of every config (see `override`)."""
    configs = []
    for n in names or EXPERIMENTS:
        if n not in EXPERIMENTS and n not in FIGURES:
            raise ConfigError(f"--only: unknown experiment {n!r}; allowed: experiments "
                              f"{', '.join(EXPERIMENTS)}, or configs {', '.join(FIGURES)}")
        configs += [c for c in EXPERIMENTS.get(n, (n,)) if c not in configs]
    out = Path(out) if out is not None else Path("figures") / ("quick" if quick else "")
    done, r = {}, Run(out, quick, quiet, extra)
    for i, n in enumerate(configs, 1):
        if not quiet:
            print(f"[{i}/{len(configs)}] {n} ({'quick' if quick else 'full'} sizes) -> {out}",
                  flush=True)
        t0 = time.perf_counter()
        files = FIGURES[n](r)
        done[n] = (files, time.perf_counter() - t0)
        if not quiet:
            print(f"      {len(files)} figures in {done[n][1]:.1f} s", flush=True)
    return done


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true",
                        help="small sizes (the whole set in minutes on a laptop CPU)")
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help=f"experiments ({', '.join(EXPERIMENTS)}) or single configs "
                             f"({', '.join(FIGURES)}) to run")
    parser.add_argument("--out", metavar="DIR",
                        help="figure directory (default figures/, or figures/quick with --quick)")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    from simlab.sweep import add_cache_argument
    add_cache_argument(parser)


def cli_main(args) -> int:
    from simlab.sweep import apply_cache_argument
    apply_cache_argument(args)
    done = reproduce(args.only, args.out, args.quick, args.quiet)
    total = sum(s for _, s in done.values())
    print(f"reproduce: {sum(len(f) for f, _ in done.values())} figures in {total:.1f} s")
    return 0
