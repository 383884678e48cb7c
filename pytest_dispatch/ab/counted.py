"""An A/B job in counted mode (``pytest --dispatch-ab=REF --dispatch-instructions``).

Host instructions are counted, not timed, so the two versions need no sessions of paired
rounds: each side runs once, counted under callgrind in a session of its own tree (both at
once: a count does not move with the load), and the head's instructions per call are judged
against the base's exactly as a counted run is judged against its baseline
(``gate.compare_instructions``); counts are compared exactly as always.  Before that, both
sides collect natively: a side that cannot collect stops the job before callgrind starts.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

import pytest

from pytest_dispatch.ab import coordinator, sidepaths
from pytest_dispatch.errors import JobError, Unavailable
from pytest_dispatch.ab.trees import source_roots
from pytest_dispatch.ab.worker import HARNESS
from pytest_dispatch.judgement import gate
from pytest_dispatch import storage
from pytest_dispatch.judgement.status import ExitCode, Status
from pytest_dispatch.measurement.instructions import Software, valgrind_executable


def _pytest_command(pytest_args: Sequence[str]) -> list[str]:
    """A side's pytest session, which names the test paths its tree lacks (``sidepaths``)."""
    return [sys.executable, "-m", "pytest", *pytest_args, "-p", "no:cacheprovider",
            "-p", "pytest_dispatch.ab.sidepaths"]


def _side_command(json_path: Path, pytest_args: Sequence[str]) -> list[str]:
    return _pytest_command([*pytest_args, "--dispatch-instructions", f"--dispatch-json={json_path}"])


def _side_env(side: str, folder: Path) -> dict[str, str]:
    # pytest-dispatch (the instrument) from the coordinator's installation, then the side's tree
    paths = [HARNESS, *source_roots(folder), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, coordinator.SIDE_ENV: side, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def _as_they_end(sides: dict, stop: Callable[[], bool]):
    """Each side as its process ends, first ended first; none more once ``stop()`` (a side that
    could not collect: nothing can be compared, so the other is not waited out under callgrind)."""
    pending = dict(sides)
    while pending and not stop():
        ended = [side for side, (process, _, _) in pending.items() if process.poll() is not None]
        for side in ended:
            yield side, pending.pop(side)
        if not ended:
            time.sleep(0.1)


def run_counted_job(base_folder: Path, head_folder: Path, pytest_args: Sequence[str], tolerance: float,
                    descriptions: tuple[str, str], out: Callable[[str], None] = print) -> int:
    """Count both sides, print one line per measurement and a summary; the exit status."""
    without_valgrind = _without_valgrind()
    if without_valgrind is None:
        stopped, notices = _collection_stops({"base": base_folder, "head": head_folder}, pytest_args)
        if stopped:
            for line in notices + stopped:
                out(f"A/B (counted): {line}")
            out("A/B (counted): nothing compared: a side collected no tests")
            return ExitCode.NOTHING_COMPARED
    with tempfile.TemporaryDirectory(prefix="pytest-dispatch-ab-counted-") as scratch:
        sides = {}
        for side, folder in (("base", base_folder), ("head", head_folder)):
            path = Path(scratch) / f"{side}.json"
            log = open(Path(scratch) / f"{side}.log", "w+")
            process = subprocess.Popen(_side_command(path, pytest_args), cwd=folder, env=_side_env(side, folder),
                                       stdout=log, stderr=subprocess.STDOUT)
            sides[side] = (process, path, log)
        how = ("both sides under callgrind" if without_valgrind is None
               else f"both sides timed, not counted ({without_valgrind})")
        out(f"A/B (counted): base {descriptions[0]}, head {descriptions[1]}: {how}")
        documents, head_failed, not_collected, notices = {}, False, [], []
        try:
            for side, (process, path, log) in _as_they_end(sides, lambda: bool(not_collected)):
                code = process.returncode
                log.seek(0)
                lines = [line for line in log.read().splitlines() if line.strip()]
                log.close()
                side_notices, side_not_collected = _said(side, lines)
                notices += side_notices
                not_collected += side_not_collected
                if not path.exists() and not not_collected and code != pytest.ExitCode.NO_TESTS_COLLECTED:
                    raise JobError(f"the {side} side wrote no results (exit {code}); its output ends: "
                                   f"{' | '.join(line[:200] for line in lines[-3:])}")
                if path.exists():
                    documents[side] = storage.load_document(path)
                head_failed |= side == "head" and code not in (0, pytest.ExitCode.NO_TESTS_COLLECTED)
        finally:  # stopped, or a side that failed: the other is not left running under callgrind
            for process, _, log in sides.values():
                log.close()
                if process.poll() is None:
                    process.terminate()  # a side's session ends its valgrind's process group on SIGTERM
                    try:
                        process.wait(10)
                    except subprocess.TimeoutExpired:
                        process.kill()
                        process.wait()
    for line in notices + not_collected:
        out(f"A/B (counted): {line}")
    if "head" in documents and "base" not in documents and not not_collected:
        return _new_only(documents["head"], head_failed, without_valgrind is None, out)
    if len(documents) < 2:
        out("A/B (counted): nothing compared: a side collected no tests")
        return ExitCode.NOTHING_COMPARED
    base_counted, head_counted = (storage.counted_of(documents[s]) for s in ("base", "head"))
    if base_counted is None or head_counted is None:
        raise JobError("a side was not counted (valgrind missing there?): run the job where valgrind is")
    differences = Software.from_dict(head_counted).differences(Software.from_dict(base_counted))
    job_gate = gate.Gate(storage.results_of(documents["base"]), comparable=True, software_differences=differences,
                         instruction_tolerance=tolerance)
    totals: dict[str, int] = {}
    regressed = False
    for result in storage.results_of(documents["head"]):
        test_verdicts = job_gate.judge(result)
        for line in test_verdicts.lines():
            out(f"{result.nodeid}: {line}")
        regressed |= bool(test_verdicts.failure_lines)
        for verdict in test_verdicts.instructions.values():
            totals[verdict.status] = totals.get(verdict.status, 0) + 1
        totals[Status.NEW] = totals.get(Status.NEW, 0) + len(test_verdicts.missing)
    summary = ", ".join(f"{n} {status}" for status, n in sorted(totals.items()) if n) or "nothing compared"
    out(f"A/B (counted): {summary} (host instructions per call, tolerance {100 * tolerance:g}%)")
    if head_failed:
        out("A/B (counted): a head test failed (see its session's output with -p no:dispatch_ab)")
    return ExitCode.FAILED if regressed or head_failed or not_collected else ExitCode.OK


def _without_valgrind() -> str | None:
    """Why the sides will not run under callgrind, or None where they will (without valgrind
    they run timed, at native speed: a look at their collection first would only add its cost)."""
    try:
        valgrind_executable()
    except Unavailable as error:
        return str(error)
    return None


def _collection_stops(folders: dict[str, Path], pytest_args: Sequence[str]) -> tuple[list[str], list[str]]:
    """Both sides' collection, natively and at once, before either starts under callgrind (10-50x
    slower): the lines of the files a side could not collect, where that stops its session, and
    the notices of the test paths a side lacks. ([], []) where no side would stop."""
    # counted mode off (its session would start again under callgrind), from the command line or the ini
    natively = [arg for arg in pytest_args if arg != "--dispatch-instructions"] + ["-o", "dispatch_instructions=false"]
    processes = {side: subprocess.Popen(_pytest_command([*natively, "--collect-only", "-q"]), cwd=folder,
                                        env=_side_env(side, folder), stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
                 for side, folder in folders.items()}
    try:
        outputs = {side: process.communicate()[0] for side, process in processes.items()}
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
    stopped, notices = [], []
    for side, output in outputs.items():
        side_notices, not_collected = _said(side, [line for line in output.splitlines() if line.strip()])
        notices += side_notices
        if processes[side].returncode == pytest.ExitCode.INTERRUPTED:  # its counted session would stop there too
            stopped += not_collected
    return (stopped, notices) if stopped else ([], [])


def _said(side: str, lines: list[str]) -> tuple[list[str], list[str]]:
    """What a side's session output says, as the job's lines: the test paths its tree lacks, and
    the files it could not collect."""
    other = "head" if side == "base" else "base"
    notices = [f"{side}: {line.removeprefix(sidepaths.MISSING)} is not in this tree: its tests run on the {other} alone"
               for line in lines if line.startswith(sidepaths.MISSING)]
    return notices, [f"{side}: could not collect {error}" for error in _collection_errors(lines)]


def _new_only(head: dict, head_failed: bool, counted: bool, out: Callable[[str], None]) -> int:
    """The base has none of the tests (the pull request that adds the first ones): the head's
    measurements are new, and the job passes unless a head test failed."""
    new = 0
    for result in storage.results_of(head):
        for measurement in result.measurements:
            new += 1
            out(f"{result.nodeid}: {measurement.name} new: {measurement.dispatches} dispatches per call, "
                "only in the head")
    out(f"A/B (counted): nothing to compare yet: the base has none of these tests; {new} measurement(s) "
        f"{'counted' if counted else 'ran'} on the head alone (new)")
    if head_failed:
        out("A/B (counted): a head test failed (see its session's output with -p no:dispatch_ab)")
    return ExitCode.FAILED if head_failed else ExitCode.OK


def _collection_errors(lines: list[str]) -> list[str]:
    """'file: the error's last line' for each file a pytest session's output says it could not collect."""
    errors: dict[str, str] = {}
    current = None
    for line in lines:
        header = re.fullmatch(r"_+ ERROR collecting (.+?) _+", line.strip())
        if header:
            current = header.group(1)
            errors[current] = ""
        elif line.startswith("=") or (line.startswith("_") and line.rstrip("_ ") == ""):
            current = None
        elif current and line.startswith("E "):
            errors[current] = line[1:].strip()[:300]
    return [f"{name}: {error}" if error else name for name, error in errors.items()]
