"""History on real saved runs: how often a change is named that did not happen, and a real step found.

    python benchmarks/history_series.py --make-runs 40 [--storage DIR]   # save runs first, then judge
    python benchmarks/history_series.py --storage DIR [--commits 20] [--per-commit 4] [--step 0.20]
    python benchmarks/history_series.py --history-json FILE [-k steady]   # runs a `history --json` kept

With ``--make-runs N``, saves N runs (separate pytest sessions, ``--dispatch-save``) of unchanged
code (two tests of the AddOne kernel, 50 dispatches per call: one-pass and one submit per
dispatch) into ``--storage`` (a temporary folder when not given).  Then, for every measurement
of the storage's runs of one GPU, builds ``--series`` series of ``--commits`` commits of
``--per-commit`` runs each, every run a median drawn at random from the real saved runs'
medians (so the series carry the real run-to-run spread; runs are taken as exchangeable, so
slow drift between runs is not kept), and counts:

- unchanged series: how many have a change point named (``history.steps_of``, the algorithm of
  ``pytest-dispatch history``);
- step series, the runs from the middle commit on multiplied by 1 + ``--step``: how many have
  exactly one change named, at that commit.

With ``--history-json``, the pools are the run medians of the series of a kept
``pytest-dispatch history --json`` document whose key contains ``-k`` (e.g. the H200's runs in
docs/results).  Prints the figures per measurement with the runs' spread and the resolution the history
reports.  Exit 0 always: the figures are the result.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

from pytest_dispatch.judgement import history, storage as run_storage

TEST_FILE = textwrap.dedent('''
    import pytest

    from pytest_dispatch.workloads import AddOne


    @pytest.fixture
    def kernel(gpu_device):
        return AddOne(gpu_device)


    def test_one_pass(dispatch_meter, kernel):
        dispatch_meter.measure(kernel.single_pass, 50, name="add_one")


    def test_submit_each(dispatch_meter, kernel):
        dispatch_meter.measure(kernel.submit_per_dispatch, 50, name="add_one")
''')


def make_runs(storage: Path, runs: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="history-series-"))
    (folder / "test_unchanged.py").write_text(TEST_FILE)
    began = time.perf_counter()
    for number in range(1, runs + 1):
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_unchanged.py",
                               "--gpu-required", "--dispatch-save=unchanged", f"--dispatch-storage={storage}"],
                              cwd=folder, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"history_series: run {number}: pytest exited {done.returncode}\n{done.stdout[-2000:]}")
        print(f"history_series: run {number}/{runs} saved ({time.perf_counter() - began:.0f} s)", flush=True)


def judge(pool: np.ndarray, args: argparse.Namespace, rng: np.random.Generator) -> dict[str, float]:
    commits = [i // args.per_commit for i in range(args.commits * args.per_commit)]
    middle = (args.commits // 2) * args.per_commit
    named = found = 0
    resolutions = []
    for _ in range(args.series):
        values = rng.choice(pool, size=len(commits), replace=True)
        named += bool(history.steps_of(values, commits=commits))
        resolutions.append(history.resolvable_step(values, history.Settings(), args.commits - 1))
        stepped = values.copy()
        stepped[middle:] *= 1 + args.step
        steps = history.steps_of(stepped, commits=commits)
        found += len(steps) == 1 and steps[0][0] == middle
    return {"named": named, "found": found, "resolution": float(np.median(resolutions))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", help="a --dispatch-storage folder of saved runs")
    parser.add_argument("--make-runs", type=int, default=0, help="first save this many runs of unchanged code")
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--per-commit", type=int, default=4)
    parser.add_argument("--step", type=float, default=0.20)
    parser.add_argument("--series", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--history-json", action="append", default=[], help="a kept history --json document")
    parser.add_argument("-k", default="steady", help="with --history-json: series whose key contains this")
    args = parser.parse_args()
    history.require_ruptures()
    rng = np.random.default_rng(args.seed)
    for path in args.history_json:
        for gpu in json.loads(Path(path).read_text())["gpus"]:
            for series in gpu["series"]:
                if args.k in series["key"]:
                    report(f"{path}: {gpu['gpu'][:40]}: {series['key']}",
                           np.array([p["median_us"] for p in series["points"]], dtype=float), args, rng)
    if args.history_json and not (args.storage or args.make_runs):
        return footer()
    storage = Path(args.storage or tempfile.mkdtemp(prefix="history-series-storage-"))
    if args.make_runs:
        make_runs(storage, args.make_runs)
    for fingerprint in run_storage.BaselineStore(storage).fingerprints():
        runs = history.load_runs(storage, fingerprint)
        print(f"GPU {runs[-1].gpu if runs else fingerprint}: {len(runs)} saved runs in {storage}")
        for key in history.keys_of(runs):
            report(f"  {key}", history.series_of(runs, key, find_changes=False).medians, args, rng)
    return footer()


def report(label: str, pool: np.ndarray, args: argparse.Namespace, rng: np.random.Generator) -> None:
    if pool.size < 5 or pool.min() <= 0:
        print(f"{label}: {pool.size} usable runs, skipped")
        return
    figures = judge(pool, args, rng)
    print(f"{label}: {pool.size} runs' medians {pool.min():.1f}-{pool.max():.1f} µs/dispatch "
          f"(spread x{history.runs_spread(pool):.2f}); {args.series} series of {args.commits} commits x "
          f"{args.per_commit} runs: unchanged, no change named in {args.series - figures['named']} "
          f"({1 - figures['named'] / args.series:.1%}); +{args.step:.0%} step found at its commit in "
          f"{figures['found']} ({figures['found'] / args.series:.1%}); resolves x{figures['resolution']:.2f}",
          flush=True)


def footer() -> int:
    print(f"python {' '.join(sys.argv)}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
