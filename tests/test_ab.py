"""A/B jobs end to end on the session's adapter: two worker processes, each importing its
own tree's code, paired rounds, and one clear line for every kind of bad input."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_dispatch.ab import command, coordinator
from pytest_dispatch.ab.channel import Channel
from pytest_dispatch.errors import JobError
from pytest_dispatch.ab import placement as ab_placement

TEST_FILE = """
import os, time
import pytest
import cost  # from this side's tree
from pytest_dispatch.workloads import AddOne

@pytest.fixture(scope="module")
def kernel(gpu_device):
    return AddOne(gpu_device)

def work(kernel):
    kernel.single_pass(cost.DISPATCHES)
    end = time.perf_counter() + cost.EXTRA_US / 1e6
    while time.perf_counter() < end:  # host work per call: the injected cost
        pass

def test_model(dispatch_meter, kernel):
    dispatch_meter.measure(work, kernel, per_round=2, name="work")

def test_steady(dispatch_meter, kernel):
    dispatch_meter.measure(kernel.single_pass, 10, per_round=2, name="steady")
"""
FAST = dict(pairs=6, sessions=4, max_sessions=4, min_time=0.0, max_time=3.0)
FAST_FLAGS = ("--pairs", "6", "--sessions", "4", "--max-sessions", "4", "--min-time", "0", "--max-time", "3",
              "--test-timeout", "90")
# For the jobs whose tests check what a job reports (counts, new and missing tests, a side's
# failures), not a timing verdict: two sessions (a fresh pair of workers each) instead of four.
TWO_SESSIONS = {"sessions": 2, "max_sessions": 2}
TWO_SESSION_FLAGS = ("--pairs", "6", "--sessions", "2", "--max-sessions", "2", "--min-time", "0", "--max-time", "3",
                     "--test-timeout", "90")


def git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True, text=True).stdout


def write_cost(folder: Path, dispatches: int = 20, extra_us: float = 0.0) -> None:
    (folder / "cost.py").write_text(f"DISPATCHES = {dispatches}\nEXTRA_US = {extra_us}\n")


@pytest.fixture
def project(tmp_path, gpu_info) -> Path:
    """A git repository whose main commit has the workload; the work tree is the head."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "test_work.py").write_text(TEST_FILE)
    write_cost(folder)
    git(folder, "init", "-q", "-b", "main")
    git(folder, "add", ".")
    git(folder, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    return folder


def ab(project: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_dispatch.cli", "ab", *args], cwd=project,
                          capture_output=True, text=True, timeout=timeout)


def outcome_of(project: Path, *args: str,
               flags: tuple[str, ...] = FAST_FLAGS) -> tuple[subprocess.CompletedProcess, dict]:
    done = ab(project, *flags, "--json", "ab.json", *args)
    return done, json.loads((project / "ab.json").read_text()) if (project / "ab.json").exists() else {}


def by_name(outcome: dict) -> dict[str, dict]:
    return {m["name"]: m for m in outcome["measurements"]}


def test_a_head_that_only_adds_tests_finds_no_regression_and_what_it_added_is_new_on_cpus_chosen_by_number(
        project, tmp_path, monkeypatch):
    # the head's unchanged code is an A/A job for work, steady and where: no false alarm
    (project / "test_where.py").write_text(PLACEMENT_TEST)  # where each worker ran
    git(project, "add", ".")
    git(project, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "where")
    logs = tmp_path / "placements"
    logs.mkdir()
    monkeypatch.setenv("PLACEMENT_LOG", str(logs))
    chosen = min(os.sched_getaffinity(0))
    head = TEST_FILE.replace('name="steady")', 'name="steady")\n'
                             '    dispatch_meter.measure(kernel.single_pass, 4, per_round=2, name="extra")')
    head += ("\ndef test_new_in_head(dispatch_meter, kernel):\n"
             "    dispatch_meter.measure(kernel.single_pass, 5, per_round=2, name='new')\n")
    (project / "test_work.py").write_text(head)
    done, outcome = outcome_of(project, "--base", "main", "--cpu", str(chosen), flags=TWO_SESSION_FLAGS)
    assert done.returncode == 0, done.stdout + done.stderr  # what is new fails nothing
    measured = by_name(outcome)
    assert set(measured) == {"work", "steady", "extra", "new", "where"}
    for measurement in (measured["work"], measured["steady"]):
        assert measurement["status"] in ("unchanged", "inconclusive"), measurement["timing"]
        assert len(measurement["sessions"]) == 2, measurement["timing"]
    assert measured["work"]["dispatches_per_call"] == {"base": 20, "head": 20}
    assert measured["new"]["status"] == "new" and measured["extra"]["status"] == "new"
    assert measured["new"]["dispatches_per_call"] == {"base": None, "head": 5}
    assert "test_work.py::test_new_in_head (head only)" in done.stdout
    assert outcome["schema"] == "pytest-dispatch-ab/2" and "A/B passed" in done.stdout
    placements = placements_in(logs)  # both workers of both sessions ran on the CPU chosen
    assert sorted(p["side"] for p in placements) == ["base", "base", "head", "head"], placements
    assert all(p["cpus"] == [chosen] for p in placements), ("the sessions' CPUs are the ones chosen", placements)


def test_head_with_an_injected_cost_regresses_and_the_base_worktree_is_removed(project):
    write_cost(project, extra_us=2000)  # the head's own cost.py: 2 ms per call against ~0.1 ms
    done, outcome = outcome_of(project, "--base", "main")
    assert done.returncode == 1, done.stdout + done.stderr
    measured = by_name(outcome)
    assert measured["work"]["status"] == "regressed" and measured["work"]["timing"]["low"] > 1.02
    assert measured["steady"]["status"] in ("unchanged", "inconclusive")
    assert "work regressed: time per call regressed:" in done.stdout
    assert git(project, "worktree", "list").count("\n") == 1  # the base's checkout is gone


def test_the_pytest_twin_finds_an_exact_count_regression_with_the_commands_settings_from_ini(project):
    # the job's timing verdict is test_head_with_an_injected_cost_...'s; here the twin's ini
    # settings reach the same job, which finds the head's exact count regression (test_model
    # alone: its count regressed, so the job needs no timing session after the first)
    write_cost(project, dispatches=22)
    (project / "pytest.ini").write_text("[pytest]\ndispatch_ab_max_time = 3\ndispatch_ab_pairs = 6\n"
                                        "dispatch_ab_min_time = 0\ndispatch_ab_max_sessions = 2\n"
                                        "dispatch_ab_seed = 4\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "--dispatch-ab=main", "-o", "dispatch_ab_sessions=2",
                           "--dispatch-json=ab.json", "-q", "test_work.py::test_model"], cwd=project,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "session 1 " in done.stdout + done.stderr and "session 2 " not in done.stdout + done.stderr
    assert "work regressed: dispatches regressed: 20 -> 22 per call (+2: add_one +2)" in done.stdout
    outcome = json.loads((project / "ab.json").read_text())
    assert by_name(outcome)["work"]["counts"]["dispatches"]["status"] == "regressed"
    settings = outcome["settings"]  # the job's own, as the command's flags
    assert (settings["sessions"], settings["max_sessions"], settings["pairs"], settings["seed"]) == (2, 2, 6, 4)
    assert (settings["min_seconds"], settings["max_seconds"]) == (0, 3)


def test_the_jobs_fine_tuning_is_not_a_pytest_flag(pytester):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest("--dispatch-ab-pairs=8")
    assert result.ret == 4 and "unrecognized arguments: --dispatch-ab-pairs=8" in result.stderr.str()


def test_a_ref_that_does_not_exist_is_one_line(project):
    done = ab(project, "--base", "no-such-branch")
    assert done.returncode == 2
    assert done.stdout.strip() == (f"pytest-dispatch ab: 'no-such-branch' is neither a folder nor a commit of the "
                                   f"git repository at {project}: give a branch, tag, commit or folder")


def test_pytest_xdist_options_are_refused(project):
    done = ab(project, "--base", ".", "--", "-n", "2")
    assert done.returncode == 2 and "drop the pytest-xdist option" in done.stdout


def test_a_head_whose_test_module_cannot_be_imported_compares_nothing_and_fails(project):
    (project / "test_work.py").write_text("import no_such_module_here\n" + TEST_FILE)
    done, outcome = outcome_of(project, "--base", "main", flags=TWO_SESSION_FLAGS)
    assert done.returncode == 4, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "head: could not collect test_work.py: ModuleNotFoundError: No module named 'no_such_module_here'" in lines
    assert "nothing compared: no measurement exists on both sides" in lines and "A/B passed" not in done.stdout
    assert outcome["exit_code"] == 4


def test_a_file_a_side_cannot_collect_and_a_worker_that_crashes_fail_the_job_and_the_rest_is_compared(project):
    (project / "test_crash.py").write_text("import os, cost\n\ndef test_crash(gpu_device):\n"
                                           "    if getattr(cost, 'CRASH', False):\n        os.abort()\n")
    git(project, "add", ".")
    git(project, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "crash test")
    with open(project / "cost.py", "a") as handle:
        handle.write("CRASH = True\n")  # a native abort in the head only, as a wgpu-native panic would be
    (project / "test_broken.py").write_text("import no_such_module_here\n")  # the head's only
    # test_broken.py, test_crash.py, test_work.py: work is measured after the head worker restarted
    done, outcome = outcome_of(project, "--base", "main", "--", "-p", "no:randomly", flags=TWO_SESSION_FLAGS)
    assert done.returncode == 1, done.stdout + done.stderr
    assert ("head: could not collect test_broken.py: ModuleNotFoundError: No module named 'no_such_module_here'"
            in done.stdout.splitlines())  # one line
    assert "head: test_crash.py::test_crash: the head worker was killed by SIGABRT" in done.stdout
    assert outcome["head_failed"] == ["test_crash.py::test_crash"]  # the crash failed that test
    assert by_name(outcome)["work"]["timing"] is not None and "A/B FAILED" in done.stdout  # the rest compared


def test_a_side_that_cannot_start_is_one_line_that_cuts_long_output_and_names_the_log(project):
    plugin = "no_such_plugin_" + "m" * 300  # pytest names it in one long line
    done = ab(project, "--base", ".", "--", "-p", plugin)
    assert done.returncode == 2
    line = done.stdout.strip()
    assert line.startswith("pytest-dispatch ab: ") and "\n" not in line and plugin not in line
    log = Path(line.rsplit("(all of it: ", 1)[1].split(")", 1)[0])
    assert plugin in log.read_text()  # the whole output is kept for the user


# Only the hanging test runs under the time-out (no healthy test that a loaded machine could make
# slow; the hanging one asks for no fixture, so it reaches its hang in milliseconds), and the slow
# restart's sleep outlasts it whatever the load (a sleep is never shorter than asked).
HANG_TIMEOUT = 1
SLOW_RESTART = f"""
import os, time

def pytest_configure(config):  # the worker started after the first hang: silent longer than --test-timeout
    marker = os.path.join(os.path.dirname(__file__), "restart-slowly")
    if os.path.exists(marker):
        os.remove(marker)
        time.sleep({HANG_TIMEOUT * 1.5})
"""


HANGS_THEN_PASSES = """
def test_aaa_hang():
    here = os.path.dirname(__file__)
    if not os.path.exists(os.path.join(here, "hung-once")):
        open(os.path.join(here, "hung-once"), "w").close()
        open(os.path.join(here, "restart-slowly"), "w").close()
    time.sleep(600)

def test_aab_after_the_hang():  # the head's next test: its lost worker is restarted for it
    pass
"""


def test_a_worker_that_hangs_is_killed_and_named(project, capsys):
    hanging = TEST_FILE.replace("def test_model(", HANGS_THEN_PASSES + "\ndef test_model(")
    (project / "test_work.py").write_text(hanging)
    (project / "conftest.py").write_text(SLOW_RESTART)
    settings = coordinator.Settings(test_timeout=HANG_TIMEOUT, **{**FAST, **TWO_SESSIONS})
    lines = []
    code = command.run("main", str(project), ["-p", "no:randomly", "-k", "hang"], settings, out=lines.append)
    # the head's hanging test and the one after it, which asks for no fixture: the job measured nothing
    # (4); a restart taken for a hang (its start silent longer than --test-timeout) would have
    # ended the job as one that cannot run (2)
    assert code == 4 and "A/B FAILED: nothing measured" in "\n".join(lines), lines
    assert any(f"sent nothing for {HANG_TIMEOUT} s (hung); it was killed" in line for line in lines), lines
    assert not any("could not be restarted" in line for line in lines), lines
    assert (project / "hung-once").exists() and not (project / "restart-slowly").exists()  # the restart was slow


PLACEMENT_TEST = """
import json, os, sys
from pytest_dispatch.workloads import AddOne

LOGS = os.environ["PLACEMENT_LOG"]
open(os.path.join(LOGS, f"started-{os.getpid()}"), "w").close()  # at collection: every worker that started

def test_where(dispatch_meter, gpu_device):
    dispatch_meter.measure(AddOne(gpu_device).single_pass, 2, per_round=2, name="where")
    side = os.environ["PYTEST_DISPATCH_AB_SIDE"]
    with open(os.path.join(LOGS, f"placed-{side}-{os.getpid()}.json"), "w") as log:
        json.dump({"side": side, "cpus": sorted(os.sched_getaffinity(0)),
                   "hash_seed": os.environ.get("PYTHONHASHSEED")}, log)
"""


def placements_in(logs: Path) -> list[dict]:
    """Where each worker that ran test_where ran."""
    return [json.loads(path.read_text()) for path in logs.glob("placed-*")]


EARLY_TEST = """
import glob, json, os, time
from pytest_dispatch.workloads import AddOne

LOGS, SEED = os.environ["PLACEMENT_LOG"], os.environ.get("PYTHONHASHSEED")
STARTED = time.time()  # at collection, while the worker starts
open(os.path.join(LOGS, f"started-{SEED}-{os.getpid()}"), "w").write(repr(STARTED))

def started_later():
    \"\"\"Whether a worker of another session started after this one (the next session's).\"\"\"
    return any(float(open(path).read()) > STARTED for path in glob.glob(os.path.join(LOGS, "started-*"))
               if not os.path.basename(path).startswith(f"started-{SEED}-"))

def test_early(dispatch_meter, gpu_device):
    dispatch_meter.measure(AddOne(gpu_device).single_pass, 2, per_round=2, name="early")
    first = all(os.path.basename(path).startswith(f"measured-{SEED}-")  # no other session measured before
                for path in glob.glob(os.path.join(LOGS, "measured-*")))
    deadline = time.time() + float(os.environ["NEXT_WAIT_S"])
    while first and not started_later() and time.time() < deadline:
        time.sleep(0.05)
    side = os.environ["PYTEST_DISPATCH_AB_SIDE"]
    with open(os.path.join(LOGS, f"measured-{SEED}-{side}-{os.getpid()}.json"), "w") as log:
        json.dump({"side": side, "cpus": sorted(os.sched_getaffinity(0)), "first": first,
                   "next_started": started_later(), "hash_seed": SEED}, log)
"""


def _early_job(project: Path, tmp_path: Path, monkeypatch, wait_s: float,
               **settings) -> tuple[list[list[dict]], list[str]]:
    """A two-session job of EARLY_TEST: what each worker that measured wrote, by session (the
    first session first), and the job's progress lines."""
    (project / "test_early.py").write_text(EARLY_TEST)
    logs = tmp_path / "placements"
    logs.mkdir()
    monkeypatch.setenv("PLACEMENT_LOG", str(logs))
    monkeypatch.setenv("NEXT_WAIT_S", str(wait_s))
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    lines = []
    # an A/A job judged at a +-100% tolerance: its exit status says whether the job ran, not how
    # two sessions on a busy 2-core machine timed (one CI run read x1.076 and x1.074)
    code = command.run(str(project), str(project), ["-p", "no:randomly", "test_early.py"],
                       coordinator.Settings(seed=5, threshold=1.0, **{**FAST, **TWO_SESSIONS}, **settings),
                       out=lines.append)
    assert code == 0, lines
    measured = [json.loads(path.read_text()) for path in logs.glob("measured-*")]
    sessions = sorted({m["hash_seed"] for m in measured}, key=lambda seed: not any(
        m["first"] for m in measured if m["hash_seed"] == seed))
    assert len(sessions) == 2, (measured, lines)
    return [[m for m in measured if m["hash_seed"] == seed] for seed in sessions], lines


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="the OS cannot pin a process to a CPU")
def test_the_next_sessions_workers_start_while_this_session_measures(project, tmp_path, monkeypatch, gpu_info):
    allowed = sorted(os.sched_getaffinity(0))
    per_session = ab_placement.cpus_per_session(gpu_info.is_cpu)
    if len(allowed) < 2 * per_session:
        pytest.skip(f"two sessions' CPUs ({2 * per_session}) are needed; this process may use {len(allowed)}")
    monkeypatch.setattr(ab_placement, "PRESTART_SESSIONS_OF_CPUS", 2)  # so that a 2-core machine does it
    # the guess: a GPU's device files where the adapter is a GPU (right)
    monkeypatch.setattr(ab_placement, "_gpu_device_files", lambda: not gpu_info.is_cpu)
    ticks = itertools.count(step=100)
    monkeypatch.setattr(ab_placement, "_idle_times", lambda: dict.fromkeys(allowed, next(ticks)))
    (first, second), lines = _early_job(project, tmp_path, monkeypatch, wait_s=120)
    assert {m["side"] for m in first} == {m["side"] for m in second} == {"base", "head"}, (first, second, lines)
    # placed right from the start, the first pair is not started again: two sessions' pairs in all
    assert len(list((tmp_path / "placements").glob("started-*"))) == 4, lines
    # the first session's workers, still in their test, saw the second session's start
    assert all(m["first"] and m["next_started"] for m in first), (first, lines)
    assert first[0]["cpus"] == first[1]["cpus"] and not set(first[0]["cpus"]) & set(second[0]["cpus"]), \
        (first, second, lines)


def _most_workers_at_once(monkeypatch) -> list[int]:
    """[the most worker processes of the job running at once], counted as each starts."""
    started, most, start = [], [0], coordinator._Side.start

    def counted_start(side):
        start(side)
        started.append(side.process)
        most[0] = max(most[0], sum(process.poll() is None for process in started))

    monkeypatch.setattr(coordinator._Side, "start", counted_start)
    return most


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="the OS cannot pin a process to a CPU")
def test_both_workers_of_a_session_share_their_cpus_and_one_hash_seed(project, tmp_path, monkeypatch, gpu_info):
    """One job shows where its sessions ran; that the first pair starts again where its
    placement was guessed wrong (before any worker has named the adapter; a right guess is
    test_the_next_sessions_workers_start_...'s); and that without prestart each session starts
    after the last."""
    allowed = sorted(os.sched_getaffinity(0))
    # the guess: no GPU's device files where the adapter is a GPU, or the other way round (wrong)
    monkeypatch.setattr(ab_placement, "_gpu_device_files", lambda: gpu_info.is_cpu)
    ticks = itertools.count(step=100)  # every CPU equally idle, whatever else loads this machine
    monkeypatch.setattr(ab_placement, "_idle_times", lambda: dict.fromkeys(allowed, next(ticks)))
    monkeypatch.setattr(ab_placement, "PRESTART_SESSIONS_OF_CPUS", 1)  # where only no_prestart stops a prestart
    most = _most_workers_at_once(monkeypatch)
    sessions, lines = _early_job(project, tmp_path, monkeypatch, wait_s=0, no_prestart=True)
    assert None not in {m["hash_seed"] for session in sessions for m in session}, (sessions, lines)
    assert most == [2], ("without prestart each session starts after the last", most, lines)
    if len(allowed) >= 2:  # on one CPU every adapter's session is placed on it: no guess is wrong
        started = len(list((tmp_path / "placements").glob("started-*")))
        assert started == 6, lines  # two sessions' pairs, and the first pair again
    per_session = ab_placement.cpus_per_session(any("(CPU) via" in line for line in lines))  # one on lavapipe
    for first, second in sessions:  # a session's two workers share a hash seed; sessions do not
        assert {first["side"], second["side"]} == {"base", "head"}
        assert first["cpus"] == second["cpus"] and set(first["cpus"]) <= set(allowed)
        assert 1 <= len(first["cpus"]) <= per_session  # fewer when fewer CPUs are quiet
    if len(allowed) > per_session:
        assert sessions[0][0]["cpus"] != sessions[1][0]["cpus"]  # quiet CPUs are taken in turn
    where = ",".join(map(str, sessions[0][0]["cpus"]))
    assert any(line.endswith(f" on CPU{'s' if ',' in where else ''} {where})") for line in lines), lines


def test_a_session_goes_to_idle_cpus_and_quiet_ones_take_turns(monkeypatch):
    samples = iter([{0: 100, 1: 100, 2: 100, 3: 100}, {0: 120, 1: 101, 2: 119, 3: 119}] * 2)
    monkeypatch.setattr(ab_placement, "_idle_times", lambda: next(samples))
    assert [ab_placement.idlest_cpus([0, 1, 2, 3], turn, 2, window=0) for turn in (0, 1)] == [[0, 2], [0, 3]]


def test_with_one_quiet_cpu_a_session_gets_that_one_alone(monkeypatch):
    samples = iter([{0: 100, 1: 100}, {0: 120, 1: 102}])  # CPU 1 kept busy by a neighbour
    monkeypatch.setattr(ab_placement, "_idle_times", lambda: next(samples))
    assert ab_placement.idlest_cpus([0, 1], turn=1, count=2, window=0) == [0]


def test_a_cpu_the_job_may_not_use_is_one_line(project):
    done = ab(project, "--base", ".", "--cpu", "100000")
    assert done.returncode == 2
    assert done.stdout.strip().startswith("pytest-dispatch ab: --cpu 100000: this job may run on CPUs ")


def test_the_jobs_settings_keep_their_json_names():
    # docs/schema.md: the A/B JSON's `settings` holds the pairs' times as `min_seconds` and `max_seconds`
    data = coordinator.Settings(min_time=0.25, max_time=7.0, no_prestart=True).as_dict()
    assert (data["min_seconds"], data["max_seconds"]) == (0.25, 7.0) and not {"min_time", "max_time"} & set(data)
    assert data["prestart"] is False and "no_prestart" not in data
    assert json.loads(json.dumps(data))["pairs"] == coordinator.Settings().pairs


def test_sides_on_different_adapters_are_refused():
    job = coordinator.Job.__new__(coordinator.Job)
    collected = [{"adapter": {"fingerprint": f, "description": f}, "no_adapter": None} for f in ("gpu-a", "gpu-b")]
    with pytest.raises(JobError, match="different adapters .* refused; pin one with --gpu-adapter"):
        job._check_adapters(collected)


def test_a_channel_closed_twice_leaves_the_files_that_reuse_its_numbers_open():
    # a worker lost in its session's last test keeps its closed channel until the session's end
    channel = Channel(*os.pipe())
    channel.close()
    read_fd, write_fd = os.pipe()  # the lowest free numbers: the channel's
    try:
        channel.close()
        os.fstat(read_fd), os.fstat(write_fd)  # still open
        with pytest.raises(EOFError):
            channel.send({"cmd": "quit"})
    finally:
        os.close(read_fd), os.close(write_fd)


def test_worker_arguments_drop_the_coordinators_options():
    args = ["tests", "--dispatch-ab=main", "--dispatch-report", "--dispatch-json", "x.json", "-k", "fast",
            "--dispatch-ab-max-time=5", "--dispatch-ab-sessions", "3", "--gpu-adapter=H200", "--dispatch-save"]
    assert command.worker_args(args) == ["tests", "-k", "fast", "--gpu-adapter=H200"]


@pytest.mark.parametrize("disabled", ["dispatch", "dispatch_ab"])
def test_either_entry_point_can_be_disabled_alone(pytester, disabled):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest("-p", f"no:{disabled}")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.assert_outcomes(passed=1)


SLEEPER = """
import os, time

def test_sleeps(gpu_device):
    with open(os.environ["SLEEPER_PIDS"], "a") as pids:
        pids.write(f"{os.getpid()}\\n")
    time.sleep(300)
"""


@pytest.fixture
def sleeper(project, tmp_path) -> dict[str, str]:
    """A job's environment in which both workers write their pid and sleep in their test; its own
    temporary folder, where the job checks the base out (and Mesa's runtime folder is made)."""
    (project / "test_sleeps.py").write_text(SLEEPER)
    git(project, "add", ".")
    git(project, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "sleeper")
    (tmp_path / "tmp").mkdir()
    environment = {name: value for name, value in os.environ.items() if name != "XDG_RUNTIME_DIR"}
    return {**environment, "TMPDIR": str(tmp_path / "tmp"), "SLEEPER_PIDS": str(tmp_path / "pids")}


def _start_sleeping_job(project: Path, environment: dict[str, str]) -> tuple[subprocess.Popen, list[int]]:
    """A job (in a process group of its own) whose two workers are in their test; their pids."""
    job = subprocess.Popen([sys.executable, "-m", "pytest_dispatch.cli", "ab", "--base", "main", "--test-timeout",
                            "600", "--", "test_sleeps.py"], cwd=project, env=environment, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    pids = Path(environment["SLEEPER_PIDS"])
    for _ in range(1200):  # both workers started and reached their test
        if job.poll() is not None or (pids.exists() and len(pids.read_text().split()) == 2):
            break
        time.sleep(0.1)
    assert job.poll() is None, job.communicate()[0]
    return job, [int(pid) for pid in pids.read_text().split()]


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _checkouts(environment: dict[str, str]) -> list[str]:
    return sorted(path.name for path in Path(environment["TMPDIR"]).glob("pytest-dispatch-base-*"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("to_group", [False, True], ids=["process", "group"])
def test_a_stopped_job_removes_its_checkout_and_ends_its_workers(project, sleeper, number, to_group):
    job, workers = _start_sleeping_job(project, sleeper)
    try:
        assert len(_checkouts(sleeper)) == 1 and git(project, "worktree", "list").count("\n") == 2
        (os.killpg if to_group else os.kill)(job.pid, number)
        output = job.communicate(timeout=30)[0]  # a polite quit would wait for the sleeping tests
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
    assert job.returncode == 128 + number, output
    assert f"pytest-dispatch ab: stopped by {number.name}; its workers and checkout are gone" in output
    assert _checkouts(sleeper) == [] and git(project, "worktree", "list").count("\n") == 1
    assert list(Path(sleeper["TMPDIR"]).iterdir()) == []  # nor the job's logs or the workers' runtime folders
    assert all(_gone(pid) for pid in workers)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_later_job_removes_the_checkout_of_a_killed_one(project, sleeper):
    job, workers = _start_sleeping_job(project, sleeper)
    try:
        job.kill()
        job.communicate(timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
    assert len(_checkouts(sleeper)) == 1 and git(project, "worktree", "list").count("\n") == 2
    for _ in range(300):  # the workers end with their coordinator
        if all(_gone(pid) for pid in workers):
            break
        time.sleep(0.1)
    assert all(_gone(pid) for pid in workers)
    later = subprocess.run([sys.executable, "-m", "pytest_dispatch.cli", "ab", "--base", "no-such-ref"], cwd=project,
                           env=sleeper, capture_output=True, text=True, timeout=120)
    assert later.returncode == 2
    assert _checkouts(sleeper) == [] and git(project, "worktree", "list").count("\n") == 1


def test_both_front_ends_build_the_jobs_settings_from_the_option_table_alike(pytester):
    from pytest_dispatch import cli, options

    args = cli.build_parser().parse_args(["ab", "--base", "main", "--pairs", "8", "--seed", "3", "--test-timeout",
                                          "1m", "--no-prestart", "--threshold", "5%"])
    from_command = coordinator.Settings.of(lambda option: getattr(args, option.setting))
    pytester.makeini("[pytest]\ndispatch_ab_pairs = 8\ndispatch_ab_seed = 3\ndispatch_ab_test_timeout = 1m\n"
                     "dispatch_ab_no_prestart = true\ndispatch_threshold = 5%\n")
    values = options.of(pytester.parseconfig())
    from_pytest = coordinator.Settings.of(lambda option: getattr(values, option.name))
    assert from_command == from_pytest
    assert (from_pytest.seed, from_pytest.test_timeout, from_pytest.no_prestart, from_pytest.pairs) == (3, 60.0, True, 8)


FAKE_VALGRIND = """#!/bin/sh
touch "$(dirname "$0")/valgrind-started"
exit 1
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counting runs on Linux only")
def test_a_counted_job_whose_head_cannot_collect_compares_nothing_and_says_why(pytester, gpu_info, monkeypatch):
    base, head = pytester.mkdir("base"), pytester.mkdir("head")
    for side in (base, head):
        (side / "test_counted_work.py").write_text(
            "from pytest_dispatch.workloads import AddOne\n\ndef test_work(dispatch_meter, gpu_device):\n"
            "    dispatch_meter.measure(AddOne(gpu_device).single_pass, 2, per_round=2, name='work')\n")
    (head / "test_broken.py").write_text("import no_such_module_here\n")
    # a valgrind that says when it was started: the job finds the head cannot collect before that
    tools = pytester.mkdir("tools")
    (tools / "valgrind").write_text(FAKE_VALGRIND)
    (tools / "valgrind").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    result = pytester.runpytest_subprocess(f"--dispatch-ab={base}", "-o", f"dispatch_ab_head={head}",
                                           "--dispatch-instructions", timeout=600)
    assert result.ret == 4, result.stdout.str()
    result.stdout.fnmatch_lines(["A/B (counted): head: could not collect test_broken.py: ModuleNotFoundError: "
                                 "No module named 'no_such_module_here'",
                                 "A/B (counted): nothing compared: a side collected no tests"])
    assert not (tools / "valgrind-started").exists()  # no side was started under callgrind
