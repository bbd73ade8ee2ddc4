"""The numbers of docs/config.md, "Seeds or tokens": the gain metrics of experiments/
seeds_vs_tokens.toml at 4 x 512 tokens x 24 seeds against 16 x 512 x 6 seeds (the commands are
in the TOML's header): seed mean +- the 95% Student-t half-width, the seed-to-seed standard
deviation, and, for the seeds both ran (the same weights; the 4 sequences are the first 4 of the
16), the per-seed difference 4 x 512 - 16 x 512, whose spread is the token-sampling part.
python experiments/seeds_vs_tokens.py runs/svt_4x512 runs/svt_16x512"""

import sys

import simlab
from simlab.engine.results import seed_ci

small, big = (simlab.load(p) for p in sys.argv[1:3])
N = small.axes["drift_norm"]
for r in (small, big):
    i = r.meta["config"]["inputs"]
    wall, compute = r.meta["wall_time_s"], r.meta["compute_time_s"]
    print(
        f"{i['batch']} x {i['length']} tokens, {r.n_seeds} seeds: "
        f"wall {wall:.0f} s (compute {compute:.0f} s)"
    )
shared = min(small.n_seeds, big.n_seeds)
for m in ("out_cos_gain", "out_cos_within_gain"):
    print(f"== {m}")
    for j, n in enumerate(N):
        a, b = small[m][j], big[m][j]
        row = []
        for name, x in (("4x512", a), ("16x512", b)):
            lo, hi = seed_ci(x, 0)
            row.append(
                f"{name}: {x.mean():+.4f} \u00b1 {(hi - lo) / 2:.4f} (seed std {x.std(ddof=1):.4f})"
            )
        d = a[:shared] - b[:shared]
        lo, hi = seed_ci(d, 0)
        row.append(
            f"paired 4x512 - 16x512 over {shared} seeds: {d.mean():+.4f} \u00b1 {(hi - lo) / 2:.4f}"
            f" (std {d.std(ddof=1):.4f})"
        )
        print(f"  N {n:g}: " + "; ".join(row))
