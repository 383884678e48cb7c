"""The outcome of every verdict, one word each; the values are the strings the JSON files hold."""

from __future__ import annotations

import enum


class Status(enum.StrEnum):
    """What a verdict decided (counts, timing, A/B, budget, speedup)."""

    REGRESSED = "regressed"  # worse: fails the test (or the A/B job)
    IMPROVED = "improved"
    UNCHANGED = "unchanged"
    INCONCLUSIVE = "inconclusive"  # not enough evidence either way; never fails
    INCOMPARABLE = "incomparable"  # the baseline is of another GPU: time not compared
    NEW = "new"  # A/B: measured only on the head
    REMOVED = "removed"  # A/B: measured only on the base
    OFF = "off"  # timing disabled (--dispatch-disable-timing) here or in the baseline
    PASSED = "passed"  # assert_speedup: the speedup was shown
    FAILED = "failed"  # assert_speedup: not shown
    WITHIN_BUDGET = "ok"
    OVER_BUDGET = "fail"
    NO_BUDGET = "-"


def exact_ratio_status(ratio: float, tolerance: float) -> Status:
    """The verdict on an exact ratio (counted instructions, no samples): ``regressed`` above
    ``1 + tolerance``, ``improved`` below its inverse, ``unchanged`` inside (exact figures inside
    the tolerance are evidence of no change)."""
    if ratio > 1 + tolerance:
        return Status.REGRESSED
    if ratio < 1 / (1 + tolerance):
        return Status.IMPROVED
    return Status.UNCHANGED


class ExitCode(enum.IntEnum):
    """The exit status of every front end: pytest with the plugin, ``pytest-dispatch`` and its
    commands, A/B jobs (the README's "Exit codes"). 0, 1 and 4 mean what they mean to pytest."""

    OK = 0
    FAILED = 1  # a test failed, a count or a time regressed, an adapter failed, a file was not written
    BAD_INPUT = 2  # pytest-dispatch: a file, a ref or an argument it cannot use (pytest: interrupted)
    INTERNAL_ERROR = 3  # pytest's own: a plugin or pytest itself raised
    NOTHING_COMPARED = 4  # a gate or a comparison that compared nothing (pytest: a usage error)
