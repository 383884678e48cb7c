"""The worker side of an A/B job: a pytest session that runs the tests the
coordinator names and serves each measurement's rounds when asked.

Started by the coordinator as ``python -c BOOT side read_fd write_fd roots -- pytest args``
in its tree's folder.  pytest_dispatch itself (the instrument) is imported from
the coordinator's installation before the tree's source roots are put first on
sys.path, so both sides are measured by the same meter and differ only in the
code under test.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

import pytest

from pytest_dispatch.ab.channel import Channel
from pytest_dispatch import settings

PLUGIN_NAME = "dispatch-ab-worker"
CPU_ENV = "PYTEST_DISPATCH_AB_CPU"  # the CPUs ("3,4") this worker, and every thread it starts, run on
HARNESS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BOOT = ("import sys; sys.path.insert(0, {harness!r}); "
        "from pytest_dispatch.ab.worker import main, exit_now; exit_now(main(sys.argv[1:]))")


def boot_command(python: str, side: str, read_fd: int, write_fd: int, roots: list[str], pytest_args: list[str]):
    return [python, "-c", BOOT.format(harness=HARNESS), side, str(read_fd), str(write_fd), os.pathsep.join(roots),
            "--", *pytest_args]


def _error_line(longrepr: Any, last: bool = False) -> str:
    """A report's first error line (``E ...``), or its last (a collection error's own message,
    ``ModuleNotFoundError: No module named 'x'``, after a SyntaxError's source lines)."""
    text = str(longrepr or "").strip()
    lines = [line for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("E ")]
    return (errors[-1 if last else 0][1:].strip() if errors else lines[-1] if lines else "")[:300]


class Worker:
    """The pytest plugin of a worker process, and the meter's round server."""

    def __init__(self, channel: Channel, side: str) -> None:
        self.channel = channel
        self.side = side
        self.collect_errors: list[str] = []
        self.missing: list[str] = []  # test paths given that this side's tree does not have
        self._phases: dict[str, tuple[str, str]] = {}
        self._result: dict | None = None
        self._item: pytest.Item | None = None  # the test running now

    def pytest_dispatch_round_server(self, config: pytest.Config) -> "Worker":
        return self

    # -- collection

    def pytest_configure(self, config: pytest.Config) -> None:
        from pytest_dispatch.ab import sidepaths

        self.missing = sidepaths.drop_missing(config)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collect_errors.append(f"{report.nodeid or 'collection'}: {_error_line(report.longrepr, last=True)}")

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_collection(self, session: pytest.Session):
        """Send what was collected once collection has ended, also when pytest refused an argument
        (a test name the file does not have): that is a collection error of this side, named."""
        try:
            return (yield)
        except pytest.UsageError as error:
            first = next((line for line in str(error).splitlines() if line.strip()), "usage error")
            self.collect_errors.append(first.removeprefix("ERROR: ")[:300])
            session.items = []
            return True
        finally:
            self._send_collected(session)

    def _send_collected(self, session: pytest.Session) -> None:
        gpu_session = session.config.hook.pytest_dispatch_gpu_session(config=session.config)
        reason = gpu_session.unavailable_reason
        self.channel.send({
            "event": "collected",
            "nodeids": [item.nodeid for item in session.items],
            "errors": self.collect_errors,
            "missing": self.missing,
            "adapter": None if reason else {"fingerprint": gpu_session.info.fingerprint,
                                            "description": gpu_session.info.describe(),
                                            "is_cpu": gpu_session.info.is_cpu},
            "no_adapter": reason,
            "pid": os.getpid(),
        })

    # -- running what the coordinator names

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        items = {item.nodeid: item for item in session.items}
        while True:
            command = self.channel.receive()
            if command.get("cmd") != "run":
                return True
            item = items.get(command["nodeid"])
            self._phases, self._result, self._item = {}, None, item
            if item is not None:
                item.config.hook.pytest_runtest_protocol(item=item, nextitem=items.get(command.get("next")))
            self.channel.send({"event": "test_done", "nodeid": command["nodeid"], **self._outcome(item)})

    def _outcome(self, item) -> dict[str, Any]:
        if item is None:
            return {"outcome": "missing", "message": "not collected on this side", "result": None}
        failed = [(when, text) for when, (outcome, text) in self._phases.items() if outcome == "failed"]
        if failed:
            when, text = failed[0]
            outcome = "error" if when != "call" else "failed"
            return {"outcome": outcome, "message": text, "result": self._result}
        skipped = [text for outcome, text in self._phases.values() if outcome == "skipped"]
        if skipped:
            return {"outcome": "skipped", "message": skipped[0], "result": self._result}
        return {"outcome": "passed", "message": "", "result": self._result}

    def _overrides(self) -> dict[str, float]:
        """The running test's gate settings (alpha, threshold) from its dispatch_budget marker, read
        by the marker's one parser (collection already refused a bad one)."""
        from pytest_dispatch.judgement import budget

        marker = None if self._item is None else self._item.get_closest_marker(budget.MARKER)
        return {} if marker is None else dict(budget.parse_budget(marker.args, marker.kwargs).gate)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        from pytest_dispatch.judgement.results import USER_PROPERTY

        text = ""
        if report.failed:
            text = _error_line(report.longreprtext)
        elif report.skipped and isinstance(report.longrepr, tuple):
            text = str(report.longrepr[2])
        self._phases[report.when] = (report.outcome, text)
        for name, value in report.user_properties:
            if name == USER_PROPERTY and report.when == "call":
                self._result = value

    # -- the meter's round server

    def serve(self, key: str, calls: dict[str, int], take_round: Callable[[], tuple[int, int, int]]) -> bool:
        """Announce the warmed-up measurement with its test's gate settings, then take blocks of
        rounds until told to finish.

        False: the other side has no such measurement; measure alone."""
        self.channel.send({"event": "measure", "key": key, "calls": calls, "overrides": self._overrides()})
        while True:
            command = self.channel.receive()
            kind = command.get("cmd")
            if kind == "block":
                rounds = [take_round() for _ in range(command["settle"] + command["rounds"])][command["settle"]:]
                self.channel.send({"event": "block", "wall_ns": [r[0] for r in rounds],
                                   "sync_ns": [r[1] for r in rounds], "per_round": rounds[0][2]})
            elif kind == "finish":
                return True
            elif kind == "solo":
                return False
            else:
                raise RuntimeError(f"A/B worker: unexpected command {command!r}")


def exit_now(code: int) -> None:
    """End the worker once its pytest session has ended: output flushed and atexit handlers run,
    but not the interpreter's teardown of every module (about 0.3 s a session on lavapipe, with
    the next pair waiting for it)."""
    import atexit

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    atexit._run_exitfuncs()
    os._exit(code)


def _end_with_coordinator() -> None:
    """Have Linux kill this worker when its coordinator ends, even killed with SIGKILL."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main(argv: list[str]) -> int:
    side, read_fd, write_fd, roots = argv[0], int(argv[1]), int(argv[2]), argv[3]
    _end_with_coordinator()
    if os.environ.get(CPU_ENV):  # before any thread starts: threads inherit the main thread's CPUs
        os.sched_setaffinity(0, settings.cpu(CPU_ENV, os.environ.pop(CPU_ENV)))
    pytest_args = argv[argv.index("--") + 1:]
    import pytest_dispatch.plugin  # noqa: F401  the instrument: the coordinator's, before the tree's roots
    tree_roots = [root for root in roots.split(os.pathsep) if root]
    sys.path[:0] = tree_roots
    os.environ["PYTHONPATH"] = os.pathsep.join(tree_roots + [p for p in [os.environ.get("PYTHONPATH")] if p])
    channel = Channel(read_fd, write_fd)
    worker = Worker(channel, side)
    try:
        return int(pytest.main(pytest_args, plugins=[worker]))
    finally:
        channel.close()
