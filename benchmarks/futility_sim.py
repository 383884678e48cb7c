"""Simulated A/B measurements judged over sessions: what the futility rule costs and saves.

Each measurement's sessions have normal log-ratios (a true change, a per-session sd) and are
judged by the A/B coordinator's own decisions (``judgement.sessions.Sessions``): ``judge_sessions``
at the design's looks, the futility rule at a look that did not decide and between looks from
``FUTILITY_FROM`` sessions.  One measurement alone: Benjamini-Hochberg across a job's
measurements does not come in.  Rules:
``old`` (the projection of the observed mean and sd to the cap, kept here as ``old_futility``),
``p=X`` (the predictive probability of a decision at the cap below X; the real
``paired.decision_probability``, of which ``paired.futility`` is the same test at
``FUTILITY_PROBABILITY``) and ``none`` (no futility stop).

    python benchmarks/futility_sim.py --measurements 2000 --thresholds 0.02 0.05 0.10 [--look-every 2] [--per-job 4]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import math
from typing import Callable, Sequence

import numpy as np

from pytest_dispatch.judgement import paired
from pytest_dispatch.judgement.sessions import FUTILITY_FROM, Sessions
from pytest_dispatch.judgement.status import Status


def old_futility(sessions: Sequence[paired.PairedVerdict], question: paired.ChangeQuestion,
                 design: paired.SessionDesign) -> str | None:
    """The rule before the predictive probability: the observed mean and sd projected to the cap."""
    from scipy import stats

    e = np.log([v.ratio for v in sessions if math.isfinite(v.ratio) and v.ratio > 0])
    cap = design.max_sessions
    if e.size < 2 or e.size >= cap:
        return None
    mean, sd = abs(float(np.mean(e))), float(np.std(e, ddof=1))
    half = float(stats.t.isf(design.alpha_per_look, cap - 1)) * sd / math.sqrt(cap)
    if mean + half <= question.bound or mean - half > question.bound:
        return None
    return "stopped (old rule)"


def as_verdicts(logs: np.ndarray) -> list[paired.PairedVerdict]:
    return [paired.PairedVerdict(Status.INCONCLUSIVE, math.exp(x), 0.0, math.inf, 0.99, 30, 0.1, 10.0,
                                 10.0 * math.exp(x), 1.0) for x in logs]


def run_measurement(verdicts: list[paired.PairedVerdict], stops: Callable[[int], bool],
                    question: paired.ChangeQuestion, design: paired.SessionDesign) -> tuple[Status, int]:
    """The status and the sessions used, session by session as a job takes them; ``stops(n)``:
    futility after n sessions.  Fewer verdicts than the cap that decide nothing: inconclusive
    after one more session than there are (they ran out)."""
    decisions = Sessions(design, question.tolerance,
                         futility=lambda sessions, *_: "stopped" if stops(len(sessions)) else None)
    for n, verdict in enumerate(verdicts[:design.max_sessions], 1):
        decisions.add("m", verdict)
        decisions.look(final=n >= design.max_sessions)
        if "m" in decisions.decided:
            return decisions.decided["m"].status, n
    return Status.INCONCLUSIVE, len(verdicts) + 1


def simulate_cell(sd: float, change: float, measurements: int, thresholds: Sequence[float], max_sessions: int,
                  seed: int, look_every: int) -> dict[str, list[tuple[Status, int]]]:
    design = paired.SessionDesign(max_sessions=max_sessions, step=look_every)
    question = paired.ChangeQuestion(0.02)
    rng = np.random.default_rng([seed, round(sd * 1000), round(change * 1000)])
    out: dict[str, list[tuple[Status, int]]] = {"none": [], "old": [], **{f"p={t:g}": [] for t in thresholds}}
    for _ in range(measurements):
        verdicts = as_verdicts(math.log1p(change) + rng.normal(0.0, sd, design.max_sessions))
        probability = {}

        def decision_probability(n: int) -> float:
            if n not in probability:  # one probability per point, shared by the thresholds
                probability[n] = paired.decision_probability(verdicts[:n], question, design)
            return probability[n]

        out["none"].append(run_measurement(verdicts, lambda n: False, question, design))
        out["old"].append(run_measurement(verdicts, lambda n: old_futility(verdicts[:n], question, design) is not None,
                                          question, design))
        for t in thresholds:
            out[f"p={t:g}"].append(run_measurement(
                verdicts, lambda n, t=t: n < design.max_sessions and decision_probability(n) < t, question, design))
    return out


def row(rule: str, sd: float, change: float, results: list[tuple[Status, int]], per_job: int) -> str:
    statuses = [s for s, _ in results]
    sessions = np.array([n for _, n in results])
    jobs = sessions[:sessions.size - sessions.size % per_job].reshape(-1, per_job).max(axis=1)  # a job waits for its last
    false_alarms = sum(s in (Status.REGRESSED, Status.IMPROVED) for s in statuses) if change == 0 else None
    right = Status.UNCHANGED if change == 0 else Status.REGRESSED if change > 0 else Status.IMPROVED
    correct = 100 * sum(s == right for s in statuses) / len(statuses)
    alarms = "-" if false_alarms is None else str(false_alarms)
    return (f"| {sd:.3g} | {'A/A' if change == 0 else f'{change:+.0%}'} | {rule} | {alarms} | {correct:.1f} | "
            f"{sessions.mean():.1f} | {np.percentile(sessions, 90):.0f} | {100 * np.mean(sessions <= 3):.0f} | "
            f"{100 * np.mean(sessions <= 4):.0f} | {np.median(jobs):.0f} | {np.percentile(jobs, 90):.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measurements", type=int, default=2000, help="per sd and change")
    parser.add_argument("--sds", type=float, nargs="+", default=[0.03, 0.06, 0.10, 0.20, 0.40],
                        help="per-session sd of the log-ratio")
    parser.add_argument("--changes", type=float, nargs="+", default=[0.0, 0.10, 0.12, 0.20],
                        help="true change of B against A (0.10: +10%%)")
    parser.add_argument("--thresholds", type=float, nargs="+", default=[0.02, 0.05, 0.10],
                        help="probabilities of a decision at the cap below which a measurement stops")
    parser.add_argument("--max-sessions", type=int, default=paired.SessionDesign().max_sessions)
    parser.add_argument("--look-every", type=int, default=paired.SessionDesign().step,
                        help="sessions between two looks after the first")
    parser.add_argument("--per-job", type=int, default=4,
                        help="measurements a job waits for (consecutive ones of a row): the job columns")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1, help="processes")
    args = parser.parse_args()
    cells = [(sd, change) for sd in args.sds for change in args.changes]
    design = paired.SessionDesign(max_sessions=args.max_sessions, step=args.look_every)
    print(f"{args.measurements} measurements per row; tolerance 2%; looks at {design.look_points}, alpha 0.01 "
          f"over them; futility from {FUTILITY_FROM} sessions; no Benjamini-Hochberg")
    print("| sd | change | rule | false alarms | % decided correctly | mean sessions | p90 sessions "
          f"| % done by 3 | % done by 4 | job sessions, median ({args.per_job} a job) | job sessions, p90 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with concurrent.futures.ProcessPoolExecutor(args.workers) as pool:
        futures = [pool.submit(simulate_cell, sd, change, args.measurements, args.thresholds, args.max_sessions,
                               args.seed, args.look_every) for sd, change in cells]
        for (sd, change), future in zip(cells, futures):
            for rule, results in future.result().items():
                print(row(rule, sd, change, results, args.per_job), flush=True)


if __name__ == "__main__":
    main()
