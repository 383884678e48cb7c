"""Statistical properties of pytest_dispatch.judgement.stats on seeded synthetic samples.

Noise models: ``simulate_lavapipe_rounds`` (rounds of one run: 40 µs x LogNormal(0,
0.07), 5% of rounds 1.3-2.5x slower; lavapipe, 2026-11-30) and
``simulate_run_medians`` (medians of separate runs: a run-level random effect
of log-sd 0.22, as measured between separate lavapipe runs of unchanged code, on top
of the within-run standard error 0.035).  The run-level effect is what made a run
judged against one stored run raise false alarms; these tests include it.
"""

from __future__ import annotations

import numpy as np
import pytest
from noise import simulate_lavapipe_rounds, simulate_run_medians
from scipy import stats as sps

from pytest_dispatch.judgement.status import Status
from pytest_dispatch.measurement.meter import DEFAULT_ROUNDS
from pytest_dispatch.judgement.stats import (
    MIN_STORED_RUNS,
    Interval,
    judge_against_runs,
    resolvable_change,
    median_ci,
    ratio_of_medians_ci,
)

TRIALS = 1000
ALPHA = 0.01


def simulate_trials(seed: int, ratio: float, rounds: int = DEFAULT_ROUNDS, trials: int = TRIALS, **model):
    """(baseline, current) arrays of shape (trials, rounds) from the lavapipe-like model."""
    rng = np.random.default_rng(seed)
    baseline = simulate_lavapipe_rounds(rng, rounds, trials=trials, **model)
    current = simulate_lavapipe_rounds(rng, rounds, trials=trials, ratio=ratio, **model)
    return baseline, current


def binomial_upper(n: int, p: float, quantile: float = 0.999) -> float:
    return float(sps.binom.ppf(quantile, n, p))


# --------------------------------------------------------------------------
# a run against the stored runs of its GPU


def stored_trials(seed: int, ratio: float, stored: int = 8, trials: int = TRIALS, **model):
    """(stored run medians, this run's median) per trial, with the run-level random effect."""
    rng = np.random.default_rng(seed)
    return [(simulate_run_medians(rng, stored, **model), simulate_run_medians(rng, 1, ratio=ratio, **model)[0])
            for _ in range(trials)]


def statuses(trials, **settings) -> list[str]:
    return [judge_against_runs({"t": trial}, **settings)["t"].status for trial in trials]


def test_unchanged_runs_are_rarely_flagged_despite_the_run_level_effect():
    flagged = statuses(stored_trials(seed=1, ratio=1.0), alpha=ALPHA).count("regressed")
    assert flagged <= binomial_upper(TRIALS, ALPHA / 2), flagged


def test_one_stored_run_would_flag_unchanged_code_often_which_is_why_the_unit_is_the_run():
    # the old gate's question, asked of one run's rounds: is this run slower than that one?
    rng = np.random.default_rng(2)
    medians = simulate_run_medians(rng, 2 * TRIALS).reshape(TRIALS, 2)
    apart = np.abs(np.log(medians[:, 1] / medians[:, 0])) > np.log(1.05)
    assert apart.mean() > 0.5  # most pairs of unchanged runs differ by more than 5%


def test_a_large_change_is_caught_and_a_small_one_is_not_claimed():
    # 8 runs of log-sd 0.22 resolve changes of about x2.3 (the 99% spread times the tolerance)
    large = statuses(stored_trials(seed=3, ratio=4.0, trials=200), alpha=ALPHA)
    assert large.count("regressed") >= 0.9 * 200
    small = statuses(stored_trials(seed=4, ratio=1.01, trials=200, run_sd=0.001, within_se=0.001), alpha=ALPHA)
    assert small.count("regressed") == 0  # significant, but under the 2% threshold


def test_improvements_mirror_regressions():
    verdicts = statuses(stored_trials(seed=5, ratio=1 / 4.0, trials=200), alpha=ALPHA)
    assert verdicts.count("improved") >= 0.9 * 200 and verdicts.count("regressed") == 0


def test_too_few_stored_runs_is_inconclusive_and_says_to_use_ab():
    verdict = judge_against_runs({"t": ([40.0] * (MIN_STORED_RUNS - 1), 400.0)})["t"]
    assert verdict.status == "inconclusive" and not verdict.failed and verdict.spread is None
    assert "pytest-dispatch ab" in verdict.summary and "x10.00" in verdict.summary


def test_overrides_apply_to_their_key_only():
    runs = list(40.0 * np.exp(np.linspace(-0.02, 0.02, 8)))
    verdicts = judge_against_runs({"a": (runs, 48.0), "b": (runs, 48.0)}, overrides={"a": {"threshold": 0.5}})
    assert verdicts["a"].status == Status.UNCHANGED and verdicts["b"].status == Status.REGRESSED
    assert verdicts["a"].threshold == 0.5 and verdicts["b"].threshold == 0.02


def test_family_size_pads_unmeasured_comparisons_conservatively():
    runs = list(40.0 * np.exp(np.linspace(-0.05, 0.05, 6)))
    alone = judge_against_runs({"t": (runs, 44.0)})["t"]
    padded = judge_against_runs({"t": (runs, 44.0)}, family_size=50)["t"]
    assert padded.p_adjusted >= alone.p_adjusted


def test_verdict_line_names_the_spread_and_the_stored_runs():
    runs = list(40.0 * np.exp(np.linspace(-0.05, 0.05, 6)))
    verdict = judge_against_runs({"t": (runs, 80.0)})["t"]
    assert verdict.status == "regressed" and verdict.failed
    assert verdict.line("work us_per_call").startswith("work us_per_call regressed: 40.0 -> 80.0 µs per call "
                                                       "(x2.00 per call, 99% interval x")
    assert "from the spread of 6 stored runs" in verdict.summary and verdict.as_dict()["stored_runs"] == 6


def test_runs_that_spread_wider_than_the_tolerance_never_say_unchanged():
    # the H200 case: stored medians ~5 or ~9 µs, then a run 50% slower than their centre
    runs = [5.0, 9.0, 5.2, 8.8, 5.1]
    verdict = judge_against_runs({"t": (runs, 1.5 * float(np.exp(np.mean(np.log(runs)))))})["t"]
    assert verdict.status == Status.INCONCLUSIVE and not verdict.failed
    resolves = resolvable_change(verdict.spread, verdict.threshold)
    assert resolves > 1.5 and f"resolve changes of x{resolves:.2f} or more" in verdict.summary
    low, high = verdict.interval
    assert low < 1 < 1.5 < high


def test_unchanged_only_when_the_interval_lies_inside_the_tolerance():
    tight = list(40.0 * np.exp(np.linspace(-0.002, 0.002, 8)))
    assert judge_against_runs({"t": (tight, 40.1)}, threshold=0.05)["t"].status == Status.UNCHANGED
    # the same run against the same runs, but a tolerance narrower than the spread
    wide = list(40.0 * np.exp(np.linspace(-0.03, 0.03, 8)))
    verdict = judge_against_runs({"t": (wide, 40.1)}, threshold=0.01)["t"]
    assert verdict.status == Status.INCONCLUSIVE and verdict.interval[1] > 1.01


@pytest.mark.parametrize(("runs", "current", "message"), [
    ([40.0, float("nan")] * 3, 40.0, "NaN/inf"),
    ([40.0, 0.0] * 3, 40.0, "> 0"),
    ([], 40.0, "empty"),
])
def test_bad_inputs_are_one_line_errors(runs, current, message):
    with pytest.raises(ValueError, match=message):
        judge_against_runs({"t": (runs, current)})


# --------------------------------------------------------------------------
# confidence intervals


@pytest.mark.slow
def test_ratio_ci_covers_the_true_ratio_at_about_the_nominal_rate():
    trials, true_ratio = 200, 1.10
    baseline, current = simulate_trials(seed=114, ratio=true_ratio, trials=trials)
    intervals = [ratio_of_medians_ci(c, b, 0.95, seed=i) for i, (b, c) in enumerate(zip(baseline, current))]
    coverage = np.mean([ci.covers(true_ratio) for ci in intervals])
    excludes_no_change = np.mean([not ci.covers(1.0) for ci in intervals])
    assert coverage >= 0.90, coverage
    assert excludes_no_change >= 0.90, excludes_no_change  # covers the truth without being vacuous


@pytest.mark.slow
def test_paired_ratio_ci_uses_the_pairing_under_shared_drift():
    trials, true_ratio, rounds = 200, 1.10, DEFAULT_ROUNDS
    rng = np.random.default_rng(115)
    drift = rng.lognormal(0.0, 0.15, (trials, rounds))  # slow/fast rounds hit both sides of a pair
    baseline = drift * simulate_lavapipe_rounds(rng, rounds, trials=trials)
    current = drift * simulate_lavapipe_rounds(rng, rounds, trials=trials, ratio=true_ratio)
    paired = [ratio_of_medians_ci(c, b, paired=True, seed=i) for i, (b, c) in enumerate(zip(baseline, current))]
    unpaired = [ratio_of_medians_ci(c, b, paired=False, seed=i) for i, (b, c) in enumerate(zip(baseline, current))]
    assert np.mean([ci.covers(true_ratio) for ci in paired]) >= 0.90
    assert np.mean([ci.width for ci in paired]) < np.mean([ci.width for ci in unpaired])


@pytest.mark.slow
def test_median_ci_covers_the_true_median_at_about_the_nominal_rate():
    rng = np.random.default_rng(116)
    true_median = 40.0
    samples = true_median * rng.lognormal(0.0, 0.07, (200, DEFAULT_ROUNDS))
    coverage = np.mean([median_ci(x, 0.95, seed=i).covers(true_median) for i, x in enumerate(samples)])
    assert coverage >= 0.90, coverage


def test_intervals_are_deterministic_per_seed_and_bracket_the_estimate():
    rng = np.random.default_rng(117)
    x, y = simulate_lavapipe_rounds(rng, 20), simulate_lavapipe_rounds(rng, 20)
    assert median_ci(x, seed=3) == median_ci(x, seed=3)
    assert ratio_of_medians_ci(x, y, seed=3) == ratio_of_medians_ci(x, y, seed=3)
    ci = ratio_of_medians_ci(x, y, 0.9)
    assert ci.low <= ci.estimate <= ci.high and ci.confidence == 0.9
    assert ci.estimate == pytest.approx(np.median(x) / np.median(y))
    assert median_ci(x, 0.99).width > median_ci(x, 0.5).width


def test_degenerate_samples_give_degenerate_intervals():
    assert median_ci([7.0] * 10) == Interval(7.0, 7.0, 7.0, 0.95)
    assert median_ci([7.0]) == Interval(7.0, 7.0, 7.0, 0.95)
    assert ratio_of_medians_ci([6.0] * 5, [3.0] * 5) == Interval(2.0, 2.0, 2.0, 0.95)
    assert ratio_of_medians_ci([6.0], [2.0, 4.0]) == Interval(2.0, 2.0, 2.0, 0.95)
    two = median_ci([1.0, 3.0])
    assert two.low == 1.0 and two.high == 3.0
    varying = ratio_of_medians_ci([6.0] * 8, [2.0, 3.0, 4.0, 3.0, 2.5, 3.5, 3.0, 3.0])
    assert varying.low < 2.0 < varying.high


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: median_ci([]), "empty"),
        (lambda: median_ci([1.0, float("nan")]), "NaN/inf"),
        (lambda: median_ci([[1.0, 2.0]]), "1-D"),
        (lambda: median_ci([1.0, 2.0], confidence=95), "confidence"),
        (lambda: ratio_of_medians_ci([1.0, 2.0], [0.0, 1.0]), "> 0"),
        (lambda: ratio_of_medians_ci([1.0, 2.0], [1.0], paired=True), "paired=True"),
    ],
)
def test_interval_input_errors_say_what_is_wrong(call, message):
    with pytest.raises(ValueError, match=message):
        call()
