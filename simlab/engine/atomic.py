"""Writing a file all or nothing: a temporary file in the same folder, fsync'd, then
os.replace, so that a reader (or a writer after a crash) never sees half a file (docs/design.md,
"Flow of one sweep"). Every file simlab writes into a sweep directory goes through here
(simlab.engine.records); a dead writer's temporary files carry its host and pid and are removed
by the next writer (simlab.engine.claims.Coordinator.clean).
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from simlab.engine.claims import HOST
from simlab.errors import StorageError


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` via a temporary file and os.replace (all or nothing); the file
    gets the usual permissions (0666 less the umask), not mkstemp's 0600."""
    path = Path(path)
    # host and pid in the name: the next writer removes a dead writer's leftovers
    # (simlab.engine.claims.Coordinator.clean)
    prefix = f".{path.name}.{HOST}.{os.getpid()}."
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=".tmp")
    except OSError as e:
        raise StorageError(
            e.errno, f"{path}: cannot be written in {path.parent} ({e.strerror or e})"
        ) from None
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError) and not isinstance(e, StorageError):
            raise StorageError(
                e.errno,
                f"{path}: cannot be written ({e.strerror or e}); nothing was written there",
            ) from None
        raise


def atomic_save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    atomic_write_bytes(Path(path), buf.getvalue())


def write_json(path: Path, obj: Mapping[str, Any]) -> None:
    """`obj` as indented JSON (numpy scalars and arrays as plain values), atomically."""
    atomic_write_bytes(Path(path), json.dumps(obj, indent=2, default=json_default).encode())


def json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o)}")
