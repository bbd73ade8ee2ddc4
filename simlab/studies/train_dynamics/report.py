"""The report of a training-dynamics run: summary numbers, the printed table, the figures."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simlab.engine.results import Results
from simlab.studies.train_dynamics.loop import TABLE_FRACTIONS
from simlab.studies.train_dynamics.stats import PER_HEAD, PER_LAYER


def table_steps(res: Results) -> list[int]:
    """The checkpoints nearest to TABLE_FRACTIONS of the run."""
    steps = res.axes["step"]
    return sorted({int(steps[np.argmin(np.abs(steps - f * steps[-1]))]) for f in TABLE_FRACTIONS})


def summarize(res: Results) -> dict:
    """Numbers for the report: per layer at the first and the last checkpoint (head mean and
    [min, max] over heads, seed mean), the loss, and the closing-the-loop table."""
    steps, out = res.axes["step"], {}
    m = {n: res.mean(n) for n in res.metrics}  # (step, layer|1, head|1)
    out["loss"] = {
        "first": float(m["loss"][0, 0, 0]),
        "last": float(m["loss"][-1, 0, 0]),
        "floor": res.meta["corpus"]["conditional_entropy"],
        "unigram_entropy": res.meta["corpus"]["unigram_entropy"],
    }
    per = {}
    for name in PER_HEAD + PER_LAYER:
        x = m[name]
        per[name] = {
            when: [
                {
                    "mean": float(x[i, l].mean()),
                    "min": float(x[i, l].min()),
                    "max": float(x[i, l].max()),
                }
                for l in range(x.shape[1])
            ]
            for when, i in (("first", 0), ("last", -1))
        }
    a = np.abs(m["qk_mean_cos"])
    per["abs_qk_mean_cos"] = {
        when: [
            {
                "mean": float(a[i, l].mean()),
                "min": float(a[i, l].min()),
                "max": float(a[i, l].max()),
            }
            for l in range(a.shape[1])
        ]
        for when, i in (("first", 0), ("last", -1))
    }
    out["layers"] = per
    share = m["shift_logit_std"] ** 2 / np.maximum(m["logit_std"] ** 2, 1e-30)
    out["shift_share_last"] = [float(v) for v in share[-1].mean(-1)]
    out["loop"] = []
    for s in table_steps(res):
        i = int(np.argmin(np.abs(steps - s)))
        for l in range(m["attn_entropy"].shape[1]):
            row = {"step": s, "layer": l}
            for n in (
                "attn_entropy",
                "lab_entropy_norms",
                "lab_entropy_aligned",
                "token_logit_std",
                "lab_token_logit_std",
                "shift_logit_std",
                "q_mean_norm",
                "q_rms",
            ):
                row[n] = float(m[n][i, l].mean())
            row["attn_input_corr"] = float(m["attn_input_corr"][i, l, 0])
            out["loop"].append(row)
    return out


def format_summary(name: str, s: dict) -> str:
    lines = [
        f"[{name}] held-out loss {s['loss']['first']:.3f} -> {s['loss']['last']:.3f} nats "
        f"(Markov floor {s['loss']['floor']:.3f}, unigram entropy "
        f"{s['loss']['unigram_entropy']:.3f})"
    ]
    lay = s["layers"]
    for l in range(len(lay["attn_entropy"]["last"])):
        f = {n: lay[n]["first"][l]["mean"] for n in lay}
        t = {n: lay[n]["last"][l]["mean"] for n in lay}
        lines.append(
            f"  layer {l}: |mq| {f['q_mean_norm']:.2f}->{t['q_mean_norm']:.2f}  |mk| "
            f"{f['k_mean_norm']:.2f}->{t['k_mean_norm']:.2f}  "
            f"|cos(mq,mk)| {t['abs_qk_mean_cos']:.2f} "
            f"(cos per head in [{lay['qk_mean_cos']['last'][l]['min']:+.2f},"
            f"{lay['qk_mean_cos']['last'][l]['max']:+.2f}])"
            f"  |mq.mk| {f['qk_mean_dot']:.3f}->{t['qk_mean_dot']:.2f}  entropy "
            f"{f['attn_entropy']:.2f}->{t['attn_entropy']:.2f}  anisotropy(out) "
            f"{f['out_cos']:.2f}->{t['out_cos']:.2f} (within {t['out_cos_within']:.2f})  "
            f"shared share of logit var {s['shift_share_last'][l]:.2f}"
        )
    lines.append(
        "  closing the loop (head means): step layer  measured  lab[norms]  lab[aligned]"
        "  token-logit-std measured/lab"
    )
    for r in s["loop"]:
        lines.append(
            f"    {r['step']:5d} {r['layer']:3d}     {r['attn_entropy']:.3f}     "
            f"{r['lab_entropy_norms']:.3f}       {r['lab_entropy_aligned']:.3f}        "
            f"{r['token_logit_std']:.3f}/{r['lab_token_logit_std']:.3f}"
        )
    return "\n".join(lines)


COLORS = {"zipf": "tab:blue", "uniform": "tab:orange"}

STYLES = ("-", "--", ":", "-.")


def _plot_line(ax, x, mean, band, label, color, ls, y_label, y_log=False):
    """One series through simlab.plot.curves (log step axis), restyled; NaN points dropped."""
    from simlab.plot import curves

    keep = np.isfinite(mean)
    if band is not None:
        band = tuple(b[keep] for b in band)
    curves(
        x[keep],
        {label: (mean[keep], band)},
        x_label="training step",
        y_label=y_label,
        x_log=True,
        y_log=y_log,
        ax=ax,
    )
    ax.get_lines()[-1].set(color=color, linestyle=ls, markersize=2.5)
    if band is not None:
        ax.collections[-1].set_color(color)


def _legend(ax):
    ax.legend(fontsize=7, framealpha=0.85, handlelength=3.5)


def _per_layer_panel(ax, runs, metric, y_label, y_log=False, band=True, fn=None):
    """Head mean of fn(metric) (seed mean) per corpus and layer, band = [min, max] over heads;
    step 0 is left out (log axis)."""
    for name, res in runs.items():
        x, m = res.axes["step"][1:], res.mean(metric)[1:]
        m = fn(res)[1:] if fn is not None else m
        for l in range(m.shape[1]):
            v = m[:, l]
            b = (v.min(-1), v.max(-1)) if band and v.shape[-1] > 1 else None
            _plot_line(
                ax,
                x,
                v.mean(-1),
                b,
                f"{name} L{l}",
                COLORS[name],
                STYLES[l % len(STYLES)],
                y_label,
                y_log,
            )
    _legend(ax)


def make_figures(runs: dict[str, Results], fig_dir) -> list[Path]:
    """train_drift.png, train_entropy_anisotropy.png, train_loop_entropy.png in fig_dir."""
    from matplotlib.figure import Figure

    from simlab.plot import save_figure

    fig_dir, paths = Path(fig_dir), []
    tag = ", ".join(f"{c}: {r.meta['config']['steps']} steps" for c, r in runs.items())

    fig = Figure(figsize=(15, 12), layout="constrained")
    axs = fig.subplots(3, 3)
    share = lambda r: r.mean("shift_logit_std") ** 2 / np.maximum(r.mean("logit_std") ** 2, 1e-30)  # noqa: E731
    panels = [
        ("q_mean_norm", "|mean q| (head mean; band: min-max over heads)", True, None),
        ("k_mean_norm", "|mean k|", True, None),
        ("qk_mean_dot", "|mean q . mean k|", True, None),
        ("qk_mean_cos", "|cos(mean q, mean k)|", False, lambda r: np.abs(r.mean("qk_mean_cos"))),
        ("q_rms", "RMS norm of centred queries |q - mean q|", True, None),
        ("k_rms", "RMS norm of centred keys |k - mean k|", True, None),
        ("shift_logit_std", "std over keys of shared logit mq.k_j/sqrt(K)", True, None),
        ("token_logit_std", "std over keys of token logit (q_i-mq).k_j/sqrt(K)", True, None),
        ("logit_std", "shared share of logit variance", False, share),
    ]
    for ax, (metric, label, log, fn) in zip(axs.ravel(), panels):
        _per_layer_panel(ax, runs, metric, label, y_log=log, fn=fn)
    fig.suptitle(
        f"Mean query/key drift during training ({tag}); held-out batch; "
        "solid: layer 0, dashed: layer 1"
    )
    paths.append(save_figure(fig, fig_dir / "train_drift.png"))

    fig = Figure(figsize=(11, 8.5), layout="constrained")
    axs = fig.subplots(2, 2)
    _per_layer_panel(axs[0, 0], runs, "attn_entropy", "attention entropy / log(n_keys)")
    _per_layer_panel(axs[0, 1], runs, "out_cos", "hidden-state anisotropy (global cos)", band=False)
    _per_layer_panel(axs[1, 0], runs, "out_cos_within", "anisotropy within sequence", band=False)
    ax = axs[1, 1]
    for name, res in runs.items():
        x = res.axes["step"][1:]
        _plot_line(
            ax,
            x,
            res.mean("loss")[1:, 0, 0],
            None,
            f"{name} held-out loss",
            COLORS[name],
            "-",
            "next-token loss (nats)",
        )
        ax.axhline(
            res.meta["corpus"]["conditional_entropy"],
            color=COLORS[name],
            ls=":",
            lw=1,
            label=f"{name} Markov floor",
        )
        ax.axhline(
            res.meta["corpus"]["unigram_entropy"],
            color=COLORS[name],
            ls="-.",
            lw=1,
            label=f"{name} unigram entropy",
        )
    _legend(ax)
    fig.suptitle(f"Attention entropy, anisotropy of layer outputs and loss ({tag})")
    paths.append(save_figure(fig, fig_dir / "train_entropy_anisotropy.png"))

    fig = Figure(figsize=(5 * (len(runs) + 1), 4.8), layout="constrained")
    axs = fig.subplots(1, len(runs) + 1)
    for ax, (name, res) in zip(axs, runs.items()):
        x = res.axes["step"][1:]
        for l in range(res.metrics["attn_entropy"].shape[1]):
            for metric, ls, what in (
                ("attn_entropy", "-", "measured"),
                ("lab_entropy_norms", "--", "lab [norms]"),
                ("lab_entropy_aligned", ":", "lab [aligned]"),
            ):
                _plot_line(
                    ax,
                    x,
                    res.mean(metric)[1:, l].mean(-1),
                    None,
                    f"L{l} {what}",
                    f"C{l}",
                    ls,
                    "attention entropy (head mean)",
                )
        ax.set_title(
            f"{name}: trained (solid) vs untrained lab block with the measured scale/shift",
            fontsize=9,
        )
        _legend(ax)
    ax = axs[-1]
    for name, res in runs.items():
        steps = res.axes["step"]
        for j, s in enumerate(table_steps(res)):
            i = int(np.argmin(np.abs(steps - s)))
            meas = res.mean("attn_entropy")[i].ravel()
            for metric, mk in (("lab_entropy_norms", "o"), ("lab_entropy_aligned", "^")):
                ax.scatter(
                    meas,
                    res.mean(metric)[i].ravel(),
                    marker=mk,
                    s=20,
                    color=COLORS[name],
                    alpha=0.3 + 0.35 * j,
                    edgecolors="none",
                    label=f"{name} [{metric.split('_')[-1]}]" if j == 0 else None,
                )
    ax.plot([1e-3, 2], [1e-3, 2], color="k", lw=0.8)
    ax.set(
        xlabel="measured entropy (one point per layer and head)",
        ylabel="lab-predicted entropy",
        xscale="log",
        yscale="log",
        xlim=(1e-2, 1.3),
        ylim=(1e-2, 1.3),
    )
    ax.set_title("checkpoints at 1/4, 1/2 and all of the run (darker = later)", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, framealpha=0.85)
    paths.append(save_figure(fig, fig_dir / "train_loop_entropy.png"))
    return paths
