"""How much of an A/B job's session-to-session spread its measurements share.

    python benchmarks/ab_session_factor.py JOB.json ...     (ab_jobs.py --keep DIR writes them)

In each job every measurement gets one log-ratio (head/base) per session, from the same pair of
worker processes.  If what moves a session's ratios is the pair of processes (each draws its own
speed), the measurements of one session move together, and a measurement's log-ratio less another
one's of the same session (a control measured on both sides) spreads less than either.  Prints,
pooled over unchanged measurements: the sd of the log-ratios around each measurement's mean; the
same after subtracting one other measurement's log-ratio of the same session (every pair of
measurements); after subtracting the mean of all the others; and the share of the variance that
the session's measurements have in common.
"""

from __future__ import annotations

import itertools
import json
import math
import sys


def session_logs(outcome: dict) -> dict[str, list[float | None]]:
    """measurement name -> its log-ratio in each session (None where that session gave none)."""
    logs = {}
    for measurement in outcome["measurements"]:
        sessions = measurement.get("sessions") or []
        logs[measurement["name"]] = [math.log(s["ratio"]) if s.get("ratio") else None for s in sessions]
    return logs


def pooled_sd(series: list[list[float]]) -> tuple[float, int]:
    """sd of each series around its own mean, pooled; and its degrees of freedom."""
    squares, freedom = 0.0, 0
    for values in series:
        if len(values) >= 2:
            mean = sum(values) / len(values)
            squares += sum((v - mean) ** 2 for v in values)
            freedom += len(values) - 1
    return (math.sqrt(squares / freedom) if freedom else float("nan")), freedom


def main(paths: list[str]) -> int:
    raw, less_one, less_rest = [], [], []
    for path in paths:
        logs = session_logs(json.load(open(path)))
        names = sorted(logs)
        for name in names:
            raw.append([v for v in logs[name] if v is not None])
        for a, b in itertools.permutations(names, 2):
            less_one.append([x - y for x, y in zip(logs[a], logs[b]) if x is not None and y is not None])
        for name in names:
            series = []
            for i, value in enumerate(logs[name]):
                others = [logs[o][i] for o in names if o != name and i < len(logs[o]) and logs[o][i] is not None]
                if value is not None and others:
                    series.append(value - sum(others) / len(others))
            less_rest.append(series)
    sd_raw, df_raw = pooled_sd(raw)
    sd_one, df_one = pooled_sd(less_one)
    sd_rest, df_rest = pooled_sd(less_rest)
    # x - y with x, y sharing a session factor of variance c and own parts of variance s:
    # var(x) = c + s, var(x - y) = 2s, so the common share is 1 - var(x - y) / (2 var(x)).
    common = 1 - sd_one ** 2 / (2 * sd_raw ** 2)
    print(f"{len(paths)} jobs")
    print(f"log-ratio sd around each measurement's mean: {sd_raw:.4f} ({df_raw} df)")
    print(f"less one other measurement of the same session: {sd_one:.4f} ({df_one} df, pairs counted both ways)")
    print(f"less the mean of the others: {sd_rest:.4f} ({df_rest} df)")
    print(f"share of the variance common to a session's measurements: {common:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
