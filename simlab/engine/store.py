"""Where a sweep's work and results live: the chunk layout and the chunk store (docs/design.md,
"Flow of one sweep").

A seed's grid points are cut into micro-batches of `micro_batch` points and chunks of
`chunk_mb` micro-batches (Layout). Finished chunks are kept by micro-batch range
(ChunkStore), on disk as OUT/chunks/seed{S}_mb{A}-{B}.npz, and merged into metric arrays of
shape (*axes, seeds, *dims). This module knows nothing about Transformers.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from simlab.engine import records
from simlab.engine.config import SweepConfig, config_diff
from simlab.errors import ConfigError, ResultsError

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
    n_points: int, micro_batch: int, n_devices: int, chunk_mb_per_device: int, floor: int = 1
) -> Layout:
    """Layout with chunk_mb = n_devices * chunk_mb_per_device, capped at one seed's grid but not
    below `floor` micro-batches per device (a part of a grown or refined sweep: its chunks keep
    the per-device count class, 1 or >= 2, of the whole sweep's; simlab.engine.grow)."""
    n_mb = -(-n_points // micro_batch)
    cap = max(-(-n_mb // n_devices), floor)
    return Layout(n_points, micro_batch, n_devices * max(1, min(chunk_mb_per_device, cap)))


class ChunkStore:
    """Finished chunks of one sweep, keyed (seed, start, stop) by micro-batch range (the work
    unit is one micro-batch of one seed, docs/design.md "Work units").

    With a directory, chunks are written there atomically, each with a record of the sweep
    fingerprint, its range, its metrics and a sha256 of its arrays; files found there are
    verified before they are trusted (`scan`, also picking up chunks other writers add): a file
    that is unreadable, truncated, altered, of another sweep or lacking a metric is moved to
    OUT/rejected/ with a warning naming it, and its micro-batches count as missing. Without a
    directory (out=None) the chunks live in memory.
    """

    def __init__(
        self,
        directory: Path | None,
        fingerprint: str = "",
        names: tuple[str, ...] = (),
        micro_batch: int = 1,
        warn=None,
    ):
        self.dir, self.fp, self.names, self.micro_batch = directory, fingerprint, names, micro_batch
        self.warn = warn or (lambda msg: None)
        self.chunks: dict[tuple[int, int, int], Any] = {}
        self.covered: dict[int, set[int]] = {}
        self.rejected: list[str] = []
        self._seen: set[str] = set()
        self.scan()

    def scan(self) -> list[tuple[int, int]]:
        """Verify and add chunk files not seen yet; the (seed, micro-batch) units they newly
        cover."""
        if self.dir is None or not self.dir.is_dir():
            return []
        added = []
        for p in sorted(self.dir.iterdir()):
            m = CHUNK_RE.fullmatch(p.name)
            if not m or p.name in self._seen:
                continue
            self._seen.add(p.name)
            key = tuple(map(int, m.groups()))
            why = records.verify_chunk(p, key, self.fp, self.names, self.micro_batch)
            if why is None:
                added += self._add(key, p)
            else:
                self._reject(p, why)
        return added

    def _reject(self, p: Path, why: str) -> None:
        dest = p.parent.parent / "rejected" / p.name
        try:
            dest.parent.mkdir(exist_ok=True)
            os.replace(p, dest)
        except OSError:
            dest = p
        self.rejected.append(p.name)
        self.warn(f"chunk {p.name} rejected ({why}); moved to {dest}; it will be recomputed")

    def _add(self, key, value) -> list[tuple[int, int]]:
        """Keep a chunk; the (seed, micro-batch) units it newly covers."""
        self.chunks[key] = value
        done = self.covered.setdefault(key[0], set())
        new = [(key[0], m) for m in range(key[1], key[2]) if m not in done]
        done.update(range(key[1], key[2]))
        return new

    def covers(self, seed: int, start: int, stop: int) -> bool:
        return self.covered.get(seed, set()).issuperset(range(start, stop))

    def put(
        self, seed: int, start: int, stop: int, arrays: dict[str, np.ndarray]
    ) -> list[tuple[int, int]]:
        """Store (and, with a directory, write) a chunk; the units it newly covers."""
        if self.dir is not None:
            name = f"seed{seed}_mb{start}-{stop}.npz"
            records.write_chunk(self.dir / name, self.fp, (seed, start, stop), arrays)
            self._seen.add(name)
        return self._add((seed, start, stop), arrays)

    def merge(self, seed: int, layout: Layout) -> dict[str, np.ndarray]:
        """metric -> (n_points, ...) for one seed, from every chunk of that seed."""
        mb, buf = layout.micro_batch, None
        for (s, a, b), v in sorted(self.chunks.items(), key=lambda kv: kv[0]):
            if s != seed:
                continue
            if isinstance(v, Path):
                v = records.read_chunk(v)
            if buf is None:
                buf = {
                    k: np.empty((layout.n_mb * mb,) + x.shape[1:], x.dtype) for k, x in v.items()
                }
            for k, x in v.items():
                buf[k][a * mb : b * mb] = x
        return {k: x[: layout.n_points] for k, x in buf.items()}


def merge(store: ChunkStore, cfg: SweepConfig, layout: Layout, names) -> dict[str, np.ndarray]:
    """Chunks -> metric arrays of shape (*axes, seeds, *dims): each metric's own trailing dims."""
    per_seed = [store.merge(s, layout) for s in range(cfg.sweep.seeds)]
    metrics = {}
    for k in names:
        x = np.stack([p[k] for p in per_seed])  # (seeds, n_points, ...)
        x = x.reshape((cfg.sweep.seeds,) + cfg.shape + x.shape[2:])
        metrics[k] = np.moveaxis(x, 0, len(cfg.shape))  # (*axes, seeds, ...)
    return metrics


def _exists(p: Path) -> bool:
    try:
        return p.exists()
    except OSError:  # ENAMETOOLONG and the like: not a place that exists
        return False


def check_path_lengths(path: Path, where: str) -> None:
    """A ConfigError naming `where` when a component of the path, or the whole path, is longer
    than the file system allows (NAME_MAX, PATH_MAX of the nearest existing folder)."""
    base = Path(path).absolute()
    existing = base
    while not _exists(existing):
        existing = existing.parent
    try:
        name_max = os.pathconf(existing, "PC_NAME_MAX")
        path_max = os.pathconf(existing, "PC_PATH_MAX")
    except (OSError, ValueError):
        name_max, path_max = 255, 4096
    for part in base.parts:
        if len(os.fsencode(part)) > name_max:
            raise ConfigError(
                f"{where}: the name {part[:40]}... is {len(os.fsencode(part))} bytes long; "
                f"this file system allows {name_max}"
            )
    if len(os.fsencode(str(base))) >= path_max:
        raise ConfigError(
            f"{where}: the path is {len(os.fsencode(str(base)))} bytes long; this file system "
            f"allows {path_max - 1}"
        )


def check_writable(out: str | os.PathLike, where: str = "--out") -> Path:
    """The output directory as a Path, refused (ConfigError naming `where`) when it is empty,
    exists as a file, lies below a file, or cannot be created or written by this user."""
    if str(out).strip() == "":
        raise ConfigError(f"{where}: empty path; name an output directory")
    out = Path(out)
    check_path_lengths(out, where)
    if out.is_symlink() and not out.exists():
        raise ConfigError(
            f"{where}: {out} is a symbolic link to {os.readlink(out)}, which does not exist"
        )
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{where}: {out} exists and is not a directory")
    parent = out
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"{where}: {out} lies below {parent}, which is a file, not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{where}: {parent} is not writable by this user; choose another place")
    return out


def check_out_dir(out: Path, config: dict[str, Any], fp: str) -> bool:
    """Refuse a directory that holds another sweep or other files, or that cannot be written;
    True when it holds this finished sweep."""
    out = check_writable(out)
    if not out.exists():
        return False
    if not out.is_dir():
        raise ConfigError(f"{out}: exists and is not a directory")
    sj = out / "sweep.json"
    if not sj.exists():
        # what another writer starting at this moment may have made already is not "other files"
        ours = {".lock", "claims", "chunks", "rejected"}
        if any(p.name not in ours and not p.name.startswith(".") for p in out.iterdir()):
            raise ConfigError(
                f"{out}: is not empty and holds no sweep.json; use a new or empty directory"
            )
        return False
    old = records.read_sweep(sj)
    if not isinstance(old.get("fingerprint"), str):
        raise ResultsError(f"{sj}: has no fingerprint; the file is not simlab's sweep.json")
    if old.get("fingerprint") != fp:
        raise different_sweep(out, old, config)
    return records.is_finished(out)


def explain_diff(old: dict[str, Any], new: dict[str, Any], diff: list[str]) -> list[str]:
    """config_diff's field names for a refusal, each field a sweep fills in itself (not set by
    the user: sweep.micro_batch, sweep.dtype) with both values and why it differs; when it is
    the only difference, how to match the directory."""
    out = []
    for d in diff:
        a, b = (c.get("sweep", {}).get(d.partition(".")[2]) for c in (old, new))
        alone = len(diff) == 1
        if d == "sweep.micro_batch":
            d += f" ({a} there, {b} here: chosen from the sizes when the config does not set it"
            d += f"; set sweep.micro_batch = {a} to match)" if alone else ")"
        elif d == "sweep.dtype":
            d += f" ({a} there, {b} here: the precision of the process"
            d += f"; run with JAX_ENABLE_X64={int(a == 'float64')} to match)" if alone else ")"
        out.append(d)
    return out


def different_sweep(out: Path, old: dict[str, Any], config: dict[str, Any]) -> ConfigError:
    """The refusal of a directory holding the sweep `old` (its sweep.json) for `config`."""
    held = old.get("config", {})
    diff = explain_diff(held, config, config_diff(held, config))
    return ConfigError(
        f"{out}: holds a different sweep (differs in: {', '.join(diff) or 'config'}); "
        "use another --out directory or delete it"
    )


def claim_directory(out: Path, config: dict[str, Any], fp: str, rule: int | None = None) -> None:
    """Make `out` this sweep's directory (simlab.engine.records.claim_sweep; `fp` made under
    fingerprint rule `rule`, None: the current one), or refuse it when it already names another
    sweep. Call under the directory lock (simlab.engine.claims)."""
    old = records.claim_sweep(out, config, fp, rule)
    if old is not None:
        raise different_sweep(out, old, config)
