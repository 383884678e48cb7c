"""Counted mode's proof: A/A differences and injected host-side changes, across separate processes.

    python benchmarks/instruction_proof.py --processes 8 --out proof.json            # lavapipe
    python benchmarks/instruction_proof.py --processes 8 --impl dawn --out null.json  # Dawn's Null backend
    python benchmarks/instruction_proof.py --busy ...   # a neighbour keeps one core busy meanwhile

Each process is one ``pytest --dispatch-instructions`` session (relaunched under callgrind)
of a generated test file that counts five workloads of the paper's add-one kernel (a pass of
100 dispatches, one submit; 20 dispatches each with its own encoder and submit; 10 passes of
10 in one encoder; a 256-byte write then a pass of 50; 50 dispatches with a bind group set
before each).  The first ``--injected`` processes also count the first two with host work
injected: an extra ``set_bind_group`` every M dispatches (API calls) or an empty Python loop
of L turns per call (interpreter work), M and L sized from a first calibration session so
that they add 1%, 2% and 5%.  Every third process runs from a copy of the test folder at a
longer path with an unrelated environment variable set.  Then every pair of processes is
compared as the gate compares a run with its baseline, one run, no statistics: base_i
against base_j (A/A: any verdict but unchanged is a false alarm) and base_i against
variant_j (caught when regressed).  Prints the figures; --out keeps them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
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
SIZES = (0.01, 0.02, 0.05)

TEST_FILE = '''
import itertools, json, os
import pytest
import wgpu
from pytest_dispatch.workloads import AddOne

PLAN = json.loads(os.environ["PROOF_PLAN"])  # variant -> [workload, extra bind groups every M, loop turns]
SMALL = bytes(256)


@pytest.fixture(scope="module")
def kernel(gpu_device):
    return AddOne(gpu_device)


def run(kernel, dispatches, encoding, every, turns):
    device = kernel.device
    if encoding == "single_pass":
        encoder = device.create_command_encoder()
        compute = encoder.begin_compute_pass()
        compute.set_pipeline(kernel.pipeline)
        compute.set_bind_group(0, kernel.bind_group)
        for i in range(dispatches):
            if every and i % every == every - 1:
                compute.set_bind_group(0, kernel.bind_group)
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
            compute.set_bind_group(0, kernel.bind_group)
            if every and i % every == every - 1:
                compute.set_bind_group(0, kernel.bind_group)
            compute.dispatch_workgroups(kernel.workgroups)
            compute.end()
            device.queue.submit([encoder.finish()])
    for _ in itertools.repeat(None, turns):  # the same cost every turn (range's ints above 256 are allocated)
        pass


@pytest.mark.parametrize("variant", sorted(PLAN))
def test_variant(dispatch_meter, kernel, variant):
    workload, dispatches, encoding, every, turns = PLAN[variant]
    dispatch_meter.measure(run, kernel, dispatches, encoding, every, turns, name=variant)
'''


def session(folder: Path, plan: dict, impl: str, extra_env: dict[str, str], out: Path) -> dict[str, float]:
    """One counted session: instructions per call by variant."""
    env = {**os.environ, "PROOF_PLAN": json.dumps(plan), **extra_env}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--dispatch-instructions",
               f"--dispatch-json={out}", f"--gpu-impl={impl}", str(folder / "test_proof.py")]
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"session failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    document = json.loads(out.read_text())
    return {m["name"]: m["instructions"]["per_call"] for test in document["pytest_dispatch"]["tests"]
            for m in test["measurements"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=12)
    parser.add_argument("--impl", choices=("wgpu", "dawn"), default="wgpu",
                        help="dawn: wgpudawn's Null backend (WGPU_BACKEND_TYPE=Null)")
    parser.add_argument("--injected", type=int, default=4,
                        help="the first N processes also count the injected variants (the others: the bases only)")
    parser.add_argument("--busy", action="store_true", help="keep one core busy with a second process meanwhile")
    parser.add_argument("--tolerance", type=float, default=settings.INSTRUCTION_TOLERANCE)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
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
            # calibration: one extra set_bind_group per dispatch, 10,000 loop turns
            calibration = {f"{w}-{kind}": [w, *WORKLOADS[w], every, turns] for w in INJECTED
                           for kind, every, turns in (("base", 0, 0), ("api", 1, 0), ("python", 0, 10_000))}
            measured = session(near, calibration, args.impl, impl_env, Path(scratch) / "calibration.json")
            plan = {f"{w}-base": [w, n, enc, 0, 0] for w, (n, enc) in WORKLOADS.items()}
            for w in INJECTED:
                n, enc = WORKLOADS[w]
                base = measured[f"{w}-base"]
                per_bind = (measured[f"{w}-api"] - base) / n
                per_turn = (measured[f"{w}-python"] - base) / 10_000
                for size in SIZES:
                    every = max(1, round(per_bind / (size * base / n))) if per_bind > 0 else 0
                    plan[f"{w}-api+{size:.0%}"] = [w, n, enc, every, 0]
                    plan[f"{w}-python+{size:.0%}"] = [w, n, enc, 0, max(1, round(size * base / per_turn))]
            base_plan = {variant: spec for variant, spec in plan.items() if variant.endswith("base")}
            runs = []
            for index in range(args.processes):
                moved = index % 3 == 2
                extra = {**impl_env, **({"AN_UNRELATED_VARIABLE": "x" * (37 + index)} if moved else {})}
                counts = session(far if moved else near, plan if index < args.injected else base_plan, args.impl,
                                 extra, Path(scratch) / f"run{index}.json")
                runs.append({"moved": moved, "counts": counts})
                print(f"process {index + 1}/{args.processes}{' (moved, extra variable)' if moved else ''} "
                      f"({time.time() - started:.0f} s): "
                      + ", ".join(f"{k} {v:,.0f}" for k, v in counts.items() if k.endswith("base")), flush=True)
    finally:
        if neighbour is not None:
            neighbour.kill()
    report = judge(runs, plan, args.tolerance)
    report.update(impl=args.impl, busy=args.busy, processes=args.processes, seconds=round(time.time() - started),
                  tolerance=args.tolerance, plan=plan, runs=runs)
    for line in report["lines"]:
        print(line)
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))
    return 0


def judge(runs: list[dict], plan: dict, tolerance: float) -> dict:
    """Every ordered pair of distinct processes compared, A/A and injected."""
    lines = []
    aa_ratios: list[float] = []
    moved_ratios: list[float] = []
    caught: dict[str, list[bool]] = {}
    for (i, a), (j, b) in itertools.permutations(enumerate(runs), 2):
        for variant in b["counts"]:
            workload = variant.split("-")[0]
            base = a["counts"][f"{workload}-base"]
            ratio = b["counts"][variant] / base
            if variant.endswith("base"):
                if i < j:
                    aa_ratios.append(ratio)
                    if a["moved"] != b["moved"]:
                        moved_ratios.append(ratio)
            else:
                caught.setdefault(variant, []).append(ratio > 1 + tolerance)
    false_alarms = sum(1 for r in aa_ratios if not 1 / (1 + tolerance) <= r <= 1 + tolerance)
    worst = max(abs(r - 1) for r in aa_ratios)
    worst_moved = max((abs(r - 1) for r in moved_ratios), default=0.0)
    lines.append(f"A/A: {len(aa_ratios)} comparisons, largest difference {100 * worst:.3f}% "
                 f"({100 * worst_moved:.3f}% between a moved checkout with an extra variable and the others), "
                 f"{false_alarms} false alarms at the {100 * tolerance:g}% tolerance")
    for variant, hits in caught.items():
        lines.append(f"{variant}: caught {sum(hits)} of {len(hits)} ({100 * sum(hits) / len(hits):.0f}%)")
    return {"lines": lines, "aa_comparisons": len(aa_ratios), "aa_largest": worst, "aa_false_alarms": false_alarms,
            "moved_largest": worst_moved, "caught": {k: [sum(v), len(v)] for k, v in caught.items()}}


if __name__ == "__main__":
    sys.exit(main())
