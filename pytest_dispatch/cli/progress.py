"""Progress lines for long commands: one line per finished step on stderr, never long silence."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from pytest_dispatch.presentation.text import printable


class Progress:
    """``step(text)`` writes ``command: [done/total] text (elapsed s)`` on ``stream``.

    With ``every_s``, steps closer together than that are not written, except the last one
    when something was written before (fast loops stay quiet, slow ones say how far they are).
    """

    def __init__(self, command: str, total: int | None = None, every_s: float = 0.0,
                 stream: TextIO | None = None) -> None:
        self.command = command
        self.total = total
        self.every_s = every_s
        self.stream = stream
        self.done = 0
        self.started = self.last = time.perf_counter()
        self.written = False

    def step(self, text: str = "") -> None:
        self.done += 1
        now = time.perf_counter()
        last_step = self.total is not None and self.done >= self.total
        if now - self.last < self.every_s and not (last_step and self.written):
            return
        count = f"[{self.done}/{self.total}] " if self.total is not None else f"[{self.done}] "
        stream = self.stream or sys.stderr
        stream.write(printable(f"{self.command}: {count}{text + ' ' if text else ''}({now - self.started:.1f} s)") + "\n")
        stream.flush()
        self.last = now
        self.written = True
