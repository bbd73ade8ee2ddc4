"""Chunk files and their records, verified before a resume reuses them.

OUT/chunks/seed<s>_mb<a>-<b>.npz holds one seed's metric arrays for micro-batches a..b and, under
the key RECORD, its record (JSON: the sweep's fingerprint, the range, the metric names, a sha256
of the arrays, and the machine facts it was computed under, simlab.engine.machine), written
atomically by `write_chunk` and checked by `verify_chunk`. The machine facts are recorded, never
verified: a chunk computed on another machine is reused, and the sweep that combines it warns
(`unit_machines`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from simlab.engine import machine
from simlab.engine.atomic import atomic_save_npz

# The key of a chunk file's record (JSON): fingerprint, range, metric names, sha256, machine.
RECORD = "__chunk__"


def arrays_sha256(arrays: dict[str, np.ndarray]) -> str:
    """sha256 over every array's name, dtype, shape and bytes, in name order."""
    h = hashlib.sha256()
    for k in sorted(arrays):
        x = np.ascontiguousarray(arrays[k])
        h.update(f"{k}|{x.dtype.str}|{x.shape}|".encode())
        h.update(x.tobytes())
    return h.hexdigest()


def chunk_record(fp: str, key: tuple[int, int, int], arrays: dict[str, np.ndarray]) -> str:
    return json.dumps(
        {
            "fingerprint": fp,
            "seed": key[0],
            "start": key[1],
            "stop": key[2],
            "metrics": sorted(arrays),
            "sha256": arrays_sha256(arrays),
            "machine": machine.facts(),
        }
    )


def write_chunk(path: Path, fp: str, key: tuple[int, int, int], arrays) -> None:
    """A chunk file: its arrays and its record, atomically."""
    atomic_save_npz(path, {**arrays, RECORD: np.asarray(chunk_record(fp, key, arrays))})


def read_chunk(path: Path) -> dict[str, np.ndarray]:
    """A verified chunk file's metric arrays (its record left out)."""
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files if k != RECORD}


def verify_chunk(
    path: Path, key: tuple[int, int, int], fp: str, names: tuple[str, ...], micro_batch: int
) -> str | None:
    """None when the chunk file at `path` is this sweep's chunk `key`, complete and intact;
    otherwise why not."""
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except Exception as e:  # truncated, empty, not a zip, bad member: all mean "unreadable"
        return f"unreadable: {type(e).__name__}"
    if RECORD not in arrays:
        return "no chunk record (not written by this version of simlab)"
    try:
        rec = json.loads(str(arrays.pop(RECORD)))
    except (ValueError, TypeError):
        return "chunk record is not JSON"
    if rec.get("fingerprint") != fp:
        return "belongs to another sweep (fingerprint differs)"
    if (rec.get("seed"), rec.get("start"), rec.get("stop")) != key:
        return "its record names another range than its file name"
    missing = [n for n in names if n not in arrays]
    if missing:
        return f"lacks metrics {missing}"
    rows = (key[2] - key[1]) * micro_batch
    bad = [k for k, x in arrays.items() if x.ndim < 1 or x.shape[0] != rows]
    if bad:
        return f"metrics {bad} do not have {rows} rows"
    if rec.get("sha256") != arrays_sha256(arrays):
        return "checksum mismatch (the arrays were altered)"
    return None


def chunk_machine(path: Path) -> dict[str, Any] | None:
    """The machine facts a verified chunk file was computed under (None: not recorded, a chunk
    written before simlab recorded them)."""
    with np.load(path, allow_pickle=False) as z:
        return json.loads(str(z[RECORD])).get("machine")


def unit_machines(chunks: Iterable[Path | dict], where: object) -> list[dict[str, Any] | None]:
    """The distinct machine facts of a sweep's chunks (a verified file, or arrays computed by
    this process: its facts), printing on stderr the warning that they differ
    (simlab.engine.machine.mixed_line, naming `where`)."""
    found = [chunk_machine(c) if isinstance(c, Path) else machine.facts() for c in chunks]
    return machine.report(found, where)
