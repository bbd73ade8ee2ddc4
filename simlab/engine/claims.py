"""Several writers on one output directory: an exclusive lock, claims on work units, and the
clean-up of what dead writers leave behind (docs/design.md, "Work units").

Every writer (a plain `simlab sweep`, a `--worker I/N`, a jax.distributed process) holds
OUT/.lock (fcntl.flock, exclusive) only for short transactions: creating sweep.json (so a
second, different config is refused however close in time it starts), and choosing its next
chunk: under the lock it rescans the finished chunks and the live claims and writes a claim
file OUT/claims/seed{S}_mb{A}-{B}.<host>.<pid>.claim for micro-batches no one has or holds.
The claim is deleted once the chunk file is written. A background thread touches the
writer's claims every HEARTBEAT_S seconds; a claim is stale (and removed) when its writer's
process is gone (same host) or it was not touched for STALE_S seconds (another host). So a
worker that dies loses nothing but its unfinished chunk, and re-running it (or any plain run)
takes over. Temporary files of dead writers (`.<name>.<host>.<pid>.<random>.tmp`, from
simlab.engine.records.atomic_write_bytes) are removed by the next writer.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import socket
import threading
import time
from pathlib import Path

HEARTBEAT_S = 10.0
STALE_S = 120.0
CLAIM_RE = re.compile(r"seed(\d+)_mb(\d+)-(\d+)\.(.+)\.(\d+)\.claim")
TMP_RE = re.compile(r"\.(?:.+)\.(?P<host>[^.]+)\.(?P<pid>\d+)\.[^.]+\.tmp")
HOST = socket.gethostname().replace(".", "_") or "host"


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_stale(path: Path, host: str, pid: int, now: float | None = None) -> bool:
    """A claim or temporary file whose writer is gone: same host and its pid dead, or not
    touched for STALE_S seconds."""
    if host == HOST and pid != os.getpid():
        return not pid_alive(pid)
    if host == HOST:
        return False
    try:
        age = (now or time.time()) - path.stat().st_mtime
    except FileNotFoundError:
        return False
    return age > STALE_S


class Coordinator:
    """The lock, claims and clean-up of one output directory (see the module docstring)."""

    def __init__(self, out: Path):
        self.out = Path(out)
        self.claims_dir = self.out / "claims"
        self.mine: set[Path] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def lock(self):
        """The exclusive directory lock, for a short transaction."""
        self.out.mkdir(parents=True, exist_ok=True)
        with open(self.out / ".lock", "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def clean(self) -> list[str]:
        """Remove stale claims and dead writers' temporary files (call under the lock)."""
        removed = []
        now = time.time()
        for d in (self.out, self.out / "chunks"):
            if not d.is_dir():
                continue
            for p in d.iterdir():
                m = TMP_RE.fullmatch(p.name)
                old_style = p.name.endswith(".tmp") and p.name.startswith(".") and not m
                stale = (
                    is_stale(p, m["host"], int(m["pid"]), now)
                    if m
                    else old_style and now - p.stat().st_mtime > STALE_S
                )
                if stale:
                    p.unlink(missing_ok=True)
                    removed.append(p.name)
        for p, (_, _, _, host, pid) in self.claims().items():
            if is_stale(p, host, pid, now):
                p.unlink(missing_ok=True)
                removed.append(p.name)
        return removed

    def claims(self) -> dict[Path, tuple[int, int, int, str, int]]:
        """Every claim file: path -> (seed, start, stop, host, pid)."""
        if not self.claims_dir.is_dir():
            return {}
        out = {}
        for p in self.claims_dir.iterdir():
            m = CLAIM_RE.fullmatch(p.name)
            if m:
                out[p] = (int(m[1]), int(m[2]), int(m[3]), m[4], int(m[5]))
        return out

    def held(self) -> dict[int, set[int]]:
        """seed -> micro-batches claimed by other live writers (call under the lock)."""
        out: dict[int, set[int]] = {}
        for p, (seed, a, b, host, pid) in self.claims().items():
            if p in self.mine or is_stale(p, host, pid):
                continue
            out.setdefault(seed, set()).update(range(a, b))
        return out

    def claim(self, seed: int, start: int, stop: int) -> Path:
        """Write this writer's claim on micro-batches [start, stop) of `seed` (under the lock)."""
        self.claims_dir.mkdir(exist_ok=True)
        p = self.claims_dir / f"seed{seed}_mb{start}-{stop}.{HOST}.{os.getpid()}.claim"
        p.write_text(f"{time.time()}\n")
        self.mine.add(p)
        self._heartbeat()
        return p

    def release(self, p: Path) -> None:
        p.unlink(missing_ok=True)
        self.mine.discard(p)

    def tidy(self) -> None:
        """After the merge: remove the claims folder if empty and the lock file (a writer that
        arrives later finds the finished sweep and only reads)."""
        with contextlib.suppress(OSError):
            self.claims_dir.rmdir()
        with contextlib.suppress(OSError):
            (self.out / ".lock").unlink()

    def leave(self) -> None:
        """After an interruption: drop this writer's claims, and when no other writer holds a
        claim or the lock, remove the claims folder and the lock file (a lone writer leaves no
        trace but its finished chunk files)."""
        self.close()
        others = [p for p in self.claims() if p not in self.mine]
        if others or not (self.out / ".lock").exists():
            return
        with open(self.out / ".lock", "a+") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return  # another writer holds it: leave it be
            self.tidy()
            fcntl.flock(f, fcntl.LOCK_UN)

    def close(self) -> None:
        """Stop the heartbeat and drop this writer's remaining claims: those it recorded, and
        any claim file of this process it had not recorded yet (an interrupt between writing a
        claim and recording it)."""
        self._stop.set()
        own = [p for p, c in self.claims().items() if c[3] == HOST and c[4] == os.getpid()]
        for p in {*self.mine, *own}:
            self.release(p)

    def _heartbeat(self) -> None:
        if self._thread is not None:
            return

        def beat():
            while not self._stop.wait(HEARTBEAT_S):
                for p in list(self.mine):
                    with contextlib.suppress(FileNotFoundError):
                        os.utime(p)

        self._thread = threading.Thread(target=beat, name="simlab-claims", daemon=True)
        self._thread.start()
