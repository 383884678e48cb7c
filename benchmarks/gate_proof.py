"""Proof of the A/B gate on real measurements: false alarms and power, each trial a fresh job.

    python benchmarks/gate_proof.py OUT [--aa-trials 150] [--regression-trials 100] [--neighbour]

Two source trees are written under OUT/trees: ``base`` and ``head``.  Both have the same
tests (one measurement each: a pass of 100 dispatches of the paper's kernel after some
host work per call before the pass); only the head's ``cost.py`` differs, adding host work
to some of them.  The work is calibrated first from the time per call of one long job (many
interleaved pairs) to add 5%, 10% and 20%; the ratios it reaches are measured, by a second
long job and in the trials (where the GPU is the bottleneck, part of the host work overlaps
the GPU's: on the H200, 10% of the time per call reached x1.064).  Every trial is one
``pytest-dispatch ab`` run, two fresh worker processes: A/A trials (``-k aa``: ``--aa-per-job`` unchanged
measurements), regression trials (``-k reg``: the three sizes) and mixed trials (the
unchanged ones and 4 at +10% in one job, as in a real suite, where most tests are unchanged
and the correction across the job is strict).  ``--neighbour`` keeps one core
busy with a second process for the whole proof.  Prints one table and writes
OUT/gate_proof.json with every trial's outcome.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gzip
import json
import math
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
from scipy import stats

# One job measures every size it selects, in the same sessions: --aa-per-job unchanged
# measurements per A/A job, 4 of each regression size per regression job.
REGRESSIONS = {f"reg{size:02d}{copy}": size / 100 for size in (5, 10, 20) for copy in "abcd"}
AA_PER_JOB = 12
SIZES: dict[str, float] = {}


def set_aa_per_job(count: int) -> None:
    SIZES.clear()
    SIZES.update({**{f"aa{i:02d}": 0.0 for i in range(1, count + 1)}, **REGRESSIONS})


set_aa_per_job(AA_PER_JOB)
TEST_FILE = '''
import time
import pytest
import cost
from pytest_dispatch.workloads import AddOne


@pytest.fixture(scope="module")
def kernel(gpu_device):
    return AddOne(gpu_device)


def spin(us):
    end = time.perf_counter() + us / 1e6
    while time.perf_counter() < end:
        pass


@pytest.mark.parametrize("size", cost.EXTRA_US)
def test_step(dispatch_meter, kernel, size):
    extra = cost.EXTRA_US[size] + cost.BASE_US

    def step():
        spin(extra)  # host work before the pass: it adds to the time per call serially
        kernel.single_pass(cost.DISPATCHES)

    dispatch_meter.measure(step, per_round=cost.PER_ROUND, name="step")
'''


WORKLOAD = [100, 2]  # dispatches per call, calls per round (--workload)


def write_tree(folder: Path, extra_us: dict[str, float], base_us: float, dispatches: int | None = None,
               per_round: int | None = None) -> None:
    dispatches, per_round = dispatches or WORKLOAD[0], per_round or WORKLOAD[1]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test_proof.py").write_text(TEST_FILE)
    (folder / "cost.py").write_text(f"DISPATCHES = {dispatches}\nPER_ROUND = {per_round}\nBASE_US = {base_us!r}\n"
                                    f"EXTRA_US = {json.dumps(extra_us)}\n")


def ab_job(trees: Path, out: Path, select: str, *extra: str, cpus: set[int] | None = None) -> tuple[dict, float]:
    """One A/B job in fresh processes (on ``cpus`` only, when given): its JSON outcome and wall seconds."""
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest_dispatch.cli", "ab", "--base", str(trees / "base"),
                           "--head", str(trees / "head"), "--json", str(out), *extra, "--",
                           "-q", "-p", "no:randomly", "-k", select, *PYTEST_EXTRA],
                          capture_output=True, text=True,
                          preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    seconds = time.monotonic() - start
    with open(out.parent / "jobs.log", "a") as log:  # the jobs' own lines (sessions, CPUs), for diagnosis
        log.write(f"== {select} {' '.join(extra)}\n{done.stdout}{done.stderr}")
    if not out.exists():
        raise SystemExit(f"gate_proof: the A/B job failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    outcome = json.loads(out.read_text())
    out.unlink()
    return outcome, seconds


def by_size(outcome: dict) -> dict[str, dict]:
    """Measurements by the size id of their test (aa01, reg10b, ...)."""
    return {m["nodeid"].split("[", 1)[1].rstrip("]"): m for m in outcome["measurements"]}


def extra_us(per_call_us: float) -> dict[str, float]:
    """Host work per call of every size: its fraction of the time per call."""
    return {name: per_call_us * target for name, target in SIZES.items()}


def calibrate(trees: Path, out: Path, base_us: float, pairs: int,
              reach: bool = True) -> tuple[dict[str, float], dict[str, float]]:
    """Host work per size from the time per call of a long A/A job (host work adds to it
    serially), and the head/base ratio that work then reaches, measured by a long A/B job
    (with ``reach``; else the trials' own ratios tell it)."""
    write_tree(trees / "head", {name: 0.0 for name in SIZES}, base_us)
    long_job = ("--pairs", str(pairs), "--sessions", "6", "--max-sessions", "6", "--threshold", "0.5")
    outcome, _ = ab_job(trees, out, "aa01", *long_job)
    extra = extra_us(by_size(outcome)["aa01"]["timing"]["a_median"])
    write_tree(trees / "head", extra, base_us)
    if not reach:
        return extra, {}
    outcome, _ = ab_job(trees, out, "reg05a or reg10a or reg20a", *long_job)
    reached = {name[:-1]: by_size(outcome)[name]["timing"]["ratio"] for name in by_size(outcome)}
    return extra, reached


def process_noise(trees: Path, out: Path, sessions: int, dispatches: int = 100, per_round: int = 2) -> dict:
    """One A/A job of many sessions: how much sessions (fresh worker pairs) differ, against
    the interval each session's pairs give (the round noise)."""
    write_tree(trees / "base", {name: 0.0 for name in SIZES}, 0.0, dispatches, per_round)
    write_tree(trees / "head", {name: 0.0 for name in SIZES}, 0.0, dispatches, per_round)
    outcome, _ = ab_job(trees, out, "aa01", "--sessions", str(sessions), "--max-sessions",
                        str(sessions))
    write_tree(trees / "base", {name: 0.0 for name in SIZES}, 0.0)
    per_session = by_size(outcome)["aa01"]["sessions"]
    estimates = [math.log(s["ratio"]) for s in per_session if s["ratio"]]
    widths = [(math.log(s["high"]) - math.log(s["low"])) / 2 for s in per_session if s["high"] and s["low"]]
    row = {"kind": "two processes", "dispatches": dispatches, "per_round": per_round,
           "sessions": len(estimates), "sd_between_sessions": float(np.std(estimates, ddof=1)),
           "median_half_width_within": float(np.median(widths)) if widths else None, "log_ratios": estimates}
    print(f"two processes ({dispatches} dispatches x {per_round} per round): sd of the sessions' log-ratios {row['sd_between_sessions']:.3f} over {len(estimates)} "
          f"A/A sessions; a session's own interval half-width (median) "
          f"{row['median_half_width_within'] or float('nan'):.3f}", flush=True)
    return row


IN_PROCESS = """
import json, math, sys, time
import wgpu
from pytest_dispatch.judgement import paired
from pytest_dispatch.workloads import AddOne
dispatches, per_round = int(sys.argv[1]), int(sys.argv[2])
device = wgpu.gpu.request_adapter_sync(power_preference="high-performance").request_device_sync()
kernels = [AddOne(device), AddOne(device)]  # A and B: the same code, in one process
sync_buffer = device.create_buffer(size=4, usage=wgpu.BufferUsage.COPY_SRC)
sync = lambda: device.queue.read_buffer(sync_buffer)
def take_round(side):
    start = time.perf_counter_ns(); sync(); empty = time.perf_counter_ns() - start
    start = time.perf_counter_ns()
    for _ in range(per_round):
        kernels[side].single_pass(dispatches)
    sync()
    return time.perf_counter_ns() - start, empty, per_round
for side in (0, 1):
    for _ in range(3):
        take_round(side)
design = paired.Design(first=30, batch=30, max_pairs=30)
verdict = paired.run_sequential(take_round, paired.ChangeQuestion(0.02), design)
print(json.dumps({"log_ratio": math.log(verdict.ratio), "half_width": (math.log(verdict.high) - math.log(verdict.low)) / 2}))
"""


def in_process_noise(processes: int, dispatches: int, per_round: int) -> dict:
    """The same A/A question with both sides in one process, each time a fresh process:
    what pairing achieves when there is no second process."""
    estimates, widths = [], []
    for _ in range(processes):
        done = subprocess.run([sys.executable, "-c", IN_PROCESS, str(dispatches), str(per_round)],
                              capture_output=True, text=True)
        data = json.loads(done.stdout.strip().splitlines()[-1])
        estimates.append(data["log_ratio"])
        widths.append(data["half_width"])
    row = {"kind": "in one process", "dispatches": dispatches, "per_round": per_round, "processes": processes,
           "sd_between_processes": float(np.std(estimates, ddof=1)), "median_half_width_within":
           float(np.median(widths)), "log_ratios": estimates}
    print(f"in one process ({dispatches} dispatches x {per_round} per round): sd of the processes' log-ratios "
          f"{row['sd_between_processes']:.3f} over {processes}; a process's own half-width (median) "
          f"{row['median_half_width_within']:.3f}", flush=True)
    return row


def upper_bound(failures: int, trials: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound of a rate."""
    return 1.0 if failures >= trials else float(stats.beta.ppf(confidence, failures + 1, trials - failures))


PYTEST_EXTRA: list[str] = []
STARTED = time.monotonic()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--aa-trials", type=int, default=25, help="A/A jobs (--aa-per-job comparisons each)")
    parser.add_argument("--regression-trials", type=int, default=10, help="jobs of +5/10/20%% (4 of each)")
    parser.add_argument("--mixed-trials", type=int, default=0, help="jobs of the A/A measurements and 4 of +10%% "
                                                                   "together (fewer worker starts per comparison)")
    parser.add_argument("--aa-per-job", type=int, default=AA_PER_JOB, help="unchanged measurements in a job")
    parser.add_argument("--base-us", type=float, default=0.0, help="host work per call on both sides")
    parser.add_argument("--workload", default="100:2", help="DISPATCHES:PER_ROUND of the trials' measurements")
    parser.add_argument("--calibration-pairs", type=int, default=100, help="per session of the six-session "
                                                                          "calibration jobs")
    parser.add_argument("--no-reach-job", action="store_true", help="calibrate from the time per call only; "
                        "the ratios reached are then the trials' own (their median, in the table)")
    parser.add_argument("--from-trials", nargs="+", metavar="TRIALS_JSONL",
                        help="only summarise the trials.jsonl (or .jsonl.gz) of earlier runs (a proof run in parts)")
    parser.add_argument("--neighbour", action="store_true", help="keep one core busy with a second process")
    parser.add_argument("--calibrated", help="a calibration file: read when it exists (no calibration), "
                                             "else written after calibrating")
    parser.add_argument("--parallel", type=int, default=1, help="jobs at once, each on its own share of the "
                                                                "CPUs; they share the GPU, which on one H200 made "
                                                                "every session noisy (docs/RESULTS.md, section 4)")
    parser.add_argument("--stop-after", type=float, default=math.inf, metavar="SECONDS",
                        help="start no job that the longest so far would carry past this many seconds "
                             "(a proof run in parts, under a time limit, loses no job half done)")
    parser.add_argument("--pytest-arg", action="append", default=[], help="passed to the workers' pytest")
    parser.add_argument("--noise-sessions", type=int, default=0,
                        help="first measure the process-pair effect: one A/A job of this many sessions, and as "
                             "many fresh processes pairing A/A within themselves, per --noise-workload")
    parser.add_argument("--noise-workload", action="append", default=[],
                        help="DISPATCHES:PER_ROUND of a noise measurement (default 100:2)")
    args = parser.parse_args()
    PYTEST_EXTRA.extend(args.pytest_arg)
    set_aa_per_job(args.aa_per_job)
    out_dir = Path(args.out)
    if args.from_trials:
        texts = [gzip.open(name, "rt").read() if name.endswith(".gz") else Path(name).read_text()
                 for name in args.from_trials]
        trials = [json.loads(line) for text in texts for line in text.splitlines() if line.strip()]
        out_dir.mkdir(parents=True, exist_ok=True)
        document = {"command": " ".join(sys.argv), "summary": summarise(trials), "trials": trials}
        (out_dir / "gate_proof.json").write_text(json.dumps(document, indent=1))
        return 0
    trees = out_dir / "trees"
    WORKLOAD[:] = [int(x) for x in args.workload.split(":")]
    write_tree(trees / "base", {name: 0.0 for name in SIZES}, args.base_us)
    scratch = out_dir / "job.json"
    neighbour = None
    if args.neighbour:
        neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    noise = []
    try:
        for workload in (args.noise_workload or ["100:2"]) if args.noise_sessions else []:
            dispatches, per_round = (int(x) for x in workload.split(":"))
            noise.append(process_noise(trees, scratch, args.noise_sessions, dispatches, per_round))
            noise.append(in_process_noise(args.noise_sessions, dispatches, per_round))
            (out_dir / "noise.json").write_text(json.dumps(noise, indent=1))
        if not (args.aa_trials or args.regression_trials or args.mixed_trials):
            (out_dir / "gate_proof.json").write_text(json.dumps({"command": " ".join(sys.argv), "noise": noise},
                                                                indent=1))
            return 0
        if args.calibrated and Path(args.calibrated).exists():
            calibration = json.loads(Path(args.calibrated).read_text())
            per_call = calibration.get("per_call_us") or calibration["extra_us"]["reg10a"] / SIZES["reg10a"]
            extra, reached = extra_us(per_call), calibration["ratio"]
            write_tree(trees / "head", extra, args.base_us)
        else:
            extra, reached = calibrate(trees, scratch, args.base_us, args.calibration_pairs,
                                       reach=not args.no_reach_job)
            if args.calibrated:
                Path(args.calibrated).write_text(json.dumps({"per_call_us": extra["reg10a"] / SIZES["reg10a"],
                                                             "extra_us": extra, "ratio": reached}, indent=1))
        print("calibrated host work per call (µs): " + ", ".join(f"{k} {v:.1f}" for k, v in extra.items()
                                                                     if k.startswith("reg")), flush=True)
        if reached:
            print("head/base ratio reached (long job): " + ", ".join(f"{k} x{v:.3f}" for k, v in reached.items()),
                  flush=True)
        jobs = [("aa", "aa")] * args.aa_trials + [("mixed", "aa or reg10")] * args.mixed_trials
        for index in range(args.regression_trials):  # spread among the A/A jobs: a proof cut short has both
            jobs.insert(round(index * len(jobs) / args.regression_trials) + index, ("regression", "reg"))
        trials = run_trials(trees, out_dir, jobs, args.parallel, STARTED + args.stop_after)
    finally:
        if neighbour is not None:
            neighbour.kill()
    summary = summarise(trials)
    document = {"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "neighbour": args.neighbour, "noise": noise, "calibrated_extra_us": extra, "calibrated_ratio": reached,
                "summary": summary, "trials": trials}
    (out_dir / "gate_proof.json").write_text(json.dumps(document, indent=1))
    return 0


def run_trials(trees: Path, out_dir: Path, jobs: list[tuple[str, str]], parallel: int,
               deadline: float = math.inf) -> list[dict]:
    """Every job, ``parallel`` at a time on disjoint shares of this process's CPUs, none
    started that would end after ``deadline`` (monotonic) at the pace of the longest so far;
    each trial is appended to OUT/trials.jsonl as it ends (kept when the proof is cut short)."""
    cpus = sorted(os.sched_getaffinity(0))
    shares = [set(cpus[index::parallel]) for index in range(parallel)] if parallel > 1 else [None]
    free: queue.Queue = queue.Queue()
    for index, share in enumerate(shares):
        free.put((index, share))
    trials, lock = [], threading.Lock()

    def one(number: int, kind: str, select: str) -> None:
        index, share = free.get()
        longest = max((t["seconds"] for t in trials), default=0.0)
        if time.monotonic() + longest > deadline:
            free.put((index, share))
            return
        try:
            outcome, seconds = ab_job(trees, out_dir / f"job{index}.json", select, cpus=share)
        finally:
            free.put((index, share))
        trial = {"kind": kind, "seconds": seconds, "parallel": parallel, "measurements": outcome["measurements"]}
        with lock:
            trials.append(trial)
            with open(out_dir / "trials.jsonl", "a") as log:
                log.write(json.dumps(trial) + "\n")
            print(f"{kind} job {number}: " + ", ".join(
                f"{m['status'][:5]} x{(m['timing'] or {}).get('ratio') or float('nan'):.3f}"
                for m in outcome["measurements"]) + f" ({seconds:.0f} s)", flush=True)

    with concurrent.futures.ThreadPoolExecutor(len(shares)) as pool:
        for future in [pool.submit(one, number + 1, kind, select) for number, (kind, select) in enumerate(jobs)]:
            future.result()
    return trials


def summarise(trials: list[dict]) -> dict:
    rows = {}
    for size in ("aa", "reg05", "reg10", "reg20"):
        outcomes = [m for t in trials for m in t["measurements"] if f"[{size}" in m["nodeid"]]
        if not outcomes:
            continue
        statuses = [m["status"] for m in outcomes]
        pairs = sorted(m["timing"]["pairs"] for m in outcomes if m["timing"])
        seconds = sorted(m["timing"]["seconds"] for m in outcomes if m["timing"])
        ratios = [m["timing"]["ratio"] for m in outcomes if m["timing"] and m["timing"].get("ratio")]
        rows[size] = {"comparisons": len(statuses), **{s: statuses.count(s) for s in set(statuses)},
                      "median_pairs": pairs[len(pairs) // 2] if pairs else None,
                      "median_seconds_of_pairs": seconds[len(seconds) // 2] if seconds else None,
                      "median_ratio": float(np.median(ratios)) if ratios else None}
    is_aa = lambda m: "[aa" in m["nodeid"]  # noqa: E731
    aa = [m for t in trials for m in t["measurements"] if is_aa(m)]
    false_alarms = sum(m["status"] == "regressed" for m in aa)
    aa_jobs = [t for t in trials if any(is_aa(m) for m in t["measurements"])]
    jobs_with_alarm = sum(any(is_aa(m) and m["status"] == "regressed" for m in t["measurements"]) for t in aa_jobs)
    job_seconds = sorted(t["seconds"] / max(len(t["measurements"]), 1) for t in trials)
    summary = {"sizes": rows, "aa_comparisons": len(aa), "aa_false_alarms": false_alarms,
               "aa_false_alarm_upper_95": upper_bound(false_alarms, len(aa)) if aa else None,
               "aa_jobs": len(aa_jobs), "aa_jobs_with_a_false_alarm": jobs_with_alarm,
               "aa_job_false_alarm_upper_95": upper_bound(jobs_with_alarm, len(aa_jobs)) if aa_jobs else None,
               "median_job_seconds_per_gated_test": job_seconds[len(job_seconds) // 2] if job_seconds else None}
    print(f"{'measurement':12} {'jobs':>5} {'regressed':>9} {'improved':>8} {'unchanged':>9} {'inconcl.':>8} "
          f"{'pairs (median)':>14} {'s of pairs':>10} {'ratio (median)':>14}")
    for size, row in rows.items():
        print(f"{size:12} {row['comparisons']:5d} {row.get('regressed', 0):9d} {row.get('improved', 0):8d} "
              f"{row.get('unchanged', 0):9d} {row.get('inconclusive', 0):8d} {row['median_pairs'] or 0:14d} "
              f"{row['median_seconds_of_pairs'] or 0:10.1f} {row['median_ratio'] or float('nan'):14.3f}")
    if aa:
        print(f"A/A false alarms: {false_alarms} of {len(aa)} comparisons (95% upper bound "
              f"{100 * summary['aa_false_alarm_upper_95']:.2f}%, as if independent); jobs with one: "
              f"{jobs_with_alarm} of {len(aa_jobs)} (95% upper bound {100 * summary['aa_job_false_alarm_upper_95']:.1f}%)")
    print(f"wall time of a job per gated test (median, workers' start included): "
          f"{summary['median_job_seconds_per_gated_test']:.1f} s")
    return summary


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
