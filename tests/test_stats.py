"""Statistical properties of pytest_dispatch.stats on seeded synthetic samples.

Noise model (pytest_dispatch.stats.simulate_lavapipe_rounds): each round costs
40 µs x LogNormal(0, sigma=0.07), and 5% of rounds are further multiplied by
U(1.3, 2.5). Source: lavapipe measured on 2026-11-30 (Mesa 22.3.6, 2 shared
cores; 20 rounds of 100 dispatches, one sync per round, per-dispatch µs):
one-pass median 30-42 µs, MAD/median 0.04-0.08, CV 0.25-0.5 from occasional
rounds 2-3x slower; sequential median 89-95 µs, CV 0.05-0.09, MAD/median
0.035-0.07. The model scales every round by ``ratio``, so the true ratio of
medians between two settings is known exactly.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from pytest_dispatch.meter import DEFAULT_ROUNDS
from pytest_dispatch.stats import (
    TIMING_STATUSES,
    Interval,
    hodges_lehmann_ratio,
    hodges_lehmann_shift,
    judge_timings,
    median_ci,
    min_attainable_p,
    ratio_of_medians_ci,
    simulate_lavapipe_rounds,
)

TRIALS = 1000
ALPHA = 0.01
GATES_OFF = {"threshold": 0.0, "floor_us": 0.0}


def simulate_trials(seed: int, ratio: float, rounds: int = DEFAULT_ROUNDS, trials: int = TRIALS, **model):
    """(baseline, current) arrays of shape (trials, rounds) from the lavapipe-like model."""
    rng = np.random.default_rng(seed)
    baseline = simulate_lavapipe_rounds(rng, rounds, trials=trials, **model)
    current = simulate_lavapipe_rounds(rng, rounds, trials=trials, ratio=ratio, **model)
    return baseline, current


def judge_each_alone(baseline, current, **settings) -> list[str]:
    """Status of every trial, each judged in its own call (a family of one)."""
    return [
        judge_timings({"t": (b, c)}, with_ci=False, **settings)["t"].status for b, c in zip(baseline, current)
    ]


def binomial_upper(n: int, p: float, quantile: float = 0.999) -> float:
    return float(sps.binom.ppf(quantile, n, p))


# --------------------------------------------------------------------------
# error rates and power, one comparison per call


def test_aa_false_positive_rate_at_default_gates_is_at_most_two_percent():
    baseline, current = simulate_trials(seed=101, ratio=1.0)
    statuses = judge_each_alone(baseline, current, alpha=ALPHA)
    false_verdicts = statuses.count("regressed") + statuses.count("improved")
    assert false_verdicts <= 0.02 * TRIALS, f"{false_verdicts} false verdicts in {TRIALS} A/A trials"


def test_aa_rate_per_direction_is_alpha_when_effect_gates_are_off():
    # Without threshold and floor only Mann-Whitney decides: each direction
    # should fire in about alpha of A/A trials, neither far more nor ~never.
    baseline, current = simulate_trials(seed=102, ratio=1.0)
    statuses = judge_each_alone(baseline, current, alpha=ALPHA, **GATES_OFF)
    low, high = sps.binom.ppf([0.001, 0.999], TRIALS, ALPHA)
    for direction in ("regressed", "improved"):
        assert low <= statuses.count(direction) <= high, (direction, statuses.count(direction))


@pytest.mark.parametrize(
    ("ratio", "expected", "opposite"), [(1.10, "regressed", "improved"), (1 / 1.10, "improved", "regressed")]
)
def test_ten_percent_change_is_detected_in_95_percent_of_trials(ratio, expected, opposite):
    baseline, current = simulate_trials(seed=103, ratio=ratio)
    statuses = judge_each_alone(baseline, current, alpha=ALPHA)
    assert statuses.count(expected) >= 0.95 * TRIALS, f"power {statuses.count(expected) / TRIALS:.3f}"
    assert statuses.count(opposite) == 0


# --------------------------------------------------------------------------
# Benjamini-Hochberg across the comparisons of one call


def test_bh_flags_real_shifts_among_many_nulls_and_bounds_false_discoveries():
    n_null, n_real, calls = 50, 5, 100
    rng = np.random.default_rng(104)
    real_flagged, fdp_bh, fdp_raw = 0, [], []
    for _ in range(calls):
        pairs = {}
        for i in range(n_null + n_real):
            ratio = 1.2 if i < n_real else 1.0
            pairs[f"c{i}"] = (
                simulate_lavapipe_rounds(rng, DEFAULT_ROUNDS),
                simulate_lavapipe_rounds(rng, DEFAULT_ROUNDS, ratio=ratio),
            )
        verdicts = judge_timings(pairs, alpha=ALPHA, with_ci=False, **GATES_OFF)
        is_real = [i < n_real for i in range(n_null + n_real)]
        flagged = [v.status in ("regressed", "improved") for v in verdicts.values()]
        flagged_raw = [v.p_value < ALPHA for v in verdicts.values()]
        real_flagged += sum(v.status == "regressed" for v, real in zip(verdicts.values(), is_real) if real)
        for flags, out in ((flagged, fdp_bh), (flagged_raw, fdp_raw)):
            false = sum(f and not real for f, real in zip(flags, is_real))
            out.append(false / max(sum(flags), 1))

    assert real_flagged >= 0.95 * n_real * calls
    # BH bounds each direction's FDR by alpha * m0 / m, so both together by twice that.
    fdr_bound = 2 * ALPHA * n_null / (n_null + n_real)
    allowance = 3 * np.std(fdp_bh) / math.sqrt(calls)
    assert np.mean(fdp_bh) <= fdr_bound + allowance
    # Without the correction the same data would break that bound.
    assert np.mean(fdp_raw) > fdr_bound + 3 * np.std(fdp_raw) / math.sqrt(calls)


def test_bh_family_is_every_comparison_in_the_call():
    rng = np.random.default_rng(105)
    baseline = simulate_lavapipe_rounds(rng, DEFAULT_ROUNDS)
    current = simulate_lavapipe_rounds(rng, DEFAULT_ROUNDS, ratio=1.06)
    alone = judge_timings({"target": (baseline, current)}, alpha=ALPHA, with_ci=False, **GATES_OFF)["target"]
    assert alone.status == "regressed" and alone.p_adjusted == alone.p_value

    nulls = {
        f"null{i}": (simulate_lavapipe_rounds(rng, DEFAULT_ROUNDS), simulate_lavapipe_rounds(rng, DEFAULT_ROUNDS))
        for i in range(49)
    }
    crowded = judge_timings({"target": (baseline, current), **nulls}, alpha=ALPHA, with_ci=False, **GATES_OFF)
    target = crowded["target"]
    assert target.p_value == alone.p_value
    assert target.p_adjusted > ALPHA > target.p_value
    assert target.status == "unchanged"


def test_strong_improvements_elsewhere_do_not_loosen_the_regression_gate():
    rng = np.random.default_rng(106)
    pairs = {
        "slower": (
            simulate_lavapipe_rounds(rng, DEFAULT_ROUNDS),
            simulate_lavapipe_rounds(rng, DEFAULT_ROUNDS, ratio=1.05),
        )
    }
    for i in range(20):
        pairs[f"faster{i}"] = (
            simulate_lavapipe_rounds(rng, DEFAULT_ROUNDS),
            simulate_lavapipe_rounds(rng, DEFAULT_ROUNDS, ratio=0.5),
        )
    verdicts = judge_timings(pairs, alpha=ALPHA, with_ci=False, **GATES_OFF)
    assert all(verdicts[f"faster{i}"].status == "improved" for i in range(20))
    slower = verdicts["slower"]
    # In the regress-direction family the 20 improvements sit at p ~ 1, so the
    # regression is adjusted as the best of 21 (p * 21), not helped by them.
    assert slower.p_adjusted == pytest.approx(min(1.0, 21 * slower.p_value))


def test_inconclusive_comparisons_do_not_dilute_the_family():
    rng = np.random.default_rng(107)
    pairs = {
        f"c{i}": (
            simulate_lavapipe_rounds(rng, DEFAULT_ROUNDS),
            simulate_lavapipe_rounds(rng, DEFAULT_ROUNDS, ratio=1.03),
        )
        for i in range(5)
    }
    tiny = {f"tiny{i}": (simulate_lavapipe_rounds(rng, 3), simulate_lavapipe_rounds(rng, 3)) for i in range(10)}
    without = judge_timings(pairs, with_ci=False)
    with_tiny = judge_timings({**pairs, **tiny}, with_ci=False)
    assert all(with_tiny[k].status == "inconclusive" and with_tiny[k].p_adjusted is None for k in tiny)
    for key in pairs:
        assert with_tiny[key].p_adjusted == without[key].p_adjusted


# --------------------------------------------------------------------------
# the effect-size gates


def _low_noise_pair(seed: int, median_us: float, ratio: float, rounds: int = DEFAULT_ROUNDS):
    rng = np.random.default_rng(seed)
    model = {"median_us": median_us, "sigma": 0.005, "outlier_fraction": 0.0}
    return simulate_lavapipe_rounds(rng, rounds, **model), simulate_lavapipe_rounds(rng, rounds, ratio=ratio, **model)


@pytest.mark.parametrize(("ratio", "moved"), [(1.10, "regressed"), (1 / 1.10, "improved")])
def test_floor_alone_vetoes_a_significant_shift_below_it(ratio, moved):
    baseline, current = _low_noise_pair(108, median_us=1.0, ratio=ratio)  # ~0.1 µs shift
    vetoed = judge_timings({"k": (baseline, current)}, alpha=ALPHA, threshold=0.05, floor_us=0.5, with_ci=False)["k"]
    assert vetoed.p_adjusted < ALPHA and abs(math.log(vetoed.ratio)) >= math.log(1.05)
    assert abs(vetoed.shift_us) < 0.5
    assert vetoed.status == "unchanged"
    passed = judge_timings({"k": (baseline, current)}, alpha=ALPHA, threshold=0.05, floor_us=0.05, with_ci=False)["k"]
    assert passed.status == moved


@pytest.mark.parametrize(("ratio", "moved"), [(1.02, "regressed"), (1 / 1.02, "improved")])
def test_threshold_alone_vetoes_a_significant_change_below_it(ratio, moved):
    baseline, current = _low_noise_pair(109, median_us=40.0, ratio=ratio)  # ~0.8 µs shift
    vetoed = judge_timings({"k": (baseline, current)}, alpha=ALPHA, threshold=0.05, floor_us=0.5, with_ci=False)["k"]
    assert vetoed.p_adjusted < ALPHA and abs(vetoed.shift_us) >= 0.5
    assert vetoed.status == "unchanged"
    passed = judge_timings({"k": (baseline, current)}, alpha=ALPHA, threshold=0.01, floor_us=0.5, with_ci=False)["k"]
    assert passed.status == moved


def test_overrides_apply_to_their_key_only():
    baseline, current = _low_noise_pair(110, median_us=40.0, ratio=1.02)
    pairs = {"strict": (baseline, current), "default": (baseline, current)}
    verdicts = judge_timings(pairs, overrides={"strict": {"threshold": 0.01}, "absent": {"alpha": 0.5}}, with_ci=False)
    assert verdicts["strict"].status == "regressed" and verdicts["strict"].threshold == 0.01
    assert verdicts["default"].status == "unchanged" and verdicts["default"].threshold == 0.05


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"overrides": {"k": {"treshold": 0.1}}}, "unknown setting"),
        ({"overrides": {"k": {"alpha": "low"}}}, "must be a number"),
        ({"alpha": 0.0}, "alpha must be between 0 and 1"),
        ({"overrides": {"k": {"alpha": 1.5}}}, "override for 'k'"),
        ({"threshold": -0.1}, "threshold must be"),
        ({"floor_us": float("nan")}, "floor_us must be"),
    ],
)
def test_bad_settings_are_rejected(kwargs, message):
    baseline, current = _low_noise_pair(111, median_us=40.0, ratio=1.0)
    with pytest.raises(ValueError, match=message):
        judge_timings({"k": (baseline, current)}, **kwargs)


# --------------------------------------------------------------------------
# inconclusive at tiny sizes


@pytest.mark.parametrize(("n_baseline", "n_current"), [(3, 3), (4, 4), (1, 50), (50, 1)])
def test_tiny_samples_are_inconclusive_even_for_a_doubling(n_baseline, n_current):
    rng = np.random.default_rng(112)
    pairs = {"k": (simulate_lavapipe_rounds(rng, n_baseline), simulate_lavapipe_rounds(rng, n_current, ratio=2.0))}
    verdict = judge_timings(pairs, alpha=ALPHA)["k"]
    assert verdict.status == "inconclusive" and not verdict.failed
    assert "cannot reach alpha" in verdict.summary


def test_five_rounds_a_side_can_decide_and_a_looser_alpha_rescues_three():
    rng = np.random.default_rng(113)
    five = (simulate_lavapipe_rounds(rng, 5), simulate_lavapipe_rounds(rng, 5, ratio=2.0))
    three = (five[0][:3], five[1][:3])
    assert judge_timings({"k": five}, alpha=ALPHA)["k"].status == "regressed"
    assert judge_timings({"k": three}, alpha=ALPHA)["k"].status == "inconclusive"
    assert judge_timings({"k": three}, overrides={"k": {"alpha": 0.1}})["k"].status == "regressed"
    # At alpha == 1/C(6, 3) p < alpha is still impossible.
    assert judge_timings({"k": three}, overrides={"k": {"alpha": 1 / 20}})["k"].status == "inconclusive"


@pytest.mark.parametrize(("n1", "n2"), [(3, 3), (4, 4), (5, 5), (2, 7), (8, 3)])
def test_min_attainable_p_is_the_exact_p_of_complete_separation(n1, n2):
    separated = sps.mannwhitneyu(np.arange(n1) + 100.0, np.arange(n2), alternative="greater", method="exact")
    assert min_attainable_p(n1, n2) == pytest.approx(separated.pvalue, rel=1e-12)
    assert min_attainable_p(n1, n2) == min_attainable_p(n2, n1)


def test_min_attainable_p_known_values_and_bad_sizes():
    assert min_attainable_p(3, 3) == pytest.approx(1 / 20)
    assert min_attainable_p(5, 5) == pytest.approx(1 / 252)
    assert min_attainable_p(500, 500) < 1e-290
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match="positive whole number"):
            min_attainable_p(bad, 5)


# --------------------------------------------------------------------------
# confidence intervals


def test_ratio_ci_covers_the_true_ratio_at_about_the_nominal_rate():
    trials, true_ratio = 200, 1.10
    baseline, current = simulate_trials(seed=114, ratio=true_ratio, trials=trials)
    intervals = [ratio_of_medians_ci(c, b, 0.95, seed=i) for i, (b, c) in enumerate(zip(baseline, current))]
    coverage = np.mean([ci.covers(true_ratio) for ci in intervals])
    excludes_no_change = np.mean([not ci.covers(1.0) for ci in intervals])
    assert coverage >= 0.90, coverage
    assert excludes_no_change >= 0.90, excludes_no_change  # covers the truth without being vacuous


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


# --------------------------------------------------------------------------
# Hodges-Lehmann estimators


def test_hodges_lehmann_shift_known_cases():
    assert hodges_lehmann_shift([4.0, 5.0, 6.0], [1.0, 2.0, 3.0]) == 3.0  # diffs 1,2,2,3,3,3,4,4,5
    assert hodges_lehmann_shift([10.0], [1.0, 2.0, 7.0]) == 8.0  # diffs 9, 8, 3
    base = np.arange(1.0, 21.0)
    assert hodges_lehmann_shift(base + 2.5, base) == pytest.approx(2.5)
    assert hodges_lehmann_shift(base, base + 2.5) == pytest.approx(-2.5)


def test_hodges_lehmann_shift_shrugs_off_an_outlier_round():
    base = np.linspace(40.0, 41.0, 30)
    current = base + 1.0
    current[0] = 400.0  # one pathological round
    assert hodges_lehmann_shift(current, base) == pytest.approx(1.0, abs=0.1)
    assert np.mean(current) - np.mean(base) > 10


def test_hodges_lehmann_ratio_known_cases():
    assert hodges_lehmann_ratio([6.0], [1.0, 2.0, 3.0]) == pytest.approx(3.0)  # ratios 6, 3, 2
    base = np.geomspace(10.0, 50.0, 25)
    assert hodges_lehmann_ratio(1.2 * base, base) == pytest.approx(1.2)
    rng = np.random.default_rng(118)
    x, y = simulate_lavapipe_rounds(rng, 30), simulate_lavapipe_rounds(rng, 31)
    assert hodges_lehmann_ratio(x, y) == pytest.approx(1 / hodges_lehmann_ratio(y, x))
    with pytest.raises(ValueError, match="> 0"):
        hodges_lehmann_ratio([1.0, -1.0], [1.0])


# --------------------------------------------------------------------------
# judge_timings: inputs and report


@pytest.mark.parametrize(
    ("baseline", "current", "message"),
    [
        ([40.0, float("nan"), 41.0], [40.0, 41.0, 42.0], r"baseline samples of 'k' has 1 NaN/inf"),
        ([40.0, 41.0, 42.0], [40.0, float("inf")], r"current samples of 'k' has 1 NaN/inf"),
        ([], [40.0, 41.0], r"baseline samples of 'k' is empty"),
        ([40.0, 41.0], [0.0, 41.0], r"current samples of 'k' must be > 0"),
        ([[40.0, 41.0]], [40.0, 41.0], r"1-D"),
    ],
)
def test_judge_rejects_bad_samples_with_a_one_line_message(baseline, current, message):
    with pytest.raises(ValueError, match=message) as raised:
        judge_timings({"k": (baseline, current)})
    assert "\n" not in str(raised.value)


def test_judge_rejects_a_pair_that_is_not_baseline_and_current():
    with pytest.raises(ValueError, match=r"\(baseline_samples, current_samples\)"):
        judge_timings({"k": ([1.0, 2.0],)})


def test_constant_samples_are_judged_without_crashing():
    same = judge_timings({"k": ([40.0] * 30, [40.0] * 30)})["k"]
    assert same.status == "unchanged" and same.p_value == 1.0 and same.ratio_ci.width == 0
    slower = judge_timings({"k": ([40.0] * 30, [44.0] * 30)})["k"]
    assert slower.status == "regressed" and slower.ratio == pytest.approx(1.1)
    assert judge_timings({}) == {}


def test_verdict_fields_summary_and_ci_skipping():
    baseline, current = simulate_trials(seed=119, ratio=1.12, trials=1)
    with_ci = judge_timings({"us_per_dispatch": (baseline[0], current[0])})["us_per_dispatch"]
    without_ci = judge_timings({"us_per_dispatch": (baseline[0], current[0])}, with_ci=False)["us_per_dispatch"]
    assert with_ci.status == "regressed" and with_ci.failed and with_ci.status in TIMING_STATUSES
    assert without_ci.ratio_ci is None
    assert with_ci == type(with_ci)(**{**without_ci.__dict__, "ratio_ci": with_ci.ratio_ci})
    assert with_ci.ratio == pytest.approx(hodges_lehmann_ratio(current[0], baseline[0]))
    assert with_ci.shift_us == pytest.approx(hodges_lehmann_shift(current[0], baseline[0]))
    assert with_ci.p_value == pytest.approx(sps.mannwhitneyu(current[0], baseline[0], alternative="greater").pvalue)
    assert with_ci.ratio_ci.covers(with_ci.ratio_ci.estimate)

    line = with_ci.summary
    assert "\n" not in line
    assert line.startswith("us_per_dispatch regressed: ")
    assert f"{with_ci.baseline_median:.1f} -> {with_ci.current_median:.1f} µs" in line
    assert f"x{with_ci.ratio:.2f}" in line and "95% CI" in line and "adj." in line
    assert "CI" not in without_ci.summary


def test_family_size_pads_unmeasured_comparisons_conservatively():
    """Deciding test by test with the family size known: never more significant than at the end."""
    rng = np.random.default_rng(7)
    pairs = {
        f"t{i}": (simulate_lavapipe_rounds(rng, 30), simulate_lavapipe_rounds(rng, 30, ratio=1.0 + 0.04 * i))
        for i in range(8)
    }
    final = judge_timings(pairs, with_ci=False)
    seen = {}
    for key, pair in pairs.items():
        seen[key] = pair
        partial = judge_timings(seen, with_ci=False, family_size=len(pairs))
        for k in seen:
            assert partial[k].p_adjusted >= final[k].p_adjusted - 1e-12
            if partial[k].status == "regressed":
                assert final[k].status == "regressed"
    assert judge_timings(pairs, with_ci=False, family_size=len(pairs))["t7"].p_adjusted == final["t7"].p_adjusted
