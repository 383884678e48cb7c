"""Paired, sequential comparison of two things timed in alternating rounds.

The unit of replication is a *pair*: one round of A and one round of B taken back
to back (in ABBA or random order), so whatever the machine does on a scale longer
than a pair (a slower process, drift, a neighbour loading a core) cancels in the
pair's log-ratio ``log(B) - log(A)``.  The comparison is the one-sided Wilcoxon
signed-rank test of those log-ratios against a bound, and the interval is the
Hodges-Lehmann estimate's, from inverting the same test (Walsh averages).

Pairs are added in batches until the interval decides (Pinpoint's "add attempts
until a decision"), up to a cap.  Each of the design's L looks tests at alpha / L
per side (Bonferroni over looks), so looking after every batch cannot raise the
false-alarm rate above alpha whatever the dependence between looks.

Used by the A/B gate (head against base) and by ``assert_speedup`` (slow against
fast): one engine, two questions (``ChangeQuestion``, ``SpeedupQuestion``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import random
import time
from typing import Callable, Sequence

import numpy as np

from pytest_dispatch import settings
from pytest_dispatch.judgement.stats import format_confidence
from pytest_dispatch.judgement.status import Status
from pytest_dispatch.measurement.meter import per_call_us

_EXACT_MAX_PAIRS = 400  # beyond this the signed-rank null is normal to far better than its use needs


@dataclasses.dataclass(frozen=True)
class Design:
    """How many pairs, in what order, and how the looks share alpha."""

    first: int = 30  # pairs before the first look
    batch: int = 30  # pairs added before each further look
    max_pairs: int = 300
    max_time: float = 60.0
    alpha: float = 0.01  # total, over all looks (Bonferroni)
    order: str = "abba"
    min_time: float = 0.0  # the first look waits until the pairs took this long (never past max_time)

    def __post_init__(self) -> None:
        """ValueError (one line) for a design that cannot run."""
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be between 0 and 1, not {self.alpha!r}")
        if self.first < 6 or self.batch < 1 or self.max_pairs < self.first:
            raise ValueError(f"pairs: need first >= 6, batch >= 1 and max_pairs >= first "
                             f"(got {self.first}, {self.batch}, {self.max_pairs})")
        if not self.max_time > 0:
            raise ValueError(f"max_time must be > 0, not {self.max_time!r}")
        if not self.min_time >= 0:
            raise ValueError(f"min_time must be >= 0, not {self.min_time!r}")
        if self.order not in settings.PAIR_ORDERS:
            raise ValueError(f"order must be one of {', '.join(settings.PAIR_ORDERS)}, not {self.order!r}")

    @property
    def looks(self) -> int:
        """Looks planned: after ``first`` pairs, then after every ``batch`` up to ``max_pairs``."""
        return 1 + math.ceil(max(self.max_pairs - self.first, 0) / self.batch)

    @property
    def alpha_per_look(self) -> float:
        """One-sided level of each look."""
        return self.alpha / self.looks


# --------------------------------------------------------------------------
# the signed-rank test and its interval


@functools.lru_cache(maxsize=64)
def _signed_rank_cdf(n: int) -> np.ndarray:
    """P(T+ <= t) for t = 0..n(n+1)/2 under the null (no ties, no zeros)."""
    distribution = np.array([1.0])
    for rank in range(1, n + 1):
        grown = np.zeros(distribution.size + rank)
        grown[: distribution.size] += distribution
        grown[rank:] += distribution
        distribution = grown / 2
    return np.cumsum(distribution)


@functools.lru_cache(maxsize=256)
def _t_quantile(one_sided_alpha: float, df: int) -> float:
    """Student's t quantile a session verdict uses; the same few (alpha, df) pairs recur at every
    look, and scipy takes most of a millisecond for each."""
    from scipy import stats

    return float(stats.t.isf(one_sided_alpha, df))


def _critical_count(n: int, one_sided_alpha: float) -> int:
    """Largest k with P(T+ <= k - 1) <= alpha: the interval drops the k-1 most extreme
    Walsh averages on each side. 0 means no bound is possible at this n."""
    if n > _EXACT_MAX_PAIRS:
        from scipy.stats import norm

        mean, sd = n * (n + 1) / 4, math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
        return max(0, math.floor(mean - norm.isf(one_sided_alpha) * sd + 0.5))
    return int(np.searchsorted(_signed_rank_cdf(n), one_sided_alpha, side="right"))


def walsh_interval(d: np.ndarray, one_sided_alpha: float) -> tuple[float, float, float]:
    """Hodges-Lehmann estimate of the centre of ``d`` and its interval, each bound
    at one-sided level ``one_sided_alpha`` (so 1 - 2 alpha coverage)."""
    n = d.size
    i, j = np.triu_indices(n)
    walsh = np.sort((d[i] + d[j]) / 2)
    estimate = float(np.median(walsh))
    k = _critical_count(n, one_sided_alpha)
    if k == 0:
        return estimate, -math.inf, math.inf
    return estimate, float(walsh[k - 1]), float(walsh[walsh.size - k])


def signed_rank_p(d: np.ndarray, bound: float, alternative: str) -> float:
    """One-sided Wilcoxon signed-rank p for 'the centre of d is above (greater) or
    below (less) ``bound``': scipy's exact p, from the cached null distribution where there are
    no ties and no zeros (scipy builds it again on every call: most of a look's time), else scipy."""
    from scipy import stats

    shifted = d - bound
    if not np.any(shifted):
        return 1.0
    magnitudes = np.abs(shifted)
    if d.size <= _EXACT_MAX_PAIRS and np.all(shifted) and np.unique(magnitudes).size == d.size:
        ranks = np.empty(d.size)
        ranks[np.argsort(magnitudes)] = np.arange(1, d.size + 1)
        t_plus = int(round(ranks[shifted > 0].sum()))
        cdf = _signed_rank_cdf(d.size)
        # the null is symmetric: P(T+ >= t) = P(T+ <= n(n+1)/2 - t)
        return float(min(1.0, cdf[cdf.size - 1 - t_plus] if alternative == "greater" else cdf[t_plus]))
    method = "exact" if d.size <= _EXACT_MAX_PAIRS and np.all(shifted) else "auto"
    p = float(stats.wilcoxon(shifted, alternative=alternative, method=method).pvalue)
    return 1.0 if math.isnan(p) else p


# --------------------------------------------------------------------------
# verdicts


# the JSON's names (schema.md), kept from before the fields said their unit
_JSON_KEYS = {"a_median_us_per_call": "a_median", "b_median_us_per_call": "b_median"}


@dataclasses.dataclass(frozen=True)
class PairedVerdict:
    """The decision on a set of pairs: B against A as a ratio with its interval.

    ``ratio`` is exp(Hodges-Lehmann estimate of the log-ratios); ``low``/``high``
    bound it at ``confidence``.  ``p_value`` is the sequential (Bonferroni over
    looks) one-sided p in the direction of ``status``'s question; ``p_adjusted``
    is set once a session's family is known (Benjamini-Hochberg).
    """

    status: Status
    ratio: float
    low: float
    high: float
    confidence: float
    pairs: int
    seconds: float
    a_median_us_per_call: float  # of A (base, or fast)
    b_median_us_per_call: float
    p_value: float
    reason: str = ""  # why inconclusive, or what the bound was
    p_adjusted: float | None = None
    sessions: int = 1  # pairs of worker processes the pairs came from

    @property
    def interval_text(self) -> str:
        low = "0" if self.low <= 0 else f"{self.low:.3f}"
        high = "inf" if math.isinf(self.high) else f"{self.high:.3f}"
        return f"{format_confidence(self.confidence)} interval {low}-{high}"

    @property
    def failed(self) -> bool:
        """A regression (A/B) or a speedup not shown (assert_speedup)."""
        return self.status in (Status.REGRESSED, Status.FAILED)

    def line(self, label: str) -> str:
        """One line, with ``label`` naming the comparison; the interval says what it bounds."""
        if math.isnan(self.ratio):
            return f"{label} {self.status}: {self.reason}"
        sessions = f" in {self.sessions} sessions" if self.sessions > 1 else ""
        return (f"{label} {self.status}: x{self.ratio:.3f} per call ({self.interval_text} of the ratio per call, "
                f"over these {self.pairs} pairs of rounds{sessions})" + (f"; {self.reason}" if self.reason else ""))

    def as_dict(self) -> dict:
        """JSON-ready: an unbounded or undefined figure is None."""
        return {_JSON_KEYS.get(key, key): None if isinstance(value, float) and not math.isfinite(value) else value
                for key, value in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict) -> "PairedVerdict":
        values = {f.name: data[_JSON_KEYS.get(f.name, f.name)] for f in dataclasses.fields(cls)
                  if _JSON_KEYS.get(f.name, f.name) in data}
        values["status"] = Status(values["status"])
        for name, missing in (("ratio", math.nan), ("high", math.inf), ("a_median_us_per_call", math.nan),
                              ("b_median_us_per_call", math.nan)):
            if values.get(name) is None:
                values[name] = missing
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class ChangeQuestion:
    """Did B change against A by more than ``tolerance`` (a ratio: 0.02 is 2%)?

    regressed: the interval is above 1 + tolerance; improved: below 1 / (1 + tolerance);
    unchanged: inside both; otherwise more data is needed (inconclusive at the cap).
    """

    tolerance: float = 0.02

    @property
    def bound(self) -> float:
        return math.log1p(self.tolerance)

    def classify(self, low: float, high: float) -> Status | None:
        """The status an interval of the log-ratio shows, None while it straddles a bound."""
        if low > self.bound:
            return Status.REGRESSED
        if high < -self.bound:
            return Status.IMPROVED
        if low >= -self.bound and high <= self.bound:
            return Status.UNCHANGED
        return None

    def decides(self, low: np.ndarray, high: np.ndarray) -> np.ndarray:
        """``classify`` of many intervals at once: True where it gives a status (a simulation's
        thousands of draws, without a Python call each)."""
        bound = self.bound
        return (low > bound) | (high < -bound) | ((low >= -bound) & (high <= bound))

    def decide(self, d: np.ndarray, one_sided_alpha: float,
               looks: int) -> tuple[Status | None, float, float, float, float]:
        estimate, low, high = walsh_interval(d, one_sided_alpha)
        status = self.classify(low, high)
        upward = status == Status.REGRESSED or (status != Status.IMPROVED and estimate >= 0)
        p = signed_rank_p(d, self.bound, "greater") if upward else signed_rank_p(d, -self.bound, "less")
        return status, estimate, low, high, min(1.0, p * looks)

    def undecided_reason(self, low: float, high: float) -> str:
        return f"the interval straddles the {self.tolerance:.0%} tolerance"


@dataclasses.dataclass(frozen=True)
class SpeedupQuestion:
    """Is B (slow) at least ``at_least`` times A (fast)? passed / failed."""

    at_least: float

    def decide(self, d: np.ndarray, one_sided_alpha: float,
               looks: int) -> tuple[Status | None, float, float, float, float]:
        bound = math.log(self.at_least)
        estimate, low, high = walsh_interval(d, one_sided_alpha)
        p_pass = min(1.0, signed_rank_p(d, bound, "greater") * looks)
        if low > bound:
            return Status.PASSED, estimate, low, high, p_pass
        if high < bound:
            return Status.FAILED, estimate, low, high, min(1.0, signed_rank_p(d, bound, "less") * looks)
        return None, estimate, low, high, p_pass

    def undecided_reason(self, low: float, high: float) -> str:
        return f"the interval straddles the required {self.at_least:g}x"


# --------------------------------------------------------------------------
# taking pairs


@dataclasses.dataclass
class Rounds:
    """One side's raw rounds: wall and empty-sync ns, and calls per round."""

    per_round: list[int] = dataclasses.field(default_factory=list)
    wall_ns: list[int] = dataclasses.field(default_factory=list)
    sync_ns: list[int] = dataclasses.field(default_factory=list)

    def add(self, wall_ns: int, sync_ns: int, per_round: int) -> None:
        self.wall_ns.append(wall_ns)
        self.sync_ns.append(sync_ns)
        self.per_round.append(per_round)

    def per_call_us(self) -> np.ndarray:
        return per_call_us(self.wall_ns, self.sync_ns, self.per_round)


TakeRound = Callable[[int], tuple[int, int, int]]  # side (0: A, 1: B) -> (wall_ns, sync_ns, per_round)


def run_sequential(take_round: TakeRound, question, design: Design, *,
                   clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None,
                   progress: Callable[[int, "PairedVerdict | None"], None] | None = None) -> PairedVerdict:
    """Take pairs of rounds of A and B in ``design.order`` until ``question`` decides,
    the pairs reach ``design.max_pairs`` or the time ``design.max_time`` (both
    caps end inconclusive/failed with the interval).  The first look comes after
    ``design.first`` pairs, or later, once the pairs took ``design.min_time``."""
    rng = rng or random.Random()
    sides = (Rounds(), Rounds())
    start = clock()
    target, looked = design.first, False

    def more_pairs() -> bool:
        if len(sides[0].wall_ns) < target:
            return True
        return not looked and clock() - start < min(design.min_time, design.max_time)

    while True:
        while more_pairs():
            # ABBA: pairs alternate AB, BA, so a linear drift cancels in every two pairs
            first = rng.randrange(2) if design.order == "random" else len(sides[0].wall_ns) % 2
            for side in (first, 1 - first):
                sides[side].add(*take_round(side))
        verdict, looked = judge_rounds(sides, question, design, clock() - start), True
        timed_out = clock() - start >= design.max_time
        if verdict.status != Status.INCONCLUSIVE or target >= design.max_pairs or timed_out:
            if verdict.status == Status.INCONCLUSIVE and timed_out and target < design.max_pairs:
                verdict = dataclasses.replace(
                    verdict, reason=f"{verdict.reason} after {verdict.pairs} pairs (time cap {design.max_time:g} s)")
            if progress:
                progress(verdict.pairs, verdict)
            return _as_final(verdict, question)
        if progress:
            progress(verdict.pairs, None)
        target = min(max(target, verdict.pairs) + design.batch, design.max_pairs)


def judge_rounds(sides: Sequence[Rounds], question, design: Design, seconds: float = 0.0) -> PairedVerdict:
    """The question's verdict on the pairs taken so far (Status.INCONCLUSIVE while undecided)."""
    a, b = sides[0].per_call_us(), sides[1].per_call_us()
    n = min(a.size, b.size)
    a, b = a[:n], b[:n]
    confidence = 1 - 2 * design.alpha_per_look
    a_median_us_per_call, b_median_us_per_call = float(np.median(a)), float(np.median(b))
    if n < 2 or min(a.min(), b.min()) <= 0:
        return PairedVerdict(Status.INCONCLUSIVE, math.nan, 0.0, math.inf, confidence, n, seconds, a_median_us_per_call,
                             b_median_us_per_call, 1.0, "rounds at or below zero once the sync is subtracted: the work per "
                             "round is within the sync's noise; raise per_round")
    d = np.log(b) - np.log(a)
    status, estimate, low, high, p = question.decide(d, design.alpha_per_look, design.looks)
    reason = "" if status else question.undecided_reason(low, high)
    return PairedVerdict(status or Status.INCONCLUSIVE, math.exp(estimate), math.exp(low), math.exp(high),
                         confidence, n, seconds, a_median_us_per_call, b_median_us_per_call, p, reason)


def _as_final(verdict: PairedVerdict, question) -> PairedVerdict:
    """A speedup that is still undecided at the cap fails (it was not shown)."""
    if isinstance(question, SpeedupQuestion) and verdict.status == Status.INCONCLUSIVE:
        return dataclasses.replace(verdict, status=Status.FAILED, reason=verdict.reason + " at the cap: not shown")
    return verdict


def adjust_family(verdicts: dict[str, PairedVerdict], alpha: float) -> dict[str, PairedVerdict]:
    """Benjamini-Hochberg over the session's regressed/improved calls.

    Each verdict's p is a valid sequential p-value; a regression or improvement
    whose adjusted p is not below ``alpha`` becomes inconclusive, saying why."""
    from scipy import stats

    if not verdicts:
        return {}
    keys = list(verdicts)
    adjusted = stats.false_discovery_control([verdicts[k].p_value for k in keys])
    out = {}
    for key, p_adjusted in zip(keys, adjusted):
        verdict = dataclasses.replace(verdicts[key], p_adjusted=float(p_adjusted))
        if verdict.status in (Status.REGRESSED, Status.IMPROVED) and p_adjusted >= alpha:
            verdict = dataclasses.replace(
                verdict, status=Status.INCONCLUSIVE,
                reason=f"{verdict.status} alone (p={verdict.p_value:.2g}) but not across the session's "
                       f"{len(keys)} measurements (Benjamini-Hochberg p={p_adjusted:.2g} >= {alpha:g})")
        out[key] = verdict
    return out


# --------------------------------------------------------------------------
# sessions: pairs of fresh worker processes


@dataclasses.dataclass(frozen=True)
class SessionDesign:
    """An A/B job's replication: ``pairs`` pairs of rounds per measurement in each
    session (a fresh pair of worker processes), looks after ``first`` sessions and then
    every ``step`` up to ``max_sessions``, alpha shared over the looks (Bonferroni)."""

    pairs: int = settings.AB_DEFAULTS["pairs"]
    first: int = settings.AB_DEFAULTS["sessions"]
    step: int = settings.AB_DEFAULTS["look_every"]
    max_sessions: int = settings.AB_DEFAULTS["max_sessions"]
    max_time: float = settings.AB_DEFAULTS["max_time"]  # of pairs, per measurement and session
    alpha: float = settings.DEFAULTS["alpha"]
    order: str = settings.AB_DEFAULTS["order"]
    min_time: float = settings.AB_DEFAULTS["min_time"]  # past `pairs`, a session's pairs go on until they took this long

    def __post_init__(self) -> None:
        if self.first < 2 or self.step < 1 or self.max_sessions < self.first:
            raise ValueError(f"sessions: need first >= 2, step >= 1 and max_sessions >= first "
                             f"(got {self.first}, {self.step}, {self.max_sessions})")
        self.within  # the session's Design checks the rest (alpha, time, order)

    @property
    def within(self) -> Design:
        """One session's pairs: ``pairs``, or more until they took ``min_time``; one look (the
        session decides nothing alone)."""
        return Design(first=self.pairs, batch=self.pairs, max_pairs=self.pairs, max_time=self.max_time,
                      alpha=self.alpha, order=self.order, min_time=self.min_time)

    @property
    def look_points(self) -> tuple[int, ...]:
        points = list(range(self.first, self.max_sessions + 1, self.step))
        if points[-1] != self.max_sessions:
            points.append(self.max_sessions)
        return tuple(points)

    @property
    def alpha_per_look(self) -> float:
        return self.alpha / len(self.look_points)


def judge_sessions(sessions: Sequence[PairedVerdict], question: ChangeQuestion,
                   design: SessionDesign) -> PairedVerdict:
    """B against A over sessions: the weighted mean of the sessions' log-ratios with a t
    interval from their weighted spread (``session_weights``).

    Two worker processes differ for their whole life (where the scheduler put them, what
    the driver chose), by more than their rounds do; only fresh processes replicate that,
    so the session, not the pair, is the unit of this interval (Kalibera and Jones)."""
    from scipy import stats

    usable = [v for v in sessions if math.isfinite(v.ratio) and v.ratio > 0]
    pairs, seconds = sum(v.pairs for v in sessions), sum(v.seconds for v in sessions)
    confidence = 1 - 2 * design.alpha_per_look
    a_median_us_per_call = float(np.median([v.a_median_us_per_call for v in usable])) if usable else math.nan
    b_median_us_per_call = float(np.median([v.b_median_us_per_call for v in usable])) if usable else math.nan
    e, w = session_weights(sessions)
    if e.size < 2:
        reason = (sessions[0].reason if sessions and not usable else "") or "fewer than 2 sessions measured it"
        return PairedVerdict(Status.INCONCLUSIVE, math.nan if not usable else usable[0].ratio, 0.0, math.inf, confidence,
                             pairs, seconds, a_median_us_per_call, b_median_us_per_call, 1.0, reason, sessions=len(sessions))
    n = e.size
    mean, se = map(float, _weighted_mean_and_se(e, w))
    quantile = _t_quantile(design.alpha_per_look, n - 1)
    low, high = mean - quantile * se, mean + quantile * se
    status = question.classify(low, high)
    looks = len(design.look_points)
    upward = status == Status.REGRESSED or (status != Status.IMPROVED and mean >= 0)
    bound = question.bound if upward else -question.bound
    t = (mean - bound) / se if se > 0 else math.copysign(math.inf, mean - bound)
    p = float(stats.t.sf(t, n - 1) if upward else stats.t.cdf(t, n - 1))
    reason = ""
    if not status:
        reason = (f"{question.undecided_reason(low, high)} after {n} sessions; "
                  f"{n} sessions resolve {_resolution_text(question.bound + quantile * se)} here")
    return PairedVerdict(status or Status.INCONCLUSIVE, math.exp(mean), math.exp(low), math.exp(high), confidence, pairs,
                         seconds, a_median_us_per_call, b_median_us_per_call, min(1.0, p * looks), reason, sessions=n)


def session_weights(sessions: Sequence[PairedVerdict]) -> tuple[np.ndarray, np.ndarray]:
    """The sessions' log-ratios and their weights: 1, less for a session whose own interval is
    wider than the sessions' median (its pairs spread more: a stall, a neighbour's burst), in
    proportion to its variance; a session whose interval is unbounded while others are
    bounded is left out.  The weights only shrink wild sessions: the spread the interval is
    sized from stays the sessions' own (Hartung-Knapp), so sessions with alike intervals
    are judged exactly as by their plain mean.  On the H200 one wild session in 5 had pulled a
    +10% change's mean to x1.013 (docs/RESULTS.md@cb24f50 §10)."""
    usable = [v for v in sessions if math.isfinite(v.ratio) and v.ratio > 0]
    e = np.log([v.ratio for v in usable]) if usable else np.zeros(0)
    variance = np.array([_session_variance(v) for v in usable])
    bounded = np.isfinite(variance)
    if bounded.sum() < 2:
        return e, np.ones(e.size)
    typical = float(np.median(variance[bounded]))
    return e[bounded], np.minimum(1.0, typical / np.maximum(variance[bounded], 1e-300))


def _session_variance(verdict: PairedVerdict) -> float:
    """A session's log-ratio variance as its own interval shows it (inf where unbounded)."""
    from scipy import stats

    if not (verdict.low > 0 and math.isfinite(verdict.high) and 0 < verdict.confidence < 1):
        return math.inf
    half = (math.log(verdict.high) - math.log(verdict.low)) / 2
    return (half / float(stats.norm.isf((1 - verdict.confidence) / 2))) ** 2


def _weighted_mean_and_se(e: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The weighted mean of ``e`` along its last axis and its standard error from their
    weighted spread (n - 1 df): floats for one series, arrays for a stack of them."""
    mean = e @ w / w.sum()
    spread = (e - np.expand_dims(mean, -1)) ** 2 @ w / ((e.shape[-1] - 1) * w.sum())
    return mean, np.sqrt(spread)


def _resolution_text(log_change: float) -> str:
    """The smallest change (on the log scale) an interval can show beyond the tolerance, as '±6%'."""
    return f"±{math.expm1(log_change):.0%}"


def futility(sessions: Sequence[PairedVerdict], question: ChangeQuestion, design: SessionDesign) -> str | None:
    """Why the sessions left cannot decide, or None while they still can.

    The sessions still allowed up to the cap are simulated from what the sessions so far
    say about their log-ratios (``decision_probability``); when a decision at the cap is
    less likely than ``FUTILITY_PROBABILITY``, more sessions only spend time: the
    measurement ends inconclusive with what the cap would resolve.  Stopping early can
    only turn a verdict into inconclusive, so the false-alarm rate stays within alpha."""
    e, w = session_weights(sessions)
    cap = design.max_sessions
    if e.size < 2 or len(sessions) >= cap:
        return None
    probability = decision_probability(sessions, question, design)
    if probability >= FUTILITY_PROBABILITY:
        return None
    sd = float(_weighted_mean_and_se(e, w)[1]) * math.sqrt(e.size)
    half = _t_quantile(design.alpha_per_look, cap - 1) * sd / math.sqrt(cap)
    return (f"stopped after {len(sessions)} sessions: with their ratios (sd {sd:.1%}) a decision at {cap} sessions "
            f"has probability {probability:.0%} (below {FUTILITY_PROBABILITY:.0%}); {cap} sessions resolve "
            f"{_resolution_text(question.bound + half)} here")


# Stop for futility below this predictive probability of a decision at the cap.  Sized with
# benchmarks/futility_sim.py (the default SessionDesign, per-session sd 0.023-0.06, changes of 0
# and +10%): against 0.10, a 4-test A/A job at sd 0.023 waits for a median 6 sessions, not 7, and
# a +10% change is caught 99.3% of the time at sd 0.035 (99.6%), 91% at sd 0.047 (93%); a higher
# value stops identical code sooner at the cost of real changes.  docs/RESULTS.md §10.
FUTILITY_PROBABILITY = 0.15
_FUTILITY_DRAWS = 4000
_FUTILITY_SEED = 20261203  # fixed: the same sessions always get the same verdict


def decision_probability(sessions: Sequence[PairedVerdict], question: ChangeQuestion, design: SessionDesign) -> float:
    """The predictive probability that completing the sessions to ``design.max_sessions``
    decides (regressed, improved or unchanged, as ``judge_sessions`` would at the cap).

    The log-ratios' mean and sd (weighted as ``judge_sessions`` weighs them; a session to
    come weighs 1) are drawn from the noninformative posterior of the sessions so far
    (sigma^2 = (n-1) s^2 / chi2(n-1), mu ~ N(mean, sigma^2 / n)) rather than taken
    as the truth: from 2-3 sessions the sd is often twice the true one, which would stop
    real changes."""
    e, w = session_weights(sessions)
    if e.size < 2:
        return 1.0  # one session says nothing about the spread: nothing rules a decision out
    left = design.max_sessions - len(sessions)
    n, total = e.size, e.size + max(left, 0)
    mean, se = map(float, _weighted_mean_and_se(e, w))
    rng = np.random.default_rng(_FUTILITY_SEED)
    sigma = se * math.sqrt(n) * np.sqrt((n - 1) / rng.chisquare(n - 1, _FUTILITY_DRAWS))
    mu = rng.normal(mean, sigma / math.sqrt(n))
    future = rng.normal(mu[:, None], sigma[:, None], (_FUTILITY_DRAWS, max(left, 0)))
    completed = np.concatenate([np.broadcast_to(e, (_FUTILITY_DRAWS, n)), future], axis=1)
    weights = np.concatenate([w, np.ones(max(left, 0))])  # a session to come: a typical one
    means, ses = _weighted_mean_and_se(completed, weights)
    half = _t_quantile(design.alpha_per_look, total - 1) * ses
    return int(np.count_nonzero(question.decides(means - half, means + half))) / _FUTILITY_DRAWS
