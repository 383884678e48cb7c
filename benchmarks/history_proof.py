"""Proof of `pytest-dispatch history` on real runs: a step is found and attributed to its commit.

    python benchmarks/history_proof.py [--runs 10] [--changed-from 6] [--extra-us 100] [--sessions 1] [--out DIR]
    python benchmarks/history_proof.py --counted --extra-turns 200 --runs 20 --changed-from 11   # counted runs

In a temporary git repository, makes ``--runs`` commits; after each, runs a pytest session of
two measurements of the paper's AddOne kernel (sequential method, 50 dispatches per call) and
saves it with ``--dispatch-save``.  From commit ``--changed-from`` on, the 'changed' measurement
spins ``--extra-us`` µs on the host after every dispatch; the 'steady' one never changes.
Then runs ``pytest-dispatch history`` on the storage and checks that it names exactly that
commit for 'changed', nothing for 'steady', and no count change.  With ``--sessions K``, each
commit is measured by K sessions (all kept; a change can only fall between commits).  With ``--counted``,
each session counts host instructions (``--dispatch-instructions``) and the change is ``--extra-turns``
turns of an empty Python loop after every dispatch (a spin's instructions would depend on time);
the check is then on the counted series, which ``history`` compares run to run, exactly.  Prints
the series and the verdict; exit 0 when the check passes.  With ``--out``, writes history.json, history.md and
history.html there.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from pytest_dispatch import cli
from pytest_dispatch.judgement import history
from pytest_dispatch.measurement.key import MeasurementKey

TEST_FILE = textwrap.dedent('''
    import itertools
    import time

    import pytest

    import workload_cost
    from pytest_dispatch.workloads import AddOne

    DISPATCHES = 50


    def spin(us):
        end = time.perf_counter() + us / 1e6
        while time.perf_counter() < end:
            pass


    @pytest.fixture
    def kernel(gpu_device):
        return AddOne(gpu_device)


    def test_changed(dispatch_meter, kernel):
        def dispatches(n):
            for _ in range(n):
                kernel.submit_per_dispatch(1)
                spin(workload_cost.EXTRA_US)
                for _ in itertools.repeat(None, workload_cost.EXTRA_TURNS):
                    pass

        dispatch_meter.measure(dispatches, DISPATCHES, name="add_one")


    def test_steady(dispatch_meter, kernel):
        dispatch_meter.measure(kernel.submit_per_dispatch, DISPATCHES, name="add_one")
''')


def git(repo: Path, *args: str, env: dict | None = None) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}).stdout.strip()


def plugin_arguments() -> list[str]:
    """``-p pytest_dispatch.plugin`` where the package is not installed (its entry point is missing)."""
    from importlib.metadata import entry_points

    return [] if any(ep.name == "dispatch" for ep in entry_points(group="pytest11")) else ["-p", "pytest_dispatch.plugin"]


def history_output(storage: Path, *options: str) -> str:
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = cli.main(["history", "--storage", str(storage), *options])
    if code != 0:
        raise SystemExit(f"pytest-dispatch history {' '.join(options)} exited {code}")
    return stdout.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="commits, each measured by --sessions runs")
    parser.add_argument("--changed-from", type=int, default=6, help="first commit (1-based) with the added cost")
    parser.add_argument("--extra-us", type=float, default=None,
                        help="host µs spun after each dispatch (default 100; 0 with --counted)")
    parser.add_argument("--sessions", type=int, default=1, help="pytest sessions (saved runs) per commit")
    parser.add_argument("--counted", action="store_true", help="count host instructions (--dispatch-instructions)")
    parser.add_argument("--extra-turns", type=int, default=0, help="empty Python loop turns added after each dispatch")
    parser.add_argument("--out", help="folder for history.json, history.md and history.html")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments, e.g. --gpu-impl dawn")
    args = parser.parse_args()
    if args.extra_us is None:
        args.extra_us = 0.0 if args.counted else 100.0
    if args.counted and args.extra_us:
        parser.error("--counted counts instructions, and a spin's depend on time: give --extra-turns and --extra-us 0")
    try:
        history.require_ruptures()
    except history.ChangePointsUnavailable as error:
        raise SystemExit(f"history_proof: {error}") from None

    work = Path(tempfile.mkdtemp(prefix="history-proof-"))
    repo, storage = work / "repo", work / "storage"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "proof@example.invalid")
    git(repo, "config", "user.name", "history proof")
    (repo / "test_workload.py").write_text(TEST_FILE)
    start = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0) - datetime.timedelta(hours=1)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), *sys.path])}
    commits = []
    began = time.perf_counter()
    for number in range(1, args.runs + 1):
        changed = number >= args.changed_from
        extra, turns = (args.extra_us, args.extra_turns) if changed else (0.0, 0)
        (repo / "workload_cost.py").write_text(
            f"# revision {number}\nEXTRA_US = {extra!r}\nEXTRA_TURNS = {turns!r}\n")
        git(repo, "add", "-A")
        stamp = (start + datetime.timedelta(minutes=number)).isoformat()
        git(repo, "commit", "-q", "-m", f"revision {number}", env={"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp})
        commits.append(git(repo, "rev-parse", "HEAD"))
        for _ in range(args.sessions):
            session = subprocess.run(
                [sys.executable, "-m", "pytest", "test_workload.py", "-q", "-p", "no:cacheprovider",
                 *plugin_arguments(), "--rootdir", str(repo), "--gpu-required", "--dispatch-save=proof",
                 f"--dispatch-storage={storage}", *(["--dispatch-instructions"] if args.counted else []),
                 *args.pytest_args],
                cwd=repo, env=env, capture_output=True, text=True)
            if session.returncode != 0:
                print(session.stdout[-3000:], session.stderr[-3000:], sep="\n")
                raise SystemExit(f"commit {number}: pytest exited {session.returncode}")
        print(f"history_proof: commit {number}/{args.runs} {commits[-1][:10]} "
              f"(extra {extra:g} µs, {turns} turns a dispatch): {args.sessions} run(s) saved "
              f"({time.perf_counter() - began:.0f} s)", flush=True)

    text = history_output(storage)
    document = json.loads(history_output(storage, "--json"))
    print(text)
    (gpu,) = document["gpus"]
    expected = commits[args.changed_from - 1]
    # a counted series names changes run to run, exactly; a timed one names change points
    section, found, value, spec, what = (
        ("counted", "changes", "instructions_per_call", ",.0f", "host instructions per call") if args.counted
        else ("series", "change_points", "median_us", ".1f", "run medians (µs/dispatch)"))
    series = {MeasurementKey.parse(s["key"]).nodeid.rsplit("::", 1)[-1]: s for s in gpu[section]}
    for name, s in series.items():
        values = " ".join(format(p[value], spec) for p in s["points"])
        print(f"{name} {what}, commit order: {values}")
    changed = [c["commit"] for c in series["test_changed"][found]]
    steady = [c["commit"] for c in series["test_steady"][found]]
    counts = [] if args.counted else [c for s in series.values() for c in s["count_changes"]]
    passed = changed == [expected] and not steady and not counts
    print(f"GPU: {gpu['gpu']}")
    print(f"expected change at commit {args.changed_from} ({expected[:10]}); found for changed: "
          f"{[c[:10] for c in changed]}, for steady: {[c[:10] for c in steady]}, count changes: {len(counts)}")
    print("history_proof: PASS" if passed else "history_proof: FAIL")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "history.json").write_text(json.dumps(document, indent=2))
        (out / "history.md").write_text(history_output(storage, "--markdown"))
        history_output(storage, "--html", str(out / "history.html"))
        print(f"history_proof: wrote {out}/history.json, history.md, history.html")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
