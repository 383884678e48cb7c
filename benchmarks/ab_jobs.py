"""A/B jobs as a user runs them, in separate job processes: time per job, false alarms, power.

    python benchmarks/ab_jobs.py [--tests 5] [--jobs 12] [--aa-jobs 0] [--change 0.10] [--dispatches 20]
                                 [--alternate=--no-prestart] [--keep DIR] [-- ab arguments, e.g. --max-sessions 12]

In a temporary git repository, a suite of ``--tests`` tests, each measuring the AddOne kernel
(``--dispatches`` one-pass dispatches per call).  The base is the commit; the head is the work
tree, where the last test ("slow") spins on the host for ``--change`` times its measured time
per call (calibrated first by one pytest run with --dispatch-json).  Runs ``--jobs`` mixed jobs
(unchanged tests beside the slow one) and ``--aa-jobs`` A/A jobs (--base .), each as its own
``pytest-dispatch ab`` process with the default settings, and prints per job its seconds and
verdicts, then: seconds per job (median, max), false alarms among the unchanged comparisons,
and how often the change was caught.  ``--keep DIR`` keeps each job's ``--json`` outcome there
(job-N.json; benchmarks/futility_replay.py judges them again).  Exit 0 always: the figures are the result.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from pytest_dispatch.ab import placement

TEST_TEMPLATE = textwrap.dedent('''
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

''')
TEST_FUNCTION = textwrap.dedent('''
    def test_{name}(dispatch_meter, kernel):
        def work():
            kernel.single_pass(cost.DISPATCHES)
            spin(cost.EXTRA_US.get("{name}", 0.0))
        dispatch_meter.measure(work, per_round=2, name="{name}")
''')


def git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True, text=True).stdout


def write_cost(folder: Path, dispatches: int, extra_us: dict[str, float]) -> None:
    (folder / "cost.py").write_text(f"DISPATCHES = {dispatches}\nEXTRA_US = {extra_us!r}\n")


def make_project(root: Path, names: list[str], dispatches: int) -> Path:
    folder = root / "project"
    folder.mkdir()
    (folder / "test_suite.py").write_text(TEST_TEMPLATE + "".join(TEST_FUNCTION.format(name=n) for n in names))
    write_cost(folder, dispatches, {})
    git(folder, "init", "-q", "-b", "main")
    git(folder, "add", ".")
    git(folder, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "base")
    return folder


def per_call_us(folder: Path, name: str) -> float:
    """The median wall µs per call of one test's measurement, from one pytest run placed as a
    job places its workers (the idlest CPUs, as many as a session gets): unpinned beside a busy
    core, lavapipe read 607 µs a call where the pinned workers read about 133, and a "+10%"
    spin sized from it was +46% in the job."""
    out = folder.parent / "calibrate.json"
    cpus = None
    if hasattr(os, "sched_setaffinity"):
        count = placement.guessed_cpus_per_session()
        cpus = set(placement.idlest_cpus(sorted(os.sched_getaffinity(0)), 0, count))
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"test_suite.py::test_{name}",
                    f"--dispatch-json={out}"], cwd=folder, check=True, capture_output=True, text=True,
                   preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    (test,) = json.loads(out.read_text())["pytest_dispatch"]["tests"]
    (measurement,) = test["measurements"]
    return statistics.median(measurement["wall_us_per_call"])


def run_job(folder: Path, base: str, extra: list[str]) -> tuple[float, dict]:
    out = folder.parent / "ab.json"
    out.unlink(missing_ok=True)
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest_dispatch.cli", "ab", "--base", base, "--json", str(out),
                           *extra], cwd=folder, capture_output=True, text=True)
    seconds = time.perf_counter() - began
    if not out.exists():
        raise SystemExit(f"ab_jobs: the job wrote no outcome (exit {done.returncode}):\n{done.stdout[-3000:]}"
                         f"\n{done.stderr[-3000:]}")
    return seconds, json.loads(out.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=5, help="tests in the suite (the last one changes)")
    parser.add_argument("--jobs", type=int, default=12, help="mixed jobs: unchanged tests beside one changed")
    parser.add_argument("--aa-jobs", type=int, default=0, help="A/A jobs (--base .)")
    parser.add_argument("--change", type=float, default=0.10, help="the slow test's added time, a fraction")
    parser.add_argument("--dispatches", type=int, default=20, help="dispatches per call of every test")
    parser.add_argument("--alternate", metavar="ARGS", help="every second job adds these ab arguments (e.g. "
                        "--alternate=--no-prestart): the two arms share one calibration, and each arm's figures are printed")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep each job's outcome as DIR/job-N.json")
    parser.add_argument("ab_args", nargs="*", help="more pytest-dispatch ab arguments")
    args = parser.parse_args()
    arms = [("", args.ab_args)] + ([(args.alternate, args.ab_args + shlex.split(args.alternate))]
                                   if args.alternate else [])

    names = [f"t{i}" for i in range(args.tests - 1)] + ["slow"]
    with tempfile.TemporaryDirectory(prefix="ab-jobs-") as temp:
        folder = make_project(Path(temp), names, args.dispatches)
        cost = per_call_us(folder, "slow")
        extra_us = args.change * cost
        print(f"ab_jobs: {args.tests} tests of {args.dispatches} dispatches; slow: {cost:.1f} µs per call, "
              f"the head adds {extra_us:.1f} µs (+{args.change:.0%})", flush=True)
        tally = {label: Tally() for label, _ in arms}
        plan = [("mixed", "main")] * args.jobs + [("A/A", ".")] * args.aa_jobs
        for number, (kind, base) in enumerate(plan, 1):
            label, ab_args = arms[(number - 1) % len(arms)]
            write_cost(folder, args.dispatches, {"slow": extra_us} if kind == "mixed" else {})
            took, outcome = run_job(folder, base, ab_args)
            if args.keep:
                args.keep.mkdir(parents=True, exist_ok=True)
                (args.keep / f"job-{number}.json").write_text(json.dumps(outcome, indent=1))
            verdicts = {m["name"]: m for m in outcome["measurements"]}
            tally[label].add(took, verdicts, kind)
            shown = ", ".join(f"{n} {m['status']} x{(m['timing'] or {}).get('ratio') or float('nan'):.3f}"
                              f"/{(m['timing'] or {}).get('sessions', 0)}s" for n, m in verdicts.items())
            arm = f", {label}" if label else ""
            print(f"job {number}/{len(plan)} ({kind}{arm}): {took:.0f} s: {shown}", flush=True)
        print(f"adapter: {outcome['adapter']}")
        for label, arm in tally.items():
            if arm.seconds:
                arm.report(args.change, f"[{label or 'as given'}] " if len(arms) > 1 else "")
    return 0


class Tally:
    """One arm's jobs: seconds, false alarms, changes caught, and the spread of the sessions'
    log-ratios of unchanged measurements around each one's mean (pooled)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.unchanged = self.false_alarms = self.caught = self.changed = 0
        self.squares, self.freedom = 0.0, 0

    def add(self, seconds: float, verdicts: dict, kind: str) -> None:
        self.seconds.append(seconds)
        for name, measurement in verdicts.items():
            if kind == "mixed" and name == "slow":
                self.changed += 1
                self.caught += measurement["status"] == "regressed"
                continue
            self.unchanged += 1
            self.false_alarms += measurement["status"] in ("regressed", "improved")
            logs = [math.log(s["ratio"]) for s in measurement.get("sessions") or [] if s.get("ratio")]
            if len(logs) >= 2:
                mean = sum(logs) / len(logs)
                self.squares += sum((x - mean) ** 2 for x in logs)
                self.freedom += len(logs) - 1

    def report(self, change: float, prefix: str) -> None:
        print(f"{prefix}seconds per job: median {statistics.median(self.seconds):.0f}, max {max(self.seconds):.0f} "
              f"({len(self.seconds)} jobs)")
        print(f"{prefix}false alarms: {self.false_alarms} of {self.unchanged} unchanged comparisons")
        if self.freedom:
            print(f"{prefix}sessions' log-ratio sd, unchanged measurements pooled: "
                  f"{math.sqrt(self.squares / self.freedom):.4f} ({self.freedom} degrees of freedom)")
        if self.changed:
            print(f"{prefix}+{change:.0%} caught: {self.caught} of {self.changed}")


if __name__ == "__main__":
    sys.exit(main())
