"""Statistical properties of pytest_dispatch.judgement.stats on seeded synthetic samples.

Noise model: ``simulate_lavapipe_rounds`` (rounds of one run: 40 µs x LogNormal(0, 0.07),
5% of rounds 1.3-2.5x slower; lavapipe).
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from noise import simulate_lavapipe_rounds

from pytest_dispatch.judgement import stats
from pytest_dispatch.judgement.stats import Interval, median_ci
from pytest_dispatch.measurement.meter import DEFAULT_ROUNDS


@pytest.mark.slow
def test_median_ci_covers_the_true_median_at_about_the_nominal_rate():
    rng = np.random.default_rng(116)
    true_median = 40.0
    samples = true_median * rng.lognormal(0.0, 0.07, (200, DEFAULT_ROUNDS))
    coverage = np.mean([median_ci(x, 0.95, seed=i).covers(true_median) for i, x in enumerate(samples)])
    assert coverage >= 0.90, coverage


def test_intervals_are_deterministic_per_seed_and_bracket_the_estimate():
    x = simulate_lavapipe_rounds(np.random.default_rng(117), 20)
    assert median_ci(x, seed=3) == median_ci(x, seed=3)
    ci = median_ci(x, 0.9)
    assert ci.low <= ci.estimate <= ci.high and ci.confidence == 0.9
    assert ci.estimate == pytest.approx(np.median(x))
    assert median_ci(x, 0.99).width > median_ci(x, 0.5).width


def test_degenerate_samples_give_degenerate_intervals():
    assert (median_ci([7.0] * 10).low, median_ci([7.0] * 10).high) == (7.0, 7.0)
    assert median_ci([7.0]) == Interval(7.0, 7.0, 7.0, 0.95)
    two = median_ci([1.0, 3.0])
    assert two.low == 1.0 and two.high == 3.0


def test_an_interval_says_it_bounds_one_runs_rounds_median():
    # two measurements of one function in one run have intervals of their own rounds' medians;
    # the label must not present them as the function's cost
    label = median_ci(simulate_lavapipe_rounds(np.random.default_rng(5), 20)).label()
    assert label.startswith("95% interval of the rounds' median")
    assert "this run's rounds" in label


def test_memory_of_the_median_interval_does_not_grow_with_the_rounds():
    # 2,000,000 rounds: resampling all of them at once would take 9,999 x 2,000,000 indices (160 GB)
    x = np.random.default_rng(7).lognormal(3.0, 0.1, 2_000_000)
    tracemalloc.start()
    try:
        interval = median_ci(x)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert interval.low <= interval.estimate <= interval.high
    assert peak < x.nbytes + 48 * 2**20  # one copy of the rounds (the median) and a fixed bootstrap batch


def test_thinning_keeps_every_kth_round_and_at_most_the_cap():
    x = np.arange(10_001, dtype=float)
    kept = stats.thinned(x, most=1000)
    assert kept.size <= 1000 and kept[0] == 0 and kept[1] - kept[0] == 11
    assert stats.thinned(x[:1000], most=1000).size == 1000


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: median_ci([]), "empty"),
        (lambda: median_ci([1.0, float("nan")]), "NaN/inf"),
        (lambda: median_ci([[1.0, 2.0]]), "1-D"),
        (lambda: median_ci([1.0, 2.0], confidence=95), "confidence"),
    ],
)
def test_interval_input_errors_say_what_is_wrong(call, message):
    with pytest.raises(ValueError, match=message):
        call()
