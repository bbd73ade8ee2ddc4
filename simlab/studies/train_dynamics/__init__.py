"""Training dynamics: does the mean query/key drift appear, and does it explain sharpening?

Godey, de la Clergerie & Sagot (EACL 2024, arXiv 2401.12143), section on training: in trained
language models the mean query mq and the mean key mk drift away from the origin along
nearly parallel (or anti-parallel) directions, |mq . mk| grows, and attention gets sharper.
Here a small decoder is trained from scratch on a synthetic corpus (`corpus`) and the
statistics are tracked at log-spaced checkpoints on a fixed held-out batch; then the measured
statistics are fed as knobs into the untrained lab (simlab.core.lab.Lab) to see whether an
untrained block with the same scale and shift reproduces the trained attention entropy.

Model: token embedding + learned positions, `depth` pre-LN causal blocks computed by
simlab.core.block.stack_apply (the same pure functions, params layout and init as the lab; knobs at
their defaults), final LayerNorm, untied unembedding; AdamW with warm-up + cosine decay.

Tracked, per layer l and head h, from the RAW projections q = LN1(x) W_Q + b_Q, k likewise
(over all B*T held-out tokens; mq, mk the means, q~ = q - mq):
  q_mean_norm |mq|, k_mean_norm |mk|, qk_mean_cos cos(mq, mk) (simlab.core.metrics.qk_drift),
  qk_mean_dot |mq . mk|, q_rms sqrt(mean |q~|^2), k_rms likewise,
  attn_entropy (simlab.core.metrics.attn_entropy of the head, normalised), attn_max,
  logit_std, token_logit_std, shift_logit_std: the std over the attended keys j <= i of
  l_ij = q_i.k_j/sqrt(K), of its token-specific part q~_i.k_j/sqrt(K) and of its shared part
  mq.k_j/sqrt(K), RMS over rows i >= 1 (q_i.mk is constant over j: softmax ignores it);
per layer: input_cos, input_cos_within (anisotropy of the layer input,
  simlab.core.metrics.anisotropy), out_cos, out_cos_within (of the layer output = hidden
  state), attn_input_corr (mean within-sequence cosine of the globally centred LN1(x));
per step: loss (held-out next-token cross-entropy, nats).

Result file (simlab.load): axes (step, layer, head) and every metric has shape
(step, layer, head, seed): a metric that does not depend on head (or layer) has size 1 there
(broadcastable); meta["dims"][name] names the real dims. seed = training seeds (default 1).

Modules: config (TrainConfig, sizes from experiments/train_dynamics.toml), corpus (the synthetic
corpora), model (the decoder, loss, optimiser), stats (what is tracked), loop (training and
closing the loop), report (summary and figures); `simlab train-dynamics` is defined here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from simlab.engine import results
from simlab.errors import ConfigError
from simlab.studies.train_dynamics.config import TrainConfig, load
from simlab.studies.train_dynamics.loop import run
from simlab.studies.train_dynamics.report import format_summary, make_figures, summarize

__all__ = ["TrainConfig", "load", "run", "summarize", "format_summary", "make_figures"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`simlab train-dynamics` arguments."""
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small model, few steps (about 20 s on 2 CPU cores)",
    )
    parser.add_argument(
        "--corpus",
        choices=("zipf", "uniform", "both"),
        default="both",
        help="synthetic corpus (default: both)",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="output directory: OUT/<corpus>/results.npz + meta.json, OUT/summary.json "
        "(default runs/train-dynamics[-quick])",
    )
    parser.add_argument(
        "--figures",
        default=None,
        help="figure directory (default: figures/ for a full run, OUT/figures for --quick)",
    )
    parser.add_argument("--no-figures", action="store_true", help="write no figures")
    parser.add_argument("--steps", type=int, default=None, help="override the number of steps")
    parser.add_argument("--seeds", type=int, default=None, help="training seeds (default 1)")
    parser.add_argument("--seed", type=int, default=None, help="base seed (default 0)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--plot-only",
        action="store_true",
        help="do not train: reload OUT/<corpus> and redraw the figures and summary",
    )


def cli_main(args) -> int:
    """Train on each corpus, save results, print the summary, draw the figures."""
    overrides = {}
    for name in ("steps", "seeds", "seed"):
        v = getattr(args, name)
        if v is not None:
            if v < (0 if name == "seed" else 1):
                raise ConfigError(f"train-dynamics.{name}: {v} is too small")
            overrides[name] = v
    cfg = load(args.quick, overrides)
    from simlab.engine.store import check_writable

    out = check_writable(
        args.out or ("runs/train-dynamics-quick" if args.quick else "runs/train-dynamics"), "--out"
    )
    corpora = ("zipf", "uniform") if args.corpus == "both" else (args.corpus,)
    t0, runs, summary = time.perf_counter(), {}, {}
    for name in corpora:
        runs[name] = (
            results.load(out / name)
            if args.plot_only
            else run(dataclasses.replace(cfg, corpus=name), out / name, args.quiet)
        )
        summary[name] = summarize(runs[name])
        print(format_summary(name, summary[name]), flush=True)
    old = out / "summary.json"
    summary["wall_time_s"] = (
        json.loads(old.read_text()).get("wall_time_s")
        if args.plot_only and old.exists()
        else time.perf_counter() - t0
    )
    results.atomic_write_bytes(old, json.dumps(summary, indent=2).encode())
    if not args.no_figures:
        fig_dir = (
            Path(args.figures)
            if args.figures
            else (out / "figures" if args.quick else Path("figures"))
        )
        for p in make_figures(runs, fig_dir):
            print(f"figure: {p}")
    print(
        f"results in {out}/<corpus> (simlab.load), summary in {out / 'summary.json'}; "
        f"wall time {time.perf_counter() - t0:.0f} s"
    )
    return 0
