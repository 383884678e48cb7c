"""The terminal report of ``pytest --dispatch-report``: one row per measurement."""

from __future__ import annotations

import collections
import dataclasses
import shutil
import textwrap
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

import numpy as np

from pytest_dispatch.judgement import stats
from pytest_dispatch.judgement.results import TestResult
from pytest_dispatch.judgement.status import Status
from pytest_dispatch.measurement import recorder
from pytest_dispatch.measurement.gpu import GpuInfo
from pytest_dispatch.measurement.meter import SINGLE_OP, Measurement
from pytest_dispatch.presentation.text import cut_keeping_end, cut_keeping_start

if TYPE_CHECKING:
    from pytest_dispatch.judgement.gate import TestVerdicts

DEFAULT_WIDTH = 100  # when the terminal's width is unknown (not a terminal, no COLUMNS)
MIN_WIDTH = DEFAULT_WIDTH  # the table needs this much (a 27-character name and the numbers)
_NAME_MIN = 27  # a narrow terminal still gets this much of a name
_NUMBER_COLUMNS = (
    ("disp/call", 9),
    ("sub/call", 8),
    ("wall µs/disp [95% CI]", 22),
    ("host µs/d", 9),
    ("sync µs", 7),
    ("infl.", 5),
    ("budget", 6),
)
_NUMBERS_WIDTH = sum(width + 1 for _, width in _NUMBER_COLUMNS)


def terminal_width() -> int:
    """The terminal's columns (``COLUMNS`` wins), at least MIN_WIDTH."""
    return max(shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns, MIN_WIDTH)


@dataclasses.dataclass(frozen=True)
class Label:
    """A row's test name and what says which measurement; only the name is ever cut."""

    name: str
    suffix: str = ""

    def __len__(self) -> int:
        return len(self.name) + len(self.suffix)

    def fit(self, width: int, cut: Callable[[str, int], str] = cut_keeping_end) -> str:
        room = width - len(self.suffix)
        if room < 8:  # no room for a readable name: cut both, still keeping the end
            return cut_keeping_end(self.name + self.suffix, width)
        return cut(self.name, room) + self.suffix


class _Table:
    """Fixed number columns; the test column takes the rest of the width, no more than it needs."""

    def __init__(self, labels: Iterable[Label], width: int) -> None:
        labels = set(labels)
        longest = max((len(label) for label in labels), default=len("test"))
        self.name_width = max(len("test"), min(longest, max(width - _NUMBERS_WIDTH, _NAME_MIN)))
        self._texts = {label: label.fit(self.name_width) for label in labels}
        # Names that differ only in the middle (test_fused_is_... / test_fused_plus_is_...)
        # read alike once their start goes: those keep their start instead.
        alike = collections.Counter(self._texts.values())
        for label, text in self._texts.items():
            if alike[text] > 1:
                self._texts[label] = label.fit(self.name_width, cut_keeping_start)

    def row(self, label: Label | str, cells: Iterable[str]) -> str:
        text = self._texts[label] if isinstance(label, Label) else label
        parts = [f"{text:<{self.name_width}}"]
        parts += [f"{cut_keeping_end(cell, width):>{width}}" for (_, width), cell in zip(_NUMBER_COLUMNS, cells)]
        return " ".join(parts).rstrip()

    def header(self) -> str:
        return self.row("test", (name for name, _ in _NUMBER_COLUMNS))


def row_label(result: TestResult, measurement: Measurement | None, several: bool) -> Label:
    """The test's name and, where needed, which measurement."""
    suffix = ""
    if measurement is not None and several:
        suffix += f" [{measurement.name.rsplit('.', 1)[-1]}]"
    if measurement is not None and measurement.method == SINGLE_OP:
        suffix += " (single-op)"
    return Label(result.nodeid.split("::", 1)[-1], suffix)


def _interval_text(samples: np.ndarray) -> str:
    interval = stats.median_ci(samples)
    return f"{interval.estimate:.1f} [{interval.low:.1f}-{interval.high:.1f}]"


def median_text(measurement: Measurement) -> str:
    """Median wall µs per dispatch, for one-figure listings."""
    if not measurement.timed:
        return Status.OFF
    return f"{np.median(measurement.wall_us_per_dispatch):.1f}" if measurement.dispatches else "-"


def measurement_cells(result: TestResult, measurement: Measurement) -> tuple[str, ...]:
    inflation = result.single_op_inflation(measurement)
    if not measurement.timed:
        return (str(measurement.dispatches), str(measurement.submits), Status.OFF, Status.OFF, Status.OFF, "",
                result.budget_verdict if measurement.method != SINGLE_OP else "")
    return (
            str(measurement.dispatches),
            str(measurement.submits),
            _interval_text(measurement.wall_us_per_dispatch) if measurement.dispatches else "-",
            f"{np.median(measurement.host_us_per_dispatch):.1f}" if measurement.dispatches else "-",
            f"{measurement.sync_median_us:.0f}",
            f"{inflation:.1f}x" if inflation else "",
            result.budget_verdict if measurement.method != SINGLE_OP else "",  # budgets judge sequential
    )


def counts_cells(result: TestResult) -> tuple[str, ...]:
    """A test with a budget but no measurement: its whole-test counts."""
    call = result.call
    return (str(call["dispatches"]), str(call["calls"]["submit"]), "(not measured)", "", "", "",
            result.budget_verdict)


def breakdown_lines(measurement: Measurement, width: int = DEFAULT_WIDTH) -> list[str]:
    """Per-kernel dispatches and per-API-call host µs of one measurement (for -v)."""
    kernels = ", ".join(f"{name} {n}" for name, n in measurement.by_kernel.items()) or "none"
    host_total = sum(measurement.host_breakdown_us.values()) or 1.0
    calls = ", ".join(
        f"{kind} {measurement.calls[kind]}x {measurement.host_breakdown_us[kind]:.1f} µs "
        f"({100 * measurement.host_breakdown_us[kind] / host_total:.0f}%)"
        for kind in recorder.KINDS
        if measurement.calls.get(kind)
    )
    indent = " " * 6
    lines = textwrap.wrap(f"kernels/call: {kernels}", width, initial_indent="    ", subsequent_indent=indent)
    lines += textwrap.wrap(f"host per call: {calls}", width, initial_indent="    ", subsequent_indent=indent)
    if measurement.gpu_us is not None:
        note = " (CPU adapter: indicative only)" if measurement.gpu_is_indicative else ""
        lines.append(f"    GPU µs/call from timestamps: {np.median(measurement.gpu_us):.1f}{note}")
    rounds = f"{measurement.rounds} timed rounds" if measurement.timed else "timing off"
    lines.append(f"    method: {measurement.method}, {rounds} x {measurement.per_round} calls, "
                 f"{measurement.warmup} warm-up; sync: {measurement.sync_method}")
    return lines


def render(
    results: list[TestResult],
    gpu: GpuInfo | None,
    header: str,
    verbose: bool = False,
    verdicts: Mapping[str, "TestVerdicts"] | None = None,
    width: int | None = None,
) -> list[str]:
    """The report's lines, at most ``width`` columns (default: the terminal's)."""
    width = width or terminal_width()
    rows: list[tuple[TestResult, Measurement | None, Label]] = []
    for result in results:
        several = len({m.name for m in result.measurements}) > 1
        rows += [(result, m, row_label(result, m, several)) for m in result.measurements]
        if not result.measurements:
            rows.append((result, None, row_label(result, None, False)))
    table = _Table((label for _, _, label in rows), width)
    lines = textwrap.wrap(header if gpu is None else f"adapter: {gpu.describe()}", width, subsequent_indent="  ")
    if gpu is not None and gpu.is_cpu:
        lines.append("CPU adapter: timings are CPU-emulated; counts are exact")
    lines.append(table.header())
    lines.append("-" * min(width, len(lines[-1])))

    def wrapped(text: str, first: str, rest: str) -> list[str]:
        return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=rest)

    for index, (result, measurement, label) in enumerate(rows):
        if measurement is None:
            lines.append(table.row(label, counts_cells(result)))
        else:
            lines.append(table.row(label, measurement_cells(result, measurement)))
            if measurement.timed and measurement.dispatches and np.median(measurement.wall_us) <= 0:
                lines.append("    the work is below the sync's noise: measure more calls per round (per_round)")
            if verbose:
                lines.extend(breakdown_lines(measurement, width))
        if index + 1 < len(rows) and rows[index + 1][0] is result:
            continue  # the test's own lines follow its last row
        if result.budget_lines:
            lines.extend(f"    {line}" for line in result.budget_lines)
        for line in result.speedups:
            lines.extend(wrapped(line, "    ", " " * 6))
        if verdicts and result.nodeid in verdicts:
            for line in verdicts[result.nodeid].lines():
                lines.extend(wrapped(line, "    gate: ", " " * 10))
    return lines


PYTEST_ACCEPT_HINT = "run with --dispatch-accept to make this run the baseline"


def gate_summary(baseline, verdicts: Mapping[str, "TestVerdicts"], late_regressions: list[str],
                 accept_hint: str = PYTEST_ACCEPT_HINT) -> list[str]:
    """The gate's totals, one line, then what to do about them: ``accept_hint`` when
    something improved and nothing regressed."""
    statuses: dict[str, int] = {}
    for test in verdicts.values():
        for per_key in test.counts.values():
            for verdict in per_key:
                if verdict.status != Status.UNCHANGED:
                    statuses[f"counts {verdict.status}"] = statuses.get(f"counts {verdict.status}", 0) + 1
        for verdict in test.timing.values():
            statuses[f"timing {verdict.status}"] = statuses.get(f"timing {verdict.status}", 0) + 1
        if test.missing:
            statuses["no baseline"] = statuses.get("no baseline", 0) + len(test.missing)
    where = (f" and {baseline.stored_runs} stored run(s) of this GPU" if baseline.comparable
             else " (another GPU: timing incomparable, counts compared)")
    totals = ", ".join(f"{n} {status}" for status, n in sorted(statuses.items())) or "nothing compared"
    lines = [f"dispatch gate vs {baseline.path}{where}: {totals}"]
    lines += [f"dispatch gate: regressed with the whole session known: {line}" for line in late_regressions]
    regressed = late_regressions or any(test.failure_lines for test in verdicts.values())
    if not regressed and any(test.improved for test in verdicts.values()):
        lines.append(f"dispatch gate: improvements found; {accept_hint}")
    return lines
