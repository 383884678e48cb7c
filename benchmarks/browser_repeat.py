"""The page examples in fresh browser processes: are the counts exact, and how far apart is time?

Runs ``pytest examples/browser --dispatch-json`` ``--runs`` times, each a new pytest process with a
new Chromium, then prints, per measurement, whether its counts (per call, by kind and by kernel)
were identical in every process, and the spread of its median wall µs per dispatch across the
processes (the A/A spread a comparison of separate runs would face: the geometric sd of the
medians, and the largest over the smallest).

    python benchmarks/browser_repeat.py [--runs 10] [--out DIR] [-- extra pytest arguments]
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_once(out: Path, index: int, extra: list[str]) -> Path:
    path = out / f"run-{index:02d}.json"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "examples" / "browser"),
               f"--dispatch-json={path}", *extra]
    finished = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    (out / f"run-{index:02d}.log").write_text(finished.stdout + finished.stderr)
    if finished.returncode != 0 or not path.exists():
        raise SystemExit(f"browser_repeat: run {index} failed (exit {finished.returncode}); see {out}/run-{index:02d}.log")
    return path


def measurements(path: Path) -> dict[str, dict]:
    document = json.loads(path.read_text())
    return {f"{test['nodeid']}::{m['name']}": m
            for test in document["pytest_dispatch"]["tests"] for m in test["measurements"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None, help="keep each run's JSON and log here")
    parser.add_argument("extra", nargs="*", help="more pytest arguments (after --)")
    options = parser.parse_args()
    out = options.out or Path(tempfile.mkdtemp(prefix="browser-repeat-"))
    out.mkdir(parents=True, exist_ok=True)
    runs = [measurements(run_once(out, index, options.extra)) for index in range(options.runs)]
    gpu = json.loads((out / "run-00.json").read_text())["machine_info"].get("gpu") or {}
    print(f"command: python benchmarks/browser_repeat.py --runs {options.runs}"
          + (" -- " + " ".join(options.extra) if options.extra else ""))
    print(f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; CPUs: {os.cpu_count()}; "
          f"raw: {out}")
    print(f"adapter: {gpu.get('adapter_name')} ({gpu.get('adapter_type')}) via {gpu.get('backend')}, "
          f"{gpu.get('implementation')} {gpu.get('implementation_version')}")
    exact = True
    print(f"{'measurement':72} {'counts':>9} {'disp':>5}  median µs/dispatch per process: gsd, max/min")
    for key in sorted(runs[0]):
        shapes = [(m.get("calls_per_call"), m.get("by_kernel_per_call")) for m in (run.get(key) for run in runs) if m]
        same = len(shapes) == len(runs) and all(shape == shapes[0] for shape in shapes)
        exact &= same
        medians = [statistics.median(run[key]["wall_us_per_call"]) / max(run[key]["dispatches_per_call"], 1)
                   for run in runs if key in run and run[key].get("wall_us_per_call")]
        medians = [m for m in medians if m > 0]
        spread = ""
        if len(medians) > 1:
            logs = [math.log(m) for m in medians]
            spread = f"{math.exp(statistics.stdev(logs)):.3f}, {max(medians) / min(medians):.2f}x " \
                     f"({min(medians):.1f}-{max(medians):.1f})"
        dispatches = runs[0][key].get("dispatches_per_call")
        print(f"{key[-72:]:72} {'identical' if same else 'DIFFER':>9} {dispatches!s:>5}  {spread}")
    print(f"counts identical in all {len(runs)} processes for every measurement: {'yes' if exact else 'NO'}")
    return 0 if exact else 1


if __name__ == "__main__":
    raise SystemExit(main())
