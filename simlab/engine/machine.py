"""The machine facts that decide a sweep's arithmetic: the platform, the CPU model and its vector
instruction sets (or the accelerator), and the jax and jaxlib builds.

XLA compiles a program for the instruction sets it finds (AVX-512 or AVX2, FMA, ...), and a new
jax build may order a sum differently, so the same program can round differently elsewhere: a
sweep is bit-identical whatever its chunk size and device count on one machine and jax build,
and agrees within float32 rounding across machines (README, the promise table). Each chunk file
and meta.json records the facts (`facts`); a resume, grow or merge that combines units computed
under different facts warns on stderr, naming them (`report`, `mixed_line`). The facts never
enter the fingerprint: a unit computed elsewhere is reused, not recomputed.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import platform
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

# The CPU flags that choose XLA:CPU's vector code: x86's SSE, AVX, FMA, F16C and AMX families,
# ARM's SIMD (asimd, sve).
VECTOR_FLAG = re.compile(r"sse\w*|ssse3|avx\w*|fma\w*|f16c|amx\w*|asimd\w*|sve\w*")
CPUINFO = Path("/proc/cpuinfo")


def cpu(cpuinfo: str | None = None) -> tuple[str, list[str]]:
    """The CPU model and its vector instruction set flags, sorted (from /proc/cpuinfo, or the
    text `cpuinfo`; where there is none, platform.processor() and no flags)."""
    if cpuinfo is None:
        try:
            cpuinfo = CPUINFO.read_text(errors="replace")
        except OSError:
            cpuinfo = ""
    model, flags = "", None
    for line in cpuinfo.splitlines():
        key, _, value = (s.strip() for s in line.partition(":"))
        if not model and key.lower() in ("model name", "cpu model", "hardware"):
            model = value
        elif flags is None and key.lower() in ("flags", "features"):
            flags = sorted(f for f in value.split() if VECTOR_FLAG.fullmatch(f))
    return model or platform.processor() or platform.machine(), flags or []


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@functools.cache
def facts() -> dict[str, Any]:
    """This process's machine facts: the platform jax computes on; on a CPU its model and
    vector flags (`cpu`), else the device kind (e.g. "NVIDIA H100 80GB HBM3"); the
    architecture; the jax and jaxlib versions."""
    import jax  # deferred: jax only where a sweep computed (records are read without it)

    device = jax.devices()[0]
    out: dict[str, Any] = {"platform": device.platform, "arch": platform.machine()}
    if device.platform == "cpu":
        out["cpu"], out["vector_isa"] = cpu()
    else:
        out["device"] = device.device_kind
    out.update(jax=_version("jax"), jaxlib=_version("jaxlib"))
    return out


def describe(f: Mapping[str, Any] | None) -> str:
    """One machine's facts in words (None: not recorded)."""
    if f is None:
        return "a machine not recorded (units written before simlab recorded it)"
    where = f.get("device") or f"{f.get('cpu', '?')} [{' '.join(f.get('vector_isa', []))}]"
    return (
        f"{f.get('platform', '?')} {where} {f.get('arch', '')}".rstrip()
        + f", jax {f.get('jax', '?')}, jaxlib {f.get('jaxlib', '?')}"
    )


def distinct(machines: Iterable[Mapping[str, Any] | None]) -> list[dict[str, Any] | None]:
    """The distinct facts among `machines`, in order of first appearance."""
    seen: dict[str, dict[str, Any] | None] = {}
    for m in machines:
        seen.setdefault(json.dumps(m, sort_keys=True), None if m is None else dict(m))
    return list(seen.values())


def mixed_line(machines: list[dict[str, Any] | None], where: object) -> str | None:
    """The warning that `where` combines units computed under different machine facts (None
    when there is one set of facts)."""
    if len(machines) < 2:
        return None
    return (
        f"simlab: warning: {where}: combines units computed under different machine facts: "
        + "; and ".join(map(describe, machines))
        + " (values agree within float32 rounding, not bit for bit: bit-identity holds on one "
        "machine and jax build)"
    )


def report(machines: Iterable[Mapping[str, Any] | None], where: object) -> list:
    """The distinct facts of a sweep's units, printing `mixed_line` on stderr when they
    differ: what meta.json records as "machines"."""
    found = distinct(machines)
    line = mixed_line(found, where)
    if line:
        print(line, file=sys.stderr)
    return found
