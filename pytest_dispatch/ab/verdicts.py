"""What an A/B job decided, per measurement, and the one way each decision is shown.

A measurement's status is computed once (``Comparison.status``) from its exact
count verdicts and its paired timing verdict; the terminal lines, the Markdown
table, the JSON file and the exit status all read it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from pytest_dispatch.judgement import paired
from pytest_dispatch.judgement.gate import CountVerdict, compare_counts
from pytest_dispatch.judgement.stats import format_us
from pytest_dispatch.judgement.status import Status
from pytest_dispatch.measurement.key import MeasurementKey
from pytest_dispatch.measurement.meter import Measurement
from pytest_dispatch.presentation.text import markdown_table

TALLY_ORDER = (Status.REGRESSED, Status.IMPROVED, Status.UNCHANGED, Status.INCONCLUSIVE, Status.NEW, Status.REMOVED)
SCHEMA = "pytest-dispatch-ab/2"  # docs/schema.md
EXIT_OK, EXIT_REGRESSED, EXIT_BAD_INPUT = 0, 1, 2


@dataclasses.dataclass
class Comparison:
    """One measurement (``nodeid::name``) of base against head."""

    key: str
    base: Measurement | None
    head: Measurement | None
    timing: paired.PairedVerdict | None = None
    note: str = ""  # why timing was not judged (a crash, a lone measurement)
    sessions: list[paired.PairedVerdict] = dataclasses.field(default_factory=list)  # one per session

    @property
    def name(self) -> str:
        return MeasurementKey.parse(self.key).name

    @property
    def nodeid(self) -> str:
        return MeasurementKey.parse(self.key).nodeid

    @property
    def counts(self) -> list[CountVerdict]:
        if self.base is None or self.head is None:
            return []
        return compare_counts(self.base, self.head)

    @property
    def status(self) -> Status:
        if self.base is None:
            return Status.NEW
        if self.head is None:
            return Status.REMOVED
        statuses = {v.status for v in self.counts} | {self.timing.status if self.timing else Status.INCONCLUSIVE}
        for status in (Status.REGRESSED, Status.IMPROVED):
            if status in statuses:
                return status
        return Status.INCONCLUSIVE if Status.INCONCLUSIVE in statuses else Status.UNCHANGED

    @property
    def failed(self) -> bool:
        return self.status == Status.REGRESSED

    def line(self) -> str:
        """``name status: what was seen`` - the one line shown for this measurement."""
        if self.status in (Status.NEW, Status.REMOVED):
            side = self.head or self.base
            return f"{self.name} {self.status}: {side.dispatches} dispatches per call, only in the " \
                   f"{'head' if self.base is None else 'base'}"
        parts = [v.summary for v in self.counts if v.status != Status.UNCHANGED]
        timing = self.timing
        if timing is not None and not math.isnan(timing.ratio):
            per_call = f"{format_us(timing.a_median)} -> {format_us(timing.b_median)} µs per call"
            detail = (f"x{timing.ratio:.3f} per call, {timing.interval_text}, {timing.sessions} sessions, "
                      f"{timing.pairs} pairs, {timing.seconds:.1f} s")
            if timing.p_adjusted is not None:
                detail += f", p={timing.p_adjusted:.2g} adj."
            parts.append(f"time per call {timing.status}: {per_call} ({detail})"
                         + (f"; {timing.reason}" if timing.status == Status.INCONCLUSIVE and timing.reason else ""))
        elif timing is not None:
            parts.append(f"time per call inconclusive: {timing.reason}")
        elif self.note:
            parts.append(f"time not compared: {self.note}")
        return f"{self.name} {self.status}: " + "; ".join(parts or ["counts unchanged"])

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key, "nodeid": self.nodeid, "name": self.name, "status": self.status,
            "counts": {v.metric: v.as_dict() for v in self.counts},
            "timing": None if self.timing is None else self.timing.as_dict(),
            "base_us_per_call": self._median(self.base, 0, per_dispatch=False),
            "head_us_per_call": self._median(self.head, 1, per_dispatch=False),
            "base_us_per_dispatch": self._median(self.base, 0),
            "head_us_per_dispatch": self._median(self.head, 1),
            "dispatches_per_call": {"base": self.base.dispatches if self.base else None,
                                    "head": self.head.dispatches if self.head else None},
            "sessions": [{key: v.as_dict()[key] for key in ("ratio", "low", "high", "pairs")} for v in self.sessions],
            "note": self.note, "line": self.line(),
        }

    def _median(self, measurement: Measurement | None, side: int, per_dispatch: bool = True) -> float | None:
        if measurement is None or self.timing is None or math.isnan(self.timing.ratio):
            return None
        per_call = self.timing.a_median if side == 0 else self.timing.b_median
        return per_call / max(measurement.dispatches, 1) if per_dispatch else per_call


@dataclasses.dataclass
class Outcome:
    """The whole job: what was compared, and what went wrong on either side."""

    base: str
    head: str
    adapter: str
    settings: dict[str, Any]
    comparisons: list[Comparison] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)  # one line each: crashes, failures, errors
    head_failed: list[str] = dataclasses.field(default_factory=list)  # tests failing on the head
    seconds: float = 0.0

    @property
    def regressed(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.failed]

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSED if self.regressed or self.head_failed else EXIT_OK

    def tally(self) -> str:
        counts = {status: sum(c.status == status for c in self.comparisons) for status in TALLY_ORDER}
        return ", ".join(f"{n} {status}" for status, n in counts.items() if n) or "nothing measured"

    def lines(self) -> list[str]:
        out = [f"A/B: base {self.base}  vs  head {self.head}", f"adapter: {self.adapter}"]
        by_test: dict[str, list[Comparison]] = {}
        for comparison in self.comparisons:
            by_test.setdefault(comparison.nodeid, []).append(comparison)
        for nodeid, comparisons in by_test.items():
            out.append(nodeid)
            out.extend(f"    {c.line()}" for c in comparisons)
        out.extend(self.problems)
        verdict = "FAILED" if self.exit_code else "passed"
        out.append(f"A/B {verdict}: {self.tally()} ({self.seconds:.0f} s)")
        return out

    def markdown(self) -> list[str]:
        rows = []
        for c in self.comparisons:
            d = c.as_dict()
            dispatches = f"{d['dispatches_per_call']['base'] or '–'} → {d['dispatches_per_call']['head'] or '–'}"
            us = "–"
            if d["base_us_per_call"] is not None:
                us = f"{format_us(d['base_us_per_call'])} → {format_us(d['head_us_per_call'])}"
            ratio, pairs = "–", "–"
            if c.timing is not None and not math.isnan(c.timing.ratio):
                high = "inf" if math.isinf(c.timing.high) else f"{c.timing.high:.3f}"
                ratio, pairs = f"x{c.timing.ratio:.3f} [{c.timing.low:.3f}–{high}]", str(c.timing.pairs)
            rows.append((f"`{c.nodeid}`", c.name, dispatches, us, ratio, pairs, f"**{c.status}**"))
        lines = [f"### A/B: {self.head} against {self.base}", "", f"Adapter: {self.adapter}", ""]
        lines += markdown_table(("test", "measurement", "dispatches per call base → head",
                                 "µs per call base → head", "ratio per call [interval]", "pairs", "verdict"),
                                rows, right=(2, 3, 4, 5))
        lines += [""] + [f"- {problem}" for problem in self.problems]
        lines.append(f"**A/B {'failed' if self.exit_code else 'passed'}**: {self.tally()}")
        return lines

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "base": self.base, "head": self.head, "adapter": self.adapter,
            "settings": self.settings, "seconds": self.seconds, "exit_code": self.exit_code,
            "measurements": [c.as_dict() for c in self.comparisons],
            "problems": list(self.problems), "head_failed": list(self.head_failed),
        }
