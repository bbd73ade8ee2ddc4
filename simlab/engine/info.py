"""What a sweep directory holds (`simlab info DIR`) — the summary of its results (axes, metrics
with shapes and ranges, sizes, seeds), versions and timings, or for an unfinished sweep the
chunks done and missing."""

from __future__ import annotations

from pathlib import Path

from simlab.engine import results
from simlab.errors import ResultsError


def describe(out: Path, with_config: bool = False) -> str:
    """The text `simlab info` prints."""
    out = Path(out)
    if (out / "results.npz").exists() and (out / "meta.json").exists():
        res = results.load(out)
        m = res.meta
        lines = [res.summary()]
        v = m.get("versions", {})
        lines.append("  versions: " + ", ".join(f"{k} {x}" for k, x in v.items()))
        t = [
            f"{k.replace('_time_s', '')} {m[k]:.3g} s"
            for k in ("compile_time_s", "compute_time_s", "wall_time_s")
            if m.get(k) is not None
        ]
        if t:
            lines.append("  time: " + ", ".join(t))
        if m.get("chunks_computed") is not None:
            lines.append(
                f"  chunks: {m.get('chunks_computed')} computed, {m.get('chunks_reused')} "
                f"reused, rejected {m.get('chunks_rejected') or 'none'}"
            )
        config = m.get("config")
    elif (out / "sweep.json").exists():
        sj = results.read_json(out / "sweep.json", "sweep.json of a sweep directory")
        config = sj.get("config", {})
        sw = config.get("sweep", {})
        n_points = 1
        for a in config.get("axes", []):
            n_points *= len(a.get("values") or []) or int(a.get("num") or 1)
        mb = int(sw.get("micro_batch") or 1)
        n_mb = -(-n_points // mb)
        done = set()
        for p in (out / "chunks").glob("seed*_mb*-*.npz"):
            seed, rng = p.stem[4:].split("_mb")
            a, b = map(int, rng.split("-"))
            done |= {(int(seed), m) for m in range(a, b)}
        total = n_mb * int(sw.get("seeds") or 1)
        lines = [
            f"unfinished sweep ({out}): {len(done)} of {total} work units (micro-batches x "
            f"seeds) in chunk files, {total - len(done)} missing; "
            f"`simlab merge {out}` computes the rest"
        ]
    else:
        raise ResultsError(
            f"{out}: not a sweep directory (no results.npz, meta.json or sweep.json)"
        )
    if with_config and config is not None:
        from simlab.engine.config import to_toml

        lines += ["", "# the resolved config (TOML: `simlab sweep` reads it back)", to_toml(config)]
    return "\n".join(lines)
