"""A counted run ends with its job: stopped by a signal (to it or its group) or with its valgrind
killed, it ends every process it started at once, removes callgrind's dumps and says so in one line."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

# valgrind's stand-in: it writes a dump, starts a child (as valgrind runs the session, which runs
# workers) and waits, as a long counted session does
FAKE_VALGRIND = """#!/bin/sh
if [ "$1" = "--version" ]; then echo valgrind-3.99.0; exit 0; fi
for arg; do case "$arg" in --callgrind-out-file=*) out="${arg#--callgrind-out-file=}";; esac; done
dumps=$(dirname "$out")
echo "events: Ir" > "$dumps/callgrind.$$"
sleep 300 &
echo "$$ $! $dumps" > "$STARTED.tmp" && mv "$STARTED.tmp" "$STARTED"
wait
"""

DRIVER = textwrap.dedent("""
    import sys
    from pytest_dispatch.measurement.instructions import launch
    launch.build_helper = lambda valgrind=None: None
    sys.exit(launch.relaunch(["tests"], cwd="."))
""")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


@pytest.fixture
def counted_run(tmp_path):
    """A relaunch under the stand-in valgrind, started in a session of its own (as a CI job's
    step); (its process, its valgrind's pid, the child's pid, the dump folder)."""
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    (bin_folder / "valgrind").write_text(FAKE_VALGRIND)
    (bin_folder / "valgrind").chmod(0o755)
    started = tmp_path / "started"
    env = {**os.environ, "PATH": f"{bin_folder}:{os.environ['PATH']}", "STARTED": str(started)}
    env.pop("PYTEST_DISPATCH_COUNTED", None)
    errors = tmp_path / "stderr.txt"
    with open(errors, "w") as stderr:  # a file: a process that outlives the run cannot hold a pipe open
        process = subprocess.Popen([sys.executable, "-c", DRIVER], env=env, cwd=tmp_path, stderr=stderr,
                                   start_new_session=True)
    process.errors = errors
    deadline = time.monotonic() + 60
    while not started.exists():
        assert process.poll() is None and time.monotonic() < deadline, errors.read_text()
        time.sleep(0.05)
    valgrind, child, dumps = started.read_text().split()
    yield process, int(valgrind), int(child), Path(dumps)
    for pid in (process.pid, int(valgrind), int(child)):
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def ended(process, timeout=20):
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"the counted run did not end within {timeout} s of its stop")
    return process.returncode, [line for line in process.errors.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "SIGHUP", "SIGTERM to the group"])
def test_a_stopped_counted_run_ends_its_processes_and_removes_its_dumps(counted_run, how):
    process, valgrind, child, dumps = counted_run
    assert any(dumps.iterdir())
    number = signal.Signals[how.split()[0]]
    if how.endswith("group"):
        os.killpg(process.pid, number)
    else:
        os.kill(process.pid, number)
    code, lines = ended(process)
    assert code == 128 + number
    assert lines[-1].startswith(f"dispatch: counted run stopped by {number.name}: its processes ended"), lines
    assert not any("Traceback" in line for line in lines), lines
    assert not alive(valgrind) and not alive(child) and not dumps.exists()


def test_a_killed_valgrind_is_named_and_its_other_processes_end(counted_run):
    process, valgrind, child, dumps = counted_run
    os.kill(valgrind, signal.SIGKILL)
    code, lines = ended(process)
    assert code == 128 + signal.SIGKILL
    assert lines[-1].startswith("dispatch: the counted session was killed by SIGKILL"), lines
    assert not alive(child) and not dumps.exists()
