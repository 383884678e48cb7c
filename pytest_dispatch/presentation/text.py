"""The text helpers every renderer shares: cutting text to a width, Markdown from data, Markdown tables."""

from __future__ import annotations

import re
import textwrap
from typing import Iterable, Sequence

# CommonMark lets a backslash escape any ASCII punctuation; escaping all of it (but "|", which a
# table escapes) leaves no emphasis, link, image, autolink, entity or raw HTML in text from data.
_PUNCTUATION = re.compile(r"([!-/:-@\[-`{}~])")  # ASCII punctuation but "|"
_BACKTICKS = re.compile(r"`+")
# what a terminal acts on rather than shows: C0 controls but tab and newline (ESC starts the escape
# sequences that move the cursor, recolour or retitle), DEL, C1 controls, and the marks that turn
# text around (a name could show as another)
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: object) -> str:
    """``text`` (lines that hold names, branches, messages: data) for a terminal or a text file:
    each control character written as its escape (``\\x1b``), tab and newline kept."""
    return _CONTROL.sub(lambda found: f"\\x{ord(found.group()):02x}" if ord(found.group()) < 0x100
                        else f"\\u{ord(found.group()):04x}", str(text))


def cut_keeping_end(text: str, width: int) -> str:
    """``text`` in ``width`` characters: when it must be cut, its start goes (names
    share their start, e.g. ``test_fused_``; their end tells them apart)."""
    if len(text) <= width:
        return text
    return "…" + text[len(text) - width + 1:] if width > 1 else "…"


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


_WORD = re.compile(r"[^_\[\].:-]+[_\[\].:-]*|[_\[\].:-]+")  # a word and the separators after it


def cut_at_words(text: str, width: int) -> str:
    """``text`` in ``width`` characters: when it must be cut, whole words of its middle go (words:
    what ``_ [ ] . : -`` separate), its first and last words stay (``fused_is…than_eager``); where
    even those two do not fit, ``cut_in_the_middle``."""
    if len(text) <= width:
        return text
    words = _WORD.findall(text)
    if len(words) < 2:
        return cut_in_the_middle(text, width)
    head, tail = [words[0]], [words[-1]]

    def length() -> int:
        return len("".join(head).rstrip("_-.:")) + 1 + len("".join(tail))
    if length() > width:
        return cut_in_the_middle(text, width)
    first, last = 1, len(words) - 2
    grew = True
    while grew and first <= last:  # the end first: it tells names that share their start apart
        grew = False
        tail.insert(0, words[last])
        if length() <= width:
            last, grew = last - 1, True
        else:
            tail.pop(0)
        if first <= last:
            head.append(words[first])
            if length() <= width:
                first, grew = first + 1, True
            else:
                head.pop()
    return "".join(head).rstrip("_-.:") + "…" + "".join(tail)


def first_names(names: Sequence[str], shown: int) -> str:
    """``a, b, ...``: the first ``shown`` names, and dots where there are more."""
    return ", ".join(names[:shown]) + (", ..." if len(names) > shown else "")


def count_and_first(names: Sequence[str], shown: int = 2) -> str:
    """``3 (a, b, ...)``: how many names, and the first few."""
    return f"{len(names)} ({first_names(names, shown)})" if names else "0"


def wrap(text: str, width: int, initial_indent: str = "", subsequent_indent: str = "") -> list[str]:
    """``textwrap.wrap``, in time linear in ``text``: a word longer than a line (a name: figures are
    short) is cut in its middle to fit instead of broken over lines; textwrap copies the rest of a
    long word once per line it fills, which is quadratic in the word's length."""
    room = max(1, width - max(len(initial_indent), len(subsequent_indent)))
    text = re.sub(r"\S{%d,}" % (room + 1), lambda word: cut_in_the_middle(word.group(), room), text)
    return textwrap.wrap(text, width, initial_indent=initial_indent, subsequent_indent=subsequent_indent)


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def markdown_text(text: object) -> str:
    """``text`` (names, branches, messages: data) as Markdown that shows it literally, on one line."""
    return _PUNCTUATION.sub(r"\\\1", _one_line(text))


def markdown_code(text: object) -> str:
    """``text`` in a code span that it cannot close: the fence is one backtick longer than its longest run."""
    text = _one_line(text)
    fence = "`" * (1 + max((len(run) for run in _BACKTICKS.findall(text)), default=0))
    pad = " " if text.startswith("`") or text.endswith("`") or not text else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def markdown_table(columns: Sequence[str], rows: Iterable[Sequence[object]], right: Sequence[int] = ()) -> list[str]:
    """A Markdown table: the header, the rule (columns ``right`` aligned right), a line per row.
    Cells are Markdown already (data passed through ``markdown_text`` or ``markdown_code``); every
    ``|`` in them is escaped here, code spans included (GitHub splits cells before it reads spans)."""
    rule = "|" + "|".join("---:" if index in right else "---" for index in range(len(columns))) + "|"

    def row_line(cells: Sequence[object]) -> str:
        return "| " + " | ".join(_one_line(cell).replace("|", "\\|") for cell in cells) + " |"
    return [row_line(columns), rule] + [row_line(row) for row in rows]
