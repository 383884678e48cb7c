"""The paired, sequential engine (pytest_dispatch.judgement.paired) on synthetic rounds whose noise
has what real machines have: a per-process random effect, drift shared by both sides,
autocorrelated rounds and a heavy tail (``simulate_pairs``)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scipy import stats as sps

from noise import simulate_pairs

from pytest_dispatch import settings
from pytest_dispatch.ab import coordinator
from pytest_dispatch.judgement import paired
from pytest_dispatch.judgement.status import Status


def feed(a: np.ndarray, b: np.ndarray, per_round: int = 5, sync_ns: int = 200_000):
    """A take_round over synthetic per-call µs: rounds come out in the order asked for."""
    sides = (iter(a), iter(b))

    def take_round(side: int):
        return int(next(sides[side]) * 1000 * per_round) + sync_ns, sync_ns, per_round

    return take_round


def run_trials(ratio: float, trials: int, seed: int, design=paired.Design(), **noise) -> list[paired.PairedVerdict]:
    out = []
    for trial in range(trials):
        rng = np.random.default_rng([seed, trial])
        a, b = simulate_pairs(rng, design.max_pairs, ratio=ratio, **noise)
        out.append(paired.run_sequential(feed(a, b), paired.ChangeQuestion(0.02), design,
                                         rng=random.Random(trial)))
    return out


@pytest.mark.slow
def test_false_alarms_stay_under_alpha_with_process_effects_drift_and_autocorrelation():
    verdicts = run_trials(1.0, 300, seed=1, process_sd=0.005, drift_sd=0.01, autocorrelation=0.3)
    flagged = sum(v.status in (Status.REGRESSED, Status.IMPROVED) for v in verdicts)
    assert flagged <= sps.binom.ppf(0.999, 300, 0.01), flagged


def test_ten_percent_is_caught_within_the_first_looks():
    verdicts = run_trials(1.10, 100, seed=2)
    assert sum(v.status == Status.REGRESSED for v in verdicts) >= 95
    assert np.median([v.pairs for v in verdicts]) <= 60


def test_a_large_process_effect_is_reported_not_hidden():
    # two processes 10% apart for their whole life look like a change: the engine cannot
    # tell them from one, which is why the job pins both workers to one CPU (see ab.coordinator)
    verdicts = run_trials(1.0, 20, seed=3, process_sd=0.1)
    assert any(v.status != Status.UNCHANGED for v in verdicts)


@pytest.mark.slow
def test_drift_shared_by_both_sides_cancels_in_the_pairs():
    verdicts = run_trials(1.0, 50, seed=4, drift_sd=0.05, process_sd=0.0)
    assert sum(v.status == Status.REGRESSED for v in verdicts) == 0
    assert np.median([v.ratio for v in verdicts]) == pytest.approx(1.0, abs=0.01)


def test_unchanged_is_shown_early_when_the_noise_is_low():
    verdicts = run_trials(1.0, 20, seed=5, sigma=0.005, process_sd=0.0, drift_sd=0.0, outlier_fraction=0.0)
    assert all(v.status == Status.UNCHANGED and v.pairs == 30 for v in verdicts)


def test_caps_end_inconclusive_with_the_reason():
    design = paired.Design(first=10, batch=10, max_pairs=40, max_time=60)
    (verdict,) = run_trials(1.02, 1, seed=6, design=design, sigma=0.2)
    assert verdict.status == Status.INCONCLUSIVE and verdict.pairs == 40
    assert "straddles the 2% tolerance" in verdict.reason


def test_time_cap_stops_adding_pairs():
    clock = iter(range(0, 10_000, 10))  # each look 10+ s apart
    a, b = simulate_pairs(np.random.default_rng(7), 300, sigma=0.3)
    verdict = paired.run_sequential(feed(a, b), paired.ChangeQuestion(0.02), paired.Design(max_time=15),
                                    clock=lambda: next(clock))
    assert verdict.status == Status.INCONCLUSIVE and "time cap 15 s" in verdict.reason and verdict.pairs < 300


class _RoundClock:
    """A clock that only the rounds move: each takes ``seconds``."""

    def __init__(self, take_round, seconds: float) -> None:
        self.now, self.take, self.seconds = 0.0, take_round, seconds

    def round(self, side: int):
        self.now += self.seconds
        return self.take(side)


def _one_session(min_time: float, max_time: float = 20.0) -> paired.PairedVerdict:
    """One A/B session's pairs (10 at the least), a round taking 1/16 s."""
    a, b = simulate_pairs(np.random.default_rng(8), 400, sigma=0.3)
    clock = _RoundClock(feed(a, b), 0.0625)
    design = paired.SessionDesign(pairs=10, min_time=min_time, max_time=max_time).within
    return paired.run_sequential(clock.round, paired.ChangeQuestion(0.02), design, clock=lambda: clock.now)


def test_a_session_pairs_on_until_min_time_then_looks_once():
    assert _one_session(min_time=0.0).pairs == 10
    assert _one_session(min_time=0.5).pairs == 10  # 10 pairs took longer already
    assert _one_session(min_time=3.0).pairs == 24
    assert _one_session(min_time=3.0, max_time=1.5).pairs == 12  # never past the time cap


def test_min_time_delays_a_sequential_designs_first_look_only():
    a, b = simulate_pairs(np.random.default_rng(9), 300, sigma=0.3)
    clock = _RoundClock(feed(a, b), 0.0625)
    looks = []
    paired.run_sequential(clock.round, paired.ChangeQuestion(0.02),
                          paired.Design(first=10, batch=10, max_pairs=60, min_time=2.0), clock=lambda: clock.now,
                          progress=lambda pairs, verdict: looks.append(pairs))
    assert looks == [16, 26, 36, 46, 56, 60]


@pytest.mark.parametrize("order", settings.PAIR_ORDERS)
def test_orders_put_each_side_first_about_half_the_time(order):
    firsts = []
    a, b = np.full(300, 40.0), np.full(300, 44.0)
    take = feed(a, b)

    def recording(side):
        firsts.append(side)
        return take(side)

    paired.run_sequential(recording, paired.ChangeQuestion(0.02), paired.Design(order=order),
                          rng=random.Random(0))
    leading = firsts[0::2]
    assert 0.35 < np.mean(leading) < 0.65
    if order == "abba":
        assert leading[:4] == [0, 1, 0, 1]


def test_walsh_interval_is_the_exact_signed_rank_interval():
    d = np.array([0.3, -0.1, 0.5, 0.2, 0.4, 0.1, 0.25, -0.05])
    estimate, low, high = paired.walsh_interval(d, 0.025)
    i, j = np.triu_indices(d.size)
    walsh = np.sort((d[i] + d[j]) / 2)
    assert estimate == pytest.approx(np.median(walsh))
    # n = 8: P(T+ <= 3) = 5/256 < 0.025 < P(T+ <= 4) = 7/256, so the 4th Walsh average from each end
    assert (low, high) == (walsh[3], walsh[-4])
    assert paired.walsh_interval(d[:3], 0.001)[1:] == (-math.inf, math.inf)  # no bound possible at n = 3


def test_speedup_question_passes_fails_and_reads_as_a_speedup():
    fast, slow = np.full(300, 10.0), np.full(300, 30.0)
    jitter = np.random.default_rng(8).lognormal(0, 0.02, (2, 300))
    verdict = paired.run_sequential(feed(fast * jitter[0], slow * jitter[1]), paired.SpeedupQuestion(2.0),
                                    paired.Design(first=20, batch=20, max_pairs=200, alpha=0.05))
    assert verdict.status == Status.PASSED and verdict.ratio == pytest.approx(3.0, rel=0.03)
    failing = paired.run_sequential(feed(fast * jitter[0], slow * jitter[1]), paired.SpeedupQuestion(4.0),
                                    paired.Design(first=20, batch=20, max_pairs=200, alpha=0.05))
    assert failing.status == Status.FAILED and failing.high < 4.0


class _MeterInTurns:
    """A meter that feeds ``measure_in_turns`` with rounds of equal times (no GPU)."""

    def measure_in_turns(self, functions, take_pairs, **options):
        take_pairs(feed(np.full(400, 10.0), np.full(400, 10.0)))


def test_assert_speedups_time_cap_is_max_time_and_its_old_name_is_gone(monkeypatch):
    from pytest_dispatch.judgement import speedup

    designs = []
    engine = paired.run_sequential
    monkeypatch.setattr(paired, "run_sequential",
                        lambda take_round, question, design: designs.append(design) or engine(take_round, question, design))
    speedup.measure_speedup(_MeterInTurns(), min, max, max_time=7.0)
    with pytest.raises(TypeError, match="max_seconds"):
        speedup.measure_speedup(_MeterInTurns(), min, max, max_seconds=9.0)
    speedup.measure_speedup(_MeterInTurns(), min, max)
    assert [design.max_time for design in designs] == [7.0, speedup.SPEEDUP_DESIGN.max_time]


def test_rounds_within_the_sync_noise_are_inconclusive_not_a_crash():
    def take_round(side):
        return 100_000, 200_000, 1  # faster than the empty sync: negative once it is subtracted

    verdict = paired.run_sequential(take_round, paired.ChangeQuestion(0.02), paired.Design())
    assert verdict.status == Status.INCONCLUSIVE and "raise per_round" in verdict.reason


def test_bh_across_the_session_turns_a_lone_marginal_call_into_inconclusive():
    strong = paired.PairedVerdict(Status.REGRESSED, 1.5, 1.4, 1.6, 0.998, 30, 1.0, 10, 15, 1e-9)
    marginal = paired.PairedVerdict(Status.REGRESSED, 1.05, 1.03, 1.08, 0.998, 300, 9.0, 10, 10.5, 0.009)
    nulls = {f"n{i}": paired.PairedVerdict(Status.UNCHANGED, 1.0, 0.99, 1.01, 0.998, 30, 1.0, 10, 10, 1.0)
             for i in range(20)}
    adjusted = paired.adjust_family({"strong": strong, "marginal": marginal, **nulls}, alpha=0.01)
    assert adjusted["strong"].status == Status.REGRESSED
    assert adjusted["marginal"].status == Status.INCONCLUSIVE and "Benjamini-Hochberg" in adjusted["marginal"].reason


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"alpha": 0}, "alpha"), ({"first": 3}, "first >= 6"), ({"max_time": 0}, "max_time"), ({"min_time": -1}, "min_time"),
    ({"order": "zigzag"}, "order"),
])
def test_bad_designs_are_one_line_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        paired.Design(**kwargs)


def test_verdicts_travel_as_json():
    verdict = paired.PairedVerdict(Status.INCONCLUSIVE, math.nan, 0.0, math.inf, 0.998, 1, 0.1, 1.0, 1.0, 1.0, "x")
    data = verdict.as_dict()
    assert data["ratio"] is None and data["high"] is None
    back = paired.PairedVerdict.from_dict(data)
    assert back.status == verdict.status and math.isinf(back.high) and math.isnan(back.ratio)
    assert data["a_median"] == data["b_median"] == 1.0  # the schema's names (schema.md)
    assert back.a_median_us_per_call == back.b_median_us_per_call == 1.0


# --------------------------------------------------------------------------
# sessions: the unit when two processes differ for their whole life


def session_verdicts(rng, sessions: int, ratio: float, process_sd: float, within_sd: float = 0.02):
    """One within-session verdict per session: the log-ratio of a fresh process pair."""
    logs = np.log(ratio) + rng.normal(0, process_sd, sessions) + rng.normal(0, within_sd, sessions)
    return [paired.PairedVerdict(Status.INCONCLUSIVE, float(np.exp(x)), 0.0, math.inf, 0.99, 10, 0.1, 10.0,
                                 10.0 * float(np.exp(x)), 1.0) for x in logs]


@pytest.mark.slow
def test_sessions_keep_false_alarms_under_alpha_when_processes_differ():
    rng = np.random.default_rng(20)
    design, question = paired.SessionDesign(), paired.ChangeQuestion(0.02)
    flagged = 0
    for _ in range(1000):
        verdicts = session_verdicts(rng, design.max_sessions, 1.0, process_sd=0.15)
        for look in design.look_points:
            verdict = paired.judge_sessions(verdicts[:look], question, design)
            if verdict.status != Status.INCONCLUSIVE:
                flagged += verdict.status in (Status.REGRESSED, Status.IMPROVED)
                break
    assert flagged <= sps.binom.ppf(0.999, 1000, design.alpha), flagged


def test_pairs_alone_would_call_a_process_difference_a_change():
    # the same data judged as if all pairs were independent: the process effect looks like a change
    rng = np.random.default_rng(21)
    a, b = simulate_pairs(rng, 300, process_sd=0.15, sigma=0.02, drift_sd=0.0, outlier_fraction=0.0)
    alone = paired.judge_rounds((_rounds(a), _rounds(b)), paired.ChangeQuestion(0.02), paired.Design())
    assert alone.status in (Status.REGRESSED, Status.IMPROVED)


def _rounds(per_call_us):
    rounds = paired.Rounds()
    for value in per_call_us:
        rounds.add(int(value * 1000) + 1000, 1000, 1)
    return rounds


def test_sessions_decide_a_large_change_and_unchanged_code_when_processes_agree():
    rng = np.random.default_rng(22)
    design, question = paired.SessionDesign(), paired.ChangeQuestion(0.02)
    large = paired.judge_sessions(session_verdicts(rng, 4, 1.5, process_sd=0.02), question, design)
    assert large.status == Status.REGRESSED and large.sessions == 4 and large.low > 1.02
    same = paired.judge_sessions(session_verdicts(rng, 4, 1.0, process_sd=0.001, within_sd=0.001), question, design)
    assert same.status == Status.UNCHANGED


def test_session_design_looks_and_its_checks():
    assert paired.SessionDesign(first=4, step=4, max_sessions=10).look_points == (4, 8, 10)
    assert paired.SessionDesign().look_points == (4, 6, 8, 10, 12)  # the job's defaults
    assert paired.SessionDesign() == coordinator.Settings().design()  # one set of defaults: the product's
    assert paired.SessionDesign().alpha_per_look == pytest.approx(0.01 / 5)
    with pytest.raises(ValueError, match="first >= 2"):
        paired.SessionDesign(first=1)
    lone = paired.judge_sessions(session_verdicts(np.random.default_rng(0), 1, 1.0, 0.1), paired.ChangeQuestion(),
                                 paired.SessionDesign())
    assert lone.status == Status.INCONCLUSIVE and "fewer than 2 sessions" in lone.reason


def _sessions(logs) -> list[paired.PairedVerdict]:
    return [paired.PairedVerdict(Status.INCONCLUSIVE, math.exp(x), 0.0, math.inf, 0.99, 10, 0.1, 10.0,
                                 10.0 * math.exp(x), 1.0) for x in logs]


def test_futility_keeps_a_real_change_whose_first_sessions_spread_wide():
    # a true +12% with sd 0.06, whose three sessions came out with sd 0.10: projecting that sd
    # to the cap as if it were the truth would stop it, though it is caught most of the time
    design, question = paired.SessionDesign(), paired.ChangeQuestion(0.02)
    sessions = _sessions([0.01, 0.12, 0.21])
    assert np.std(np.log([v.ratio for v in sessions]), ddof=1) > 0.09
    assert paired.futility(sessions, question, design) is None
    assert paired.decision_probability(sessions, question, design) > 2 * paired.FUTILITY_PROBABILITY


def test_futility_stops_identical_code_with_a_wide_spread_after_three_sessions():
    # lavapipe's A/A jobs: sessions of identical code spread sd 13-40%
    design, question = paired.SessionDesign(), paired.ChangeQuestion(0.02)
    for logs in ([-0.15, 0.01, 0.14], [0.3, -0.25, 0.05], [0.2, -0.1, -0.05]):
        assert paired.futility(_sessions(logs), question, design), logs


def test_futility_reason_names_the_probability_and_the_resolution():
    design, question = paired.SessionDesign(), paired.ChangeQuestion(0.02)
    sessions = _sessions([-0.15, 0.01, 0.14])
    reason = paired.futility(sessions, question, design)
    probability = paired.decision_probability(sessions, question, design)
    half = sps.t.isf(design.alpha_per_look, 11) * np.std([-0.15, 0.01, 0.14], ddof=1) / math.sqrt(12)
    assert reason.startswith("stopped after 3 sessions: ")
    assert f"a decision at 12 sessions has probability {probability:.0%}" in reason
    assert reason.endswith(f"12 sessions resolve ±{math.expm1(question.bound + half):.0%} here")
    assert paired.futility(sessions, question, design) == reason  # the same sessions, the same verdict


def test_decision_probability_follows_what_the_sessions_show():
    design, question = paired.SessionDesign(), paired.ChangeQuestion(0.02)
    assert paired.decision_probability(_sessions([0.4, 0.41, 0.39]), question, design) > 0.99  # +50%, tight
    assert paired.decision_probability(_sessions([0.001, -0.001, 0.0]), question, design) > 0.99  # unchanged, tight
    assert paired.decision_probability(_sessions([0.05, -0.05, 0.0]), question, design) < 0.05  # can show neither
    # no more sessions allowed: only the sessions themselves decide
    assert paired.decision_probability(_sessions([0.05, -0.05] * 6), question, design) == 0.0
    assert paired.decision_probability(_sessions([0.05]), question, design) == 1.0  # no spread known yet


def _bounded(logs_and_halves) -> list[paired.PairedVerdict]:
    """Sessions with their own 98% intervals: (log-ratio, the interval's half-width in logs)."""
    return [paired.PairedVerdict(Status.INCONCLUSIVE, math.exp(x), math.exp(x - h), math.exp(x + h), 0.98, 30, 0.1,
                                 10.0, 10.0 * math.exp(x), 1.0) for x, h in logs_and_halves]


def test_a_wild_session_weighs_less_than_the_sessions_that_agree():
    # the H200's job 6 (12-04): four sessions near +10%, one whose pairs stalled at x0.83
    design, question = paired.SessionDesign(), paired.ChangeQuestion(0.02)
    sessions = _bounded([(0.047, 0.1), (0.043, 0.1), (0.103, 0.06), (0.059, 0.1), (-0.187, 1.0)])
    verdict = paired.judge_sessions(sessions, question, design)
    plain = float(np.mean(np.log([v.ratio for v in sessions])))
    assert plain < 0.015 < math.log(verdict.ratio)  # the plain mean is pulled to +1.3%; the weighted one is not
    assert verdict.ratio > 1.05
    assert paired.futility(sessions, question, design) is None  # a decision at 12 sessions stays likely
    equal = _sessions([math.log(v.ratio) for v in sessions])  # no intervals: weighed alike, as before
    assert paired.futility(equal, question, design)  # the wild session alone stopped it


def test_sessions_with_alike_intervals_are_judged_by_their_plain_mean():
    design, question = paired.SessionDesign(), paired.ChangeQuestion(0.02)
    logs = [0.03, 0.07, 0.05, 0.09]
    verdict = paired.judge_sessions(_bounded([(x, 0.1) for x in logs]), question, design)
    half = sps.t.isf(design.alpha_per_look, 3) * np.std(logs, ddof=1) / 2
    assert math.log(verdict.ratio) == pytest.approx(np.mean(logs))
    assert math.log(verdict.low) == pytest.approx(np.mean(logs) - half)
    # unbounded intervals everywhere: the same plain mean
    assert paired.judge_sessions(_sessions(logs), question, design).ratio == pytest.approx(verdict.ratio)


def test_a_session_without_a_bounded_interval_is_left_out_among_bounded_ones():
    design, question = paired.SessionDesign(), paired.ChangeQuestion(0.02)
    bounded = _bounded([(0.03, 0.1), (0.07, 0.1), (0.05, 0.1)])
    verdict = paired.judge_sessions(bounded + _sessions([0.9]), question, design)
    assert verdict.sessions == 3 and math.log(verdict.ratio) == pytest.approx(0.05)


@pytest.mark.parametrize("n", [1, 2, 7, 30, 120])
def test_the_signed_rank_p_is_scipys_exact_one(n):
    rng = np.random.default_rng(n)
    for centre in (-0.5, 0.0, 0.3):
        d = rng.normal(centre, 1.0, n)
        for alternative in ("greater", "less"):
            assert paired.signed_rank_p(d, 0.1, alternative) == pytest.approx(
                float(sps.wilcoxon(d - 0.1, alternative=alternative, method="exact").pvalue), rel=1e-9, abs=1e-300)


def test_decides_is_classify_of_many_intervals():
    question = paired.ChangeQuestion(0.02)
    edges = [-0.05, -question.bound, -0.01, 0.0, 0.01, question.bound, 0.05]
    lows, highs = zip(*[(low, high) for low in edges for high in edges if low <= high])
    assert question.decides(np.array(lows), np.array(highs)).tolist() == [
        question.classify(low, high) is not None for low, high in zip(lows, highs)]
