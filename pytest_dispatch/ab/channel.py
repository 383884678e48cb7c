"""JSON lines over a pair of inherited pipes: only the job's processes can reach them."""

from __future__ import annotations

import json
import os
import select
import time
from typing import Any


class Channel:
    """One end of a two-pipe link; messages are JSON objects, one per line."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd, self.write_fd = read_fd, write_fd
        self._buffer = b""

    def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message, allow_nan=False) + "\n").encode()
        try:
            while data:
                data = data[os.write(self.write_fd, data):]
        except (BrokenPipeError, OSError) as error:
            raise EOFError(str(error)) from None

    def receive(self, timeout: float | None = None) -> dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.read_fd], [], [], wait)
            if not ready:
                raise TimeoutError(f"no message in {timeout:g} s")
            chunk = os.read(self.read_fd, 1 << 16)
            if not chunk:
                raise EOFError("the other end closed the channel")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        message = json.loads(line)
        if not isinstance(message, dict):
            raise ValueError(f"not a message: {line[:80]!r}")
        return message

    def close(self) -> None:
        """Close both pipes, once: a number closed again may by then be another file's."""
        for fd in (self.read_fd, self.write_fd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.read_fd = self.write_fd = -1
