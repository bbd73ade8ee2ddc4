"""The numbers docs/instruments.md quotes for the worked example (experiments/patterns.toml), read
from a data directory: seed mean +- the half-width of the 95% Student-t interval over seeds
(simlab.engine.results.seed_ci); differences between the two clamps are paired by seed (both
variants share the seed stream: the same weights and tokens).
python experiments/gallery_numbers_patterns.py figures/quick/data/patterns"""

import sys
from pathlib import Path

import numpy as np

import simlab

root = Path(sys.argv[1] if len(sys.argv) > 1 else "figures/quick/data/patterns")
shared, token = simlab.load(root / "shared"), simlab.load(root / "token")
beta, gain = shared.axes["pattern_beta"], shared.axes["mlp_gain"]
n = shared.n_seeds
cfg = shared.meta["config"]
print(
    f"sizes: {cfg['block']['kind']} d_model {cfg['block']['d_model']}, {cfg['block']['n_heads']}"
    f" heads, {cfg['inputs']['batch']} x {cfg['inputs']['length']} tokens, {n} seeds "
    f"(base_seed {cfg['sweep']['base_seed']}); 95% CI: Student t, {n - 1} dof"
)


def pm(res, x, j):
    """'mean +- half-width' along beta at mlp_gain index j, for a metric name or an array."""
    arr = res[x] if isinstance(x, str) else x
    mean, half = arr.mean(axis=res.seed_axis), res.ci_half_width(arr)
    return " ".join(f"{m:+.3f}\u00b1{h:.3f}" for m, h in zip(mean[:, j], half[:, j]))


print("beta:", " ".join(f"{b:g}" for b in beta))
for j, g in enumerate(gain):
    print(f"== mlp_gain {g:g}")
    for m in ("attn_entropy", "attn_max"):
        same = np.array_equal(shared[m][:, j], token[m][:, j])
        print(f"  {m:20s} {pm(shared, m, j)}  (shared == token bit for bit: {same})")
    for m in ("attn_cos", "attn_cos_within", "out_cos_gain", "out_cos_within_gain", "mlp_cos"):
        print(f"  {m:20s} shared {pm(shared, m, j)}")
        print(f"  {'':20s} token  {pm(token, m, j)}")
    d = shared["out_cos_within_gain"] - token["out_cos_within_gain"]  # paired by seed
    print(f"  {'shared - token':20s} {pm(shared, d, j)}  (out_cos_within_gain, paired)")
# the MLP's part: the gain with the MLP branch on minus off, at the same seed (paired)
for name, res in (("shared", shared), ("token", token)):
    d = res["out_cos_within_gain"][:, 1] - res["out_cos_within_gain"][:, 0]
    mean, (lo, hi) = d.mean(-1), simlab.engine.results.seed_ci(d, -1)
    print(
        f"MLP on - off ({name}), out_cos_within_gain: "
        + " ".join(f"{m:+.3f}\u00b1{(h - l) / 2:.3f}" for m, l, h in zip(mean, lo, hi))
    )
# per-seed covariate: does the MLP's shared output |1^T W_2|^2 / F explain the seeds' scatter of
# the MLP branch's own anisotropy at beta = 0?
cov = shared.covariates.get("mlp_shared")
if cov is not None:
    y = shared["mlp_cos"][0, 1]
    r = np.corrcoef(cov[:, 0], y)[0, 1]
    print(f"across the {n} seeds: corr(mlp_shared covariate, mlp_cos at beta 0) = {r:+.2f}")
print("wall", sum(r.meta.get("wall_time_s", 0) for r in (shared, token)))
