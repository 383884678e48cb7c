"""Statistics of one run's rounds.

Pure functions over 1-D arrays of costs in µs; scipy.stats does the inference.  Comparisons
of two versions measured together (the only judge of time) are in
pytest_dispatch.judgement.paired; saved runs judge counts and counted instructions only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Interval", "median_ci", "format_confidence", "format_us"]

BOOTSTRAP_RESAMPLES = 9999
# Memory of a bootstrap is resamples x rounds: the rounds are thinned to at most this many
# (every k-th, in the order taken) and the resamples are drawn this many at a time, so no
# statistic holds more than about BOOTSTRAP_BATCH x MAX_BOOTSTRAP_ROUNDS values at once.
MAX_BOOTSTRAP_ROUNDS = 4096
BOOTSTRAP_BATCH = 256
MEDIAN_OF_ROUNDS = "the rounds' median, bootstrap over this run's rounds"


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided confidence interval [low, high].

    ``bounds`` says what the interval is of and what it was computed over (an interval over one
    measurement's rounds bounds that measurement's median, not the function's cost across runs)."""

    estimate: float
    low: float
    high: float
    confidence: float
    bounds: str = MEDIAN_OF_ROUNDS

    def covers(self, value: float) -> bool:
        """True when ``low <= value <= high``."""
        return self.low <= value <= self.high

    @property
    def width(self) -> float:
        return self.high - self.low

    def label(self) -> str:
        """What the interval bounds, with its level: '95% interval of the rounds' median, ...'."""
        return f"{format_confidence(self.confidence)} interval of {self.bounds}"


# --------------------------------------------------------------------------
# input checks


def _as_samples(samples, what: str) -> np.ndarray:
    """Return ``samples`` as a finite, non-empty 1-D float array or raise ValueError."""
    try:
        x = np.asarray(samples, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} must be numbers (per-round µs), got {type(samples).__name__}: {exc}") from None
    if x.ndim != 1:
        raise ValueError(f"{what} must be a 1-D sequence of per-round costs, got shape {x.shape}")
    if x.size == 0:
        raise ValueError(f"{what} is empty; measure at least one round")
    if not np.isfinite(x).all():
        bad = int(np.count_nonzero(~np.isfinite(x)))
        raise ValueError(f"{what} has {bad} NaN/inf value(s) out of {x.size}; drop or re-measure the failed rounds")
    return x


# --------------------------------------------------------------------------
# confidence intervals


# The percentile bootstrap, not scipy's default BCa: BCa's jackknife
# acceleration is degenerate for a median (leave-one-out medians take two
# values), its bias correction is skewed by the many resamples whose median
# equals the observed one, and it returns NaN with a warning on constant data.
# On the synthetic lavapipe model both reach nominal coverage at 10-30 rounds.
_BOOTSTRAP_METHOD = "percentile"


def thinned(x: np.ndarray, most: int = MAX_BOOTSTRAP_ROUNDS) -> np.ndarray:
    """At most ``most`` of the rounds: every k-th in the order taken (k = ceil(n / most)), a view.

    Deterministic, and spread over the whole run, so slow drift stays represented; an interval
    over the thinned rounds is as wide as ``most`` rounds allow, so wider (never narrower) than
    one over all of them."""
    step = -(-x.size // most)
    return x[::step] if step > 1 else x


def median_ci(samples, confidence: float = 0.95, *, seed: int = 0) -> Interval:
    """Bootstrap confidence interval of the median of one measurement's rounds.

    It bounds that measurement's rounds' median, not the function's cost in another run (runs
    differ by more than their rounds suggest: compare runs with an A/B job).  More than
    ``MAX_BOOTSTRAP_ROUNDS`` rounds are thinned (``thinned``) and the resamples drawn
    ``BOOTSTRAP_BATCH`` at a time, so memory does not grow with the rounds beyond that cap.
    A constant sample (including a single round) has nothing to resample and gives the
    degenerate interval ``[median, median]``.
    """
    x = _as_samples(samples, "samples")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1 (e.g. 0.95), got {confidence!r}")
    estimate = float(np.median(x))
    if x.min() == x.max():
        return Interval(estimate, estimate, estimate, confidence)
    from scipy import stats  # here, not at import: scipy.stats takes seconds under valgrind (counted mode)

    result = stats.bootstrap(
        (thinned(x),),
        np.median,  # vectorized: scipy passes axis=-1
        confidence_level=confidence,
        method=_BOOTSTRAP_METHOD,
        n_resamples=BOOTSTRAP_RESAMPLES,
        batch=BOOTSTRAP_BATCH,
        vectorized=True,
        rng=np.random.default_rng(seed),
    )
    ci = result.confidence_interval
    return Interval(estimate, float(ci.low), float(ci.high), confidence)


def format_confidence(confidence: float) -> str:
    """A confidence level as every verdict prints it: 0.99 -> '99%', 0.99333 -> '99.3%'."""
    return f"{100 * confidence:.3g}%"


def format_seconds(value: float) -> str:
    """A duration in s, or in ms below a tenth of a second: never "0.0 s"."""
    if abs(value) >= 0.1:
        return f"{value:.1f} s"
    return f"{format_us(value * 1e3)} ms"


def format_us(value: float) -> str:
    """A time in µs with as many decimals as its size deserves."""
    magnitude = abs(value)
    decimals = 0 if magnitude >= 100 else 1 if magnitude >= 10 else 2 if magnitude >= 1 else 3
    return f"{value:.{decimals}f}"
