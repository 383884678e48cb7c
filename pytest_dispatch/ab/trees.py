"""The two versions' source trees: a folder as it is, or a git ref checked out for the job."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

from pytest_dispatch.errors import JobError


CHECKOUT_PREFIX = "pytest-dispatch-base-"  # in the temporary folder: a job's checkout of its base
OWNER_FILE = "owner.json"  # in a checkout's folder: the job's process and repository


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)


def source_roots(tree: Path) -> list[str]:
    """What goes first on the worker's sys.path: the tree, and its src/ layout if any.

    Compiled extensions and packages installed from the tree (not found on these
    paths) are not switched between versions: install them per side yourself."""
    roots = [str(tree)]
    if (tree / "src").is_dir():
        roots.insert(0, str(tree / "src"))
    return roots


@contextlib.contextmanager
def checked_out(ref_or_dir: str, repo: Path) -> Iterator[tuple[Path, str]]:
    """(folder, description) for ``ref_or_dir``: a folder is used in place; a git ref of
    ``repo`` becomes a temporary worktree, removed afterwards (and by a later job, where
    this one was killed before it could)."""
    remove_abandoned()
    folder = Path(ref_or_dir)  # a folder is relative to where the command runs
    if folder.is_dir():
        yield folder.resolve(), f"folder {folder.resolve()}"
        return
    if shutil.which("git") is None:
        raise JobError(f"{ref_or_dir!r} is not a folder, and git is not installed to read it as a ref")
    found = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref_or_dir}^{{commit}}")
    if found.returncode != 0:
        where = _git(repo, "rev-parse", "--show-toplevel")
        if where.returncode != 0:
            raise JobError(f"{ref_or_dir!r} is not a folder, and {repo} is not in a git repository")
        raise JobError(f"{ref_or_dir!r} is neither a folder nor a commit of the git repository at "
                        f"{where.stdout.strip()}: give a branch, tag, commit or folder")
    commit = found.stdout.strip()
    top = Path(_git(repo, "rev-parse", "--show-toplevel").stdout.strip())
    temp = Path(tempfile.mkdtemp(prefix=CHECKOUT_PREFIX))
    worktree = temp / "tree"
    try:
        (temp / OWNER_FILE).write_text(json.dumps({"pid": os.getpid(), "repo": str(top)}))
        added = _git(top, "worktree", "add", "--detach", "--quiet", str(worktree), commit)
        if added.returncode != 0:
            why = (added.stderr.strip().splitlines() or [f"git exited with status {added.returncode}"])[-1]
            raise JobError(f"could not check out {ref_or_dir!r}: {why}")
        # The same place relative to the repository's top as the head's folder.
        inside = worktree / repo.resolve().relative_to(top.resolve())
        yield inside, f"{ref_or_dir} ({commit[:12]})"
    finally:
        _remove_checkout(temp, top)


def _remove_checkout(temp: Path, top: Path) -> None:
    _git(top, "worktree", "remove", "--force", str(temp / "tree"))
    shutil.rmtree(temp, ignore_errors=True)
    _git(top, "worktree", "prune")  # its entry, where the folder was removed first


def remove_abandoned() -> None:
    """Remove the checkouts (folder and git worktree entry) of jobs whose process is gone
    without removing them: killed with SIGKILL, or by a crash of the machine."""
    for temp in Path(tempfile.gettempdir()).glob(CHECKOUT_PREFIX + "*"):
        owner = _owner(temp)
        if owner is not None and not _alive(owner[0]):
            _remove_checkout(temp, owner[1])


def _owner(temp: Path) -> tuple[int, Path] | None:
    """(pid, repository) of a checkout; None when its owner file is missing (a job writing it
    just now) or not one of ours."""
    try:
        data = json.loads((temp / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not (isinstance(data, dict) and isinstance(data.get("pid"), int) and isinstance(data.get("repo"), str)):
        return None
    return data["pid"], Path(data["repo"])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's
    try:  # a process that ended but was not reaped is gone too
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True
