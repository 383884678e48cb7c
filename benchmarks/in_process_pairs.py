"""What pairing achieves when both sides run in one process: A/A false alarms and power.

    python benchmarks/in_process_pairs.py [--aa 100] [--shifted 50] [--shift 0.10] [--busy-core]

Each trial is a fresh process: a device, the paper's kernel (a pass of DISPATCHES dispatches,
PER_ROUND calls a round), and two sides made of the same code; in shifted trials side B adds
host work before each call, sized from side A's own per-call time in that process so that B
costs (1 + shift) times A. Rounds are paired in turns of blocks (as an A/B job takes them) and
judged by pytest_dispatch.judgement.paired's sequential signed-rank engine at the gate's defaults (2%
tolerance, alpha 0.01 over all looks). The A/B job cannot do this today (its two versions run
in two processes, which differ by far more; docs/RESULTS.md §4): this measures the target.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import time

TRIAL = """
import json, math, statistics, sys, time
import wgpu
from pytest_dispatch.judgement import paired
from pytest_dispatch.measurement import meter
from pytest_dispatch.workloads import AddOne

shift, dispatches, per_round = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
device = wgpu.gpu.request_adapter_sync(power_preference="high-performance").request_device_sync()
kernel = AddOne(device)
sync_buffer = device.create_buffer(size=4, usage=wgpu.BufferUsage.COPY_SRC)
sync = lambda: device.queue.read_buffer(sync_buffer)

def spin(us):
    end = time.perf_counter() + us / 1e6
    while time.perf_counter() < end:
        pass

extra = [0.0, 0.0]

def round_of(side):
    start = time.perf_counter_ns(); sync(); empty = time.perf_counter_ns() - start
    start = time.perf_counter_ns()
    for _ in range(per_round):
        spin(extra[side])
        kernel.single_pass(dispatches)
    sync()
    return time.perf_counter_ns() - start, empty, per_round

def turn(side, settle=1, block=5):
    rounds = [round_of(side) for _ in range(settle + block)][settle:]
    return (int(statistics.median(r[0] for r in rounds)), int(statistics.median(r[1] for r in rounds)), per_round)

for _ in range(5):
    round_of(0)
per_call = statistics.median(meter.per_call_us(*zip(*[round_of(0) for _ in range(15)])))
extra[1] = shift * per_call
verdict = paired.run_sequential(turn, paired.ChangeQuestion(0.02), paired.Design())
print(json.dumps({"status": verdict.status, "ratio": verdict.ratio, "low": verdict.low, "high": verdict.high,
                  "pairs": verdict.pairs, "seconds": verdict.seconds, "per_call_us": per_call}))
"""


def trial(shift: float, dispatches: int, per_round: int) -> dict:
    done = subprocess.run([sys.executable, "-c", TRIAL, str(shift), str(dispatches), str(per_round)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"in_process_pairs: a trial failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aa", type=int, default=100, help="A/A trials")
    parser.add_argument("--shifted", type=int, default=50, help="trials with side B slower by --shift")
    parser.add_argument("--shift", type=float, default=0.10)
    parser.add_argument("--dispatches", type=int, default=100)
    parser.add_argument("--per-round", type=int, default=4)
    parser.add_argument("--busy-core", action="store_true", help="keep one core busy with a second process")
    parser.add_argument("--json", help="write every trial here")
    args = parser.parse_args()
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy_core else None
    trials = []
    started = time.time()
    try:
        for kind, count, shift in (("aa", args.aa, 0.0), ("shifted", args.shifted, args.shift)):
            for index in range(count):
                trials.append({"kind": kind, **trial(shift, args.dispatches, args.per_round)})
                if (index + 1) % 10 == 0:
                    print(f"{kind}: {index + 1}/{count} trials ({time.time() - started:.0f} s)", flush=True)
    finally:
        if neighbour is not None:
            neighbour.kill()
    for kind in ("aa", "shifted"):
        rows = [t for t in trials if t["kind"] == kind]
        if rows:
            tally = collections.Counter(t["status"] for t in rows)
            ratios = sorted(t["ratio"] for t in rows)
            pairs = sorted(t["pairs"] for t in rows)
            print(f"{kind:8} {len(rows):4d} trials: " + ", ".join(f"{n} {s}" for s, n in tally.most_common())
                  + f"; ratio median x{ratios[len(ratios) // 2]:.3f} (10-90%: x{ratios[len(ratios) // 10]:.3f}-"
                    f"x{ratios[(9 * len(ratios)) // 10]:.3f}); pairs median {pairs[len(pairs) // 2]}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                       "trials": trials}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
