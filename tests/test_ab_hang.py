"""An A/B test that hangs after its measurement is failed once, named, and not run again in the
job's later sessions (each run would cost --test-timeout, on both sides, every session); its
session's last test, so its workers are not restarted (a whole start-up each, for nothing)."""

from pathlib import Path

from pytest_dispatch.ab import command, coordinator

TESTS = """
import os
import time
import pytest
from pytest_dispatch.workloads import AddOne


HUNG = os.path.join(os.path.dirname(__file__), "hung.txt")


def running(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


if os.path.exists(HUNG):  # a worker started after the hang: how many hung workers are still there
    with open(os.path.join(os.path.dirname(__file__), "started-after.txt"), "a") as log:
        log.write(f"{sum(running(int(pid)) for pid in open(HUNG).read().split())}\\n")


@pytest.fixture(scope="module")
def kernel(gpu_device):
    return AddOne(gpu_device)


def test_steady(dispatch_meter, kernel):
    dispatch_meter.measure(kernel.single_pass, 10, per_round=2, name="steady")


def test_hangs_after(dispatch_meter, kernel):
    dispatch_meter.measure(kernel.single_pass, 10, per_round=2, name="hangs")
    with open(HUNG, "a") as runs:
        runs.write(f"{os.getpid()}\\n")
    time.sleep(600)
"""


def test_a_test_that_hangs_after_its_measurement_runs_in_one_session_only(tmp_path, gpu_info, monkeypatch):
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_hang.py").write_text(TESTS)
    settings = coordinator.Settings(test_timeout=5, pairs=6, sessions=2, max_sessions=2, min_time=0.0,
                                    max_time=3.0, no_prestart=True)
    timeouts = []  # how many sides each time-out found hung
    wait = coordinator.Job._next

    def counted_wait(job, *args, **kwargs):
        try:
            return wait(job, *args, **kwargs)
        except coordinator._SideLost as lost:
            timeouts.append(1 + len(lost.also))
            raise

    monkeypatch.setattr(coordinator.Job, "_next", counted_wait)
    lines: list[str] = []
    code = command.run(str(project), str(project), ["-p", "no:randomly"], settings, out=lines.append)
    assert code == 1, lines
    hung = (project / "hung.txt").read_text().split()
    assert len(hung) == 2, lines  # base and head, in the first session only
    named = [line for line in lines if "test_hangs_after: failed (the" in line and "not run in later sessions" in line]
    assert len(named) == 1, lines
    assert any(line.startswith("session 2") for line in lines), lines  # the other test's session went on
    assert timeouts == [2], lines  # both hung sides were killed at once: one time-out, not two
    # session 2's pair alone started after the hang (no restart), once the hung workers were gone
    assert (project / "started-after.txt").read_text().split() == ["0"] * 2, lines
