"""``pytest-dispatch ab`` and ``pytest --dispatch-ab``: one implementation of both."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
from pathlib import Path
from typing import Callable, Iterator, Sequence

from pytest_dispatch import options
from pytest_dispatch.errors import JobError, UsageError
from pytest_dispatch.ab import coordinator, trees
from pytest_dispatch import storage
from pytest_dispatch.judgement.status import ExitCode
from pytest_dispatch.presentation import ab as ab_report


def worker_args(args: Sequence[str]) -> list[str]:
    """The pytest arguments for the workers: the user's, without the coordinator's options
    (those the option table marks ``coordinator``)."""
    coordinator_options = {option.flag: option for option in options.COORDINATOR_OPTIONS}
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        flag = arg.split("=", 1)[0]
        if flag in coordinator_options:
            skip = "=" not in arg and not coordinator_options[flag].bare
            continue
        kept.append(arg)
    return kept


def _refuse_parallel(args: Sequence[str]) -> None:
    for arg in args:
        if arg in ("-n", "--numprocesses", "--dist") or arg.startswith(("-n=", "--numprocesses=", "--dist=")) \
                or (arg.startswith("-n") and arg[2:].isdigit()):
            raise UsageError(f"{arg}: an A/B job runs each side in one process (the coordinator takes turns "
                             "on the GPU); drop the pytest-xdist option")


def describe_folder(folder: Path) -> str:
    """'path (commit abc123, uncommitted changes)' where the folder is in git (and git installed)."""
    if shutil.which("git") is None:
        return str(folder)
    head = subprocess.run(["git", "-C", str(folder), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                          text=True)
    if head.returncode != 0:
        return str(folder)
    dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return f"{folder} ({head.stdout.strip()}{', uncommitted changes' if dirty else ''})"


STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextlib.contextmanager
def _stopped_by_signals() -> Iterator[list[int]]:
    """SIGINT, SIGTERM and SIGHUP stop the job as Ctrl-C does (KeyboardInterrupt), so that on
    the way out its workers are killed and its checkout removed; a second signal while that
    happens is ignored.  Yields the list the signal's number is put in."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def stop(signum: int, _frame) -> None:
        if not received:
            received.append(signum)
            raise KeyboardInterrupt

    previous = {number: signal.signal(number, stop) for number in STOP_SIGNALS}
    try:
        yield received
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _job(base: str, head: str | None, pytest_args: Sequence[str], out: Callable[[str], None],
         measure: Callable[[Path, Path, list[str], tuple[str, str]], object]):
    """``measure(base_folder, head_folder, worker_args, descriptions)`` with the base checked out,
    stopped as Ctrl-C stops it; a job that cannot run is one line and exit 2, a stopped one 128 +
    the signal's number."""
    with _stopped_by_signals() as received:
        try:
            _refuse_parallel(pytest_args)
            head_folder = Path(head or os.getcwd()).resolve()
            if not head_folder.is_dir():
                raise JobError(f"head {head!r} is not a folder")
            with trees.checked_out(base, head_folder) as (base_folder, base_description):
                return measure(base_folder, head_folder, worker_args(pytest_args),
                               (base_description, describe_folder(head_folder)))
        except (JobError, UsageError) as error:
            out(f"pytest-dispatch ab: {error}")
            return ExitCode.BAD_INPUT
        except KeyboardInterrupt:
            number = received[0] if received else signal.SIGINT
            out(f"pytest-dispatch ab: stopped by {signal.Signals(number).name}; its workers and checkout are gone")
            return 128 + number


def run(base: str, head: str | None, pytest_args: Sequence[str], settings: coordinator.Settings, *,
        json_path: str | None = None, markdown_path: str | None = None,
        out: Callable[[str], None] = print) -> int:
    """Run the job, print its outcome, write the files asked for; the exit status."""
    outcome = _job(base, head, pytest_args, out, lambda base_folder, head_folder, args, descriptions:
                   coordinator.run_job(base_folder, head_folder, args, settings, descriptions, progress=out))
    if isinstance(outcome, int):
        return outcome
    for line in ab_report.job_lines(outcome):
        out(line)
    if json_path:
        storage.write_json_atomically(json_path, outcome.as_dict())
        out(f"A/B results written to {json_path}")
    if markdown_path:
        text = "\n".join(ab_report.job_markdown(outcome)) + "\n"
        if markdown_path == "-":
            out(text)
        else:
            with open(markdown_path, "a") as handle:
                handle.write(text)
    return outcome.exit_code


def run_counted(base: str, head: str | None, pytest_args: Sequence[str], tolerance: float, *,
                out: Callable[[str], None] = print) -> int:
    """The job in counted mode (``--dispatch-instructions``): each side counted once, compared
    exactly (pytest_dispatch.ab.counted); the exit status."""
    from pytest_dispatch.ab import counted

    return _job(base, head, pytest_args, out, lambda base_folder, head_folder, args, descriptions:
                counted.run_counted_job(base_folder, head_folder, args, tolerance, descriptions, out))
