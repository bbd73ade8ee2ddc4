"""Where a sweep's work and results live: the chunk layout and the chunk store (docs/design.md,
"Flow of one sweep").

A seed's grid points are cut into micro-batches of `micro_batch` points and chunks of
`chunk_mb` micro-batches (Layout). Finished chunks are kept by micro-batch range
(ChunkStore), on disk as OUT/chunks/seed{S}_mb{A}-{B}.npz, and merged into metric arrays of
shape (*axes, seeds[, layer]). This module knows nothing about Transformers.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from simlab.engine import results
from simlab.engine.config import SweepConfig, config_diff
from simlab.errors import ConfigError

CHUNK_RE = re.compile(r"seed(\d+)_mb(\d+)-(\d+)\.npz")


@dataclasses.dataclass(frozen=True)
class Layout:
    """How one seed's points split into micro-batches and chunks.

    Chunk c covers micro-batches [c * chunk_mb, min((c + 1) * chunk_mb, n_mb)).
    """

    n_points: int
    micro_batch: int
    chunk_mb: int

    @property
    def n_mb(self) -> int:
        return -(-self.n_points // self.micro_batch)

    @property
    def chunks_per_seed(self) -> int:
        return -(-self.n_mb // self.chunk_mb)

    def chunk(self, c: int) -> tuple[int, int]:
        """Micro-batch range [start, stop) of chunk c."""
        return c * self.chunk_mb, min((c + 1) * self.chunk_mb, self.n_mb)

    def real_points(self, start: int, stop: int) -> int:
        """Grid points (not padding) in micro-batches [start, stop)."""
        return min(stop * self.micro_batch, self.n_points) - start * self.micro_batch

    def point_index(self, start: int) -> np.ndarray:
        """Flat point indices of a chunk starting at micro-batch `start`, padded with the last
        point."""
        i = np.arange(start * self.micro_batch, (start + self.chunk_mb) * self.micro_batch)
        return np.minimum(i, self.n_points - 1)


def make_layout(
    n_points: int, micro_batch: int, n_devices: int, chunk_mb_per_device: int
) -> Layout:
    """Layout with chunk_mb = n_devices * chunk_mb_per_device, capped at one seed's grid."""
    n_mb = -(-n_points // micro_batch)
    cap = -(-n_mb // n_devices)
    return Layout(n_points, micro_batch, n_devices * max(1, min(chunk_mb_per_device, cap)))


class ChunkStore:
    """Finished chunks of one sweep, keyed (seed, start, stop) by micro-batch range.

    With a directory, chunks are written there atomically and existing files are picked up
    (loaded lazily); without one (out=None), they live in memory.
    """

    def __init__(self, directory: Path | None):
        self.dir = directory
        self.chunks: dict[tuple[int, int, int], Any] = {}
        self.covered: dict[int, set[int]] = {}
        if directory is not None and directory.is_dir():
            for p in sorted(directory.iterdir()):
                m = CHUNK_RE.fullmatch(p.name)
                if m:
                    self._add(tuple(map(int, m.groups())), p)

    def _add(self, key, value) -> None:
        self.chunks[key] = value
        self.covered.setdefault(key[0], set()).update(range(key[1], key[2]))

    def covers(self, seed: int, start: int, stop: int) -> bool:
        return self.covered.get(seed, set()).issuperset(range(start, stop))

    def put(self, seed: int, start: int, stop: int, arrays: dict[str, np.ndarray]) -> None:
        if self.dir is not None:
            results.atomic_save_npz(self.dir / f"seed{seed}_mb{start}-{stop}.npz", arrays)
        self._add((seed, start, stop), arrays)

    def merge(self, seed: int, layout: Layout) -> dict[str, np.ndarray]:
        """metric -> (n_points, ...) for one seed, from every chunk of that seed."""
        mb, buf = layout.micro_batch, None
        for (s, a, b), v in sorted(self.chunks.items(), key=lambda kv: kv[0]):
            if s != seed:
                continue
            if isinstance(v, Path):
                with np.load(v) as z:
                    v = {k: z[k] for k in z.files}
            if buf is None:
                buf = {
                    k: np.empty((layout.n_mb * mb,) + x.shape[1:], x.dtype) for k, x in v.items()
                }
            for k, x in v.items():
                buf[k][a * mb : b * mb] = x
        return {k: x[: layout.n_points] for k, x in buf.items()}


def merge(store: ChunkStore, cfg: SweepConfig, layout: Layout, names) -> dict[str, np.ndarray]:
    """Chunks -> metric arrays of shape (*axes, seeds[, layer])."""
    per_seed = [store.merge(s, layout) for s in range(cfg.sweep.seeds)]
    metrics = {}
    for k in names:
        x = np.stack([p[k] for p in per_seed])  # (seeds, n_points, ...)
        x = x.reshape((cfg.sweep.seeds,) + cfg.shape + x.shape[2:])
        metrics[k] = np.moveaxis(x, 0, len(cfg.shape))  # (*axes, seeds, ...)
    return metrics


def check_out_dir(out: Path, config: dict[str, Any], fp: str) -> bool:
    """Refuse a directory that holds another sweep or other files; True when it holds this
    finished sweep."""
    if not out.exists():
        return False
    if not out.is_dir():
        raise ConfigError(f"{out}: exists and is not a directory")
    sj = out / "sweep.json"
    if not sj.exists():
        if any(out.iterdir()):
            raise ConfigError(
                f"{out}: is not empty and holds no sweep.json; use a new or empty directory"
            )
        return False
    old = json.loads(sj.read_text())
    if old.get("fingerprint") != fp:
        diff = config_diff(old.get("config", {}), config)
        raise ConfigError(
            f"{out}: holds a different sweep (differs in: {', '.join(diff) or 'config'}); "
            "use another --out directory or delete it"
        )
    return (out / "results.npz").exists() and (out / "meta.json").exists()
