"""``assert_speedup``'s engine and verdict: is one function at least so many times faster than another?

Rounds of the two are taken in turns by the meter (``DispatchMeter.measure_in_turns``) and
judged in pairs by the paired engine (``paired.run_sequential`` with a ``SpeedupQuestion``),
the one the A/B gate uses too.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

from pytest_dispatch.errors import MeasurementFailed, UsageError
from pytest_dispatch.judgement import paired
from pytest_dispatch.judgement.stats import format_seconds
from pytest_dispatch.judgement.status import Status
from pytest_dispatch.measurement.sources import capabilities_of
from pytest_dispatch.measurement.meter import DEFAULT_PER_ROUND, DEFAULT_WARMUP, DispatchMeter, measurement_name

# The first look after 20 pairs, then every 20, up to 200 pairs or 60 s.
SPEEDUP_DESIGN = paired.Design(first=20, batch=20, max_pairs=200, max_time=60.0, alpha=0.05)
# Where a sync completes on a poll, a round's time is rounded to the poll: the work of a round must
# span this many polls, so that the rounding moves the ratio by a tenth at most.
POLLS_PER_ROUND = 10


@dataclasses.dataclass(frozen=True)
class Speedup:
    """How many times faster ``fast`` ran than ``slow``, per call: the paired verdict."""

    fast: str  # the name of the function expected to be faster
    slow: str  # the name of the one it is compared with
    verdict: paired.PairedVerdict  # A = fast, B = slow: the pairs' ratio B/A is the speedup
    at_least: float  # the speedup asked for

    @property
    def status(self) -> Status:
        """``passed`` or ``failed``: the paired verdict's status."""
        return self.verdict.status

    @property
    def passed(self) -> bool:
        """Whether the interval's lower bound cleared ``at_least``."""
        return self.status == Status.PASSED

    @property
    def failed(self) -> bool:
        """Not shown: the test fails."""
        return not self.passed

    @property
    def summary(self) -> str:
        """The report's line: ``line`` labelled with the two functions."""
        return self.line(f"speedup of {self.fast} over {self.slow}")

    def line(self, label: str) -> str:
        """One line: the speedup, its interval (what it bounds), pairs, seconds and the outcome."""
        v = self.verdict
        if self.passed:
            outcome = f"shown: lower bound > {self.at_least:g}x required"
        else:
            outcome = f"NOT shown ({v.reason or f'upper bound < {self.at_least:g}x required'})"
        return (f"{label}: {v.ratio:.2f}x ({v.interval_text} of the speedup per call over these {v.pairs} "
                f"pairs of rounds, {format_seconds(v.seconds)}); {outcome}")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the two functions, the status, the speedup asked for and the paired verdict."""
        return {"fast": self.fast, "slow": self.slow, "status": self.status, "at_least": self.at_least,
                "verdict": self.verdict.as_dict(), "line": self.summary}

    def assert_shown(self) -> None:
        """Raise MeasurementFailed (its message: the summary) unless the speedup was shown."""
        __tracebackhide__ = True
        if not self.passed:
            raise MeasurementFailed(self.summary)


def measure_speedup(
    meter: DispatchMeter,
    fast: Callable[[], Any],
    slow: Callable[[], Any],
    *,
    at_least: float = 1.3,
    confidence: float = 0.95,
    warmup: int = DEFAULT_WARMUP,
    per_round: int = DEFAULT_PER_ROUND,
    max_time: float | None = None,
    device=None,
    names: tuple[str, str] | None = None,
    design: paired.Design = SPEEDUP_DESIGN,
) -> Speedup | None:
    """How many times faster ``fast`` is than ``slow`` per call, measured by ``meter``.

    Rounds of the two are taken in pairs, in ABBA order, so drift cancels in each
    pair's ratio; pairs are added until the interval of the speedup (Hodges-Lehmann,
    signed-rank, at ``confidence`` over all looks) clears ``at_least`` (passed) or falls
    below it (failed), or a cap is reached (failed, with the interval): ``max_time`` seconds of
    pairs or the design's most pairs.  ``names`` label
    the two in the report (default: their qualified names).  With the meter's timing off
    (--dispatch-disable-timing), or in counted mode (--dispatch-instructions: host
    instructions are not wall time), both are only counted, and it returns None."""
    __tracebackhide__ = True
    if not at_least > 0:
        raise UsageError(f"at_least must be > 0, not {at_least!r}")
    if not 0 < confidence < 1:
        raise UsageError(f"confidence must be between 0 and 1, not {confidence!r}")
    fast_name, slow_name = (measurement_name(fn, name) for fn, name in zip((fast, slow), names or (None, None)))
    if fast_name == slow_name:
        fast_name, slow_name = f"{fast_name} [fast]", f"{slow_name} [slow]"
    design = dataclasses.replace(design, alpha=1 - confidence, max_time=max_time or design.max_time)
    question = paired.SpeedupQuestion(at_least)
    verdicts: list[paired.PairedVerdict] = []

    def take_pairs(take_round: Callable[[int], tuple[int, int, int]]) -> None:
        verdicts.append(paired.run_sequential(take_round, question, design))

    meter.measure_in_turns([fast, slow], take_pairs, names=(fast_name, slow_name), warmup=warmup,
                           per_round=per_round, device=device)
    if not verdicts:  # timing off: counted only
        return None
    poll_ms = max(capabilities_of(fn).sync_poll_ms for fn in (fast, slow))
    return Speedup(fast_name, slow_name, _within_polls(verdicts[0], poll_ms, per_round), at_least)


def _within_polls(verdict: paired.PairedVerdict, poll_ms: float, per_round: int) -> paired.PairedVerdict:
    """Not shown, and why, where a round's work is within a few of the sync's polls: the ratio
    would be the polls', whatever it says."""
    shorter_us = min(verdict.a_median_us_per_call, verdict.b_median_us_per_call)
    needed_us = POLLS_PER_ROUND * poll_ms * 1000
    if not poll_ms or not 0 < shorter_us < math.inf or shorter_us * per_round >= needed_us:
        return verdict  # no poll, or rounds within the sync's noise already said so
    return dataclasses.replace(verdict, status=Status.FAILED, reason=(
        f"inconclusive: a round's work ({shorter_us * per_round / 1000:.3g} ms) spans fewer than "
        f"{POLLS_PER_ROUND} of the sync's {poll_ms:g} ms polls, so its time is the polls'; raise per_round "
        f"to {math.ceil(needed_us / shorter_us)} or more"))
