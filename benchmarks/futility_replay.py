"""Kept A/B jobs judged again with other futility thresholds: what a job would have cost and decided.

    python benchmarks/futility_replay.py JOB.json ... [--thresholds 0.10 0.2 0.3] [--look-every 2]

Reads the ``--json`` outcomes that ``ab_jobs.py --keep DIR`` writes (each measurement's
sessions: ratio and interval) and replays every measurement's sessions as the coordinator
judges them (``futility_sim.run_measurement``: looks, and futility between them) with each
threshold.  A threshold at least the kept job's only stops earlier, so the sessions the job kept
are all a replay needs; a lower one or other looks can need more, and a measurement whose kept
sessions run out keeps the kept job's verdict and sessions (counted as "ran out").  A job's
seconds are estimated from its sessions (the most any of its measurements took) by a line
fitted to the kept jobs' own seconds.  One measurement at a time: Benjamini-Hochberg across a
job's measurements is left out, as in ``futility_sim.py``.  Prints per threshold the median and
largest estimated job, the unchanged measurements' verdicts (false alarms, ``unchanged``) and
how often the measurement named ``--changed`` (``slow`` in ab_jobs.py's mixed jobs) was caught.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import numpy as np

from futility_sim import run_measurement
from pytest_dispatch.judgement import paired
from pytest_dispatch.judgement.status import Status


def sessions_of(measurement: dict, confidence: float) -> list[paired.PairedVerdict]:
    """A measurement's kept sessions as the verdicts the coordinator judged."""
    return [paired.PairedVerdict(Status.INCONCLUSIVE, s["ratio"], s["low"] or 0.0,
                                 math.inf if s["high"] is None else s["high"], confidence, s["pairs"], 0.0,
                                 math.nan, math.nan, 1.0)
            for s in measurement.get("sessions") or [] if s.get("ratio")]


def replay(job: dict, threshold: float, look_every: int | None = None) -> dict[str, tuple[Status, int, bool]]:
    """Each timed measurement's status, sessions and whether its kept sessions ran out, under
    ``threshold``, with looks every ``look_every`` sessions after the first (default: the job's own)."""
    settings = job["settings"]
    step = look_every or settings.get("look_every", settings["sessions"])  # jobs before look_every: every `sessions`
    design = paired.SessionDesign(pairs=settings["pairs"], first=settings["sessions"], step=step,
                                  max_sessions=settings["max_sessions"], alpha=settings["alpha"])
    question = paired.ChangeQuestion(settings["threshold"])
    out = {}
    for measurement in job["measurements"]:
        sessions = sessions_of(measurement, 1 - 2 * settings["alpha"])
        if len(sessions) < 2:
            continue

        def stops(n: int, sessions=sessions) -> bool:
            return n < design.max_sessions and paired.decision_probability(sessions[:n], question, design) < threshold

        status, n = run_measurement(sessions, stops, question, design)
        ran_out = n > len(sessions)  # the kept job stopped sooner (other looks, Benjamini-Hochberg)
        if ran_out:
            status, n = Status(measurement["timing"]["status"]), len(sessions)
        out[measurement["name"]] = (status, n, ran_out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("jobs", nargs="+", type=Path)
    parser.add_argument("--thresholds", type=float, nargs="+", default=[paired.FUTILITY_PROBABILITY, 0.2, 0.3, 0.5])
    parser.add_argument("--look-every", type=int,
                        help="sessions between two looks after the first (default: the jobs' own)")
    parser.add_argument("--changed", default="slow", help="the measurement whose head really changed")
    args = parser.parse_args()
    jobs = [json.loads(path.read_text()) for path in args.jobs]
    kept = [max((len(m.get("sessions") or []) for m in job["measurements"]), default=0) for job in jobs]
    slope, intercept = np.polyfit(kept, [job["seconds"] for job in jobs], 1)
    print(f"{len(jobs)} jobs; seconds = {intercept:.1f} + {slope:.2f} x sessions (fitted to the kept jobs; "
          f"their median {statistics.median(job['seconds'] for job in jobs):.0f} s)")
    print("| threshold | median job s | max job s | false alarms | unchanged | changed caught | ran out |")
    print("|---|---|---|---|---|---|---|")
    for threshold in args.thresholds:
        seconds, alarms, unchanged, total, caught, changed, ran_out = [], 0, 0, 0, 0, 0, 0
        for job in jobs:
            verdicts = replay(job, threshold, args.look_every)
            seconds.append(intercept + slope * max((n for _, n, _ in verdicts.values()), default=0))
            ran_out += sum(short for _, _, short in verdicts.values())
            for name, (status, _, _) in verdicts.items():
                if name == args.changed:
                    changed += 1
                    caught += status == Status.REGRESSED
                else:
                    total += 1
                    alarms += status in (Status.REGRESSED, Status.IMPROVED)
                    unchanged += status == Status.UNCHANGED
        print(f"| {threshold:g} | {statistics.median(seconds):.0f} | {max(seconds):.0f} | {alarms} of {total} | "
              f"{unchanged} of {total} | {f'{caught} of {changed}' if changed else '-'} | {ran_out} |")


if __name__ == "__main__":
    main()
