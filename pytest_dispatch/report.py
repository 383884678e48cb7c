"""The terminal report of ``pytest --dispatch-report``: one row per measurement."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Iterable, Mapping

import numpy as np

from pytest_dispatch import recorder, stats
from pytest_dispatch.gpu import GpuInfo
from pytest_dispatch.meter import SINGLE_OP, Measurement
from pytest_dispatch.results import TestResult

if TYPE_CHECKING:
    from pytest_dispatch.gate import TestVerdicts

WIDTH = 100
_NAME_WIDTH = 27
_COLUMNS = (
    ("test", _NAME_WIDTH, "<"),
    ("disp/call", 9, ">"),
    ("sub/call", 8, ">"),
    ("wall µs/disp [95% CI]", 22, ">"),
    ("host µs/d", 9, ">"),
    ("sync µs", 7, ">"),
    ("infl.", 5, ">"),
    ("budget", 6, ">"),
)


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else "…" + text[-(width - 1):]


def _row(cells: Iterable[str]) -> str:
    parts = []
    for (_, width, align), cell in zip(_COLUMNS, cells):
        parts.append(f"{_shorten(cell, width):{align}{width}}")
    return " ".join(parts).rstrip()


def _test_label(result: TestResult, measurement: Measurement | None, several: bool) -> str:
    """The test's name and, where needed, which measurement: the name is cut, the suffix kept."""
    name = result.nodeid.split("::", 1)[-1]
    suffix = ""
    if measurement is not None and several:
        suffix += f" [{measurement.name.rsplit('.', 1)[-1]}]"
    if measurement is not None and measurement.method == SINGLE_OP:
        suffix += " (single-op)"
    room = _NAME_WIDTH - len(suffix)
    if len(name) > room:
        name = name[: max(room - 1, 1)] + "…"
    return name + suffix


def _interval_text(samples: np.ndarray) -> str:
    interval = stats.median_ci(samples)
    return f"{interval.estimate:.1f} [{interval.low:.1f}-{interval.high:.1f}]"


def median_text(measurement: Measurement) -> str:
    """Median wall µs per dispatch, for one-figure listings."""
    return f"{np.median(measurement.wall_us_per_dispatch):.1f}" if measurement.dispatches else "-"


def measurement_row(result: TestResult, measurement: Measurement, several: bool) -> str:
    inflation = result.single_op_inflation(measurement)
    return _row(
        (
            _test_label(result, measurement, several),
            str(measurement.dispatches),
            str(measurement.submits),
            _interval_text(measurement.wall_us_per_dispatch) if measurement.dispatches else "-",
            f"{np.median(measurement.host_us_per_dispatch):.1f}" if measurement.dispatches else "-",
            f"{measurement.sync_median_us:.0f}",
            f"{inflation:.1f}x" if inflation else "",
            result.budget_verdict if measurement.method != SINGLE_OP else "",  # budgets judge sequential
        )
    )


def counts_row(result: TestResult) -> str:
    """A test with a budget but no measurement: its whole-test counts."""
    call = result.call
    return _row(
        (_test_label(result, None, False), str(call["dispatches"]), str(call["calls"]["submit"]),
         "(not measured)", "", "", "", result.budget_verdict)
    )


def breakdown_lines(measurement: Measurement) -> list[str]:
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
    lines = textwrap.wrap(f"kernels/call: {kernels}", WIDTH, initial_indent="    ", subsequent_indent=indent)
    lines += textwrap.wrap(f"host per call: {calls}", WIDTH, initial_indent="    ", subsequent_indent=indent)
    if measurement.gpu_us is not None:
        note = " (CPU adapter: indicative only)" if measurement.gpu_is_indicative else ""
        lines.append(f"    GPU µs/call from timestamps: {np.median(measurement.gpu_us):.1f}{note}")
    lines.append(f"    method: {measurement.method}, {measurement.rounds} rounds x {measurement.per_round} calls, "
                 f"{measurement.warmup} warm-up; sync: {measurement.sync_method}")
    return lines


def render(
    results: list[TestResult],
    gpu: GpuInfo | None,
    header: str,
    verbose: bool = False,
    verdicts: Mapping[str, "TestVerdicts"] | None = None,
) -> list[str]:
    """The report's lines, at most WIDTH columns."""
    lines = textwrap.wrap(header if gpu is None else f"adapter: {gpu.describe()}", WIDTH, subsequent_indent="  ")
    if gpu is not None and gpu.is_cpu:
        lines.append("CPU adapter: timings are CPU-emulated; counts are exact")
    lines.append(_row(name for name, _, _ in _COLUMNS))
    lines.append("-" * min(WIDTH, len(lines[-1])))
    for result in results:
        several = len({m.name for m in result.measurements}) > 1
        if not result.measurements:
            lines.append(counts_row(result))
        for measurement in result.measurements:
            lines.append(measurement_row(result, measurement, several))
            if measurement.dispatches and np.median(measurement.wall_us) <= 0:
                lines.append("    the work is below the sync's noise: measure more calls per round (per_round)")
            if verbose:
                lines.extend(breakdown_lines(measurement))
        if result.budget_lines:
            lines.extend(f"    {line}" for line in result.budget_lines)
        for line in result.speedups:
            lines.extend(textwrap.wrap(line, WIDTH, initial_indent="    ", subsequent_indent=" " * 6))
        if verdicts and result.nodeid in verdicts:
            for line in verdicts[result.nodeid].lines():
                lines.extend(textwrap.wrap(line, WIDTH, initial_indent="    gate: ", subsequent_indent=" " * 10))
    return lines


def gate_summary(baseline, verdicts: Mapping[str, "TestVerdicts"], late_regressions: list[str]) -> list[str]:
    """The gate's totals, one line, then what to do about them."""
    statuses: dict[str, int] = {}
    for test in verdicts.values():
        for per_key in test.counts.values():
            for verdict in per_key:
                if verdict.status != "unchanged":
                    statuses[f"counts {verdict.status}"] = statuses.get(f"counts {verdict.status}", 0) + 1
        for verdict in test.timing.values():
            status = verdict.status if hasattr(verdict, "status") else verdict.split(":")[0]
            statuses[f"timing {status}"] = statuses.get(f"timing {status}", 0) + 1
        if test.missing:
            statuses["no baseline"] = statuses.get("no baseline", 0) + len(test.missing)
    where = (f" and {baseline.stored_runs} stored run(s) of this GPU" if baseline.comparable
             else " (another GPU: timing incomparable, counts compared)")
    totals = ", ".join(f"{n} {status}" for status, n in sorted(statuses.items())) or "nothing compared"
    lines = [f"dispatch gate vs {baseline.path}{where}: {totals}"]
    lines += [f"dispatch gate: regressed with the whole session known: {line}" for line in late_regressions]
    regressed = late_regressions or any(test.failure_lines for test in verdicts.values())
    if any(test.improved for test in verdicts.values()) and not regressed:
        lines.append("dispatch gate: improvements found; run with --dispatch-accept to make this run the baseline")
    return lines
