"""The figures of a training-dynamics run (docs/training.md): per task family, the seed mean
and range of each statistic over the steps, one column per task, one line per corpus."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simlab.engine.results import Results
from simlab.studies.train_dynamics.report import table_steps

COLORS = {"zipf": "tab:blue", "uniform": "tab:orange", "bytes": "tab:green"}
STYLES = ("-", "--", ":", "-.")
FAMILY_ORDER = ("markov", "recall", "induction", "text")


def families(runs: dict[str, Results]) -> dict[str, dict[str, Results]]:
    """task -> {corpus: results}, in FAMILY_ORDER (one figure column each)."""
    out: dict[str, dict[str, Results]] = {}
    for task in FAMILY_ORDER:
        for name, res in runs.items():
            if res.meta["corpus"]["task"] == task:
                out.setdefault(task, {})[name] = res
    return out


def _seed_curve(res: Results, metric: str, layer: int, fn=None):
    """(steps >= 1, seed mean, seed min, seed max) of the head mean of fn(metric array)."""
    x = res[metric] if fn is None else fn(res)
    v = x[1:, layer].mean(1)  # (step, seed)
    return res.axes["step"][1:], v.mean(-1), v.min(-1), v.max(-1)


def _plot(ax, res, name, metric, layer, y_label, y_log=False, fn=None, ls=None, what=""):
    """One layer of one corpus, band = min..max over seeds; NaN points dropped."""
    # deferred: matplotlib (heavy), loaded only when a figure is drawn
    from simlab.plot import curves

    x, m, lo, hi = _seed_curve(res, metric, layer, fn)
    keep = np.isfinite(m)
    curves(
        x[keep],
        {f"{name} L{layer}{what}": (m[keep], (lo[keep], hi[keep]))},
        x_label="training step",
        y_label=y_label,
        x_log=True,
        y_log=y_log,
        ax=ax,
    )
    color = COLORS[res.meta["corpus"]["law"]]
    ax.get_lines()[-1].set(color=color, linestyle=ls or STYLES[layer % 4], markersize=2)
    ax.collections[-1].set_color(color)


def _grid(fam, rows, size=(4.4, 3.0)):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(size[0] * len(fam), size[1] * rows), layout="constrained")
    axs = np.asarray(fig.subplots(rows, len(fam), squeeze=False))
    return fig, axs


def _tag(runs: dict[str, Results]) -> str:
    cfg = next(iter(runs.values())).meta["config"]
    return (
        f"d_model {cfg['d_model']}, depth {cfg['depth']}, {cfg['n_heads']} heads, context "
        f"{cfg['context']}, {cfg['steps']} steps, {cfg['seeds']} seeds; band: min-max over "
        "seeds"
    )


def _abs_cos(r):
    return np.abs(r["qk_mean_cos"])


def _share(r):
    return r["shift_logit_std"] ** 2 / np.maximum(r["logit_std"] ** 2, 1e-30)


def make_figures(runs: dict[str, Results], fig_dir) -> list[Path]:
    """train_drift.png, train_entropy_anisotropy.png, train_loop_entropy.png in fig_dir: one
    column per corpus family, one line per corpus and layer."""
    from matplotlib.figure import Figure

    # deferred: matplotlib (heavy), loaded only when a figure is drawn
    from simlab.plot import save_figure

    fig_dir, paths, fam = Path(fig_dir), [], families(runs)

    panels = [
        ("q_mean_norm", "|mean q| (head mean)", True, None),
        ("k_mean_norm", "|mean k| (head mean)", True, None),
        ("qk_mean_dot", "|mean q . mean k| (head mean)", True, None),
        ("qk_mean_cos", "|cos(mean q, mean k)| (head mean)", False, _abs_cos),
        ("q_rms", "RMS of centred queries |q - mean q|", True, None),
        ("logit_std", "shared share of logit variance", False, _share),
    ]
    fig, axs = _grid(fam, len(panels))
    for j, (task, group) in enumerate(fam.items()):
        for i, (metric, label, log, fn) in enumerate(panels):
            for name, res in group.items():
                for l in range(res["attn_entropy"].shape[1]):
                    _plot(axs[i, j], res, name, metric, l, label, log, fn)
            axs[i, j].legend(fontsize=6, framealpha=0.8)
        axs[0, j].set_title(task, fontsize=11)
    fig.suptitle(
        f"Mean query/key drift during training ({_tag(runs)}); solid: layer 0, dashed: layer 1",
        fontsize=10,
    )
    paths.append(save_figure(fig, fig_dir / "train_drift.png"))

    fig, axs = _grid(fam, 4)
    for j, (task, group) in enumerate(fam.items()):
        for name, res in group.items():
            for l in range(res["attn_entropy"].shape[1]):
                _plot(axs[0, j], res, name, "attn_entropy", l, "attention entropy / log(n_keys)")
                _plot(axs[1, j], res, name, "out_cos", l, "hidden-state anisotropy (global cos)")
                _plot(axs[2, j], res, name, "out_cos_within", l, "anisotropy within sequence")
            _plot(axs[3, j], res, name, "loss", 0, "loss, tracked held-out batch (nats)", ls="-")
            axs[3, j].get_lines()[-1].set_label(f"{name} loss")
            c, color = res.meta["corpus"], COLORS[res.meta["corpus"]["law"]]
            axs[3, j].axhline(
                c["context_free_loss"], color=color, ls="-.", lw=1, label=f"{name} context-free"
            )
            if c["loss_floor"] is not None:
                axs[3, j].axhline(c["loss_floor"], color=color, ls=":", lw=1, label=f"{name} floor")
        for i in range(4):
            axs[i, j].legend(fontsize=6, framealpha=0.8)
        axs[0, j].set_title(task, fontsize=11)
    for i in range(3):  # one y-range per quantity across the tasks: dips compare at a glance
        lo = min(ax.get_ylim()[0] for ax in axs[i])
        hi = max(ax.get_ylim()[1] for ax in axs[i])
        for ax in axs[i]:
            ax.set_ylim(0.0 if i == 0 else lo, 1.02 if i == 0 else hi)
    title = (
        f"Attention entropy, anisotropy of layer outputs, loss ({_tag(runs)}); solid: layer 0, "
        "dashed: layer 1.\nThe loss curves are on the tracked held-out batch (the same "
        "sequences at every checkpoint); docs/training.md's final losses are on 128 held-out "
        "sequences per seed."
    )
    fig.suptitle(title, fontsize=10)
    paths.append(save_figure(fig, fig_dir / "train_entropy_anisotropy.png"))

    n_layers = next(iter(runs.values()))["attn_entropy"].shape[1]
    fig = Figure(figsize=(4.4 * (len(fam) + 1), 3.2 * n_layers), layout="constrained")
    axs = np.asarray(fig.subplots(n_layers, len(fam) + 1, squeeze=False))
    for j, (task, group) in enumerate(fam.items()):
        for l in range(n_layers):
            ax = axs[l, j]
            for name, res in group.items():
                for metric, ls, what in (
                    ("attn_entropy", "-", " measured"),
                    ("lab_entropy_norms", "--", " lab[norms]"),
                    ("lab_entropy_aligned", ":", " lab[aligned]"),
                ):
                    label = "attention entropy (head mean)"
                    _plot(ax, res, name, metric, l, label, ls=ls, what=what)
            ax.set_title(f"{task}, layer {l}", fontsize=9)
            ax.legend(fontsize=6, framealpha=0.8)
    for l in range(n_layers):
        ax = axs[l, -1]
        for name, res in runs.items():
            steps = res.axes["step"]
            for k, s in enumerate(table_steps(res)):
                i = int(np.argmin(np.abs(steps - s)))
                ax.scatter(
                    res["attn_entropy"][i, l].ravel(),
                    res["lab_entropy_norms"][i, l].ravel(),
                    s=14,
                    color=COLORS[res.meta["corpus"]["law"]],
                    marker="osD^v<>"[list(runs).index(name) % 7],
                    alpha=0.3 + 0.3 * k,
                    edgecolors="none",
                    label=name if k == len(table_steps(res)) - 1 else None,
                )
        ax.plot([1e-3, 2], [1e-3, 2], color="k", lw=0.8)
        ax.set(
            xlabel=f"measured entropy, layer {l} (each head and seed)",
            ylabel="lab [norms] entropy",
            xscale="log",
            yscale="log",
            xlim=(1e-2, 1.3),
            ylim=(1e-2, 1.3),
        )
        ax.set_title("checkpoints at 1/4, 1/2, 1 of the run (darker = later)", fontsize=8)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6, framealpha=0.8)
    fig.suptitle(
        f"Closing the loop: trained (solid) vs the untrained lab with the measured scale and "
        f"shift, dashed [norms], dotted [aligned] ({_tag(runs)})",
        fontsize=10,
    )
    paths.append(save_figure(fig, fig_dir / "train_loop_entropy.png"))
    return paths
