"""The gpu_page fixture's HTTP server: 127.0.0.1, a free port, each test's folder mounted under a
path of its own, cross-origin isolated (COOP/COEP: 5 µs timers and SharedArrayBuffer in pages),
nothing cached; every file served as it is on disk."""

from __future__ import annotations

import http.server
import os
import sys
import threading
import urllib.parse
from pathlib import Path
from typing import Any

BLANK = "/__dispatch__/blank.html"


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

    def translate_path(self, path: str) -> str:
        parts = urllib.parse.unquote(urllib.parse.urlsplit(path).path).lstrip("/").split("/", 1)
        root = self.server.mounts.get(parts[0])
        if root is None or len(parts) < 2:
            return str(Path(os.devnull) / "missing")
        target = (root / parts[1]).resolve()
        return str(target) if target.is_relative_to(root) else str(Path(os.devnull) / "missing")

    def do_GET(self) -> None:
        if self.path == BLANK:
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


class PageServer(http.server.ThreadingHTTPServer):
    """127.0.0.1 on a free port; each folder mounted under a path of its own."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.mounts: dict[str, Path] = {}
        self._thread = threading.Thread(target=self.serve_forever, name="pytest-dispatch pages", daemon=True)
        self._thread.start()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A browser that drops a connection (a page closed mid-load) is no error to print."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    @property
    def blank(self) -> str:
        """An empty page of this server's origin (the adapter is probed there)."""
        return self.origin + BLANK

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def mount(self, folder: Path) -> str:
        """The URL of ``folder``'s root (ending in /)."""
        folder = folder.resolve()
        for name, root in self.mounts.items():
            if root == folder:
                return f"{self.origin}/{name}/"
        name = f"m{len(self.mounts)}"
        self.mounts[name] = folder
        return f"{self.origin}/{name}/"

    def close(self) -> None:
        self.shutdown()
        self.server_close()
