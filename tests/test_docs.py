"""Every runnable code block of README.md and docs/*.md runs, so a snippet that fails fails CI.

The convention, in a fence's info string (the words after the language; renderers show only the
language):
- ```python and ```sh blocks run; any other language (text, js, yaml, none) does not.
- A doc's blocks run in a fresh folder holding a copy of examples/ (the commands name
  `examples/...` as from a clone's root): its Python blocks with tests as test modules in one
  pytest session, the others as scripts (`python FILE`); in another fresh folder, its shell
  blocks, in order, in one bash with `set -e` and this venv's bin on PATH (so a shell block uses
  no file that a Python block's run leaves). The shell blocks run with timing off
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
import functools
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


def _runs(doc: Path, language: str) -> bool:
    return any(b.language == language and not (b.skip or b.source) for b in blocks(doc))


PYTHON_DOCS = [doc for doc in DOCS if _runs(doc, "python")]
SHELL_DOCS = [doc for doc in DOCS if _runs(doc, "sh")]

def test_every_python_or_shell_block_runs_or_says_why_not():
    """A runnable block either runs, or is an excerpt of a file that runs, or names its reason."""
    runnable = [block for block in ALL_BLOCKS if block.language in RUNS]
    assert runnable, "no ```python or ```sh block found"
    for block in runnable:
        assert not (block.skip and block.source), f"{block.where}: skip or from=, not both"
        assert block.skip is None or len(block.skip) > 10, f"{block.where}: say what the block needs"


@pytest.mark.parametrize("block", [block for block in ALL_BLOCKS if block.skip], ids=lambda block: block.where)
def test_a_block_that_cannot_run_here_is_a_skip_with_its_reason(block):
    """Listed in every run's summary (`-rs`), so the blocks not run stay in sight."""
    pytest.skip(f"{block.where}: {block.skip}")


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


@dataclasses.dataclass
class Folder:
    """A doc's fresh folder: a copy of examples/ and the doc's blocks written in it."""
    path: Path
    env: dict[str, str]
    tests: list[str] = dataclasses.field(default_factory=list)  # Python blocks that define tests
    scripts: list[str] = dataclasses.field(default_factory=list)  # the other Python blocks
    shell: list[str] = dataclasses.field(default_factory=list)  # bash lines: each shell block, its doc line echoed


def _folder(doc: Path, tmp_path: Path) -> Folder:
    shutil.copytree(ROOT / "examples", tmp_path / "examples",
                    ignore=shutil.ignore_patterns("node_modules", "__pycache__", ".dispatch"))
    if (ROOT / "node_modules").is_dir():  # the project's npm packages (Node's webgpu), as set-up installed them
        (tmp_path / "node_modules").symlink_to(ROOT / "node_modules")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTEST_ADDOPTS", None)
    folder = Folder(tmp_path, env)
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
            (folder.tests if re.search(r"^def test_", block.text, re.M) else folder.scripts).append(path)
        elif block.language == "sh":
            folder.shell += [f"echo '--- {block.where}' >&2", block.text]
    return folder


# A doc's Python blocks and its shell blocks are two tests, each in a fresh folder (every block
# written in both), so that pytest-xdist runs a doc's two halves side by side: a shell block
# uses no file a Python block's run leaves behind.
@pytest.mark.parametrize("doc", PYTHON_DOCS, ids=lambda doc: doc.name)
def test_the_docs_python_blocks_run(doc, tmp_path, gpu_info):
    """The doc's Python blocks: those without tests as scripts, then the others in one pytest
    session."""
    folder = _folder(doc, tmp_path)
    for path in folder.scripts:
        done = _run([sys.executable, path], tmp_path, folder.env)
        assert done.returncode == 0, f"{doc.name}'s {path}:\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
    if folder.tests:
        done = _run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", *folder.tests], tmp_path,
                    folder.env)
        summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        assert done.returncode == 0, f"{doc.name}'s Python blocks:\n{done.stdout[-4000:]}{done.stderr[-2000:]}"
        if " skipped" in summary:
            pytest.skip(f"{doc.name}'s Python blocks skipped: {summary}; " + " ".join(
                line for line in done.stdout.splitlines() if line.startswith("SKIPPED"))[:500])


@pytest.mark.parametrize("doc", SHELL_DOCS, ids=lambda doc: doc.name)
def test_the_docs_shell_blocks_run(doc, tmp_path, gpu_info):
    """The doc's shell blocks, in order, in one bash with `set -e`."""
    folder = _folder(doc, tmp_path)
    done = _run(["bash", "-c", "\n".join(["set -euo pipefail", *folder.shell])], tmp_path,
                {**folder.env, "PYTEST_ADDOPTS": "--dispatch-disable-timing"})
    assert done.returncode == 0, (f"{doc.name}'s shell blocks (the last '---' names the block that failed):\n"
                                  f"{done.stderr[-3000:]}\n{done.stdout[-3000:]}")


# --------------------------------------------------------------------------
# citations of RESULTS.md and of its raw outputs

RESULTS = ROOT / "docs" / "RESULTS.md"
CITING = sorted(path for path in {*ROOT.glob("pytest_dispatch/**/*.py"), *ROOT.glob("tests/**/*.py"),
                                   *ROOT.glob("benchmarks/*"), *ROOT.glob("scripts/*"), *ROOT.glob("examples/**/*.py"),
                                   *DOCS} - {RESULTS, Path(__file__).resolve()} if path.is_file())
CODE_DIRS = ("pytest_dispatch", "tests", "benchmarks", "scripts", "examples")
# `RESULTS.md §N`, `RESULTS.md, section N`, `[RESULTS.md](RESULTS.md) §N`; `RESULTS.md@COMMIT §N`: that
# section as it stood at COMMIT (the lab notebook, for figures the current page no longer holds)
CITATION = re.compile(r"RESULTS\.md(?:\]\([\w/.]*RESULTS\.md\))?(?:@([0-9a-f]{7,40}))?(?:,?\s+(?:§|section\s+)(\d+))?")
# a measured figure: a percentage, a ratio (x1.013) or a fraction (0.071); matched rounded to its digits
FIGURE = re.compile(r"(?<![\w.])(?:x(\d+\.\d+)|(\d+(?:\.\d+)?)%|(0\.\d+))(?![\w.])")
SENTENCE_END = re.compile(r"[.;:](?:\s|$)|\n\s*\n")


def _sections(text: str) -> dict[int, str]:
    return {int(match.group(1)): match.group(0)
            for match in re.finditer(r"^## (\d+)\. .*?(?=^## |\Z)", text, re.S | re.M)}


@functools.lru_cache(maxsize=None)
def _at_commit(commit: str) -> dict[int, str] | None:
    """RESULTS.md's sections as they stood at ``commit``; None where this clone lacks it (shallow)."""
    done = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:docs/RESULTS.md"], capture_output=True,
                          text=True)
    return _sections(done.stdout) if done.returncode == 0 else None


def _numbers(text: str) -> list[str]:
    return re.findall(r"\d+(?:\.\d+)?", text.replace(",", ""))


def _holds(section: str, figure: str) -> bool:
    """The section has the figure, as written or more precisely (0.3% is held by 0.316%)."""
    digits = len(figure.split(".")[1]) if "." in figure else 0
    return any(round(float(number), digits) == float(figure) for number in _numbers(section))


def _plain(text: str) -> str:
    """Comment and docstring markers out, so a sentence reads across its lines."""
    return re.sub(r"^[ \t]*(?:#+|\"\"\"|//)[ \t]?", "", text, flags=re.M)


def _citations():
    for path in CITING:
        text = _plain(path.read_text())
        for match in CITATION.finditer(text):
            start = max((end.end() for end in SENTENCE_END.finditer(text, 0, match.start())), default=0)
            yield path, text[:match.start()].count("\n") + 1, match.group(1), match.group(2), text[start:match.start()]


def test_every_citation_of_results_names_a_section_that_holds_its_figures():
    sections, problems, unread = _sections(RESULTS.read_text()), [], set()
    for path, line, commit, number, sentence in _citations():
        where = f"{path.relative_to(ROOT)}:{line}"
        if number is None:
            if path.relative_to(ROOT).parts[0] in CODE_DIRS:
                problems.append(f"{where}: cites RESULTS.md without a section")
            continue
        cited = _at_commit(commit) if commit else sections
        if cited is None:
            unread.add(commit)
            continue
        if int(number) not in cited:
            problems.append(f"{where}: RESULTS.md{'@' + commit if commit else ''} has no section {number}")
            continue
        for figure in FIGURE.findall(sentence):
            value = next(part for part in figure if part)
            if not _holds(cited[int(number)], value):
                problems.append(f"{where}: {value} is not in RESULTS.md{'@' + commit if commit else ''} §{number}")
    assert not problems, "\n".join(problems)
    if unread:
        pytest.skip(f"the citations of RESULTS.md@{', @'.join(sorted(unread))} not checked: not in this clone's history")


def _archived(folder: Path) -> set[str]:
    import tarfile

    archive = folder / "raw.tar.gz"
    if not archive.is_file():
        return set()
    with tarfile.open(archive) as tar:
        return {member.name for member in tar.getmembers()}


def test_every_raw_output_results_md_names_exists():
    """`results/FOLDER/FILE` (or a prefix of files, `lavapipe_observer_*`) is in docs/results, or in
    its folder's raw.tar.gz."""
    missing = []
    for cited in sorted(set(re.findall(r"results/([\w.-]+)/([\w./*-]*)", RESULTS.read_text()))):
        folder, name = ROOT / "docs" / "results" / cited[0], cited[1].rstrip("*")
        present = [str(path.relative_to(folder)) for path in folder.rglob("*")] if folder.is_dir() else []
        if not folder.is_dir() or not any(entry.startswith(name) for entry in [*present, *_archived(folder)]):
            missing.append("/".join(cited))
    assert not missing, f"RESULTS.md names raw outputs that docs/results lacks: {missing}"


def test_the_raw_outputs_stay_few():
    """One folder per run behind RESULTS.md, its files packed in raw.tar.gz beside those named."""
    assert len([path for path in (ROOT / "docs" / "results").rglob("*") if path.is_file()]) <= 60


# a path of this repository named in prose must exist (tests/ is left out: its node ids are made up;
# `git show COMMIT:PATH` names a file of history)
REPOSITORY_PATH = re.compile(r"(?<![\w./:-])((?:benchmarks|scripts|tests|examples|docs|pytest_dispatch)/[\w/.+-]*"
                             r"\.(?:py|md|sh|yml|js|json|html|cjs|wgsl|txt|png))(?!::)")  # not a test's node id


def test_every_file_the_docs_and_scripts_name_exists():
    missing = []
    for path in [*CITING, RESULTS]:
        if path.relative_to(ROOT).parts[0] == "tests":
            continue
        text = re.sub(r"file=\S+", "", path.read_text())  # a doc block's own file, written when it runs
        for match in REPOSITORY_PATH.finditer(text):
            name = match.group(1)
            if not (ROOT / name).exists() and not (path.parent / name).exists():
                missing.append(f"{path.relative_to(ROOT)}:{text[:match.start()].count(chr(10)) + 1}: {name}")
    assert not missing, "\n".join(missing)
