"""The numbers docs/gallery.md quotes for the width experiment (section 6), from a data root:
seed means +- the half-width of their 95% Student-t interval over the seeds
(simlab.engine.results.seed_ci), the closed form at N -> 0 (theory.mlp_mean_gain) and claim 10's
mean-field curve with each seed's own weight statistics (the overlay of the figure):
python experiments/gallery_numbers_width.py figures/data    (or figures/quick/data)

It then prints the marked blocks that the docs carry (tests/studies/test_gallery_numbers_width.py
checks them character for character on the committed data): `main(root)` returns them by name.
  width-closed-form  docs/gallery.md: per d_model the simulated gain at the smallest drift with
                     its 95% interval [lo, hi], the closed form, their ratio, and whether the
                     closed form lies inside [lo, hi];
  width-ratio        docs/theory.md ("What agreed, what did not"): the same ratios and verdicts
                     in one sentence;
  claim10-width      docs/theory.md (claim 10): claim 10's error on this experiment's seed stream,
                     as simlab.studies.check_theory.branch_gains scores it: the largest |seed mean
                     of (simulated - predicted)| over the drifts, relative to the largest predicted
                     seed mean, with each seed's own weight statistics and with their
                     expectations, and the correlation over seeds where the prediction peaks.
"""

import sys
from pathlib import Path

import numpy as np

import simlab
from simlab import theory
from simlab.engine.results import seed_ci
from simlab.studies.reproduce.overlays import mean_field_per_seed
from simlab.theory import gains


def ci(x) -> str:
    lo, hi = seed_ci(np.asarray(x), -1)
    return f"{float(np.mean(x)):+.5f} +- {float(hi - lo) / 2:.5f}"


def _widths(root: Path) -> list[str]:
    return sorted({d.name.split("-")[0] for d in root.iterdir()}, key=lambda s: int(s[1:]))


def listing(base: str) -> None:
    """The free-form listing the section's prose quotes."""
    root = Path(base) / "width"
    for w in _widths(root):
        bert, cent = simlab.load(root / f"{w}-bert"), simlab.load(root / f"{w}-centered")
        n = bert.axes["drift_norm"]
        d = bert.meta["config"]["block"]["d_model"]
        gb, gc = bert["out_cos_gain"], cent["out_cos_gain"]  # (N, seeds)
        peak = int(np.argmax(gb.mean(-1)))
        own, expect = mean_field_per_seed(bert), mean_field_per_seed(bert, own_weights=False)
        mf = own.mean(-1)
        print(
            f"d {d} ({bert.n_seeds} seeds, {bert.meta['config']['inputs']['batch']} x "
            f"{bert.meta['config']['inputs']['length']} tokens)"
        )
        print(
            f"  N = {n[0]:g}: BERT MLP {ci(gb[0])}, mean removed {ci(gc[0])}, "
            f"paired difference {ci(gb[0] - gc[0])}; closed form "
            f"{float(theory.mlp_mean_gain(d)):.5f}, mean field {mf[0]:.5f}"
        )
        print(
            f"  peak at N = {n[peak]:.3g}: BERT MLP {ci(gb[peak])}, mean removed "
            f"{ci(gc[peak])}, mean field {mf[peak]:.5f} (sim / mean field "
            f"{gb[peak].mean() / mf[peak]:.2f})"
        )
        # per seed at N -> 0, where the gain is the MLP's mean output: each seed's own
        # |1^T W_2|^2 (and the other statistics) against their expectations
        r = np.corrcoef(gb[0], own[0])[0, 1]
        rel_own = np.abs(gb[0] - own[0]) / own[0].mean()
        rel_exp = np.abs(gb[0] - expect[0]) / expect[0].mean()
        print(
            f"  per seed at N = {n[0]:g}: r(sim, own-weights prediction) = {r:+.3f}; median / "
            f"max |sim - pred| / mean pred: own weights {np.median(rel_own):.3f} / "
            f"{rel_own.max():.3f}, expectations {np.median(rel_exp):.3f} / {rel_exp.max():.3f}"
        )
        err = np.abs(gb.mean(-1) - mf)
        print(
            f"  mean field: max |sim - pred| over N {err.max():.5f} "
            f"({err.max() / max(abs(mf).max(), 1e-12):.2f} of its peak)"
        )
        r = bert["attn_residual_ratio"].mean(-1)
        print(
            f"  |Attn(x)| / |x| at N = {n[0]:g} / {n[peak]:.3g} / {n[-1]:g}: "
            f"{r[0]:.4f} / {r[peak]:.4f} / {r[-1]:.3f}; attn_cos at N = {n[0]:g}: "
            f"{bert['attn_cos'].mean(-1)[0]:.2f}; attn_entropy min over N "
            f"{bert['attn_entropy'].mean(-1).min():.4f}"
        )


def _claim10_errors(res) -> tuple[float, float, float]:
    """Claim 10's scores on one width's results (branch_gains._compare, _predict_mean_field):
    (own-weights error, expectations error, correlation over seeds at the predicted peak)."""
    b = res.meta["config"]["block"]
    d, ratio = b["d_model"], b.get("mlp_ratio", 4)
    sim = np.asarray(res["out_cos_gain"], float)  # (N, seeds)
    own = mean_field_per_seed(res)
    rho0 = np.asarray(res["input_cos"], float)
    expect = gains.mean_field_gain(rho0.mean(1), gains.expected_drift_gain_factor(d), d, ratio)
    scale = max(float(np.max(np.abs(own.mean(1)))), 1e-12)
    e_own = float(np.max(np.abs(sim.mean(1) - own.mean(1)))) / scale
    e_exp = float(np.max(np.abs(sim.mean(1) - expect))) / scale
    i = int(np.argmax(np.abs(own.mean(1))))
    return e_own, e_exp, float(np.corrcoef(sim[i], own[i])[0, 1])


def _list(ds: list[int]) -> str:
    return ", ".join(str(d) for d in ds) if ds else "none"


def main(base) -> dict[str, str]:
    """The marked blocks of the docs (module docstring), from the data root `base`."""
    root = Path(base) / "width"
    rows, ratios, inside, outside, claim10 = [], [], [], [], []
    first = None
    for w in _widths(root):
        res = simlab.load(root / f"{w}-bert")
        cfg = res.meta["config"]
        d = cfg["block"]["d_model"]
        first = res if first is None else first
        g = np.asarray(res["out_cos_gain"], float)[0]  # smallest drift, (seeds,)
        lo, hi = (float(v) for v in seed_ci(g, -1))
        cf = float(theory.mlp_mean_gain(d, cfg["block"].get("mlp_ratio", 4)))
        ok = lo <= cf <= hi
        (inside if ok else outside).append(d)
        ratio = float(g.mean()) / cf
        ratios.append(f"{ratio:.2f} at {d}")
        rows.append(
            f"| {d} | {g.mean():+.5f} [{lo:+.5f}, {hi:+.5f}] | {cf:.5f} | {ratio:.2f} | "
            f"{'inside' if ok else 'outside'} |"
        )
        claim10.append((d, *_claim10_errors(res)))
    cfg = first.meta["config"]
    n0 = float(first.axes["drift_norm"][0])
    sizes = (
        f"{first.n_seeds} seeds of {cfg['inputs']['batch']} x {cfg['inputs']['length']} "
        f"tokens, stream {cfg['sweep']['base_seed']}"
    )
    verdict = (
        f"The closed form lies inside the 95% interval at d_model {_list(inside)} and outside "
        f"at {_list(outside)}."
    )
    table = [
        f"At N = {n0:g} ({sizes}; 95% Student-t interval over the seeds):",
        "",
        "| d_model | simulated out_cos_gain [95% interval] | closed form "
        "(`theory.mlp_mean_gain`) | simulated / closed form | closed form in the interval |",
        "|---|---|---|---|---|",
        *rows,
        "",
        verdict,
    ]
    ratio_line = (
        f"Simulated / closed form at N = {n0:g} ({sizes}): {'; '.join(ratios)} (d_model). "
        + verdict
    )
    own_better = [d for d, eo, ee, _ in claim10 if eo < ee]
    exp_better = [d for d, eo, ee, _ in claim10 if ee < eo]
    c10 = [
        f"On the width experiment's stream ({sizes}, {len(first.axes['drift_norm'])} drifts "
        f"N = {n0:g}..{float(first.axes['drift_norm'][-1]):g}), scored as claim 10 scores its "
        "own run:",
        "",
        "| d_model | error, seeds' own weights | error, expectations | correlation over seeds "
        "at the peak |",
        "|---|---|---|---|",
        *(f"| {d} | {eo:.3f} | {ee:.3f} | {r:+.2f} |" for d, eo, ee, r in claim10),
        "",
        f"The seeds' own weights give the smaller error at d_model {_list(own_better)}, the "
        f"expectations at {_list(exp_better)}.",
    ]
    return {
        "width-closed-form": "\n".join(table) + "\n",
        "width-ratio": ratio_line + "\n",
        "claim10-width": "\n".join(c10) + "\n",
    }


if __name__ == "__main__":
    base = sys.argv[1] if len(sys.argv) > 1 else "figures/data"
    listing(base)
    for name, block in main(base).items():
        print(f"\n<!-- {name}:begin (python experiments/gallery_numbers_width.py figures/data) -->")
        print(block, end="")
        print(f"<!-- {name}:end -->")
