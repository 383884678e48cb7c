"""A WGSL compile error as the test's failure: the shader, the line and column, the source
line with a caret, and where the test compiled it; no wgpu frames."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from pytest_dispatch._meta import PACKAGE_DIR

_HEADLINE = re.compile(r"Shader (?:'(?P<label>[^']*)' )?(?P<kind>\w+) error: (?P<message>.*)")
_LOCATION = re.compile(r"┌─ [^:\s]*:(?P<line>\d+):(?P<column>\d+)")
_SNIPPET_LINE = re.compile(r"^\s*(?P<number>\d+) │ (?P<text>.*)$")


def is_shader_error(error: BaseException) -> bool:
    """A wgpu error raised by ``create_shader_module`` for bad WGSL."""
    return type(error).__module__.startswith(("wgpu", "wgpudawn")) and _HEADLINE.search(str(error)) is not None


def _source_of(traceback) -> str | None:
    """The WGSL given to create_shader_module: its ``code`` argument, in the innermost frame
    that has one."""
    for entry in reversed(list(traceback)):
        code = entry.frame.f_locals.get("code")
        if isinstance(code, str) and entry.frame.code.name == "create_shader_module":
            return code
    return None


def _where(traceback, invocation_dir: str | os.PathLike) -> str:
    """``path:line: `` of the innermost frame outside wgpu and this package (the user's code)."""
    wgpu_dirs = []
    for package in ("wgpu", "wgpudawn"):
        module = sys.modules.get(package)
        if module is not None and getattr(module, "__file__", None):
            wgpu_dirs.append(Path(module.__file__).resolve().parent)
    for entry in reversed(list(traceback)):
        path = Path(entry.path).resolve()
        if path.is_relative_to(PACKAGE_DIR) or any(path.is_relative_to(d) for d in wgpu_dirs):
            continue
        return f"{os.path.relpath(path, invocation_dir)}:{entry.lineno + 1}: "
    return ""


def describe(error: BaseException, source: str | None = None, where: str = "") -> str:
    """The failure's text: one headline, then the source line before, the line itself and a caret."""
    text = str(error)
    headline = _HEADLINE.search(text)
    label = headline["label"] if headline and headline["label"] is not None else "?"
    message = headline["message"].strip() if headline else text.strip().splitlines()[-1]
    kind = headline["kind"] if headline else "compile"
    location = _LOCATION.search(text)
    if location is None:
        return f"{where}WGSL {kind} error in shader {label!r}: {message}"
    line, column = int(location["line"]), int(location["column"])
    lines = [f"{where}WGSL {kind} error in shader {label!r} at line {line}, column {column}: {message}"]
    source_lines = source.splitlines() if source is not None else None
    if source_lines is None or line > len(source_lines):
        snippet = {int(m["number"]): m["text"] for m in map(_SNIPPET_LINE.match, text.splitlines()) if m}
        shown = [(line, snippet[line])] if line in snippet else []
    else:
        shown = [(n, source_lines[n - 1]) for n in range(max(1, line - 1), line + 1)]
    gutter = len(str(line))
    for number, content in shown:
        lines.append(f"  {number:>{gutter}} | {content}")
    if shown:
        lines.append(f"  {'':>{gutter}} | {' ' * (column - 1)}^")
    return "\n".join(lines)


def failure_text(excinfo, invocation_dir: str | os.PathLike) -> str:
    """``describe`` for a pytest ExceptionInfo: the source from wgpu's frame, the user's line."""
    return describe(excinfo.value, _source_of(excinfo.traceback), _where(excinfo.traceback, invocation_dir))
