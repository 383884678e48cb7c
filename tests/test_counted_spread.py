"""Counted mode's verdicts never judge a count's own noise: a tolerance tighter than the
measurement's spread gives `inconclusive` naming the fix, and a count whose windows the call
budget cut says which rounds= gives the rules' windows. No valgrind needed: counts are built."""

from __future__ import annotations

import dataclasses

from helpers import measurement

from pytest_dispatch.judgement import gate
from pytest_dispatch.judgement.status import Status
from pytest_dispatch.measurement.instructions import InstructionCount
from pytest_dispatch.presentation import report


def counted(per_call: float, spread: float, call_budget_asked: int | None = None):
    """A measurement counted at ``per_call`` host instructions per call whose two window pairs'
    slopes differ by ``spread`` of it."""
    low, high = per_call * (1 - spread / 2), per_call * (1 + spread / 2)
    windows = ((10, 1000 + int(10 * low)), (20, 1000 + int(20 * low)),
               (10, 1000 + int(10 * high)), (20, 1000 + int(20 * high)))
    count = InstructionCount(per_call, 1000.0, windows, {}, {}, call_budget_asked=call_budget_asked)
    return dataclasses.replace(measurement(rounds=0), instructions=count)


def test_a_change_inside_the_counts_own_spread_is_inconclusive_and_names_the_fix():
    base, head = counted(100_000, 0.0055), counted(100_400, 0.0055)  # +0.4%: past 0.3%, inside the 0.55% spread
    assert abs(base.instructions.spread - 0.0055) < 1e-4
    verdict = gate.compare_instructions(base, head, tolerance=0.003, software_differences=[])
    assert verdict.status == Status.INCONCLUSIVE and not verdict.failed
    line = verdict.line("work host instructions")
    assert "within the count's own spread (0.55%), wider than the tolerance" in line
    assert "rounds= or per_round=" in line and "--dispatch-instructions-tolerance" in line


def test_a_change_beyond_the_spread_still_regresses_and_a_steady_count_keeps_the_tolerance():
    base = counted(100_000, 0.0055)
    assert gate.compare_instructions(base, counted(101_000, 0.0055), 0.003, []).status == Status.REGRESSED
    steady = counted(100_000, 0.0001)
    assert gate.compare_instructions(steady, counted(100_400, 0.0001), 0.003, []).status == Status.REGRESSED
    assert gate.compare_instructions(base, counted(100_100, 0.0055), 0.003, []).status == Status.UNCHANGED


def test_windows_cut_by_the_call_budget_say_which_rounds_to_give():
    cut = counted(100_000, 0.001, call_budget_asked=332)
    text = report.budget_cut_text(cut)
    assert f"give it rounds={-(-332 // cut.per_round)} (x per_round={cut.per_round}: 332 calls)" in text
    assert text.startswith("windows cut to 10 calls by the call budget (rounds x per_round of measure())")
