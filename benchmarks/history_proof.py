"""Proof of `pytest-dispatch history` on real counted runs: a step is found and attributed to its commit.

    python benchmarks/history_proof.py --counted --series 10 --step 0.2 --runs 20   # counted runs, 10 + 10 series

The history names no timed step (time is described, not judged), so ``--counted`` is required; the
timed options below are kept for the runs' layout.

In a temporary git repository, makes ``--runs`` commits; after each, runs a pytest session of
measurements of the paper's AddOne kernel (sequential method, ``--dispatches`` (50) a call, one
submit each) and saves it with ``--dispatch-save``: ``--series`` 'steady' copies that never change and
as many 'changed' ones that, from their step's commit on, spin ``--extra-us`` µs on the host
after every dispatch (one series: from ``--changed-from``; several: their steps spread over
commits 5 .. runs - 3, at least 4 runs a side).  ``--step 0.2`` sizes the change by measurement
instead: 20% of commit 1's cost.  Then runs ``pytest-dispatch history`` on the storage and
checks that each changed series is named at its step's commit and nowhere else, its steady twin
not at all, and no count change (with several series: in >= 90% and >= 95% of them, the targets
the proof sets).  With ``--sessions K``, each commit is measured by K sessions (all kept; a change
can only fall between commits).  With ``--counted``, each session counts host instructions
(``--dispatch-instructions``) and the change is ``--extra-turns`` turns of an empty Python loop
after every dispatch (a spin's instructions would depend on time; ``--step`` prices a turn with
one more counted session, not saved); the check is then on the counted series, which
``history`` compares run by run, exactly.  Prints the series and the verdict; exit 0 when the
check passes.  With ``--out``, writes history.json, history.md and history.html there.
With ``--work DIR`` the storage and state.json are kept there (the repository is made again from
them), and a second call with the same arguments goes on from the last commit saved; ``--stop-after S`` ends a call (exit 3) before a
commit that would start after S seconds: together they split a long proof over several commands.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from pytest_dispatch import cli
from pytest_dispatch.measurement.key import MeasurementKey

TEST_FILE = textwrap.dedent('''
    import itertools
    import time

    import pytest

    import workload_cost
    from pytest_dispatch.workloads import AddOne

    DISPATCHES = workload_cost.DISPATCHES


    def spin(us):
        end = time.perf_counter() + us / 1e6
        while time.perf_counter() < end:
            pass


    @pytest.fixture
    def kernel(gpu_device):
        return AddOne(gpu_device)


    @pytest.mark.parametrize("copy", range(workload_cost.SERIES))
    def test_changed(dispatch_meter, kernel, copy):
        extra_us, turns = workload_cost.EXTRA_US.get(copy, 0.0), workload_cost.EXTRA_TURNS.get(copy, 0)

        def dispatches(n):
            for _ in range(n):
                kernel.submit_per_dispatch(1)
                spin(extra_us)
                for _ in itertools.repeat(None, turns):
                    pass

        dispatch_meter.measure(dispatches, DISPATCHES, name="add_one")


    @pytest.mark.parametrize("copy", range(workload_cost.SERIES))
    def test_steady(dispatch_meter, kernel, copy):
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


CALIBRATION_TURNS = 1000  # loop turns a dispatch in the counted calibration session


def step_commits(runs: int, series: int, changed_from: int) -> list[int]:
    """The commit (1-based) of each changed series' step: ``changed_from`` for one series; for
    several, spread over commits 5 .. runs - 3, so that every step has at least 4 runs a side."""
    if series == 1:
        return [changed_from]
    first, last = 5, runs - 3
    if last < first:
        raise SystemExit(f"history_proof: --series {series} needs --runs >= 8 (4 runs each side of a step)")
    return [first + (copy * (last - first)) // (series - 1) for copy in range(series)]


def pytest_session(repo: Path, env: dict, options: list[str], pytest_args: list[str], what: str) -> None:
    session = subprocess.run(
        [sys.executable, "-m", "pytest", "test_workload.py", "-q", "-p", "no:cacheprovider", *plugin_arguments(),
         "--rootdir", str(repo), "--gpu-required", *options, *pytest_args],
        cwd=repo, env=env, capture_output=True, text=True)
    if session.returncode != 0:
        print(session.stdout[-3000:], session.stderr[-3000:], sep="\n")
        raise SystemExit(f"{what}: pytest exited {session.returncode}")


def changed_values(json_path: Path, counted: bool) -> list[float]:
    """Each changed series' instructions per call (counted) or median µs per dispatch, from --dispatch-json."""
    document = json.loads(json_path.read_text())
    values = []
    for test in document["pytest_dispatch"]["tests"]:
        if "test_changed[" not in test["nodeid"]:
            continue
        (measurement,) = test["measurements"]
        values.append(measurement["instructions"]["per_call"] if counted
                      else statistics.median(measurement["wall_us_per_call"]) / measurement["dispatches_per_call"])
    return values


def write_cost(repo: Path, number: int, args: argparse.Namespace, extra_us: dict, turns: dict) -> None:
    (repo / "workload_cost.py").write_text(
        f"# revision {number}\nSERIES = {args.series}\nDISPATCHES = {args.dispatches}\n"
        f"EXTRA_US = {extra_us!r}\nEXTRA_TURNS = {turns!r}\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="commits, each measured by --sessions runs")
    parser.add_argument("--changed-from", type=int, default=6,
                        help="first commit (1-based) with the added cost (one series; several spread theirs)")
    parser.add_argument("--series", type=int, default=1,
                        help="changed and steady series (test copies) each; their steps fall at spread commits")
    parser.add_argument("--step", type=float, default=None,
                        help="size the change by measurement: this fraction of commit 1's cost (0.2: +20%%)")
    parser.add_argument("--extra-us", type=float, default=None,
                        help="host µs spun after each dispatch (default 100; 0 with --counted)")
    parser.add_argument("--dispatches", type=int, default=50, help="dispatches a call, each with its own submit")
    parser.add_argument("--sessions", type=int, default=1, help="pytest sessions (saved runs) per commit")
    parser.add_argument("--counted", action="store_true", help="count host instructions (--dispatch-instructions)")
    parser.add_argument("--extra-turns", type=int, default=0, help="empty Python loop turns added after each dispatch")
    parser.add_argument("--out", help="folder for history.json, history.md and history.html")
    parser.add_argument("--work", help="keep the repository and storage here; a second call goes on where one stopped")
    parser.add_argument("--stop-after", type=float, default=None,
                        help="seconds: start no commit after this; exit 3 (go on with the same command and --work)")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments, e.g. --gpu-impl dawn")
    args = parser.parse_args()
    if args.extra_us is None:
        args.extra_us = 0.0 if args.counted or args.step else 100.0
    if args.counted and args.extra_us:
        parser.error("--counted counts instructions, and a spin's depend on time: give --extra-turns and --extra-us 0")
    if not args.counted:
        parser.error("the history names counted-instruction steps only (time is described, not judged): "
                     "give --counted")

    proof = {name: value for name, value in vars(args).items() if name not in ("work", "stop_after", "out")}
    work = Path(args.work).resolve() if args.work else Path(tempfile.mkdtemp(prefix="history-proof-"))
    repo, storage, state_file = work / "repo", work / "storage", work / "state.json"
    if not state_file.exists():
        start = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0) - datetime.timedelta(hours=1)
        work.mkdir(parents=True, exist_ok=True)
        state_file.write_text(json.dumps({"start": start.isoformat(), "proof": proof}))
    state = json.loads(state_file.read_text())
    if state["proof"] != proof:
        raise SystemExit(f"history_proof: {work} holds another proof: {state['proof']}")
    start = datetime.datetime.fromisoformat(state["start"])
    steps = step_commits(args.runs, args.series, args.changed_from)
    extra_us, extra_turns = state.get("extra_us", args.extra_us), state.get("extra_turns", args.extra_turns)

    def carrying(number: int) -> list[int]:
        """The changed series whose step commit ``number`` (1-based) carries."""
        return [copy for copy, first in enumerate(steps) if number >= first]

    def commit(number: int) -> str:
        """Commit ``number``: the same content and dates give the same hash, so the
        repository can be made again from state.json where only the storage was kept."""
        changed = carrying(number)
        write_cost(repo, number, args, {copy: extra_us for copy in changed if extra_us},
                   {copy: extra_turns for copy in changed if extra_turns})
        git(repo, "add", "-A")
        stamp = (start + datetime.timedelta(minutes=number)).isoformat()
        git(repo, "commit", "-q", "-m", f"revision {number}", env={"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp})
        return git(repo, "rev-parse", "HEAD")

    shutil.rmtree(repo, ignore_errors=True)  # made again: a call stopped during a session left a commit
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "proof@example.invalid")
    git(repo, "config", "user.name", "history proof")
    (repo / "test_workload.py").write_text(TEST_FILE)
    commits = [commit(number) for number in range(1, state.get("commits", 0) + 1)]
    if commits:
        saved = {path.name.split("_")[1] for path in storage.glob("*/*.json")}
        if not set(commits) <= saved:
            raise SystemExit(f"history_proof: the commits made again from {state_file} are not those of its runs")
        print(f"history_proof: going on in {work} after commit {len(commits)}/{args.runs}", flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), *sys.path])}
    counted = ["--dispatch-instructions"] if args.counted else []
    began = time.perf_counter()
    for number in range(len(commits) + 1, args.runs + 1):
        if args.stop_after is not None and time.perf_counter() - began > args.stop_after:
            print(f"history_proof: stopped after commit {number - 1}/{args.runs}; go on with the same command",
                  flush=True)
            return 3
        commits.append(commit(number))
        measured = work / "first.json"
        for _ in range(args.sessions):
            pytest_session(repo, env, ["--dispatch-save=proof", f"--dispatch-storage={storage}", *counted,
                                       *([f"--dispatch-json={measured}"] if number == 1 else [])],
                           args.pytest_args, f"commit {number}")
        print(f"history_proof: commit {number}/{args.runs} {commits[-1][:10]} ({len(carrying(number))} of {args.series} "
              f"changed series carry their step): {args.sessions} run(s) saved "
              f"({time.perf_counter() - began:.0f} s)", flush=True)
        if number == 1 and args.step:
            base = statistics.median(changed_values(measured, args.counted))
            if args.counted:  # one session, not saved, prices a loop turn
                calibration = work / "calibration.json"
                write_cost(repo, 0, args, {}, dict.fromkeys(range(args.series), CALIBRATION_TURNS))
                pytest_session(repo, env, [*counted, f"--dispatch-json={calibration}"], args.pytest_args,
                               "calibration")
                added = statistics.median(changed_values(calibration, True)) - base
                per_turn = added / CALIBRATION_TURNS / args.dispatches
                extra_turns = max(1, round(args.step * base / args.dispatches / per_turn))
                print(f"history_proof: {base:,.0f} instructions a call; a loop turn {per_turn:.1f}: "
                      f"+{args.step:.0%} is {extra_turns} turns a dispatch", flush=True)
            else:
                extra_us = args.step * base
                print(f"history_proof: {base:.2f} µs a dispatch: +{args.step:.0%} is {extra_us:.2f} µs spun a "
                      f"dispatch", flush=True)
        state.update(commits=number, extra_us=extra_us, extra_turns=extra_turns)
        state_file.write_text(json.dumps(state))

    text = history_output(storage)
    document = json.loads(history_output(storage, "--json"))
    print(text)
    (gpu,) = document["gpus"]
    # a counted series names changes run to run, exactly; a timed one names change points
    section, found, value, spec, what = (
        ("counted", "changes", "instructions_per_call", ",.0f", "host instructions per call") if args.counted
        else ("series", "change_points", "median_us", ".1f", "run medians (µs/dispatch)"))
    series = {MeasurementKey.parse(s["key"]).nodeid.rsplit("::", 1)[-1]: s for s in gpu[section]}
    for name, s in sorted(series.items()):
        values = " ".join(format(p[value], spec) for p in s["points"])
        print(f"{name} {what}, commit order: {values}")
    right = invented = placed = 0
    number = {commit: index + 1 for index, commit in enumerate(commits)}  # 1-based, as the steps are
    for copy, first in enumerate(steps):
        changes = series[f"test_changed[{copy}]"][found]
        named = [c["commit"] for c in changes]
        right += named == [commits[first - 1]]
        # a counted change is placed at its commit; a timed one between placed_from and placed_to
        placed += any(number.get(c.get("placed_from_commit", c["commit"]), 0) <= first
                      <= number.get(c.get("placed_to_commit", c["commit"]), 0) for c in changes)
        quiet = [c["commit"] for c in series[f"test_steady[{copy}]"][found]]
        invented += bool(quiet)
        print(f"series {copy}: step at commit {first} ({commits[first - 1][:10]}): named at "
              f"{[number.get(c, c) for c in named]}; its steady twin named {[number.get(c, c) for c in quiet]}")
    counts = [] if args.counted else [c for s in series.values() for c in s["count_changes"]]
    print(f"GPU: {gpu['gpu']}")
    print(f"steady series with no change named: {args.series - invented} of {args.series}; "
          f"steps named at their commit and nowhere else: {right} of {args.series} (their commit among those "
          f"a named step was placed at: {placed}); count changes: {len(counts)}")
    passed = (args.series - invented) >= 0.95 * args.series and right >= 0.9 * args.series and not counts
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
