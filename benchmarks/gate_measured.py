"""The gate on real measurements: false alarms when nothing changed, detection of an injected cost.

Each trial measures a one-pass loop of N dispatches twice (baseline, then current)
with the meter's default rounds, and judges current against baseline with the gate's
statistics.  A/A trials change nothing; shifted trials busy-wait inside each dispatch
call for a given fraction of the measured per-dispatch cost (the kind of regression a
redundant bind-group set or extra host work adds).

    python benchmarks/gate_measured.py [--trials 20] [--dispatches 100] [--shifts 0.1,0.2]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from pytest_dispatch import encoding, gate, gpu, stats
from pytest_dispatch.gpu import AdapterRequest
from pytest_dispatch.meter import DEFAULT_ROUNDS, DispatchMeter
from pytest_dispatch.workloads import AddOne


def busy_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def one_pass(kernel: AddOne, dispatches: int, extra_s: float) -> None:
    busy = (lambda: busy_wait(extra_s)) if extra_s else None
    encoding.submit(kernel.device, kernel.work(dispatches), encoding.SINGLE_PASS, after_dispatch=busy)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--dispatches", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    parser.add_argument("--shifts", default="0.1,0.2", help="injected cost as fractions of the per-dispatch cost")
    args = parser.parse_args()

    adapter = gpu.select_adapter(AdapterRequest())
    info = gpu.gpu_info(adapter)
    kernel = AddOne(gpu.request_device(adapter))
    meter = DispatchMeter(device=kernel.device)

    def measure(extra_s: float) -> np.ndarray:
        m = meter.measure(one_pass, kernel, args.dispatches, extra_s, rounds=args.rounds, name="one_pass")
        return gate.timing_samples(m)

    base_us = float(np.median(measure(0.0)))
    print(f"adapter: {info.describe()}")
    print(f"one pass of {args.dispatches} dispatches, {args.rounds} rounds a side, {args.trials} trials per row; "
          f"per-dispatch cost ~{base_us:.1f} µs; gate defaults {gate.DEFAULTS}")
    print(f"{'injected':>10} {'regressed':>10} {'improved':>9} {'unchanged':>10} {'median ratio':>13}")
    for shift in [0.0] + [float(s) for s in args.shifts.split(",")]:
        extra_s = shift * base_us / 1e6
        counts = {"regressed": 0, "improved": 0, "unchanged": 0, "inconclusive": 0}
        ratios = []
        for _ in range(args.trials):
            baseline, current = measure(0.0), measure(extra_s)
            verdict = stats.judge_timings({"t": (baseline, current)}, **gate.DEFAULTS, with_ci=False)["t"]
            counts[verdict.status] += 1
            ratios.append(verdict.ratio)
        label = "A/A" if shift == 0 else f"+{shift:.0%}"
        print(f"{label:>10} {counts['regressed']:>10} {counts['improved']:>9} {counts['unchanged']:>10} "
              f"{np.median(ratios):>13.3f}")


if __name__ == "__main__":
    main()
