"""Training dynamics: does the mean query/key drift appear, and does it explain sharpening?

Godey, de la Clergerie & Sagot (EACL 2024, arXiv 2401.12143), section on training: in trained
language models the mean query mq and the mean key mk drift away from the origin along
nearly parallel (or anti-parallel) directions, |mq . mk| grows, and attention gets sharper.
Here a small decoder is trained from scratch, with several seeds, on each corpus of
`corpus.CORPORA` (tasks that need attention, recall and induction, in a long-tailed and a
uniform variant; bytes of real text; first-order Markov chains that need none), and the
statistics are tracked at log-spaced checkpoints on a fixed held-out batch; then the measured
statistics are fed as knobs into the untrained lab (simlab.core.lab.Lab) to see whether an
untrained block with the same scale and shift reproduces the trained attention entropy. The
verdicts (attention used, drift, sharpening, the lab predicts) are computed from the numbers
against config.Criteria (docs/training.md, "Verdicts: the criteria").

Model: token embedding + learned positions (initialised as sinusoids), `depth` pre-LN causal
blocks computed by simlab.core.block.stack_apply (the same pure functions, params layout and
init as the lab; knobs at their defaults), final LayerNorm, untied unembedding; AdamW with
warm-up + cosine decay.

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
per step: loss (held-out next-token cross-entropy, nats); per seed: meta["final_loss"], the
held-out loss of the final weights on `final_eval_batch` further held-out sequences.

Result file (simlab.load): axes (step, layer, head) and every metric has shape
(step, layer, head, seed): a metric that does not depend on head (or layer) has size 1 there
(broadcastable); meta["dims"][name] names the real dims. seed = training seeds: seed s
draws the weights (fold_in(PRNGKey(seed), s)) and the training data order; the corpus (Markov
maps, text split) and the held-out data depend on the base seed only.

Modules: config (TrainConfig, Criteria, from experiments/train_dynamics.toml), corpus (the
registry of corpora) with zipf (unigram laws), markov, recall, induction, text (one module per
task), model (the decoder, loss, optimiser), stats (what is tracked), loop (training and
closing the loop), report (numbers over seeds, verdicts, figures); `simlab train-dynamics` is
defined here.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from simlab.engine import records, results
from simlab.engine.store import check_writable
from simlab.studies.train_dynamics import corpus
from simlab.studies.train_dynamics.config import TrainConfig, load
from simlab.studies.train_dynamics.figures import make_figures
from simlab.studies.train_dynamics.loop import run
from simlab.studies.train_dynamics.report import (
    format_overall,
    format_summary,
    overall,
    summarize,
)

__all__ = [
    "TrainConfig",
    "load",
    "run",
    "study",
    "summarize",
    "overall",
    "format_summary",
    "make_figures",
]

# --corpus takes corpus names, task names (every corpus of that task) and "all" (every corpus)
GROUPS = {"all": tuple(corpus.CORPORA)} | {
    t: tuple(n for n, (task, _) in corpus.CORPORA.items() if task == t) for t in corpus.TASKS
}


def selected(cfg: TrainConfig, names) -> tuple[str, ...]:
    """The corpora to run: cfg.corpora, or the names/groups given, in CORPORA order."""
    if not names:
        return cfg.corpora
    chosen = {n for g in names for n in GROUPS.get(g, (g,))}
    return tuple(n for n in corpus.CORPORA if n in chosen)


def default_out(quick: bool) -> Path:
    """Where a run goes without --out (its figures in OUT/figures unless --figures says)."""
    return Path("runs/train-dynamics-quick" if quick else "runs/train-dynamics")


def study(
    quick: bool = False,
    overrides: dict | None = None,
    corpora=None,
    out: str | Path | None = None,
    figures: str | Path | None = None,
    quiet: bool = False,
    plot_only: bool = False,
    log=print,
) -> dict:
    """Check everything, build each corpus, then train on each (or, plot_only, reload OUT/<corpus>),
    save results and OUT/summary.json, log the summaries and the overall verdict, draw the
    figures into `figures` (None: none). Returns the summary."""
    cfg = load(quick, overrides or {})

    out = check_writable(out or default_out(quick), "--out")
    names = selected(cfg, corpora)
    cfgs = {n: dataclasses.replace(cfg, corpus=n) for n in names}
    if plot_only:
        for n in names:
            results.load(out / n)  # a missing run is a ResultsError before anything is written
    else:
        for c in cfgs.values():  # builds every corpus (text: reads the stdlib) before training
            corpus.floors(c.corpus_spec(), c.context + 1)
    t0, runs, summary = time.perf_counter(), {}, {}
    for n in names:
        runs[n] = results.load(out / n) if plot_only else run(cfgs[n], out / n, quiet)
        summary[n] = summarize(runs[n])
        log(format_summary(n, summary[n]))
    summary["overall"] = overall({n: summary[n] for n in names})
    log(format_overall(summary["overall"]))
    old = out / "summary.json"
    summary["wall_time_s"] = (
        json.loads(old.read_text()).get("wall_time_s")
        if plot_only and old.exists()
        else time.perf_counter() - t0
    )
    records.atomic_write_bytes(old, json.dumps(summary, indent=2).encode())
    if figures is not None:
        for p in make_figures(runs, Path(figures)):
            log(f"figure: {p}")
    log(
        f"results in {out}/<corpus> (simlab.load), summary in {out / 'summary.json'}; "
        f"wall time {time.perf_counter() - t0:.0f} s"
    )
    return summary
