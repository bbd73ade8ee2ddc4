"""The one table formatter of the studies: check-theory's fixed-width table and the
benchmark's Markdown tables.

A table is its columns and its rows of cells (anything str() prints).  Fixed width (the
default): a header of the column names, a rule of dashes, then each row with every cell
left-justified in its column, a cell longer than its column wrapped onto as many lines as it
needs (textwrap).  Markdown: `| name | ... |`, a `|---|` rule, then `| cell | ... |` per row,
unpadded (the renderer aligns them).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence

Column = str | tuple[str, int]


def format_table(
    columns: Sequence[Column], rows: Iterable[Sequence[object]], *, markdown: bool = False
) -> str:
    """columns: (name, width) pairs (the width in characters; a Markdown table may give the
    names alone); each row has one cell per column."""
    names = [c if isinstance(c, str) else c[0] for c in columns]
    if markdown:
        lines = [_markdown_row(names), "|" + "---|" * len(names)]
        return "\n".join(lines + [_markdown_row(row) for row in rows])
    if any(isinstance(c, str) for c in columns):
        raise ValueError("format_table: a fixed-width table needs (name, width) columns")
    widths = [w for _, w in columns]
    lines = [_fixed_row(names, widths), " ".join("-" * w for w in widths)]
    for row in rows:
        cells = [textwrap.wrap(str(c), w) or [""] for c, w in zip(row, widths)]
        for i in range(max(len(c) for c in cells)):
            lines.append(_fixed_row([c[i] if i < len(c) else "" for c in cells], widths))
    return "\n".join(lines)


def _fixed_row(cells: Sequence[str], widths: Sequence[int]) -> str:
    return " ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()


def _markdown_row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"
