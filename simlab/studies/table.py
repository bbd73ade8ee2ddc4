"""The one table formatter of the studies: check-theory's fixed-width table and the
benchmark's Markdown tables.

A table is its columns and its rows of cells (anything str() prints).  Fixed width (the
default): a header of the column names, a rule of dashes, then each row with every cell
left-justified in its column, a cell longer than its column wrapped onto as many lines as it
needs (textwrap).  Markdown: `| name | ... |`, a `|---|` rule, then `| cell | ... |` per row,
unpadded (the renderer aligns them).

Printed blocks of a doc (`replace_blocks`): the text between `<!-- NAME:begin MARK -->` and
`<!-- NAME:end -->`, rewritten by the script that MARK names (README.md's numbers, the
performance tables, docs/design.md's pictures).
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


def replace_blocks(text: str, blocks: dict[str, str], mark: str, where: object) -> str:
    """`text` (of the file `where`) with each block NAME -> BODY written between its markers:
    `<!-- NAME:begin MARK -->` newline BODY `<!-- NAME:end -->`; a missing or repeated marker
    is an error naming the file."""
    for name, body in blocks.items():
        begin, end = f"<!-- {name}:begin {mark} -->", f"<!-- {name}:end -->"
        if text.count(begin) != 1 or text.count(end) != 1:
            raise ValueError(f"{where}: needs one {begin} and one {end}")
        head, rest = text.split(begin)
        _, tail = rest.split(end)
        text = f"{head}{begin}\n{body}{end}{tail}"
    return text
