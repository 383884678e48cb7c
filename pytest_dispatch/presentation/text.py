"""The text helpers every renderer shares: cutting text to a width, Markdown tables."""

from __future__ import annotations

from typing import Iterable, Sequence


def cut_keeping_end(text: str, width: int) -> str:
    """``text`` in ``width`` characters: when it must be cut, its start goes (names
    share their start, e.g. ``test_fused_``; their end tells them apart)."""
    if len(text) <= width:
        return text
    return "…" + text[len(text) - width + 1:] if width > 1 else "…"


def cut_keeping_start(text: str, width: int) -> str:
    """``text`` in ``width`` characters: when it must be cut, its end goes."""
    if len(text) <= width:
        return text
    return text[:width - 1] + "…" if width > 1 else "…"


def cut_in_the_middle(text: str, width: int) -> str:
    """``text`` in ``width`` characters: when it must be cut, its middle goes, so that the start
    (which test: ``test_fused_plus_``) and the end (``_than_eager``) both stay."""
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    head = width // 2
    tail = width - 1 - head
    return text[:head] + "…" + (text[len(text) - tail:] if tail else "")


def markdown_table(columns: Sequence[str], rows: Iterable[Sequence[object]], right: Sequence[int] = ()) -> list[str]:
    """A Markdown table: the header, the rule (columns ``right`` aligned right), a line per row.
    A ``|`` inside a cell is the caller's to escape."""
    rule = "|" + "|".join("---:" if index in right else "---" for index in range(len(columns))) + "|"
    return ["| " + " | ".join(columns) + " |", rule] + ["| " + " | ".join(str(cell) for cell in row) + " |"
                                                        for row in rows]
