"""The ``dispatch_budget`` marker: parsing, and the judgement as one pure function.

    @pytest.mark.dispatch_budget(dispatches=564, submits=exact(1), passes=(1, 2))

Each count is an int (a maximum), a ``(lo, hi)`` range or ``exact(n)``;
``us_per_dispatch`` is an absolute ceiling on the median wall µs per dispatch;
``instructions_per_dispatch`` one on the host instructions per dispatch that counted mode
(``--dispatch-instructions``) counts: a count, so the same on every machine of the same
software (a timed run does not check it).
The budget applies to each ``Measurement`` the test took (per call), otherwise
to the counts of the whole call phase (per test).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Mapping

from pytest_dispatch import settings
from pytest_dispatch.errors import UsageError
from pytest_dispatch.measurement.recorder import COUNT_KINDS

MARKER = "dispatch_budget"
GATE_KEYS = tuple(settings.PARSERS)  # per-test overrides of the gate: alpha, threshold
MARKER_HELP = (
    f"{MARKER}(dispatches=None, submits=None, passes=None, encoders=None, us_per_dispatch=None, "
    "instructions_per_dispatch=None, alpha=None, threshold=None): fail the test when a count per call is "
    "over its budget (int = maximum, (lo, hi) = range, exact(n) = exactly n), the median µs per dispatch "
    "is over us_per_dispatch, or (--dispatch-instructions) the host instructions per dispatch are over "
    "instructions_per_dispatch; alpha/threshold override an A/B job's statistics for this test."
)


@dataclasses.dataclass(frozen=True)
class Exact:
    n: int


def exact(n: int) -> Exact:
    """Budget for exactly ``n`` (e.g. ``submits=exact(1)``)."""
    return Exact(n)


@dataclasses.dataclass(frozen=True)
class CountLimit:
    low: int
    high: int | None  # None: no maximum

    def allows(self, value: int) -> bool:
        return self.low <= value and (self.high is None or value <= self.high)

    def verdict(self, value: int, what: str) -> str:
        """What is wrong with ``value`` of ``what`` ('dispatches per call'): a maximum
        'exceeded: 5 ... > 4 allowed', or a minimum 'not met: 0 ... < 2 required'."""
        exactly = "exactly " if self.high == self.low else ""
        if self.high is not None and value > self.high:
            return f"exceeded: {value} {what} > {exactly}{self.high} allowed"
        return f"not met: {value} {what} < {exactly}{self.low} required"

    def excess(self, value: int) -> int:
        """Signed distance outside the limit (+ above, - below)."""
        if self.high is not None and value > self.high:
            return value - self.high
        return value - self.low if value < self.low else 0


@dataclasses.dataclass(frozen=True)
class Budget:
    counts: Mapping[str, CountLimit]
    us_per_dispatch: float | None = None
    gate: Mapping[str, float] = dataclasses.field(default_factory=dict)
    instructions_per_dispatch: float | None = None


def _count_limit(kind: str, value: Any) -> CountLimit:
    def non_negative_int(x: Any) -> int:
        if isinstance(x, bool) or not isinstance(x, int):
            raise UsageError(f"{kind}={value!r}: counts must be integers")
        if x < 0:
            raise UsageError(f"{kind}={value!r}: a budget cannot be negative")
        return x

    if isinstance(value, Exact):
        n = non_negative_int(value.n)
        return CountLimit(n, n)
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise UsageError(f"{kind}={value!r}: a range is (lo, hi)")
        low, high = non_negative_int(value[0]), non_negative_int(value[1])
        if low > high:
            raise UsageError(f"{kind}={value!r}: lo must not exceed hi")
        return CountLimit(low, high)
    return CountLimit(0, non_negative_int(value))


def _positive_float(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise UsageError(f"{key}={value!r}: must be a positive number")
    return float(value)


def parse_budget(args: tuple, kwargs: Mapping[str, Any]) -> Budget:
    """The marker's arguments as a Budget; UsageError on anything unknown or invalid."""
    if args:
        raise UsageError(f"takes keyword arguments only ({', '.join(COUNT_KINDS)}, us_per_dispatch)")
    known = set(COUNT_KINDS) | {"us_per_dispatch", "instructions_per_dispatch"} | set(GATE_KEYS)
    unknown = sorted(set(kwargs) - known)
    if "floor_us" in unknown:
        raise UsageError("floor_us was removed: the gate's smallest change is relative (threshold=0.05)")
    if unknown:
        raise UsageError(f"unknown argument(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    counts = {kind: _count_limit(kind, kwargs[kind]) for kind in COUNT_KINDS if kwargs.get(kind) is not None}
    us_per_dispatch = kwargs.get("us_per_dispatch")
    if us_per_dispatch is not None:
        us_per_dispatch = _positive_float("us_per_dispatch", us_per_dispatch)
    instructions_per_dispatch = kwargs.get("instructions_per_dispatch")
    if instructions_per_dispatch is not None:
        instructions_per_dispatch = _positive_float("instructions_per_dispatch", instructions_per_dispatch)
    gate = {key: settings.parse(key, kwargs[key]) for key in GATE_KEYS if kwargs.get(key) is not None}
    if not counts and us_per_dispatch is None and instructions_per_dispatch is None and not gate:
        raise UsageError("sets no budget; give at least one of "
                         + ", ".join(COUNT_KINDS + ("us_per_dispatch", "instructions_per_dispatch")))
    return Budget(counts, us_per_dispatch, gate, instructions_per_dispatch)


@dataclasses.dataclass(frozen=True)
class Observation:
    """What one budget is checked against: a measurement (per call) or a whole test."""

    name: str
    counts: Mapping[str, int]  # COUNT_KINDS -> count
    by_kernel: Mapping[str, int]
    per_call: bool = True
    us_per_dispatch_median: float | None = None
    timing_off: bool = False  # a measurement taken with --dispatch-disable-timing
    instructions_per_dispatch: float | None = None  # counted mode


@dataclasses.dataclass(frozen=True)
class BudgetFailure:
    lines: tuple[str, ...]  # one per broken limit; the first is the headline
    kernel_table: str
    over: tuple[str, ...] = ()  # the observations (measurement names) that broke a limit

    @property
    def message(self) -> str:
        return "\n".join(self.lines)


def _kernel_summary(by_kernel: Mapping[str, int], limit: int = 4) -> str:
    ranked = sorted(by_kernel.items(), key=lambda item: (-item[1], item[0]))
    text = ", ".join(f"{name} {n}" for name, n in ranked[:limit])
    return text + (", ..." if len(ranked) > limit else "")


def kernel_table(observations: Iterable[Observation]) -> str:
    """Dispatches per kernel, one column per observation, each as wide as its name."""
    observations = list(observations)
    names = sorted({k for o in observations for k in o.by_kernel},
                   key=lambda k: (-max(o.by_kernel.get(k, 0) for o in observations), k))
    width = max([len("kernel")] + [len(n) for n in names])
    columns = [max(len(o.name), len(str(o.counts["dispatches"]))) for o in observations]

    def row(first: str, cells: Iterable[object]) -> str:
        return f"{first:<{width}}  " + "  ".join(f"{cell:>{w}}" for cell, w in zip(cells, columns))

    header = row("kernel", (o.name for o in observations))
    rows = [header, "-" * len(header)]
    rows += [row(name, (o.by_kernel.get(name, 0) for o in observations)) for name in names]
    rows.append(row("total", (o.counts["dispatches"] for o in observations)))
    return "\n".join(rows)


def judge(budget: Budget, observations: Iterable[Observation]) -> BudgetFailure | None:
    """The verdict: None when every observation is within the budget."""
    observations = list(observations)
    lines = []
    over = []
    for observation in observations:
        broken = len(lines)
        unit = "per call" if observation.per_call else "in the test"
        where = f" [{observation.name}]" if len(observations) > 1 else ""
        for kind, limit in budget.counts.items():
            value = observation.counts[kind]
            if limit.allows(value):
                continue
            excess = limit.excess(value)
            detail = f"{excess:+d}"
            if kind == "dispatches" and observation.by_kernel:
                detail += f"; by kernel: {_kernel_summary(observation.by_kernel)}"
            lines.append(f"dispatch budget {limit.verdict(value, f'{kind} {unit}')} ({detail}){where}")
        ceiling = budget.us_per_dispatch
        measured = observation.us_per_dispatch_median
        if ceiling is not None and measured is not None and measured > ceiling:
            lines.append(
                f"dispatch budget exceeded: {measured:.2f} µs per dispatch (median) > {ceiling:g} allowed{where}"
            )
        instruction_ceiling, counted = budget.instructions_per_dispatch, observation.instructions_per_dispatch
        if instruction_ceiling is not None and counted is not None and counted > instruction_ceiling:
            lines.append(f"dispatch budget exceeded: {counted:,.0f} host instructions per dispatch (counted) > "
                         f"{instruction_ceiling:,.0f} allowed{where}")
        if len(lines) > broken:
            over.append(observation.name)
    if ceiling_without_measurement(budget, observations):
        lines.append(
            "dispatch budget: us_per_dispatch needs a measurement; call dispatch_meter.measure(...) in the test"
        )
        over = [o.name for o in observations]
    if not lines:
        return None
    return BudgetFailure(tuple(lines), kernel_table(observations), tuple(over))


def ceiling_without_measurement(budget: Budget, observations: list[Observation]) -> bool:
    return (budget.us_per_dispatch is not None and all(o.us_per_dispatch_median is None for o in observations)
            and not any(o.timing_off for o in observations))
