"""Proof of the A/B gate on real measurements: false alarms and power, each trial a fresh job.

    python benchmarks/gate_proof.py OUT [--aa-trials 150] [--regression-trials 100] [--neighbour]

Two source trees are written under OUT/trees: ``base`` and ``head``.  Both have the same
tests (one measurement each: a pass of 100 dispatches of the paper's kernel after some
host work per call, put before the pass so it adds to the time serially); only the head's
``cost.py`` differs, adding host work to three of them.  The work is calibrated first
with one long job (many interleaved pairs) so that the head's measured ratio is +5%, +10%
and +20%; the ratios reached are printed.  Then every trial is one ``pytest-dispatch ab``
run, two fresh worker processes: A/A trials (``-k aa``: two unchanged measurements per
job) and regression trials (``-k reg``: the three sizes).  ``--neighbour`` keeps one core
busy with a second process for the whole proof.  Prints one table and writes
OUT/gate_proof.json with every trial's outcome.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from scipy import stats

SIZES = {"aa1": 0.0, "aa2": 0.0, "reg05": 0.05, "reg10": 0.10, "reg20": 0.20}
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


def write_tree(folder: Path, extra_us: dict[str, float], base_us: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test_proof.py").write_text(TEST_FILE)
    (folder / "cost.py").write_text(f"DISPATCHES = 100\nPER_ROUND = 2\nBASE_US = {base_us!r}\n"
                                    f"EXTRA_US = {json.dumps(extra_us)}\n")


def ab_job(trees: Path, out: Path, select: str, *extra: str) -> tuple[dict, float]:
    """One A/B job in fresh processes: its JSON outcome and wall seconds."""
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest_dispatch.cli", "ab", "--base", str(trees / "base"),
                           "--head", str(trees / "head"), "--json", str(out), *extra, "--",
                           "-q", "-p", "no:randomly", "-k", select, *PYTEST_EXTRA],
                          capture_output=True, text=True)
    seconds = time.monotonic() - start
    if not out.exists():
        raise SystemExit(f"gate_proof: the A/B job failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    outcome = json.loads(out.read_text())
    out.unlink()
    return outcome, seconds


def by_size(outcome: dict) -> dict[str, dict]:
    return {m["nodeid"].split("[", 1)[1].rstrip("]"): m for m in outcome["measurements"]}


def calibrate(trees: Path, out: Path, base_us: float, pairs: int) -> tuple[dict[str, float], dict[str, float]]:
    """Host work per size that makes the head's measured ratio the target, from long jobs."""
    write_tree(trees / "head", {name: 0.0 for name in SIZES}, base_us)
    outcome, _ = ab_job(trees, out, "aa1", "--max-pairs", str(pairs), "--max-time", "120")
    per_call = by_size(outcome)["aa1"]["timing"]["a_median"]
    extra = {name: per_call * target for name, target in SIZES.items()}
    for _ in range(2):
        write_tree(trees / "head", extra, base_us)
        outcome, _ = ab_job(trees, out, "reg", "--max-pairs", str(pairs), "--max-time", "120", "--threshold", "0.5")
        reached = {name: by_size(outcome)[name]["timing"]["ratio"] - 1 for name in SIZES if name.startswith("reg")}
        for name, ratio in reached.items():
            if ratio > 0:
                extra[name] *= SIZES[name] / ratio
    write_tree(trees / "head", extra, base_us)
    outcome, _ = ab_job(trees, out, "reg", "--max-pairs", str(pairs), "--max-time", "120", "--threshold", "0.5")
    reached = {name: by_size(outcome)[name]["timing"]["ratio"] for name in SIZES if name.startswith("reg")}
    return extra, reached


def upper_bound(failures: int, trials: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound of a rate."""
    return 1.0 if failures >= trials else float(stats.beta.ppf(confidence, failures + 1, trials - failures))


PYTEST_EXTRA: list[str] = []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--aa-trials", type=int, default=150, help="A/A jobs (two comparisons each)")
    parser.add_argument("--regression-trials", type=int, default=100, help="jobs of +5/10/20%% (one of each)")
    parser.add_argument("--base-us", type=float, default=0.0, help="host work per call on both sides")
    parser.add_argument("--calibration-pairs", type=int, default=1000)
    parser.add_argument("--neighbour", action="store_true", help="keep one core busy with a second process")
    parser.add_argument("--pytest-arg", action="append", default=[], help="passed to the workers' pytest")
    args = parser.parse_args()
    PYTEST_EXTRA.extend(args.pytest_arg)
    out_dir = Path(args.out)
    trees = out_dir / "trees"
    write_tree(trees / "base", {name: 0.0 for name in SIZES}, args.base_us)
    scratch = out_dir / "job.json"
    neighbour = None
    if args.neighbour:
        neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        started = time.time()
        extra, reached = calibrate(trees, scratch, args.base_us, args.calibration_pairs)
        print(f"calibrated host work per call (µs): " + ", ".join(f"{k} {v:.1f}" for k, v in extra.items()
                                                                     if k.startswith("reg")), flush=True)
        print("head/base ratio reached (long job): " + ", ".join(f"{k} x{v:.3f}" for k, v in reached.items()),
              flush=True)
        trials = []
        for kind, count, select in (("aa", args.aa_trials, "aa"), ("regression", args.regression_trials, "reg")):
            for index in range(count):
                outcome, seconds = ab_job(trees, scratch, select)
                trials.append({"kind": kind, "seconds": seconds, "measurements": outcome["measurements"]})
                if (index + 1) % 10 == 0:
                    print(f"{kind}: {index + 1}/{count} jobs ({time.time() - started:.0f} s)", flush=True)
    finally:
        if neighbour is not None:
            neighbour.kill()
    summary = summarise(trials)
    document = {"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "neighbour": args.neighbour, "calibrated_extra_us": extra, "calibrated_ratio": reached,
                "summary": summary, "trials": trials}
    (out_dir / "gate_proof.json").write_text(json.dumps(document, indent=1))
    return 0


def summarise(trials: list[dict]) -> dict:
    rows = {}
    for size in SIZES:
        outcomes = [m for t in trials for m in t["measurements"] if m["nodeid"].endswith(f"[{size}]")]
        if not outcomes:
            continue
        statuses = [m["status"] for m in outcomes]
        pairs = sorted(m["timing"]["pairs"] for m in outcomes if m["timing"])
        seconds = sorted(m["timing"]["seconds"] for m in outcomes if m["timing"])
        rows[size] = {"comparisons": len(statuses), **{s: statuses.count(s) for s in set(statuses)},
                      "median_pairs": pairs[len(pairs) // 2] if pairs else None,
                      "median_seconds_of_pairs": seconds[len(seconds) // 2] if seconds else None}
    aa = [m for t in trials if t["kind"] == "aa" for m in t["measurements"]]
    false_alarms = sum(m["status"] == "regressed" for m in aa)
    job_seconds = sorted(t["seconds"] / max(len(t["measurements"]), 1) for t in trials)
    summary = {"sizes": rows, "aa_comparisons": len(aa), "aa_false_alarms": false_alarms,
               "aa_false_alarm_upper_95": upper_bound(false_alarms, len(aa)) if aa else None,
               "median_job_seconds_per_gated_test": job_seconds[len(job_seconds) // 2] if job_seconds else None}
    print(f"{'measurement':12} {'jobs':>5} {'regressed':>9} {'improved':>8} {'unchanged':>9} {'inconcl.':>8} "
          f"{'pairs (median)':>14} {'s of pairs':>10}")
    for size, row in rows.items():
        print(f"{size:12} {row['comparisons']:5d} {row.get('regressed', 0):9d} {row.get('improved', 0):8d} "
              f"{row.get('unchanged', 0):9d} {row.get('inconclusive', 0):8d} {row['median_pairs'] or 0:14d} "
              f"{row['median_seconds_of_pairs'] or 0:10.1f}")
    if aa:
        print(f"A/A false alarms: {false_alarms} of {len(aa)} (95% upper bound "
              f"{100 * summary['aa_false_alarm_upper_95']:.2f}%)")
    print(f"wall time of a job per gated test (median, workers' start included): "
          f"{summary['median_job_seconds_per_gated_test']:.1f} s")
    return summary


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
