"""What an A/B job decided, per measurement, and the one way each decision is shown.

A measurement's status is computed once (``Comparison.status``) from its exact
count verdicts and its paired timing verdict; the terminal lines and the Markdown
table (``presentation/ab.py``), the JSON file and the exit status all read it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from pytest_dispatch.judgement import paired
from pytest_dispatch.judgement.gate import CountVerdict, compare_counts
from pytest_dispatch.judgement.stats import format_seconds, format_us
from pytest_dispatch.judgement.status import ExitCode, Status
from pytest_dispatch.measurement.key import MeasurementKey
from pytest_dispatch.measurement.meter import Measurement

TALLY_ORDER = (Status.REGRESSED, Status.IMPROVED, Status.UNCHANGED, Status.INCONCLUSIVE, Status.NEW, Status.REMOVED)
SCHEMA = "pytest-dispatch-ab/2"  # docs/schema.md


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

    def line(self, label: str | None = None) -> str:
        """``name status: what was seen`` - the one line shown for this measurement (``label``:
        what names it, the measurement's name by default)."""
        label = self.name if label is None else label
        if self.status in (Status.NEW, Status.REMOVED):
            side = self.head or self.base
            return f"{label} {self.status}: {side.dispatches} dispatches per call, only in the " \
                   f"{'head' if self.base is None else 'base'}"
        parts = [v.line("").lstrip() for v in self.counts if v.status != Status.UNCHANGED]
        timing = self.timing
        if timing is not None and not math.isnan(timing.ratio):
            per_call = f"{format_us(timing.a_median_us_per_call)} -> {format_us(timing.b_median_us_per_call)} µs per call"
            detail = (f"x{timing.ratio:.3f} per call, {timing.interval_text}, {timing.sessions} sessions, "
                      f"{timing.pairs} pairs, {format_seconds(timing.seconds)}")
            if timing.p_adjusted is not None:
                detail += f", p={timing.p_adjusted:.2g} adj."
            parts.append(f"time per call {timing.status}: {per_call} ({detail})"
                         + (f"; {timing.reason}" if timing.status == Status.INCONCLUSIVE and timing.reason else ""))
        elif timing is not None:
            parts.append(f"time per call inconclusive: {timing.reason}")
        elif self.note:
            parts.append(f"time not compared: {self.note}")
        return f"{label} {self.status}: " + "; ".join(parts or ["counts unchanged"])

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key, "nodeid": self.nodeid, "name": self.name, "status": self.status,
            "counts": {v.metric: v.as_dict() for v in self.counts},
            "timing": None if self.timing is None else self.timing.as_dict(),
            "base_us_per_call": self.us_per_call(0), "head_us_per_call": self.us_per_call(1),
            "base_us_per_dispatch": self.us_per_dispatch(0), "head_us_per_dispatch": self.us_per_dispatch(1),
            "dispatches_per_call": {"base": self.base.dispatches if self.base else None,
                                    "head": self.head.dispatches if self.head else None},
            "sessions": [{key: v.as_dict()[key] for key in ("ratio", "low", "high", "pairs")} for v in self.sessions],
            "note": self.note, "line": self.line(),
        }

    def us_per_call(self, side: int) -> float | None:
        """The paired median µs per call of one side (0: base, 1: head); None when time was not compared."""
        measurement = self.head if side else self.base
        if measurement is None or self.timing is None or math.isnan(self.timing.ratio):
            return None
        return self.timing.b_median_us_per_call if side else self.timing.a_median_us_per_call

    def us_per_dispatch(self, side: int) -> float | None:
        """``us_per_call`` divided by that side's dispatches per call."""
        per_call = self.us_per_call(side)
        return None if per_call is None else per_call / max((self.head if side else self.base).dispatches, 1)


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
    collect_failed: bool = False  # a side could not collect a file: its tests were not compared
    notices: list[str] = dataclasses.field(default_factory=list)  # one line each: a path one side lacks
    seconds: float = 0.0

    @property
    def regressed(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.failed]

    @property
    def compared(self) -> bool:
        """Whether any measurement exists on both sides."""
        return any(c.base is not None and c.head is not None for c in self.comparisons)

    @property
    def new_only(self) -> bool:
        """Nothing on both sides, and the head measured what the base does not have (the pull
        request that adds the first measured tests): nothing to compare yet, and no failure."""
        return not self.compared and any(c.status == Status.NEW for c in self.comparisons)

    def first_run_line(self) -> str | None:
        """The line that says why a job that compared nothing passed, or None."""
        if not self.new_only:
            return None
        new = sum(c.status == Status.NEW for c in self.comparisons)
        return (f"nothing to compare yet: the base has none of these tests; {new} measurement(s) ran on the head "
                "alone (new); later jobs compare them once the base has them")

    @property
    def exit_code(self) -> int:
        if not self.compared and not self.new_only:
            return ExitCode.NOTHING_COMPARED
        return ExitCode.FAILED if self.regressed or self.head_failed or self.collect_failed else ExitCode.OK

    def tally(self) -> str:
        counts = {status: sum(c.status == status for c in self.comparisons) for status in TALLY_ORDER}
        return ", ".join(f"{n} {status}" for status, n in counts.items() if n) or "nothing measured"

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "base": self.base, "head": self.head, "adapter": self.adapter,
            "settings": self.settings, "seconds": self.seconds, "exit_code": self.exit_code,
            "measurements": [c.as_dict() for c in self.comparisons],
            "problems": list(self.problems), "notices": list(self.notices),
            "head_failed": list(self.head_failed),
        }
