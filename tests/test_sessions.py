"""An A/B job's session decisions (judgement/sessions.py, driven as the coordinator drives them):
looks, futility, a change held across the job's measurements, no false alarm among many."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_dispatch.ab import coordinator
from pytest_dispatch.judgement import paired, sessions
from pytest_dispatch.judgement.status import Status


def _verdicts(logs) -> list[paired.PairedVerdict]:
    """Session verdicts with these log-ratios."""
    return [paired.PairedVerdict(Status.INCONCLUSIVE, math.exp(x), 0.0, math.inf, 0.99, 10, 0.1, 10.0,
                                 10.0 * math.exp(x), 1.0) for x in logs]


def _decisions(log_ratios: dict[str, list[float]], **settings) -> sessions.Sessions:
    """A job's decisions that have these per-session log-ratios (nothing run)."""
    decisions = coordinator.Settings(**settings).decisions()
    for key, logs in log_ratios.items():
        for verdict in _verdicts(logs):
            decisions.add(key, verdict)
    return decisions


def test_a_change_keeps_its_sessions_until_it_holds_across_the_jobs_measurements():
    # 20 unchanged measurements and one +6%: at the first look (4 sessions) it is regressed
    # alone but not across the job (Benjamini-Hochberg), so it goes on; at the next it holds.
    rng = np.random.default_rng(5)
    logs = {f"t::{i}": list(rng.normal(0.0, 0.03, 12)) for i in range(20)}
    logs["t::slow"] = list(np.log(1.06) + np.array([0.006, -0.006, 0.004, -0.004] * 3))
    decisions = _decisions({key: values[:4] for key, values in logs.items()})
    decisions.look(final=False)
    alone = paired.judge_sessions(decisions.verdicts["t::slow"], decisions.question_for(), decisions.design)
    assert alone.status == Status.REGRESSED and "t::slow" not in decisions.decided
    for key in decisions.open:
        decisions.verdicts[key] = _verdicts(logs[key][:8])
    looked = decisions.look(final=False)
    assert decisions.decided["t::slow"].status == Status.REGRESSED and "t::slow" in dict(looked)
    assert decisions.family()["t::slow"].status == Status.REGRESSED


@pytest.mark.slow
def test_among_many_unchanged_measurements_a_job_catches_ten_percent_and_raises_no_false_alarm():
    # Jobs as on a real machine: each session's pair of processes adds its own effect to a
    # measurement (sd 0.03), and one shared by all of the session's measurements (sd 0.01).
    rng = np.random.default_rng(11)
    settings = coordinator.Settings()
    caught = false_alarms = 0
    jobs, nulls, changes = 60, 20, 4
    for _ in range(jobs):
        effects = [0.0] * nulls + [math.log(1.10)] * changes
        shared = rng.normal(0, 0.01, settings.max_sessions)
        logs = {f"t::{i}": effect + shared + rng.normal(0, 0.03, settings.max_sessions)
                for i, effect in enumerate(effects)}
        decisions = settings.decisions()
        for session in range(settings.max_sessions):
            for key in [key for key in logs if key not in decisions.decided]:
                decisions.add(key, _verdicts(logs[key][session:session + 1])[0])
            decisions.look(final=session + 1 == settings.max_sessions)
        final = decisions.family()
        false_alarms += sum(final[f"t::{i}"].status == Status.REGRESSED for i in range(nulls))
        caught += sum(final[f"t::{i}"].status == Status.REGRESSED for i in range(nulls, nulls + changes))
    assert false_alarms <= 2, false_alarms  # of 1,200 unchanged measurements (alpha 0.01: 12 allowed)
    assert caught >= 0.9 * jobs * changes, caught  # stopping at its own look and BH at the end: 129 of 240


def test_unchanged_code_that_sessions_cannot_resolve_stops_at_the_first_look():
    # the H200's A/A jobs: identical code whose sessions' ratios spread sd 6%, tolerance 2%
    rng = np.random.default_rng(7)
    decisions = _decisions({"t::same": list(rng.normal(0.0, 0.06, 4))})
    decisions.look(final=False)
    verdict = decisions.decided["t::same"]
    assert verdict.status == Status.INCONCLUSIVE and verdict.sessions == 4
    assert "stopped after 4 sessions" in verdict.reason and "12 sessions resolve ±" in verdict.reason
    # between the looks too, from the third session: futility spends no alpha
    decisions = _decisions({"t::same": list(rng.normal(0.0, 0.06, 3))})
    assert decisions.look(final=False) == []  # not at a look: no line
    assert "stopped after 3 sessions" in decisions.decided["t::same"].reason
    # a +10% change with the same spread is still worth its sessions
    decisions = _decisions({"t::slow": list(math.log(1.10) + rng.normal(0.0, 0.03, 4))})
    decisions.look(final=False)
    assert decisions.decided.get("t::slow") is None or decisions.decided["t::slow"].status == Status.REGRESSED


def test_a_measurement_whose_counts_regressed_takes_no_more_timing_sessions():
    decisions = _decisions({"t::work": [0.01]})
    decisions.look(final=False, counts_regressed={"t::work"})
    assert "counts regressed" in decisions.decided["t::work"].reason
    decisions = _decisions({"t::work": [0.01]}, time_count_regressions=True)
    decisions.look(final=False, counts_regressed={"t::work"})
    assert "t::work" not in decisions.decided
