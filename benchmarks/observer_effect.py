"""Does measuring disturb what is measured?  A plain timed loop against ``measure()``.

    python benchmarks/observer_effect.py [--pairs 8] [--rounds 30] [--warmup 1] [--json OUT.json]

Each sample is a fresh process that times one workload either plainly (no recorder
installed: empty sync, ``per_round`` calls, one sync, as the sequential method does) or
through ``DispatchMeter.measure`` (the recorder installed, as under the plugin).  The two
kinds of process alternate, ``--pairs`` times per workload, so drift cancels in each
pair's ratio; both processes of a pair run on the same idle CPUs, as an A/B session's two
workers do (two processes left to the scheduler differ by more than the effect sought:
docs/RESULTS.md, section 4).  Workloads: one pass of 100 and of 1000 dispatches, and a submit per
dispatch (100).  Prints, per workload, the median µs per dispatch of each kind and the
median of the pairs' ratios (measure / plain).  Target (issue 11): within 2%.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from pytest_dispatch.ab.coordinator import cpus_per_session, idlest_cpus

WORKLOADS = {"one pass of 100": ("single_pass", 100), "one pass of 1000": ("single_pass", 1000),
             "a submit per dispatch (100)": ("submit_per_dispatch", 100)}
PER_ROUND = 5

CHILD = """
import json, sys, time
import numpy as np
from pytest_dispatch.judgement import paired
from pytest_dispatch.measurement import gpu, recorder
from pytest_dispatch.measurement.meter import DispatchMeter
from pytest_dispatch.workloads import AddOne
kind, method, dispatches, rounds, per_round = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
warmup_seconds = float(sys.argv[6])
if kind == "measure":
    recorder.install("wgpu-native")
import wgpu
adapter = gpu.select_adapter(gpu.AdapterRequest())
device = gpu.request_device(adapter)
kernel = AddOne(device)
call = lambda: getattr(kernel, method)(dispatches)
sync_buffer = device.create_buffer(size=4, usage=wgpu.BufferUsage.COPY_SRC)
sync = lambda: device.queue.read_buffer(sync_buffer, 0, 4)
end = time.perf_counter() + warmup_seconds  # the same for both kinds: a GPU's clocks rise under load
while time.perf_counter() < end:
    for _ in range(per_round):
        call()
    sync()
if kind == "measure":
    measured = DispatchMeter(device=device, lock=False).measure(call, rounds=rounds, per_round=per_round)
    per_dispatch = float(np.median(measured.wall_us)) / dispatches
else:
    for _ in range(3):
        call()
        sync()
    wall, empty = [], []
    for _ in range(rounds):
        start = time.perf_counter_ns(); sync(); empty.append(time.perf_counter_ns() - start)
        start = time.perf_counter_ns()
        for _ in range(per_round):
            call()
        sync()
        wall.append(time.perf_counter_ns() - start)
    per_dispatch = float(np.median(paired.per_call_us(wall, empty, per_round))) / dispatches
print(json.dumps({"us_per_dispatch": per_dispatch, "adapter": gpu.gpu_info(adapter).describe()}))
"""


def cpu_adapter_here() -> bool:
    """Whether the adapter the samples will get is a CPU one (lavapipe): it decides their CPUs."""
    probe = ("import wgpu; from pytest_dispatch.measurement import gpu; "
             "print(gpu.gpu_info(wgpu.gpu.request_adapter_sync(power_preference='high-performance')).is_cpu)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    return done.stdout.strip().splitlines()[-1:] == ["True"]


def sample(kind: str, method: str, dispatches: int, rounds: int, cpus: list[int] | None,
           warmup_seconds: float) -> float:
    done = subprocess.run([sys.executable, "-c", CHILD, kind, method, str(dispatches), str(rounds), str(PER_ROUND),
                           str(warmup_seconds)],
                          capture_output=True, text=True,
                          preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, set(cpus)))
    if done.returncode != 0:
        raise SystemExit(f"observer_effect: a {kind} process failed:\n{done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    ADAPTER[:] = [result["adapter"]]
    return result["us_per_dispatch"]


ADAPTER: list[str] = []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=8, help="process pairs per workload")
    parser.add_argument("--rounds", type=int, default=30, help="timed rounds per process")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of calls before timing, in both kinds "
                        "(on the H200, pairs of processes timed right after start differed by up to 40%%)")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    per_pair = cpus_per_session(cpu_adapter_here()) if cpus else 0
    rows = []
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for label, (method, dispatches) in WORKLOADS.items():
        plain, measured, ratios = [], [], []
        for index in range(args.pairs):
            order = ("plain", "measure") if index % 2 == 0 else ("measure", "plain")
            placed = idlest_cpus(cpus, index, per_pair) if cpus else None
            got = {kind: sample(kind, method, dispatches, args.rounds, placed, args.warmup) for kind in order}
            plain.append(got["plain"])
            measured.append(got["measure"])
            ratios.append(got["measure"] / got["plain"])
        row = {"workload": label, "pairs": args.pairs, "plain_us": statistics.median(plain),
               "measure_us": statistics.median(measured), "ratio_median": statistics.median(ratios),
               "ratios": ratios}
        rows.append(row)
        if len(rows) == 1:
            print(f"adapter: {ADAPTER[0]}; {started}")
        print(f"{label:28} plain {row['plain_us']:8.3f} µs/dispatch   measure() {row['measure_us']:8.3f}   "
              f"ratio (median of {args.pairs} pairs) x{row['ratio_median']:.3f} "
              f"[{min(ratios):.3f}-{max(ratios):.3f}]", flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"command": " ".join(sys.argv), "date": started, "adapter": ADAPTER[0], "rows": rows},
                      handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
