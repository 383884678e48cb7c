"""Counted mode's proof: A/A differences and injected host-side changes, across separate processes.

    python benchmarks/instruction_proof.py --bases 20 --out proof.json              # lavapipe
    python benchmarks/instruction_proof.py --bases 20 --impl dawn --out null.json   # Dawn's Null backend
    python benchmarks/instruction_proof.py --busy --jobs 2 ...   # a neighbour keeps one core busy; 2 sessions at once

Each process is one ``pytest --dispatch-instructions`` session (relaunched under callgrind)
of one generated test file that counts five workloads of the paper's add-one kernel, the same
five tests in every process, as a gate compares one test command's runs: a pass of 100
dispatches, one submit (``pass``); 20 dispatches each with its own encoder and submit
(``seq``); 10 passes of 10 in one encoder (``passes``); a 256-byte write then a pass of 50
(``write``); 50 dispatches with a bind group set before each (``bind``).

``--bases`` processes run the code unchanged; every third of them from a copy of the test
file at a longer path with an unrelated environment variable set.  Six more processes each
change the code of two tests, as a commit would: ``pass`` and ``seq`` get host work injected,
N redundant ``set_bind_group`` calls per call, each where the pass sets its bind group (API
calls), or an empty Python loop of L turns per call (interpreter work), N and L sized from a
first calibration session so that they add 1%, 2% and 5% (the size each change measured is
printed beside it); their other three tests are unchanged neighbours of a change.  Then every pair
is compared as the gate compares a run with its baseline, one run against one run, no
statistics: base against base, per test (A/A: any verdict but unchanged is a false alarm),
a changed process's unchanged tests against every base (neighbours: the same), and each
injected test against every base (caught when regressed).  Prints the figures; --out keeps them.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_dispatch import settings  # noqa: E402

# dispatches a call, encoding; host changes are injected into the first two
WORKLOADS = {"pass": (100, "single_pass"), "seq": (20, "per_dispatch"), "passes": (100, "passes_of_10"),
             "write": (50, "write_then_pass"), "bind": (50, "bind_each")}
INJECTED = ("pass", "seq")
CALIBRATION_BINDS = 100  # extra set_bind_group calls a call, to price one
SIZES = (0.01, 0.02, 0.05)
KINDS = ("api", "python")

TEST_FILE = '''
import itertools, json, os
import pytest
import wgpu
from pytest_dispatch.workloads import AddOne

PLAN = json.loads(os.environ["PROOF_PLAN"])  # test -> [dispatches, encoding, extra set_bind_group calls, loop turns]
ROUNDS = json.loads(os.environ.get("PROOF_ROUNDS", "null"))  # None: measure's default
SMALL = bytes(256)


@pytest.fixture(scope="module")
def kernel(gpu_device):
    return AddOne(gpu_device)


def run(kernel, dispatches, encoding, extra, turns):
    device = kernel.device
    if encoding == "single_pass":
        encoder = device.create_command_encoder()
        compute = encoder.begin_compute_pass()
        compute.set_pipeline(kernel.pipeline)
        for _ in range(1 + extra):  # before the first dispatch: the first set again mid-pass cost
            compute.set_bind_group(0, kernel.bind_group)  # +7% of the call on Null, not its price
        for i in range(dispatches):
            compute.dispatch_workgroups(kernel.workgroups)
        compute.end()
        device.queue.submit([encoder.finish()])
    elif encoding == "passes_of_10":
        encoder = device.create_command_encoder()
        for first in range(0, dispatches, 10):
            compute = encoder.begin_compute_pass()
            compute.set_pipeline(kernel.pipeline)
            compute.set_bind_group(0, kernel.bind_group)
            for i in range(first, first + 10):
                compute.dispatch_workgroups(kernel.workgroups)
            compute.end()
        device.queue.submit([encoder.finish()])
    elif encoding in ("write_then_pass", "bind_each"):
        if encoding == "write_then_pass":
            device.queue.write_buffer(kernel.buffer, 0, SMALL)
        encoder = device.create_command_encoder()
        compute = encoder.begin_compute_pass()
        compute.set_pipeline(kernel.pipeline)
        for i in range(dispatches):
            if encoding == "bind_each" or i == 0:
                compute.set_bind_group(0, kernel.bind_group)
            compute.dispatch_workgroups(kernel.workgroups)
        compute.end()
        device.queue.submit([encoder.finish()])
    else:
        for i in range(dispatches):
            encoder = device.create_command_encoder()
            compute = encoder.begin_compute_pass()
            compute.set_pipeline(kernel.pipeline)
            for _ in range(1 + extra // dispatches + (i < extra % dispatches)):
                compute.set_bind_group(0, kernel.bind_group)
            compute.dispatch_workgroups(kernel.workgroups)
            compute.end()
            device.queue.submit([encoder.finish()])
    for _ in itertools.repeat(None, turns):  # the same cost every turn (range's ints above 256 are allocated)
        pass


@pytest.mark.parametrize("test", list(PLAN))
def test_workload(dispatch_meter, kernel, test):
    dispatches, encoding, extra, turns = PLAN[test]
    dispatch_meter.measure(run, kernel, dispatches, encoding, extra, turns, name=test,
                           **({"rounds": ROUNDS} if ROUNDS else {}))
'''


def session(folder: Path, plan: dict, impl: str, extra_env: dict[str, str], out: Path,
            rounds: int | None = None) -> dict[str, float]:
    """One counted session: instructions per call by test."""
    env = {**os.environ, "PROOF_PLAN": json.dumps(plan), "PROOF_ROUNDS": json.dumps(rounds), **extra_env}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--dispatch-instructions",
               f"--dispatch-json={out}", f"--gpu-impl={impl}", str(folder / "test_proof.py")]
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"session failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    document = json.loads(out.read_text())
    return {m["name"]: m["instructions"]["per_call"] for test in document["pytest_dispatch"]["tests"]
            for m in test["measurements"]}


def unchanged_plan() -> dict[str, list]:
    return {test: [dispatches, encoding, 0, 0] for test, (dispatches, encoding) in WORKLOADS.items()}


def injections(calibrated: dict[str, float]) -> dict[str, dict[str, list]]:
    """variant ("pass-api+1%") -> the plan entry that adds that much to its test, sized from a
    calibration session (CALIBRATION_BINDS extra set_bind_group calls; 10,000 loop turns)."""
    variants = {}
    for test in INJECTED:
        dispatches, encoding = WORKLOADS[test]
        base = calibrated[f"{test}-base"]
        per_bind = (calibrated[f"{test}-api"] - base) / CALIBRATION_BINDS
        per_turn = (calibrated[f"{test}-python"] - base) / 10_000
        for size in SIZES:
            variants[f"{test}-api+{size:.0%}"] = [dispatches, encoding, max(1, round(size * base / per_bind)), 0]
            variants[f"{test}-python+{size:.0%}"] = [dispatches, encoding, 0, max(1, round(size * base / per_turn))]
    return variants


def changed_plans(variants: dict[str, list]) -> list[tuple[dict[str, str], dict[str, list]]]:
    """Six processes' plans: each changes pass and seq (the other kind of change for seq)."""
    plans = []
    for size in SIZES:
        for kind, other in (KINDS, KINDS[::-1]):
            injected = {"pass": f"pass-{kind}+{size:.0%}", "seq": f"seq-{other}+{size:.0%}"}
            plan = unchanged_plan()
            for test, variant in injected.items():
                plan[test] = variants[variant]
            plans.append((injected, plan))
    return plans


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bases", type=int, default=20, help="processes of the unchanged code")
    parser.add_argument("--impl", choices=("wgpu", "dawn"), default="wgpu",
                        help="dawn: wgpudawn's Null backend (WGPU_BACKEND_TYPE=Null)")
    parser.add_argument("--no-changes", action="store_true", help="only the unchanged processes (A/A)")
    parser.add_argument("--busy", action="store_true", help="keep one core busy with a second process meanwhile")
    parser.add_argument("--jobs", type=int, default=1, help="sessions run at once (counts do not depend on it)")
    parser.add_argument("--tolerance", type=float, default=settings.INSTRUCTION_TOLERANCE)
    parser.add_argument("--rounds", type=int, help="each measurement's rounds (its call budget is rounds x 5): "
                        "the measure default cuts the windows of write and bind; 100 gives every test the rules' "
                        "windows (the budget the report's line under a cut row asks for)")
    parser.add_argument("--out", type=Path, help="the figures as JSON; each process's counts are appended to "
                        "OUT.runs.jsonl as it ends, so a cut run can still be judged (--judge)")
    parser.add_argument("--judge", type=Path, metavar="RUNS_JSONL", help="only judge the processes saved there")
    args = parser.parse_args()
    if args.judge:
        runs = [json.loads(line) for line in args.judge.read_text().splitlines() if line.strip()]
        print("\n".join(judge(runs, args.tolerance)["lines"]))
        return 0
    progress = args.out.with_suffix(".runs.jsonl") if args.out else None
    sessions = args.out.with_suffix(".sessions") if args.out else None  # each session's --dispatch-json
    if progress:
        progress.write_text("")
        sessions.mkdir(exist_ok=True)
    impl_env = {"WGPU_BACKEND_TYPE": "Null"} if args.impl == "dawn" else {}
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy else None
    started = time.time()
    try:
        with tempfile.TemporaryDirectory(prefix="proof-") as scratch:
            near = Path(scratch) / "a"
            far = Path(scratch) / "a-checkout-at-a-much-longer-path" / "with" / "more" / "folders"
            for folder in (near, far):
                folder.mkdir(parents=True)
                (folder / "test_proof.py").write_text(TEST_FILE)
            calibration = {f"{test}-{kind}": [*WORKLOADS[test], extra, turns] for test in INJECTED
                           for kind, extra, turns in (("base", 0, 0), ("api", CALIBRATION_BINDS, 0),
                                                      ("python", 0, 10_000))}
            variants = injections(session(near, calibration, args.impl, impl_env, Path(scratch) / "calibration.json",
                                          args.rounds))
            jobs = [{"kind": "base", "moved": index % 3 == 2, "plan": unchanged_plan(), "injected": {}}
                    for index in range(args.bases)]
            if not args.no_changes:
                jobs += [{"kind": "changed", "moved": False, "plan": plan, "injected": injected}
                         for injected, plan in changed_plans(variants)]

            def run(index: int) -> dict:
                job = jobs[index]
                extra = {**impl_env, **({"AN_UNRELATED_VARIABLE": "x" * (37 + index)} if job["moved"] else {})}
                counts = session(far if job["moved"] else near, job["plan"], args.impl, extra,
                                 Path(scratch) / f"run{index}.json", args.rounds)
                label = "moved, extra variable" if job["moved"] else ", ".join(job["injected"].values()) or "base"
                print(f"process {index + 1}/{len(jobs)} ({label}) ({time.time() - started:.0f} s): "
                      + ", ".join(f"{k} {v:,.0f}" for k, v in counts.items()), flush=True)
                result = {**{k: v for k, v in job.items() if k != "plan"}, "counts": counts}
                if progress:
                    shutil.copy(Path(scratch) / f"run{index}.json", sessions / f"run{index + 1}.json")
                    with progress.open("a") as saved:
                        saved.write(json.dumps(result) + "\n")
                return result

            with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
                runs = list(pool.map(run, range(len(jobs))))
    finally:
        if neighbour is not None:
            neighbour.kill()
    report = judge(runs, args.tolerance)
    report.update(impl=args.impl, busy=args.busy, rounds=args.rounds, seconds=round(time.time() - started),
                  tolerance=args.tolerance, variants=variants, runs=runs)
    for line in report["lines"]:
        print(line)
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))
    return 0


def judge(runs: list[dict], tolerance: float) -> dict:
    """Base against base (A/A), a changed process's other tests against every base (neighbours),
    and each injected test against every base (caught)."""
    bases = [run for run in runs if run["kind"] == "base"]
    changed = [run for run in runs if run["kind"] == "changed"]
    aa = [(test, b["counts"][test] / a["counts"][test], a["moved"] != b["moved"])
          for a, b in itertools.combinations(bases, 2) for test in WORKLOADS]
    neighbours = [(test, c["counts"][test] / a["counts"][test]) for c in changed for a in bases
                  for test in WORKLOADS if test not in c["injected"]]
    caught: dict[str, list[bool]] = {}
    measured: dict[str, list[float]] = {}  # what each change added, against every base: its real size
    for c in changed:
        for test, variant in c["injected"].items():
            ratios = [c["counts"][test] / a["counts"][test] for a in bases]
            caught.setdefault(variant, []).extend(ratio > 1 + tolerance for ratio in ratios)
            measured.setdefault(variant, []).extend(ratios)

    def alarm(ratio: float) -> bool:
        return not 1 / (1 + tolerance) <= ratio <= 1 + tolerance

    def summary(label: str, ratios: list[float]) -> str:
        if not ratios:
            return f"{label}: none"
        worst = max(abs(r - 1) for r in ratios)
        over = sum(abs(r - 1) > 0.001 for r in ratios)
        return (f"{label}: {len(ratios)} comparisons, largest difference {100 * worst:.3f}%, "
                f"{over} over 0.1%, {sum(map(alarm, ratios))} false alarms at the {100 * tolerance:g}% tolerance")

    lines = [summary("A/A", [r for _, r, _ in aa]),
             summary("A/A, a moved checkout with an extra variable against the others", [r for _, r, m in aa if m]),
             summary("neighbours of a change", [r for _, r in neighbours])]
    for test in WORKLOADS:
        ratios = [r for t, r, _ in aa if t == test]
        if ratios:
            lines.append(f"  {test}: A/A largest {100 * max(abs(r - 1) for r in ratios):.3f}%")
    for variant, hits in sorted(caught.items()):
        size = statistics.median(measured[variant]) - 1
        lines.append(f"{variant} (measured {100 * size:+.2f}%): caught {sum(hits)} of {len(hits)} "
                     f"({100 * sum(hits) / len(hits):.0f}%)")
    for kind in KINDS:  # the same change in either test: the trials of one size of one kind of change
        for size in SIZES:
            hits = [hit for test in INJECTED for hit in caught.get(f"{test}-{kind}+{size:.0%}", [])]
            if hits:
                lines.append(f"+{size:.0%} {kind} work, pass and seq: caught {sum(hits)} of {len(hits)} "
                             f"({100 * sum(hits) / len(hits):.0f}%)")
    return {"lines": lines, "aa_comparisons": len(aa), "aa_largest": max((abs(r - 1) for _, r, _ in aa), default=0),
            "aa_false_alarms": sum(alarm(r) for _, r, _ in aa), "neighbour_comparisons": len(neighbours),
            "neighbour_false_alarms": sum(alarm(r) for _, r in neighbours),
            "caught": {k: [sum(v), len(v)] for k, v in caught.items()},
            "measured_size": {k: statistics.median(v) - 1 for k, v in measured.items()}}


if __name__ == "__main__":
    sys.exit(main())
