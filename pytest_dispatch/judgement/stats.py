"""Statistics of one run and of a run against stored runs.

Pure functions over 1-D arrays of costs in µs.  scipy.stats does the inference
(bootstrap intervals, t prediction intervals, Benjamini-Hochberg).  Comparisons of
two versions measured together are in pytest_dispatch.judgement.paired.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from pytest_dispatch.judgement.status import Status

__all__ = [
    "Interval",
    "TimingVerdict",
    "MIN_STORED_RUNS",
    "median_ci",
    "ratio_of_medians_ci",
    "judge_against_runs",
]

BOOTSTRAP_RESAMPLES = 9999


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided confidence interval [low, high]."""

    estimate: float
    low: float
    high: float
    confidence: float

    def covers(self, value: float) -> bool:
        """True when ``low <= value <= high``."""
        return self.low <= value <= self.high

    @property
    def width(self) -> float:
        return self.high - self.low


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
    bad = ~np.isfinite(x)
    if bad.any():
        raise ValueError(
            f"{what} has {int(bad.sum())} NaN/inf value(s) out of {x.size}; drop or re-measure the failed rounds"
        )
    return x


def _require_positive(x: np.ndarray, what: str) -> None:
    if x.min() <= 0:
        raise ValueError(f"{what} must be > 0 to form ratios (smallest is {x.min():g}); costs in µs are positive")


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1 (e.g. 0.95), got {confidence!r}")


# --------------------------------------------------------------------------
# confidence intervals


def _median_along(x, axis=-1):
    return np.median(x, axis=axis)


def _ratio_of_medians(numerator, denominator, axis=-1):
    return np.median(numerator, axis=axis) / np.median(denominator, axis=axis)


# The percentile bootstrap, not scipy's default BCa: BCa's jackknife
# acceleration is degenerate for a median (leave-one-out medians take two
# values), its bias correction is skewed by the many resamples whose median
# equals the observed one, and it returns NaN with a warning on constant data.
# On the synthetic lavapipe model both reach nominal coverage at 10-30 rounds.
_BOOTSTRAP_METHOD = "percentile"


def median_ci(samples, confidence: float = 0.95, *, seed: int = 0) -> Interval:
    """Bootstrap confidence interval for the median of ``samples``.

    A constant sample (including a single round) has nothing to resample and
    gives the degenerate interval ``[median, median]``.
    """
    x = _as_samples(samples, "samples")
    _check_confidence(confidence)
    estimate = float(np.median(x))
    if x.min() == x.max():
        return Interval(estimate, estimate, estimate, confidence)
    return _bootstrap_interval((x,), _median_along, estimate, confidence, seed)


def ratio_of_medians_ci(
    numerator, denominator, confidence: float = 0.95, *, paired: bool = False, seed: int = 0
) -> Interval:
    """Bootstrap confidence interval for ``median(numerator) / median(denominator)``.

    ``paired=False`` resamples the two sides independently. ``paired=True`` is
    for interleaved A/B rounds (round i of both sides taken back to back): it
    resamples whole rounds, so drift shared by a pair cancels in the ratio.
    With fewer than two rounds on a side, or both sides constant, there is
    nothing to resample and the interval collapses to the estimate.
    """
    a = _as_samples(numerator, "numerator samples")
    b = _as_samples(denominator, "denominator samples")
    _require_positive(a, "numerator samples")
    _require_positive(b, "denominator samples")
    _check_confidence(confidence)
    if paired and a.size != b.size:
        raise ValueError(
            f"paired=True needs one numerator round per denominator round, got {a.size} and {b.size}; "
            "pass paired=False for independent runs"
        )
    estimate = float(np.median(a) / np.median(b))
    constant = a.min() == a.max() and b.min() == b.max()
    if constant or min(a.size, b.size) < 2:
        return Interval(estimate, estimate, estimate, confidence)
    return _bootstrap_interval((a, b), _ratio_of_medians, estimate, confidence, seed, paired=paired)


def _bootstrap_interval(data, statistic, estimate: float, confidence: float, seed: int,
                        paired: bool = False) -> Interval:
    from scipy import stats  # here, not at import: scipy.stats takes seconds under valgrind (counted mode)

    result = stats.bootstrap(
        data,
        statistic,
        paired=paired,
        confidence_level=confidence,
        method=_BOOTSTRAP_METHOD,
        n_resamples=BOOTSTRAP_RESAMPLES,
        vectorized=True,
        rng=np.random.default_rng(seed),
    )
    ci = result.confidence_interval
    return Interval(estimate, float(ci.low), float(ci.high), confidence)


# --------------------------------------------------------------------------
# the verdict of a run against the stored runs of its GPU

MIN_STORED_RUNS = 5  # fewer cannot estimate the run-to-run spread


@dataclass(frozen=True)
class TimingVerdict:
    """This run's median against the stored runs' medians of the same GPU.

    Separate runs of unchanged code differ far more than the rounds inside one run
    suggest, so the unit is the whole run: ``baseline_median`` is the geometric mean
    of the stored runs' medians, ``spread`` the range of ratios that unchanged runs
    show (a t prediction interval from their log-sd), and ``p_value`` the one-sided
    p of this run's ratio under that spread; ``p_adjusted`` is Benjamini-Hochberg's.
    """

    key: str
    status: Status  # regressed, improved, unchanged or inconclusive (see judge_against_runs)
    baseline_median: float
    current_median: float
    ratio: float
    spread: Interval | None  # None when inconclusive for want of runs
    p_value: float | None
    p_adjusted: float | None
    alpha: float
    threshold: float
    stored_runs: int
    reason: str = ""

    @property
    def failed(self) -> bool:
        """True when this verdict should fail the gate."""
        return self.status == Status.REGRESSED

    @property
    def summary(self) -> str:
        return self.line(self.key)

    def line(self, label: str) -> str:
        """One line for the report, with ``label`` naming the measurement."""
        head = (f"{label} {self.status}: {format_us(self.baseline_median)} -> {format_us(self.current_median)} "
                f"µs per call")
        if self.spread is None:
            return f"{head} (x{self.ratio:.2f} per call; {self.reason})"
        low, high = self.interval
        parts = [f"x{self.ratio:.2f} per call", f"{format_confidence(self.spread.confidence)} interval "
                 f"x{low:.2f}-{high:.2f} from the spread of {self.stored_runs} stored runs"]
        if self.p_adjusted is not None:
            parts.append(f"p={self.p_adjusted:.2g} adj.")
        return f"{head} ({', '.join(parts)})" + (f"; {self.reason}" if self.reason else "")

    @property
    def interval(self) -> tuple[float, float]:
        """The change this run shows against the stored runs, with their spread (nan without one)."""
        if self.spread is None:
            return math.nan, math.nan
        return self.ratio * self.spread.low, self.ratio * self.spread.high

    def as_dict(self) -> dict:
        return {
            "status": self.status, "baseline_median_us": self.baseline_median,
            "current_median_us": self.current_median, "ratio": self.ratio,
            "spread": None if self.spread is None else [self.spread.low, self.spread.high],
            "interval": None if self.spread is None else list(self.interval),
            "confidence": None if self.spread is None else self.spread.confidence,
            "p_value": self.p_value, "p_adjusted": self.p_adjusted, "stored_runs": self.stored_runs,
            "reason": self.reason, "summary": self.summary,
        }


def format_confidence(confidence: float) -> str:
    """A confidence level as every verdict prints it: 0.99 -> '99%', 0.99333 -> '99.3%'."""
    return f"{100 * confidence:.3g}%"


def format_us(value: float) -> str:
    """A time in µs with as many decimals as its size deserves."""
    magnitude = abs(value)
    decimals = 0 if magnitude >= 100 else 1 if magnitude >= 10 else 2 if magnitude >= 1 else 3
    return f"{value:.{decimals}f}"


def judge_against_runs(
    comparisons: Mapping[str, tuple],
    *,
    alpha: float = 0.01,
    threshold: float = 0.02,
    overrides: Mapping[str, Mapping] | None = None,
    family_size: int | None = None,
    min_runs: int = MIN_STORED_RUNS,
) -> dict[str, TimingVerdict]:
    """Judge each ``key -> (stored run medians, this run's median)``.

    With ``n >= min_runs`` stored medians of log-mean m and log-sd s, this run's
    log-median x is, for unchanged code, t-distributed about m with scale
    s * sqrt(1 + 1/n) (n - 1 degrees of freedom).  ``regressed``: the one-sided p of
    x above m, Benjamini-Hochberg adjusted over the family, is below alpha, and the
    change interval, the ratio exp(x - m) times the spread's (1 - alpha) range, lies above
    1 + threshold; ``improved`` mirrors it; ``unchanged`` only when that interval lies inside
    [1 / (1 + threshold), 1 + threshold]; else ``inconclusive``, saying the smallest change
    these runs resolve.  Fewer stored runs: ``inconclusive`` (never fails).
    ``family_size`` beyond the conclusive comparisons given counts the rest as p = 1,
    so a test judged early stays failed once the whole family is in.
    """
    from scipy import stats

    measured = {}
    for key, (runs, current) in comparisons.items():
        settings = {"alpha": float(alpha), "threshold": float(threshold), **(overrides or {}).get(key, {})}
        runs = _as_samples(runs, f"stored run medians of {key!r}")
        current = float(current)
        _require_positive(runs, f"stored run medians of {key!r}")
        _require_positive(np.array([current]), f"this run's median of {key!r}")
        measured[key] = (runs, current, settings)

    conclusive = {}
    for key, (runs, current, settings) in measured.items():
        if runs.size >= max(min_runs, 2):
            logs = np.log(runs)
            scale = float(np.std(logs, ddof=1)) * math.sqrt(1 + 1 / runs.size)
            conclusive[key] = (float(np.mean(logs)), max(scale, 1e-12), runs.size - 1)
    family = list(conclusive)
    unmeasured = [1.0] * max(0, (family_size or 0) - len(family))
    p_up, p_down = {}, {}
    for key, (centre, scale, dof) in conclusive.items():
        t = (math.log(measured[key][1]) - centre) / scale
        p_up[key], p_down[key] = float(stats.t.sf(t, dof)), float(stats.t.cdf(t, dof))
    adjusted_up = dict(zip(family, stats.false_discovery_control([p_up[k] for k in family] + unmeasured))) \
        if family else {}
    adjusted_down = dict(zip(family, stats.false_discovery_control([p_down[k] for k in family] + unmeasured))) \
        if family else {}

    verdicts = {}
    for key, (runs, current, settings) in measured.items():
        a, t_min = settings["alpha"], settings["threshold"]
        if key not in conclusive:
            centre = float(np.exp(np.mean(np.log(runs))))
            verdicts[key] = TimingVerdict(
                key, Status.INCONCLUSIVE, centre, current, current / centre, None, None, None, a, t_min, runs.size,
                f"{runs.size} stored run(s) of this GPU, {min_runs} needed to learn the run-to-run spread; "
                "for timing use an A/B job (pytest-dispatch ab --base REF)")
            continue
        centre, scale, dof = conclusive[key]
        ratio = math.exp(math.log(current) - centre)
        half = float(stats.t.isf(a / 2, dof)) * scale
        spread = Interval(1.0, math.exp(-half), math.exp(half), 1 - a)
        low, high = ratio * spread.low, ratio * spread.high
        status = Status.INCONCLUSIVE
        if adjusted_up[key] < a and low > 1 + t_min:
            status = Status.REGRESSED
        elif adjusted_down[key] < a and high < 1 / (1 + t_min):
            status = Status.IMPROVED
        elif low >= 1 / (1 + t_min) and high <= 1 + t_min:
            status = Status.UNCHANGED
        reason = ""
        if status == Status.INCONCLUSIVE:
            reason = (f"{runs.size} stored runs resolve changes of x{resolvable_change(spread, t_min):.2f} "
                      f"or more; for smaller ones use an A/B job (pytest-dispatch ab --base REF)")
        upward = ratio >= 1
        verdicts[key] = TimingVerdict(
            key, status, math.exp(centre), current, ratio, spread, (p_up if upward else p_down)[key],
            float((adjusted_up if upward else adjusted_down)[key]), a, t_min, runs.size, reason)
    return verdicts


def resolvable_change(spread: Interval, threshold: float) -> float:
    """The smallest ratio that a run can show beyond ``spread`` and the ``threshold`` together:
    a true change below it ends inconclusive however the run falls."""
    return (1 + threshold) * spread.high
