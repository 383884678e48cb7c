"""Does measuring disturb what is measured?  A plain timed loop against ``measure()``.

    python benchmarks/observer_effect.py [--design within|pairs] [--samples 8] [--blocks 4] [--rounds 30]
                                         [--warmup 1] [--json OUT.json]

Two kinds of block: one whole ``DispatchMeter.measure`` call with the recorder installed
(as under the plugin), or the same rounds timed plainly with no recorder installed (empty
sync, ``per_round`` calls, one sync, as the sequential method does).  Blocks come in the
order plain, measure, measure, plain, ... (``--blocks`` of each; a linear drift cancels).
A sample's ratio is the median of its measure blocks over the median of its plain blocks.

* ``--design within`` (default): a sample is one fresh process that runs both kinds,
  installing the recorder for each measure block and removing it after.
* ``--design pairs``: a sample is two fresh processes alive together, one per kind, placed on
  the same idle CPUs as an A/B session's two workers are, taking turns.

Each sample runs on idle CPUs chosen as the A/B engine chooses them.  On the H200 a fresh
process settles at one of two speeds, a third apart: the ratio of two processes,
even taking turns, is mostly which speeds they drew (x0.72-1.71 over 8 pairs), which only
``within`` cancels.  Workloads: one pass of 100 and of 1000 dispatches, and a submit per
dispatch (100).  Prints, per workload, the median µs per dispatch of each kind and the median
of the samples' ratios (measure / plain).  Target: within 2%, median of at least 8.
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
from pytest_dispatch.measurement import gpu, meter, recorder
from pytest_dispatch.measurement.meter import DispatchMeter
from pytest_dispatch.workloads import AddOne
method, dispatches, rounds, per_round = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
warmup_seconds = float(sys.argv[5])
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


def measured_block():
    recorder.install("wgpu-native")
    try:
        measured = DispatchMeter(device=device, lock=False).measure(call, rounds=rounds, per_round=per_round)
    finally:
        recorder.uninstall()
    return float(np.median(measured.wall_us_per_call)) / dispatches


def plain_block():
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
    return float(np.median(meter.per_call_us(wall, empty, per_round))) / dispatches


blocks = {"measure": measured_block, "plain": plain_block}
print(json.dumps({"ready": gpu.gpu_info(adapter).describe()}), flush=True)
for line in sys.stdin:  # a line names the kind of block to run; end of input ends the process
    print(json.dumps({"us_per_dispatch": blocks[line.strip()]()}), flush=True)
"""


def cpu_adapter_here() -> bool:
    """Whether the adapter the samples will get is a CPU one (lavapipe): it decides their CPUs."""
    probe = ("import wgpu; from pytest_dispatch.measurement import gpu; "
             "print(gpu.gpu_info(wgpu.gpu.request_adapter_sync(power_preference='high-performance')).is_cpu)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    return done.stdout.strip().splitlines()[-1:] == ["True"]


class Worker:
    """A fresh process that starts, warms up, then runs the block of each kind it is asked
    for. Requests and answers are JSON lines over its own pipes."""

    def __init__(self, method: str, dispatches: int, rounds: int, cpus: list[int] | None, warmup_seconds: float):
        self.process = subprocess.Popen(
            [sys.executable, "-c", CHILD, method, str(dispatches), str(rounds), str(PER_ROUND), str(warmup_seconds)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, set(cpus)))
        ADAPTER[:] = [self._answer()["ready"]]

    def block(self, kind: str) -> float:
        self.process.stdin.write(kind + "\n")
        self.process.stdin.flush()
        return self._answer()["us_per_dispatch"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()

    def _answer(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            self.process.wait()
            raise SystemExit(f"observer_effect: a process failed:\n{self.process.stderr.read()[-2000:]}")
        return json.loads(line)


def sample(design: str, method: str, dispatches: int, rounds: int, blocks: int, cpus: list[int] | None,
           warmup_seconds: float, plain_first: bool) -> tuple[float, float, float]:
    """(plain µs, measure µs, measure / plain) of one sample: medians of its blocks."""
    kinds = ("plain", "measure") if plain_first else ("measure", "plain")
    if design == "within":
        one = Worker(method, dispatches, rounds, cpus, warmup_seconds)
        workers = {kind: one for kind in kinds}
    else:
        workers = {kind: Worker(method, dispatches, rounds, cpus, warmup_seconds) for kind in kinds}
    got: dict[str, list[float]] = {"plain": [], "measure": []}
    try:
        for index in range(blocks):
            for kind in (kinds if index % 2 == 0 else kinds[::-1]):
                got[kind].append(workers[kind].block(kind))
    finally:
        for worker in set(workers.values()):
            worker.close()
    plain, measured = statistics.median(got["plain"]), statistics.median(got["measure"])
    return plain, measured, measured / plain


ADAPTER: list[str] = []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--design", choices=["within", "pairs"], default="within",
                        help="a sample is one process running both kinds of block, or two taking turns")
    parser.add_argument("--samples", "--pairs", type=int, default=8, help="samples per workload (default 8)")
    parser.add_argument("--blocks", type=int, default=4, help="blocks of each kind per sample")
    parser.add_argument("--rounds", type=int, default=30, help="timed rounds per block")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of calls before timing, in both kinds "
                        "(on the H200, pairs of processes timed right after start differed by up to 40%%)")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    per_sample = cpus_per_session(cpu_adapter_here()) if cpus else 0
    rows = []
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for label, (method, dispatches) in WORKLOADS.items():
        plain, measured, ratios = [], [], []
        for index in range(args.samples):
            placed = idlest_cpus(cpus, index, per_sample) if cpus else None
            got = sample(args.design, method, dispatches, args.rounds, args.blocks, placed, args.warmup,
                         plain_first=index % 2 == 0)
            plain.append(got[0])
            measured.append(got[1])
            ratios.append(got[2])
        row = {"workload": label, "design": args.design, "samples": args.samples, "blocks": args.blocks, "plain_us": statistics.median(plain),
               "measure_us": statistics.median(measured), "ratio_median": statistics.median(ratios),
               "ratios": ratios}
        rows.append(row)
        if len(rows) == 1:
            print(f"adapter: {ADAPTER[0]}; {started}")
        print(f"{label:28} plain {row['plain_us']:8.3f} µs/dispatch   measure() {row['measure_us']:8.3f}   "
              f"ratio (median of {args.samples}) x{row['ratio_median']:.3f} "
              f"[{min(ratios):.3f}-{max(ratios):.3f}]", flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"command": " ".join(sys.argv), "date": started, "adapter": ADAPTER[0], "rows": rows},
                      handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
