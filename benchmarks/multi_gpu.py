"""pytest-xdist on a host with several identical GPUs: one GPU per worker vs taking turns.

Runs the examples (or other test paths) as pytest sessions of three kinds, alternating
them ``--repeat`` times so that machine drift cancels:

* ``serial``: one process, one GPU;
* ``spread``: ``-n 2``, each worker on its own GPU (the default);
* ``shared``: ``-n 2 --gpu-no-spread``, both workers on the first GPU, taking turns.

``spread`` and ``shared`` differ only in where the workers measure, so their wall times
show what the second GPU buys. It checks that every worker named the adapter it was
meant to, that every measurement's counts equal the serial run's, and compares each
measurement's median µs per dispatch with the serial run's (ratio, and whether the
95% CIs overlap). Writes ``OUT/multi_gpu.json``, the sessions' JSON and logs; with
``nvidia-smi``, the GPUs' utilisation sampled during a spread session.

    python benchmarks/multi_gpu.py OUT [--repeat 2] [--paths examples]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from pytest_dispatch.judgement import stats
from pytest_dispatch import storage
from pytest_dispatch.judgement.results import sequential_measurements

KINDS = {"serial": [], "spread": ["-n", "2"], "shared": ["-n", "2", "--gpu-no-spread"]}
ADAPTER_LINE = re.compile(r"^dispatch: (gw\d+(?:, gw\d+)*): (.*?)(?: \[adapter (\d+) of (\d+)\])?$", re.M)


def plugin_args() -> list[str]:
    """``-p pytest_dispatch.plugin`` where the package is importable but not installed."""
    if any(ep.name == "dispatch" for ep in importlib.metadata.entry_points(group="pytest11")):
        return []
    return ["-p", "pytest_dispatch.plugin"]


def run_session(kind: str, index: int, paths: list[str], out: Path, sample_gpus: bool) -> dict:
    json_path = out / f"{kind}_{index}.json"
    command = [sys.executable, "-m", "pytest", *paths, *plugin_args(), "-p", "no:cacheprovider", "-q",
               f"--dispatch-json={json_path}", *KINDS[kind]]
    sampler = None
    if sample_gpus and shutil.which("nvidia-smi"):
        sampler = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=timestamp,index,utilization.gpu", "--format=csv,noheader", "-lms", "100"],
            stdout=open(out / f"{kind}_{index}_gpu_utilisation.csv", "w"), stderr=subprocess.DEVNULL)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if sampler is not None:
        sampler.terminate()
        sampler.wait()
    (out / f"{kind}_{index}.log").write_text(done.stdout + done.stderr)
    workers = {}
    for names, description, adapter, count in ADAPTER_LINE.findall(done.stdout):
        for name in names.split(", "):
            workers[name] = {"adapter": description, "index": int(adapter or 0), "of": int(count or 1)}
    print(f"{kind:>7} #{index}: {wall:6.2f} s, exit {done.returncode}, workers {workers or '-'}", flush=True)
    return {"kind": kind, "wall_s": wall, "exit": done.returncode, "workers": workers, "json": str(json_path)}


def measurements_of(path: str) -> dict:
    return sequential_measurements(storage.results_of(storage.load_document(path)))


def compare(serial_path: str, other_path: str) -> dict:
    """Per measurement: equal counts, median ratio other/serial, overlapping 95% CIs."""
    serial, other = measurements_of(serial_path), measurements_of(other_path)
    rows = {}
    for key in sorted(set(serial) & set(other)):
        a, b = serial[key], other[key]
        ci_a, ci_b = stats.median_ci(a.wall_us_per_dispatch), stats.median_ci(b.wall_us_per_dispatch)
        rows[key] = {
            "counts_equal": (a.calls, a.by_kernel) == (b.calls, b.by_kernel),
            "dispatches": a.dispatches,
            "serial_median_us": ci_a.estimate, "serial_ci": [ci_a.low, ci_a.high],
            "other_median_us": ci_b.estimate, "other_ci": [ci_b.low, ci_b.high],
            "ratio": ci_b.estimate / ci_a.estimate if ci_a.estimate > 0 else None,
            "cis_overlap": ci_a.low <= ci_b.high and ci_b.low <= ci_a.high,
        }
    return {"measurements": rows, "missing": sorted(set(serial) ^ set(other))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder for the results")
    parser.add_argument("--repeat", type=int, default=2, help="sessions of each kind (default %(default)s)")
    parser.add_argument("--paths", nargs="+", default=["examples"], help="test paths (default: examples)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    sessions = []
    for index in range(args.repeat):
        for kind in KINDS:
            sessions.append(run_session(kind, index, args.paths, args.out, sample_gpus=kind == "spread" and index == 0))
    by_kind = {kind: [s for s in sessions if s["kind"] == kind] for kind in KINDS}
    summary = {
        "command": " ".join(sys.argv),
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "wall_s_median": {kind: statistics.median(s["wall_s"] for s in runs) for kind, runs in by_kind.items()},
        "sessions": sessions,
        "spread_vs_serial": compare(by_kind["serial"][0]["json"], by_kind["spread"][0]["json"]),
        "shared_vs_serial": compare(by_kind["serial"][0]["json"], by_kind["shared"][0]["json"]),
    }
    (args.out / "multi_gpu.json").write_text(json.dumps(summary, indent=2))
    walls = summary["wall_s_median"]
    print(f"median wall s: serial {walls['serial']:.2f}, -n 2 one GPU per worker {walls['spread']:.2f}, "
          f"-n 2 taking turns on one GPU {walls['shared']:.2f}")
    for name in ("spread_vs_serial", "shared_vs_serial"):
        rows = summary[name]["measurements"].values()
        ratios = [r["ratio"] for r in rows if r["ratio"]]
        print(f"{name}: {len(rows)} measurements, counts equal in {sum(r['counts_equal'] for r in rows)}, "
              f"95% CIs overlap in {sum(r['cis_overlap'] for r in rows)}, median ratio "
              f"{statistics.median(ratios) if ratios else float('nan'):.3f} "
              f"(range {min(ratios, default=0):.2f}-{max(ratios, default=0):.2f})")


if __name__ == "__main__":
    main()
