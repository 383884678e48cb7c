"""A session's two workers forked from one warm process (Linux).

Where the next session's pair cannot start while this one measures (a 2-core machine, ``--cpu``
naming the CPUs), a session's seconds are mostly its workers starting, one after the other on
the session's CPU.  Much of that is the same work twice: starting Python, importing pytest,
this plugin and the WebGPU package, and cffi parsing the C types of the first adapter and
dispatches (``measurement.gpu.parsed_ctypes``).  So the job starts one process per session that
does it once, and forks the session's base and head workers from it: both get the same hash seed and
the same layout of what was imported (as one hash seed for both sides always did), and each
session gets its own, so sessions stay independent samples of a fresh pair of processes.

The coordinator sends each fork request as one JSON message over a Unix socket with the
worker's descriptors (its two channel pipes and its log) attached; the warm process answers
with the child's pid and, when a child ends, with its exit status.  Only the job holds the
socket.  A process that cannot fork safely (a module it imported started a thread) says so and
the job starts its workers the ordinary way.
"""

from __future__ import annotations

import json
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from pytest_dispatch.ab import worker

_BOOT = ("import sys; sys.path.insert(0, {harness!r}); "
         "from pytest_dispatch.ab.zygote import serve; sys.exit(serve(int(sys.argv[1]), sys.argv[2]))")
READY_TIMEOUT = 60.0  # seconds for the imports and parsing (about 0.9 s on a quiet lavapipe core)
_GONE_POLL = 0.1  # seconds between looks at /proc for a worker whose warm process has ended
_MESSAGE_BYTES = 1 << 20  # a request carries the worker's whole environment


def available() -> bool:
    """Whether workers can be forked here (Linux: fork, and descriptors sent over a Unix socket)."""
    return sys.platform.startswith("linux") and hasattr(socket, "send_fds")


class Unavailable(Exception):
    """The warm process could not start, or could not fork safely."""


class ForkedWorker:
    """A worker forked by the warm process: what the coordinator needs of a ``subprocess.Popen``."""

    def __init__(self, pid: int, zygote: "Zygote") -> None:
        self.pid, self._zygote = pid, zygote

    @property
    def returncode(self) -> int | None:
        return self._zygote.exit_code(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        code = self._zygote.wait_exit(self.pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
        return code

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class Zygote:
    """The coordinator's side: one warm process, started for one session."""

    def __init__(self, implementation: str | None, ctypes: list[str], environment: dict[str, str],
                 log_path: Path) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        preload = json.dumps({"implementation": implementation, "ctypes": ctypes})
        with open(log_path, "a") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _BOOT.format(harness=worker.HARNESS), str(theirs.fileno()), preload],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, pass_fds=(theirs.fileno(),),
                env=environment)
        theirs.close()
        self._socket = ours
        self._replies: queue.Queue = queue.Queue()
        self._exits: dict[int, int] = {}
        self._gone = False
        self._changed = threading.Condition()
        threading.Thread(target=self._listen, daemon=True).start()
        reply = self._reply(READY_TIMEOUT)
        if reply.get("event") != "ready":
            self.close()
            raise Unavailable(reply.get("why") or "the warm process did not start")

    def _listen(self) -> None:
        while True:
            try:
                data = self._socket.recv(_MESSAGE_BYTES)
            except OSError:
                data = b""
            message = json.loads(data) if data else None
            if message is not None and message.get("event") == "exit":
                with self._changed:
                    self._exits[message["pid"]] = message["code"]
                    self._changed.notify_all()
                continue
            if message is None:
                with self._changed:
                    self._gone = True
                    self._changed.notify_all()
                self._replies.put({"event": "gone", "why": "the warm process ended"})
                return
            self._replies.put(message)

    def _reply(self, timeout: float) -> dict[str, Any]:
        try:
            return self._replies.get(timeout=timeout)
        except queue.Empty:
            return {"event": "silent", "why": f"the warm process said nothing for {timeout:g} s"}

    def fork(self, argv: list[str], cwd: Path, environment: dict[str, str], fds: tuple[int, int, int]) -> ForkedWorker:
        """Fork a worker running ``worker.main(argv)`` in ``cwd``; ``fds``: its two channel ends and its log."""
        request = json.dumps({"argv": argv, "cwd": str(cwd), "environment": environment}).encode()
        try:
            socket.send_fds(self._socket, [request], list(fds))
        except OSError as error:
            raise Unavailable(f"the warm process cannot be reached ({error})") from None
        reply = self._reply(READY_TIMEOUT)
        if reply.get("event") != "forked":
            raise Unavailable(reply.get("why") or f"the warm process answered {reply.get('event')}")
        return ForkedWorker(reply["pid"], self)

    def exit_code(self, pid: int) -> int | None:
        with self._changed:
            return self._lost_code(pid)

    def wait_exit(self, pid: int, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while self._lost_code(pid) is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                # woken by an exit message; without the warm process, only /proc tells
                self._changed.wait(_GONE_POLL if left is None else min(left, _GONE_POLL))
            return self._lost_code(pid)

    def _lost_code(self, pid: int) -> int | None:
        """The worker's exit status; where the warm process is gone and cannot tell, 1 once the worker is gone."""
        if pid in self._exits:
            return self._exits[pid]
        if self._gone and not Path(f"/proc/{pid}").exists():
            return 1
        return None

    def close(self) -> None:
        """End the warm process (its workers go on until they are told to quit)."""
        try:
            self._socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._socket.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# -- the warm process


def _preload(implementation: str | None, ctypes: list[str]) -> None:
    """What every worker does before its tests: import pytest, this plugin and the WebGPU package
    the job's adapter uses (known from the first session), and parse the C types the workers
    before used (``measurement.gpu.parsed_ctypes``)."""
    import pytest  # noqa: F401
    from pytest_dispatch.measurement import gpu

    worker.import_instrument()

    if implementation:
        gpu.import_implementation(implementation)
        gpu.parse_ctypes(implementation, ctypes)


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def serve(fd: int, preload: str) -> int:
    """The warm process: preload, then fork a worker for each request until the job closes the socket."""
    link = socket.socket(fileno=fd)

    def send(message: dict[str, Any]) -> None:
        link.send(json.dumps(message).encode())

    try:
        _preload(**json.loads(preload))
    except Exception as error:  # noqa: BLE001  the job then starts its workers the ordinary way
        send({"event": "unavailable", "why": f"the warm process could not import: {error}"})
        return 0
    if _threads() > 1:  # a forked child would lack them, and a lock one of them held
        send({"event": "unavailable", "why": "an imported module started a thread, so forking is not safe"})
        return 0
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sys.stdout.flush()
    sys.stderr.flush()
    send({"event": "ready"})
    while True:
        readable, _, _ = select.select([link, wake_read], [], [])
        if wake_read in readable:
            os.read(wake_read, 4096)
            _report_exits(send)
        if link not in readable:
            continue
        data, fds, _, _ = socket.recv_fds(link, _MESSAGE_BYTES, 3)
        if not data:
            return 0  # the job closed the socket; running workers end when told to quit
        request = json.loads(data)
        pid = os.fork()
        if pid == 0:
            _become_worker(request, fds, closing=(link.fileno(), wake_read, wake_write))
        for descriptor in fds:
            os.close(descriptor)
        send({"event": "forked", "pid": pid})


def _report_exits(send) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        send({"event": "exit", "pid": pid, "code": os.waitstatus_to_exitcode(status)})


def _become_worker(request: dict[str, Any], fds: list[int], closing: tuple[int, ...]) -> None:
    """In the forked child: become the worker the request describes; never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for descriptor in closing:
            os.close(descriptor)
        reads, writes, log = fds
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(devnull)
        os.close(log)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["environment"])
        code = worker.main(worker.with_channel(request["argv"], reads, writes))
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:  # noqa: BLE001  shown in the worker's log, which the job names
        traceback.print_exc()
    finally:
        worker.exit_now(code)
