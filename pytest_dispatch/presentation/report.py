"""The terminal report of ``pytest --dispatch-report``: one row per measurement."""

from __future__ import annotations

import dataclasses
import shutil
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

import numpy as np

from pytest_dispatch.judgement import stats
from pytest_dispatch.judgement.results import TestResult
from pytest_dispatch.judgement.status import Status
from pytest_dispatch.measurement import recorder
from pytest_dispatch.measurement.gpu import GpuInfo
from pytest_dispatch.measurement.meter import SINGLE_OP, Measurement
from pytest_dispatch.presentation.text import cut_at_words, printable, wrap

DOUBT_MARK = "~"  # before a doubtful timing cell
BELOW_SYNC_NOISE = "< sync noise"  # a median at or below zero: the work was lost in the empty sync's noise
UNNAMED_INTERPRETER_NOTE = (
    "this Python has no names for its internal functions (stripped), so CPython's look-ups keyed by "
    "addresses were counted as they ran: counts of the same code can differ by up to about 1% between "
    "sessions; count with a Python that has symbols (pyenv, python.org's builds) or use "
    "--dispatch-instructions-tolerance 1% (docs/counted.md)")

if TYPE_CHECKING:
    from pytest_dispatch.judgement.gate import TestVerdicts

DEFAULT_WIDTH = 100  # when the terminal's width is unknown (not a terminal, no COLUMNS)
MIN_WIDTH = 60  # narrower terminals get lines this long
_COMPACT_BELOW = 28  # a name column narrower than this with the full headings takes the compact ones
_WALL = ("wall µs per dispatch until the GPU was done, less one empty sync: the median of the row's timed rounds "
         "[95% interval of that median; from 0: not resolved from the sync's noise]")
_WALL_PER_CALL = ("wall µs per call of the measured function, less one empty sync (median of the same rounds): "
                  "what a fused and an eager version compare on")
# Each column: its heading and width, the shorter heading and width it takes where the full ones
# would leave a name too little room (None: left out there; the host and sync figures: -v prints
# them under the row), and what it means, with its unit (the legend under the table).
_DISPATCHES = ("disp/call", 9, "disp", 5, "dispatches per call")
_SUBMITS = ("sub/call", 8, "sub", 4, "submits per call")
_BUDGET = ("budget", 6, "budget", 6, "the dispatch_budget verdict of the row (ok, fail; -: no budget)")
_TIMED = (
    _DISPATCHES,
    _SUBMITS,
    ("wall µs/call", 12, "µs/call", 7, _WALL_PER_CALL),
    ("wall µs/disp [95% CI]", 23, "wall µs/d [95% CI]", 20, _WALL),
    ("host µs/d", 9, None, 0, "host µs per dispatch until the last call returned (median of the same rounds)"),
    ("sync µs", 7, None, 0, "µs of one empty sync (median)"),
    ("infl.", 5, "infl.", 5, "single-op / sequential wall per dispatch (medians)"),
    _BUDGET,
)
# Counted mode (--dispatch-instructions): host instructions instead of times.
_COUNTED = (
    _DISPATCHES,
    _SUBMITS,
    ("instr/call", 13, "instr/call", 13, "host instructions per call"),
    ("instr/disp", 11, "instr/d", 9, "host instructions per dispatch"),
    ("spread", 7, "spread", 6, "between the window pairs"),
    _BUDGET,
)


def _headings(columns, compact: bool = False) -> tuple:
    return tuple((column[2], column[3]) if column[2] else None for column in columns) if compact \
        else tuple(column[:2] for column in columns)


_NUMBER_COLUMNS, _COMPACT_COLUMNS = _headings(_TIMED), _headings(_TIMED, compact=True)
LEGEND = {heading: column[4] for column in (*_TIMED, *_COUNTED) for heading in (column[0], column[2]) if heading}


def _numbers_width(columns) -> int:
    return sum(column[1] + 1 for column in columns if column)


def terminal_width() -> int:
    """The terminal's columns (``COLUMNS`` wins), at least MIN_WIDTH."""
    return max(shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns, MIN_WIDTH)


@dataclasses.dataclass(frozen=True)
class Label:
    """A row's test (its node id) and what says which measurement."""

    nodeid: str
    suffix: str = ""

    @property
    def full(self) -> str:
        return self.nodeid + self.suffix

    @property
    def short(self) -> str:
        """The test without its file: what an abbreviation starts from."""
        return self.nodeid.split("::", 1)[-1]

    def abbreviation(self, width: int) -> str:
        """Short name and suffix in ``width``: whole words of the name's middle go first; where the
        name would keep fewer than 8 characters, the suffix (which measurement) alone, cut too."""
        text = self.short + self.suffix
        if len(text) <= width:
            return text
        short = self.short.removeprefix("test_")  # every test has it: it tells none apart
        room = width - len(self.suffix)
        if room >= 8:
            return cut_at_words(short, room) + self.suffix
        return cut_at_words(self.suffix.strip(), width)  # the row's number names the test (key_lines)


class _Table:
    """Fixed number columns; the test column takes the rest of the width, no more than it needs.

    Each row shows its test's full node id when every one fits; otherwise a number and an
    abbreviation (``3 fused_is…eager [fused]``), unique within the table, and ``key_lines`` lists
    each number's full node id once, below the table."""

    def __init__(self, labels: Iterable[Label], width: int, columns: Sequence[tuple],
                 cells: Iterable[Sequence[str]] = ()) -> None:
        labels = list(dict.fromkeys(labels))  # in row order, so the numbers go up down the table
        cells = list(cells)

        def widened(group):  # a figure is never cut: a column is as wide as its widest cell
            return tuple(column and (column[0], max([column[1], *(len(row[i]) for row in cells if i < len(row))]))
                         for i, column in enumerate(group))
        # the name column gives way
        columns, compact_columns = widened(_headings(columns)), widened(_headings(columns, compact=True))
        longest = max((len(label.full) for label in labels), default=len("test"))
        self.columns = columns
        if width - _numbers_width(columns) >= longest:
            self.name_width = max(len("test"), longest)
            self._texts = {label: label.full for label in labels}
            self.keys: dict[str, int] = {}
            return
        if width - _numbers_width(columns) < _COMPACT_BELOW:
            self.columns = compact_columns
        self.keys = {nodeid: index for index, nodeid in
                     enumerate(dict.fromkeys(label.nodeid for label in labels), start=1)}
        key_width = len(str(len(self.keys)))
        longest_short = max(len(label.short) + len(label.suffix) for label in labels) + key_width + 1
        self.name_width = max(len("test"), min(longest_short, width - _numbers_width(self.columns)), 12)
        room = self.name_width - key_width - 1
        self._texts = {label: f"{self.keys[label.nodeid]:>{key_width}} {label.abbreviation(room)}"
                       for label in labels}
        self._cut_suffixes: dict[str, list[str]] = {}  # which measurements a row could not name whole
        for label in labels:
            if label.suffix and not self._texts[label].endswith(label.suffix):
                self._cut_suffixes.setdefault(label.nodeid, []).append(label.suffix.strip())

    def key_lines(self) -> list[str]:
        """Each number's full node id, once (none when the rows show them), with the measurements
        whose names its rows had to cut."""
        if not self.keys:
            return []
        key_width = len(str(len(self.keys)))
        return ["tests:"] + [f"  {key:>{key_width}} {nodeid}"
                             + (f" {' '.join(self._cut_suffixes[nodeid])}" if nodeid in self._cut_suffixes else "")
                             for nodeid, key in self.keys.items()]

    def row(self, label: Label | str, cells: Iterable[str]) -> str:
        text = self._texts[label] if isinstance(label, Label) else label
        parts = [f"{text:<{self.name_width}}"]
        parts += [f"{cell:>{column[1]}}" for column, cell in zip(self.columns, cells) if column]
        return " ".join(parts).rstrip()

    def header(self) -> str:
        return self.row("test", (column[0] if column else "" for column in self.columns))

    def legend(self) -> str:
        """What each heading means, with its unit."""
        shown = [column[0] for column in self.columns if column]
        return "columns: " + "; ".join(f"{name}: {LEGEND[name]}" for name in shown if name in LEGEND)


def _under_row(text: str, width: int) -> list[str]:
    """A line under a row: indented, its continuations further."""
    return wrap(text, width, initial_indent="    ", subsequent_indent=" " * 6)


def budget_cut_text(measurement: Measurement) -> str:
    """What a count whose call budget cut its windows says, and what to change to give it the rules' windows."""
    count = measurement.instructions
    smallest = count.windows[0][0]
    rounds = -(-count.call_budget_asked // max(measurement.per_round, 1))
    return (f"windows cut to {smallest} call{'s' if smallest != 1 else ''} by the call budget (rounds x per_round "
            f"of measure()): for the rules' windows, a steadier count, give it rounds={rounds} (x per_round="
            f"{measurement.per_round}: {count.call_budget_asked} calls), if the function allows that many calls")


def row_label(result: TestResult, measurement: Measurement | None, several: bool) -> Label:
    """The test's name and, where needed, which measurement."""
    suffix = ""
    if measurement is not None and several:
        suffix += f" [{measurement.name.rsplit('.', 1)[-1]}]"
    if measurement is not None and measurement.method == SINGLE_OP:
        suffix += " (single-op)"
    return Label(result.nodeid, suffix)


def _interval_text(samples: np.ndarray) -> str:
    """The median and its interval; wall less the sync can fall below zero, a time cannot: a median
    at or below zero is below the sync's noise, an interval reaching below zero starts at 0."""
    interval = stats.median_ci(samples)
    if interval.estimate <= 0:
        return BELOW_SYNC_NOISE
    return f"{interval.estimate:.1f} [{max(interval.low, 0.0):.1f}-{interval.high:.1f}]"


def median_text(measurement: Measurement) -> str:
    """Median wall µs per dispatch, for one-figure listings."""
    if not measurement.timed:
        return Status.OFF
    if not measurement.dispatches:
        return "-"
    median = float(np.median(measurement.wall_us_per_dispatch))
    return f"{median:.1f}" if median > 0 else BELOW_SYNC_NOISE


def per_call_text(measurement: Measurement) -> str:
    """Median wall µs per call, less the sync."""
    median = float(np.median(measurement.wall_us_per_call))
    return stats.format_us(median) if median > 0 else BELOW_SYNC_NOISE


def measurement_cells(result: TestResult, measurement: Measurement) -> tuple[str, ...]:
    inflation = result.single_op_inflation(measurement)
    budget_cell = result.budget_verdict_of(measurement) if measurement.method != SINGLE_OP else ""
    if not measurement.timed:
        return (str(measurement.dispatches), str(measurement.submits), Status.OFF, Status.OFF, Status.OFF,
                Status.OFF, "", budget_cell)
    return (
            str(measurement.dispatches),
            str(measurement.submits),
            per_call_text(measurement),
            _interval_text(measurement.wall_us_per_dispatch) if measurement.dispatches else "-",
            f"{np.median(measurement.host_us_per_dispatch):.1f}" if measurement.dispatches else "-",
            f"{measurement.sync_median_us:.0f}",
            f"{inflation:.1f}x" if inflation else "",
            budget_cell,  # budgets judge sequential measurements
    )


def counted_cells(result: TestResult, measurement: Measurement) -> tuple[str, ...]:
    """Counted mode: host instructions per call and per dispatch, and how repeatable they were."""
    count = measurement.instructions
    budget_cell = result.budget_verdict_of(measurement) if measurement.method != SINGLE_OP else ""
    if count is None:
        return (str(measurement.dispatches), str(measurement.submits), "-", "-", "", budget_cell)
    return (str(measurement.dispatches), str(measurement.submits), f"{count.per_call:,.0f}",
            f"{count.per_dispatch(measurement.dispatches):,.0f}",
            "-" if count.spread is None else f"{100 * count.spread:.2f}%", budget_cell)


def counted_breakdown_lines(measurement: Measurement, width: int = DEFAULT_WIDTH) -> list[str]:
    """Counted mode, -v: where a call's instructions ran, and wgpu's part by call kind."""
    count = measurement.instructions
    if count is None:
        return []
    total = count.per_call or 1.0
    layers = ", ".join(f"{layer} {value:,.0f} ({100 * value / total:.0f}%)"
                       for layer, value in count.by_layer.items() if round(value))
    kinds = ", ".join(
        f"{kind} {value / measurement.calls[kind]:,.0f}/call x{measurement.calls[kind]}"
        if measurement.calls.get(kind) else f"{kind} {value:,.0f}"
        for kind, value in count.by_kind.items() if round(value))
    windows = ", ".join(f"{calls}: {value:,}" for calls, value in count.windows)
    lines = _under_row(f"instr/call by layer: {layers}", width)
    lines += _under_row(f"inside wgpu by call kind: {kinds or 'none'}", width)
    lines += _under_row(f"windows (calls: instructions): {windows}; fixed part {count.fixed:,.0f}", width)
    if count.allocation_price is not None:
        lines += _under_row(f"allocator calls/call {count.allocator_calls_per_call:,.0f} (counted at "
                            f"{count.allocation_price} instructions each)", width)
    if count.estimated_cycles_per_call is not None:
        lines += _under_row(f"estimated cycles/call {count.estimated_cycles_per_call:,.0f} (cache simulation: "
                            "L1 hits + 5 x last-level hits + 35 x RAM accesses)", width)
    if measurement.calls.get("readback"):
        lines.append("    the measured function reads back: its wait for the GPU is counted too")
    return lines


def counts_cells(result: TestResult) -> tuple[str, ...]:
    """A test with a budget but no measurement: its whole-test counts."""
    call = result.call
    return (str(call["dispatches"]), str(call["calls"]["submit"]), "", "(not measured)", "", "", "",
            result.budget_verdict)


def breakdown_lines(measurement: Measurement, width: int = DEFAULT_WIDTH, host_column: bool = True) -> list[str]:
    """Per-kernel dispatches and per-API-call host µs of one measurement (for -v); ``host_column``:
    the table beside it has the host µs per dispatch column (the timed one)."""
    kernels = ", ".join(f"{name} {n}" for name, n in measurement.by_kernel.items()) or "none"
    host_sum = sum(measurement.host_breakdown_us_per_call.values())
    host_total = host_sum or 1.0
    calls = ", ".join(
        f"{kind} {measurement.calls[kind]}x {measurement.host_breakdown_us_per_call[kind]:.1f} µs "
        f"({100 * measurement.host_breakdown_us_per_call[kind] / host_total:.0f}%)"
        for kind in recorder.KINDS
        if measurement.calls.get(kind)
    )
    lines = _under_row(f"kernels/call: {kernels}", width)
    # The breakdown is the mean of the few counted rounds, the recorder's wrappers timing each call;
    # the host column is per dispatch, the median of the timed rounds, wrappers off. Different rounds
    # and statistics, and another unit: said so, with the timed rounds' figure per call beside it.
    timed = ""
    if measurement.timed and len(measurement.host_us_per_call):
        timed = ("; the host column is per dispatch, its timed rounds' median " if host_column
                 else "; the timed rounds' median ") + f"{np.median(measurement.host_us_per_call):.1f} per call"
    lines += _under_row(f"host µs per call inside API calls, {host_sum:.1f} in all (mean of the counted rounds, the "
                        f"recorder's wrappers on{timed}): {calls}", width)
    if measurement.gpu_us_per_call is not None:
        note = " (CPU adapter: indicative only)" if measurement.gpu_is_indicative else ""
        lines.append(f"    GPU µs/call from timestamps: {np.median(measurement.gpu_us_per_call):.1f}{note}")
    rounds = f"{measurement.rounds} timed rounds" if measurement.timed else "timing off"
    lines += _under_row(f"method: {measurement.method}, {rounds} x {measurement.per_round} calls, "
                        f"{measurement.warmup} warm-up; sync: {measurement.sync_method}"
                        + (f", {measurement.sync_median_us:.0f} µs (median)" if measurement.timed else ""), width)
    return lines


def render(
    results: list[TestResult],
    gpu: GpuInfo | None,
    header: str,
    verbose: bool = False,
    verdicts: Mapping[str, "TestVerdicts"] | None = None,
    width: int | None = None,
    timing_doubt: str | None = None,
) -> list[str]:
    """The report's lines, at most ``width`` columns (default: the terminal's).

    With ``timing_doubt`` (a line saying why the timings cannot be trusted), each timed cell is
    marked and the line follows the table."""
    width = width or terminal_width()
    rows: list[tuple[TestResult, Measurement | None, Label]] = []
    for result in results:
        several = len({m.name for m in result.measurements}) > 1
        rows += [(result, m, row_label(result, m, several)) for m in result.measurements]
        if not result.measurements:
            rows.append((result, None, row_label(result, None, False)))
    counted = next((m.instructions for _, m, _ in rows if m is not None and m.instructions is not None), None)

    def cells_of(result: TestResult, measurement: Measurement | None) -> list[str]:
        if measurement is None:
            return list(counts_cells(result))
        if counted:
            return list(counted_cells(result, measurement))
        cells = list(measurement_cells(result, measurement))
        if timing_doubt and measurement.timed and measurement.dispatches:
            cells[2], cells[3] = DOUBT_MARK + cells[2], DOUBT_MARK + cells[3]
        return cells
    row_cells = [cells_of(result, measurement) for result, measurement, _ in rows]
    table = _Table((label for _, _, label in rows), width, _COUNTED if counted else _TIMED, row_cells)
    lines = wrap(header if gpu is None else f"adapter: {gpu.describe()}", width, subsequent_indent="  ")
    if counted:
        lines.extend(wrap(
            f"counted ({counted.tool}): host instructions of the calling thread, not wall time; spread: "
            "between the window pairs ('-': one pair, a call that fills a window alone)", width, subsequent_indent="  "))
        if any(m is not None and m.instructions is not None and m.instructions.interpreter_unnamed
               for _, m, _ in rows):
            lines.extend(wrap(UNNAMED_INTERPRETER_NOTE, width, subsequent_indent="  "))
    elif gpu is not None and gpu.is_cpu:
        lines.append("CPU adapter: timings are CPU-emulated; counts are exact")
    lines.append(table.header())
    lines.append("-" * min(width, len(lines[-1])))

    for index, (result, measurement, label) in enumerate(rows):
        lines.append(table.row(label, row_cells[index]))
        if measurement is None:
            pass
        elif counted:
            if measurement.instructions is not None and measurement.instructions.call_budget_asked:
                lines.extend(_under_row(budget_cut_text(measurement), width))
            if verbose:
                lines.extend(breakdown_lines(measurement, width, host_column=False))
                lines.extend(counted_breakdown_lines(measurement, width))
        else:
            if measurement.timed and measurement.dispatches and np.median(measurement.wall_us_per_call) <= 0:
                lines.append("    the work is below the sync's noise: measure more calls per round (per_round)")
            if verbose:
                lines.extend(breakdown_lines(measurement, width))
        if index + 1 < len(rows) and rows[index + 1][0] is result:
            continue  # the test's own lines follow its last row
        if result.budget_lines:
            lines.extend(f"    {line}" for line in result.budget_lines)
        for line in result.speedups:
            lines.extend(_under_row(line, width))
        if verdicts and result.nodeid in verdicts:
            for line in verdicts[result.nodeid].lines():
                lines.extend(wrap(line, width, initial_indent="    gate: ", subsequent_indent=" " * 10))
    if rows:
        lines.extend(wrap(table.legend(), width, subsequent_indent="  "))
    lines.extend(table.key_lines())
    if timing_doubt:
        lines.append(timing_doubt)  # one line, whatever the width: it is the summary's reason
    return [printable(line) for line in lines]


PYTEST_ACCEPT_HINT = "run with --dispatch-accept to make this run the baseline"


def gate_summary(baseline, verdicts: Mapping[str, "TestVerdicts"],
                 accept_hint: str = PYTEST_ACCEPT_HINT) -> list[str]:
    """The gate's totals, one line, then what to do about them: ``accept_hint`` when
    something improved and nothing regressed.  Time is described, not judged: not tallied."""
    statuses: dict[str, int] = {}
    for test in verdicts.values():
        for per_key in test.counts.values():
            changed = [verdict.status for verdict in per_key if verdict.status != Status.UNCHANGED]
            for status in changed or [Status.UNCHANGED]:
                statuses[f"counts {status}"] = statuses.get(f"counts {status}", 0) + 1
        for verdict in test.instructions.values():
            statuses[f"instructions {verdict.status}"] = statuses.get(f"instructions {verdict.status}", 0) + 1
        if test.missing:
            statuses["no baseline"] = statuses.get("no baseline", 0) + len(test.missing)
    counted = any(test.instructions for test in verdicts.values())
    where = (" (counted)" if counted and baseline.comparable
             else f" (time shown beside {baseline.stored_runs} stored run(s) of this GPU, not judged)"
             if baseline.comparable else " (another GPU: counts compared)")
    totals = ", ".join(f"{n} {status}" for status, n in sorted(statuses.items())) or "nothing compared"
    lines = [f"dispatch gate vs {baseline.path}{where}: {totals}"]
    regressed = any(test.failure_lines for test in verdicts.values())
    if not regressed and any(test.improved for test in verdicts.values()):
        lines.append(f"dispatch gate: improvements found; {accept_hint}")
    return [printable(line) for line in lines]
