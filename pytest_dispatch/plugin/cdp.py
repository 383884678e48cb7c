"""Chromium driven over its DevTools protocol on a pipe (``--remote-debugging-pipe``): no port,
no driver process, nothing another local user can reach.

A reader thread owns the pipe: it answers calls and hands events to each session's handlers at
once, so a realm paused at its start (a worker, a frame) is given the recorder and resumed while
the test's thread waits for anything else.  Handlers run on that thread and must not wait for
answers (``post`` sends without waiting; ``call`` waits, from the test's thread only).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import tempfile
import threading
from typing import Any, Callable

from pytest_dispatch.errors import PageError

Handler = Callable[[str, dict[str, Any]], None]


def failure(message: str) -> PageError:
    """A failure of the protocol itself: Chromium answered a call with an error, or it ended (its
    ``gone`` then says why). ``protocol`` tells it from a realm's failure, which is a PageError too;
    a call with no answer in time is a TimeoutError."""
    error = PageError(message)
    error.protocol = True
    return error


class Chromium:
    """One headless Chromium process on a pipe; ``call``/``post`` to the browser or a session."""

    def __init__(self, executable: str, args: tuple[str, ...]) -> None:
        self.profile = tempfile.mkdtemp(prefix="pytest-dispatch-chromium-")
        command = [executable, "--headless", "--remote-debugging-pipe", f"--user-data-dir={self.profile}",
                   "--no-startup-window", *args]
        self._to_browser, self._from_browser, self.process = _spawn(command)
        self._lock = threading.Lock()
        self._next = 0
        self._pending: dict[int, list[Any]] = {}  # id -> [event, result, error, callback]
        self.handlers: dict[str, Handler] = {}  # session id ("" the browser) -> its events
        self.gone: str | None = None  # why the browser can no longer be asked
        self._stderr_tail: list[str] = []
        threading.Thread(target=self._read, name="pytest-dispatch chromium", daemon=True).start()
        threading.Thread(target=self._drain_stderr, name="pytest-dispatch chromium stderr", daemon=True).start()
        threading.Thread(target=self._watch, name="pytest-dispatch chromium exit", daemon=True).start()

    def _watch(self) -> None:
        """The browser's end, even where a process it left holds the pipe open (a crash handler)."""
        status = self.process.reap()
        self._end(f"the browser ended (exit status {status})")

    def _drain_stderr(self) -> None:
        for line in iter(self.process.stderr.readline, b""):
            self._stderr_tail = (self._stderr_tail + [line.decode(errors="replace").strip()])[-20:]

    def last_words(self) -> str:
        """The browser's last line on stderr that says something (why it did not start, say)."""
        lines = [line for line in self._stderr_tail if line and "DevTools listening" not in line]
        return lines[-1] if lines else ""

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._from_browser, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            for raw in messages:
                try:
                    self._dispatch(json.loads(raw))
                except Exception:  # noqa: BLE001 - a handler's bug must not end the reader
                    pass
        status = self.process.wait(2)  # the pipe closes as the browser ends: its exit status says more
        self._end(f"the browser ended (exit status {status})" if status is not None
                  else "the browser's protocol pipe closed")

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "id" in message:
            with self._lock:
                waiter = self._pending.pop(message["id"], None)
            if waiter is not None:
                if "error" in message:
                    waiter[2] = failure(str(message["error"].get("message", message["error"])))
                else:
                    waiter[1] = message.get("result", {})
                callback = waiter[3]
                if callback is not None:
                    callback(waiter[1], waiter[2])
                waiter[0].set()
            return
        handler = self.handlers.get(message.get("sessionId", ""))
        if handler is not None:
            handler(message.get("method", ""), message.get("params", {}))

    def _end(self, reason: str) -> None:
        with self._lock:
            self.gone = self.gone or reason
            pending, self._pending = self._pending, {}
        for waiter in pending.values():
            waiter[2] = failure(self.gone)
            if waiter[3] is not None:
                waiter[3](None, waiter[2])
            waiter[0].set()

    def _send(self, method: str, params: dict[str, Any] | None, session: str,
              callback: Callable[[Any, Exception | None], None] | None) -> list[Any]:
        waiter: list[Any] = [threading.Event(), None, None, callback]
        with self._lock:
            if self.gone:
                waiter[2] = failure(self.gone)
            else:
                self._next += 1
                message: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
                if session:
                    message["sessionId"] = session
                self._pending[self._next] = waiter
                data = json.dumps(message).encode() + b"\0"
                try:
                    while data:
                        data = data[os.write(self._to_browser, data):]
                except OSError:
                    self._pending.pop(self._next, None)
                    waiter[2] = failure("the browser's protocol pipe closed")
        if waiter[2] is not None:  # never sent: answered now
            if callback is not None:
                callback(None, waiter[2])
            waiter[0].set()
        return waiter

    def post(self, method: str, params: dict[str, Any] | None = None, session: str = "",
             then: Callable[[Any, Exception | None], None] | None = None) -> None:
        """Send without waiting (from a handler); ``then(result, error)`` runs on the reader thread."""
        self._send(method, params, session, then)

    def call(self, method: str, params: dict[str, Any] | None = None, session: str = "",
             timeout: float = 30.0) -> dict[str, Any]:
        """Send and wait for the answer: its result, or a PageError (``failure``), or TimeoutError."""
        waiter = self._send(method, params, session, None)
        if not waiter[0].wait(timeout):
            raise TimeoutError(f"{method} had no answer in {timeout:g} s")
        if waiter[2] is not None:
            raise waiter[2]
        return waiter[1]

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.call("Browser.close", timeout=5)
            except (PageError, TimeoutError):
                pass
            if self.process.wait(5) is None:
                self.process.kill()
                self.process.wait(5)
        self._end("the browser was closed")
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)


class Process:
    """A started browser: its pid, its stderr, and its exit status once reaped (by one thread)."""

    def __init__(self, pid: int, stderr: Any) -> None:
        self.pid, self.stderr = pid, stderr
        self.returncode: int | None = None
        self._ended = threading.Event()

    def reap(self) -> int:
        """Wait for the end (the watching thread only); the exit status, or -signal."""
        _, status = os.waitpid(self.pid, 0)
        self.returncode = os.waitstatus_to_exitcode(status)
        self._ended.set()
        return self.returncode

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit status once it ended within ``timeout`` seconds (None: however long), else None."""
        self._ended.wait(timeout)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _spawn(command: list[str]) -> tuple[int, int, Process]:
    """Start ``command`` with the protocol on its fds 3 (commands in) and 4 (answers out), spawned
    (no Python runs in the child: safe beside this process's threads); our ends of both pipes."""
    to_browser_r, to_browser = os.pipe()
    from_browser, from_browser_w = os.pipe()
    errors_r, errors_w = os.pipe()
    # above 4 first, so that placing them on 3 and 4 never overwrites one with the other
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_browser_r, from_browser_w)]
    devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    actions = [(os.POSIX_SPAWN_DUP2, devnull, 0), (os.POSIX_SPAWN_DUP2, devnull, 1),
               (os.POSIX_SPAWN_DUP2, errors_w, 2), (os.POSIX_SPAWN_DUP2, high[0], 3),
               (os.POSIX_SPAWN_DUP2, high[1], 4)]
    try:
        executable = shutil.which(command[0]) or command[0]
        pid = os.posix_spawn(executable, command, os.environ, file_actions=actions)
    except OSError:
        for fd in (to_browser, from_browser, errors_r):
            os.close(fd)
        raise
    finally:
        for fd in (to_browser_r, from_browser_w, errors_w, devnull, *high):
            os.close(fd)
    return to_browser, from_browser, Process(pid, os.fdopen(errors_r, "rb"))
