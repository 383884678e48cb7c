"""Every runnable code block of README.md and docs/*.md runs, so a snippet that fails fails CI.

The convention, in a fence's info string (the words after the language; renderers show only the
language):
- ```python and ```sh blocks run; any other language (text, js, yaml, none) does not.
- A doc's blocks run in a fresh folder holding a copy of examples/ (the commands name
  `examples/...` as from a clone's root): its Python blocks with tests as test modules in one
  pytest session, the others as scripts (`python FILE`), then its shell blocks, in order, in one
  bash with `set -e` and this venv's bin on PATH. The shell blocks run with timing off
  (`--dispatch-disable-timing` in PYTEST_ADDOPTS): they re-run examples whose time verdicts their
  own runs check, and here their counts, budgets, saved runs and history are what is checked.
- `file=PATH` writes the block to PATH in that folder (a test beside the page it opens, or a page
  file) instead of `test_<doc>_<n>.py`.
- `from=PATH` marks an excerpt of a file of the repository: not run; its lines must appear in that
  file, in order (the file itself runs where its own doc or test runs it).
- `skip: REASON` marks a block that needs what the suite has not (root, a CI job's repository, a
  download): not run; the reason says what.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNS = ("python", "sh")
FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```[ \t]*$", re.S | re.M)
OPTION = re.compile(r"(file|from)=(\S+)|skip:\s*(.+)")
RUN_TIMEOUT_S = 420


@dataclasses.dataclass(frozen=True)
class Block:
    doc: Path
    line: int
    language: str
    text: str
    file: str | None = None
    source: str | None = None  # from=
    skip: str | None = None

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def blocks(doc: Path) -> list[Block]:
    """The fenced blocks of a doc, with the options of their info strings."""
    text = doc.read_text()
    found = []
    for match in FENCE.finditer(text):
        language, info, body = match.groups()
        options: dict[str, str] = {}
        for option in OPTION.finditer(info):
            key, value, reason = option.groups()
            options["skip" if reason else ("source" if key == "from" else key)] = (reason or value).strip()
        leftover = OPTION.sub("", info).strip()
        assert not leftover, f"{doc.name}:{text[:match.start()].count(chr(10)) + 1}: unknown fence option {leftover!r}"
        found.append(Block(doc, text[:match.start()].count("\n") + 1, language, body, **options))
    return found


ALL_BLOCKS = [block for doc in DOCS for block in blocks(doc)]
RUN_DOCS = [doc for doc in DOCS if any(b.language in RUNS and not (b.skip or b.source) for b in blocks(doc))]


def test_every_python_or_shell_block_runs_or_says_why_not():
    """A runnable block either runs, or is an excerpt of a file that runs, or names its reason."""
    runnable = [block for block in ALL_BLOCKS if block.language in RUNS]
    assert runnable, "no ```python or ```sh block found"
    for block in runnable:
        assert not (block.skip and block.source), f"{block.where}: skip or from=, not both"
        assert block.skip is None or len(block.skip) > 10, f"{block.where}: say what the block needs"


@pytest.mark.parametrize("block", [block for block in ALL_BLOCKS if block.source], ids=lambda block: block.where)
def test_an_excerpt_is_what_its_file_holds(block):
    source = ROOT / block.source
    assert source.is_file(), f"{block.where}: from={block.source} is not a file of the repository"
    lines = iter(line.strip() for line in source.read_text().splitlines())
    for wanted in (line.strip() for line in block.text.splitlines()):
        if wanted and not any(line == wanted for line in lines):
            pytest.fail(f"{block.where}: {wanted!r} is not in {block.source} (in this order)")


def _run(command: list[str], folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


@pytest.mark.parametrize("doc", RUN_DOCS, ids=lambda doc: doc.name)
def test_the_docs_blocks_run(doc, tmp_path, gpu_info):
    """The doc's Python blocks in one pytest session, then its shell blocks in one bash, in a fresh
    folder with a copy of examples/."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples",
                    ignore=shutil.ignore_patterns("node_modules", "__pycache__", ".dispatch"))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTEST_ADDOPTS", None)
    tests, scripts, script = [], [], ["set -euo pipefail"]
    for number, block in enumerate(blocks(doc)):
        if block.skip or block.source:
            continue
        if block.file:
            (tmp_path / block.file).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / block.file).write_text(block.text)
        if block.language == "python":
            path = block.file or f"{'test_' if 'def test_' in block.text else ''}{doc.stem.lower()}_{number}.py"
            if not block.file:
                (tmp_path / path).write_text(block.text)
            (tests if re.search(r"^def test_", block.text, re.M) else scripts).append(path)
        elif block.language == "sh":
            script += [f"echo '--- {block.where}' >&2", block.text]
    for path in scripts:
        done = _run([sys.executable, path], tmp_path, env)
        assert done.returncode == 0, f"{doc.name}'s {path}:\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
    if tests:
        done = _run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", *tests], tmp_path, env)
        summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        assert done.returncode == 0, f"{doc.name}'s Python blocks:\n{done.stdout[-4000:]}{done.stderr[-2000:]}"
        if " skipped" in summary:
            pytest.skip(f"{doc.name}'s Python blocks skipped: {summary}; " + " ".join(
                line for line in done.stdout.splitlines() if line.startswith("SKIPPED"))[:500])
    if len(script) > 1:
        done = _run(["bash", "-c", "\n".join(script)], tmp_path,
                    {**env, "PYTEST_ADDOPTS": "--dispatch-disable-timing"})
        assert done.returncode == 0, (f"{doc.name}'s shell blocks (the last '---' names the block that failed):\n"
                                      f"{done.stderr[-3000:]}\n{done.stdout[-3000:]}")
