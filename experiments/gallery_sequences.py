"""Tokens or sequences? The answer's BERT block (experiments/answer_geometry.toml: post-LN,
d_model 768, BERT init, uniform token ids, 16 x 512 tokens, N = 0.55, stream 4001) sharpened
from lambda 1 to 1000, its output's participation ratio over all 16 x 512 tokens and over two
subsets of n = 2048 tokens each: the first 4 sequences whole (4 x 512, the size of "The
referee's questions, by geometry") and the first 128 positions of all 16 sequences (16 x 128).
If the participation ratio's change depended on the number of tokens alone, the two subsets
would read alike; docs/gallery.md, "The answer, by geometry" ("One block, two sections, two
sample sizes") quotes this output.

    python experiments/gallery_sequences.py [SEEDS]        # 20: the committed sweep's seeds
    python experiments/gallery_sequences.py --quick [SEEDS]   # its [quick] sizes

It computes in memory (nothing written) with simlab.run_sweep and three diagnostic metrics
registered here, then checks that the all-token participation ratio is the committed sweep's,
seed by seed (the same samples: common random numbers), and prints the table. About 20 s a seed
on this 2-core CPU at the full size. tests/studies/test_gallery_sample_size.py tests the subset
measure against numpy and runs the quick sizes.
"""

import sys
import time
from pathlib import Path

import jax.numpy as jnp
import numpy as np

import simlab
from simlab.engine.config import apply_quick
from simlab.engine.results import seed_ci

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "experiments" / "answer_geometry.toml"
DRIFT = 0.55


def participation_ratio(y_BTD):
    """(tr C)^2 / tr C^2 of the centred covariance C of all tokens of y (B, T, D)."""
    y_ND = y_BTD.reshape(-1, y_BTD.shape[-1])
    y_ND = y_ND - y_ND.mean(0)
    c_DD = jnp.einsum("nd,ne->de", y_ND, y_ND) / y_ND.shape[0]
    return jnp.trace(c_DD) ** 2 / jnp.sum(c_DD * c_DD)


def subsets(batch: int, length: int) -> tuple:
    """(metric, words, sequences, positions): all tokens, the first batch / 4 sequences whole,
    and the first length / 4 positions of every sequence (the two of n = batch x length / 4)."""
    return (
        ("out_participation_ratio", "all tokens", batch, length),
        ("out_pr_first_sequences", "the first sequences, whole", batch // 4, length),
        ("out_pr_first_positions", "every sequence, the first positions", batch, length // 4),
    )


def _subset(b: int, t: int):
    return lambda c: participation_ratio(c.layer.y[:b, :t])


def register(batch: int, length: int) -> None:
    """The two subset metrics (default off), once per process."""
    from simlab.core.metrics import METRICS

    for name, words, b, t in subsets(batch, length)[1:]:
        if name in METRICS:
            continue
        simlab.register_metric(
            simlab.Metric(
                name,
                _subset(b, t),
                ("y",),
                f"participation ratio of the block output's {words} ({b} x {t} tokens)",
                bounds=(1.0, float(b * t)),
                default=False,
            )
        )


def unregister() -> None:
    """Remove the diagnostic metrics again (a test's process goes on without them)."""
    from simlab.core.metrics import METRICS

    for name in ("out_pr_first_sequences", "out_pr_first_positions"):
        if name in METRICS:
            METRICS.unregister(name)


def run(seeds: int, quick: bool = False):
    """The sweep (uniform ids, N = DRIFT, lambda 1 and 1000) in memory, and the committed one."""
    import tomllib

    cfg = tomllib.loads(CONFIG.read_text())
    if quick:
        cfg = apply_quick(cfg, cfg.get("quick"), str(CONFIG))
    batch, length = cfg["inputs"]["batch"], cfg["inputs"]["length"]
    register(batch, length)
    t0 = time.time()
    res = simlab.run_sweep(
        {k: cfg[k] for k in ("block", "inputs")},
        axes=[
            {"name": "drift_norm", "values": [DRIFT]},
            {"name": "lambda", "knobs": ["q_scale", "k_scale"], "values": [1.0, 1000.0]},
        ],
        sweep={
            "seeds": seeds,
            "base_seed": cfg["sweep"]["base_seed"],
            "metrics": [m for m, *_ in subsets(batch, length)],
        },
        quiet=True,
    )
    data = ROOT / "figures" / ("quick/data" if quick else "data")
    committed = simlab.load(data / "answer_geometry" / "uniform")
    return res, committed, simlab.load(data / "referee_geometry" / "bert"), time.time() - t0


def _deviation(res, metric: str, committed, seeds: int) -> float:
    """The largest relative deviation, over seeds and the two lambdas, of this run's `metric`
    from a committed sweep's out_participation_ratio at N = DRIFT."""
    i = int(np.argmin(np.abs(committed.axes["drift_norm"] - DRIFT)))
    mine = np.asarray(res[metric])[0]  # (lambda, seed)
    theirs = np.asarray(committed["out_participation_ratio"])[i][[0, -1], :seeds]
    return float(np.max(np.abs(mine / theirs - 1.0)))


def main(seeds: int = 20, quick: bool = False) -> str:
    res, committed, referee, wall = run(seeds, quick)
    batch, length = (committed.meta["config"]["inputs"][k] for k in ("batch", "length"))
    dev = _deviation(res, "out_participation_ratio", committed, seeds)
    ref_cfg = referee.meta["config"]["inputs"]
    nested = ""
    if (ref_cfg["batch"], ref_cfg["length"]) == (batch // 4, length):
        dev_ref = _deviation(res, "out_pr_first_sequences", referee, seeds)
        nested = (
            f"; the first {batch // 4} sequences' = \"The referee's questions, by geometry\"'s "
            f"BERT block ({ref_cfg['batch']} x {ref_cfg['length']} tokens, "
            f"experiments/referee_geometry.toml) to {dev_ref:.1e}, seed by seed: the same tokens"
        )
    lines = [
        f"The answer's block (uniform ids, N = {DRIFT:g}, {batch} x {length} tokens, lambda 1 and "
        f"1000, seeds 0-{seeds - 1} of stream {committed.meta['config']['sweep']['base_seed']}; "
        "all-token participation ratio = the "
        f"committed sweep's to {dev:.1e} relative, seed by seed{nested}; {wall:.0f} s):",
        "",
        "| tokens pooled | n | sequences | participation ratio at lambda 1 | sharpening's change "
        "(of the lambda-1 value) |",
        "|---|---|---|---|---|",
    ]
    for name, words, b, t in subsets(batch, length):
        x = np.asarray(res[name])[0]
        d = x[1] - x[0]
        lo, hi = (float(v) for v in seed_ci(d, -1))
        lines.append(
            f"| {words} ({b} x {t}) | {b * t} | {b} | {x[0].mean():.2f} | "
            f"{d.mean():+.2f} ± {(hi - lo) / 2:.2f} ({d.mean() / x[0].mean():+.2%}) |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    args = sys.argv[1:]
    q = "--quick" in args
    args = [a for a in args if a != "--quick"]
    print(main(int(args[0]) if args else 20, q), end="")
