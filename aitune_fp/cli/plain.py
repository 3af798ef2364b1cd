"""A run's parts without colour as plain text: rich's own to the character, and much faster."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Literal

import attrs
from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

#: Characters after which rich starts a new line or moves to a tab stop: such text goes to rich.
_BREAKS = re.compile("[\t\n\v\f\r\x1c-\x1e\x85\u2028\u2029]")


@attrs.frozen
class Column:
    """One column of a :class:`Grid`: rich's ``add_column`` arguments that the tables use."""

    header: str | Text
    justify: Literal["left", "right"] = "left"
    no_wrap: bool = False
    overflow: Literal["fold", "crop", "ellipsis", "ignore"] = "fold"
    min_width: int | None = None
    max_width: int | None = None
    ratio: int | None = None


class Grid:
    """A table where it fits whole; below ``min_width`` columns, one record per row instead.

    Records keep every name and figure whole and let only the sentences wrap, on words.
    """

    def __init__(
        self,
        columns: Sequence[Column],
        rows: Sequence[Sequence[str | Text]],
        records: Sequence[RenderableType],
        wrapping: int,
    ) -> None:
        self.columns = tuple(columns)
        self.rows = [tuple(row) for row in rows]
        self.records = records
        whole = [
            [_plain(c.header), *(_plain(row[i]) for row in self.rows)]
            for i, c in enumerate(self.columns)
            if c.no_wrap
        ]
        self.min_width = sum(max(map(len, c)) for c in whole) + 3 * len(whole) + wrapping

    def table(self) -> Table:
        """The rich table (simple head, no edges), made when rich draws it."""
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
        for c in self.columns:
            table.add_column(**attrs.asdict(c, recurse=False))
        for row in self.rows:
            table.add_row(*row)
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """The table, or the records when the table's whole cells do not fit."""
        yield self.table() if options.max_width >= self.min_width else Group(*self.records)

    def plain_lines(self, width: int) -> list[str] | None:
        """The table's lines on a console ``width`` wide (rich's column widths), or None when rich must draw it."""
        if width < self.min_width:
            return None
        n = len(self.columns)
        room = width - (n - 1)
        cells = [[column.header, *(row[i] for row in self.rows)] for i, column in enumerate(self.columns)]  # fmt: skip
        texts: list[list[str]] = []
        widths: list[int] = []
        for i, (column, cells_i) in enumerate(zip(self.columns, cells, strict=True)):
            if any(isinstance(c, Text) and c.justify is not None for c in cells_i):
                return None
            plain = [_plain(c) for c in cells_i]
            if any(_BREAKS.search(p) for p in plain):
                return None
            pad = (i > 0) + (i < n - 1)
            if room - pad < 1:
                return None
            widest = max(cell_len(p) + pad for p in plain)
            if column.min_width is not None:
                widest = max(widest, column.min_width + pad)
            if column.max_width is not None:
                widest = min(widest, column.max_width + pad)
            if widest - pad < 1 or any(cell_len(p) > widest - pad for p in plain):
                return None  # rich would wrap or cut this cell (or drop a zero-width one)
            texts.append(plain)
            widths.append(widest or 1)
        if sum(widths) > room:
            return None
        lines = []
        for r in range(len(self.rows) + 1):
            line = []
            for i, (column, plain, w) in enumerate(zip(self.columns, texts, widths, strict=True)):
                inner = w - (i > 0) - (i < n - 1)
                text = plain[r]
                if column.justify == "right":
                    text = text.rstrip()
                    text = " " * (inner - cell_len(text)) + text
                else:
                    text = text + " " * (inner - cell_len(text))
                line.append((" " if i > 0 else "") + text + (" " if i < n - 1 else ""))
            lines.append(" ".join(line))
            if r == 0:
                lines.append("─" * (sum(widths) + n - 1))
        return lines


def _plain(cell: str | Text) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def plain_lines(part: RenderableType, width: int) -> list[str] | None:
    """``part``'s lines as rich prints them on a colourless console ``width`` wide, or None."""
    if isinstance(part, Grid):
        return part.plain_lines(width)
    if not isinstance(part, Text) or part.end != "\n" or part.justify not in (None, "default", "left"):  # fmt: skip
        return None
    text = part.plain
    if _BREAKS.search(text):
        return None
    if cell_len(text) <= width or (part.no_wrap and part.overflow == "ignore"):
        return [text]
    return None


def _drawn_by_rich(console: Console, parts: Sequence[RenderableType]) -> str:
    with console.capture() as captured:
        console.print(Group(*parts), crop=False)
    return captured.get()


def print_parts(console: Console, parts: Iterable[RenderableType]) -> None:
    """Print ``parts`` on ``console`` in one go, without rich's padding; nothing is cropped."""
    options = console.options
    own = (
        console.color_system is None
        and not console.record
        and not options.ascii_only
        and not options.legacy_windows
        and not options.no_wrap
        and options.justify is None
    )
    chunks: list[str] = []
    pending: list[RenderableType] = []
    for part in parts:
        lines = plain_lines(part, options.max_width) if own else None
        if lines is None:
            pending.append(part)
            continue
        if pending:
            chunks.append(_drawn_by_rich(console, pending))
            pending = []
        chunks.append("".join(line + "\n" for line in lines))
    if pending:
        chunks.append(_drawn_by_rich(console, pending))
    console.file.write("\n".join(line.rstrip() for line in "".join(chunks).split("\n")))
    console.file.flush()
