"""The gpu_page fixture's HTTP server: 127.0.0.1, a free port, each test's folder mounted under a
path of its own, cross-origin isolated (COOP/COEP: 5 µs timers and SharedArrayBuffer in pages),
nothing cached; every file served as it is on disk.

It serves the session's browser only: every path starts with a random secret of the session
(another local user can reach the port, not guess the secret, so a test's private folder stays
private), a request whose ``Host`` is not this server's is refused (a DNS-rebound page names its
own host), and nothing outside the mounted folders is served (links are followed, then checked)."""

from __future__ import annotations

import http.server
import os
import secrets
import threading
import urllib.parse
from pathlib import Path
from typing import Any


BLANK = "__dispatch__/blank.html"
_MISSING = str(Path(os.devnull) / "missing")  # what a path outside every mounted folder is served as


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the mounted folders cross-origin isolated."""

    server: "PageServer"
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".js": "text/javascript",
                      ".mjs": "text/javascript", ".wgsl": "text/plain", ".json": "application/json",
                      ".wasm": "application/wasm"}

    def end_headers(self) -> None:
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if self.headers.get("Host") != self.server.host:
            self.send_error(421, "Misdirected Request")  # DNS rebinding: a page of another host
            return False
        return True

    def _relative(self, path: str) -> str | None:
        """The request's path after the session's secret; None without the secret or when
        undecodable (a NUL byte, a bad escape)."""
        try:
            text = urllib.parse.unquote(urllib.parse.urlsplit(path).path, errors="strict")
        except (ValueError, UnicodeDecodeError):
            return None
        prefix = f"/{self.server.secret}/"
        if "\x00" in text or not text.startswith(prefix):
            return None
        return text[len(prefix):]

    def translate_path(self, path: str) -> str:
        relative = self._relative(path)
        parts = (relative or "").split("/", 1)
        root = self.server.mounts.get(parts[0])
        if relative is None or root is None or len(parts) < 2:
            return _MISSING
        try:
            target = (root / parts[1]).resolve()
        except (OSError, ValueError, RuntimeError):  # a link loop, a name too long
            return _MISSING
        return str(target) if target.is_relative_to(root) else _MISSING

    def do_GET(self) -> None:
        if self._relative(self.path) == BLANK:
            return self._send(b"<!doctype html><title>pytest-dispatch</title>", "text/html")
        return super().do_GET()

    def _send(self, body: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a test's output is not the place for an access log


# How often the serving thread looks whether close() was called: close() waits for that look (the
# standard half second was most of the end of a short page session); a look is one idle select().
_CLOSE_POLL = 0.05


class PageServer(http.server.ThreadingHTTPServer):
    """127.0.0.1 on a free port; each folder mounted under a path of its own."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.mounts: dict[str, Path] = {}
        self.secret = secrets.token_urlsafe(24)
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": _CLOSE_POLL},
                                        name="pytest-dispatch pages", daemon=True)
        self._thread.start()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Nothing is printed: a browser that drops a connection (a page closed mid-load) or a
        malformed request is no error of the test, and a traceback from this thread would land
        in the middle of pytest's output."""

    @property
    def host(self) -> str:
        """The ``Host`` header of a request to this server."""
        return f"127.0.0.1:{self.server_address[1]}"

    @property
    def origin(self) -> str:
        return f"http://{self.host}"

    @property
    def base(self) -> str:
        """Where everything this server serves is (no / at the end): its origin and the
        session's secret."""
        return f"{self.origin}/{self.secret}"

    @property
    def blank(self) -> str:
        """An empty page of this server's origin (the adapter is probed there)."""
        return f"{self.base}/{BLANK}"

    def mount(self, folder: Path) -> str:
        """The URL of ``folder``'s root (ending in /)."""
        folder = folder.resolve()
        for name, root in self.mounts.items():
            if root == folder:
                return f"{self.base}/{name}/"
        name = f"m{len(self.mounts)}"
        self.mounts[name] = folder
        return f"{self.base}/{name}/"

    def mounted(self) -> dict[str, Path]:
        """Each mounted folder by its URL (ending in /)."""
        return {f"{self.base}/{name}/": root for name, root in self.mounts.items()}

    def close(self) -> None:
        self.shutdown()
        self.server_close()
