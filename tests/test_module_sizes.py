"""No module of the package over MAX_LINES lines (docs/design.md: short modules named after
physical ideas; a module that grows past it is split by concept, not by size)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "simlab"
MAX_LINES = 500


def _sizes() -> dict[str, int]:
    return {
        p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines())
        for p in sorted(ROOT.rglob("*.py"))
    }


def test_no_module_over_the_limit():
    long = {m: n for m, n in _sizes().items() if n > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by concept): {long}"
