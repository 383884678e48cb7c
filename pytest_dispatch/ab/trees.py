"""The two versions' source trees: a folder as it is, or a git ref checked out for the job."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator


class TreeError(Exception):
    """A base or head that cannot be used; the message is one line."""


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
    ``repo`` becomes a temporary worktree, removed afterwards."""
    folder = Path(ref_or_dir)  # a folder is relative to where the command runs
    if folder.is_dir():
        yield folder.resolve(), f"folder {folder.resolve()}"
        return
    if shutil.which("git") is None:
        raise TreeError(f"{ref_or_dir!r} is not a folder, and git is not installed to read it as a ref")
    found = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref_or_dir}^{{commit}}")
    if found.returncode != 0:
        where = _git(repo, "rev-parse", "--show-toplevel")
        if where.returncode != 0:
            raise TreeError(f"{ref_or_dir!r} is not a folder, and {repo} is not in a git repository")
        raise TreeError(f"{ref_or_dir!r} is neither a folder nor a commit of the git repository at "
                        f"{where.stdout.strip()}: give a branch, tag, commit or folder")
    commit = found.stdout.strip()
    top = Path(_git(repo, "rev-parse", "--show-toplevel").stdout.strip())
    temp = Path(tempfile.mkdtemp(prefix="pytest-dispatch-base-"))
    worktree = temp / "tree"
    added = _git(top, "worktree", "add", "--detach", "--quiet", str(worktree), commit)
    if added.returncode != 0:
        shutil.rmtree(temp, ignore_errors=True)
        raise TreeError(f"could not check out {ref_or_dir!r}: {added.stderr.strip().splitlines()[-1:]}")
    try:
        # The same place relative to the repository's top as the head's folder.
        inside = worktree / repo.resolve().relative_to(top.resolve())
        yield inside, f"{ref_or_dir} ({commit[:12]})"
    finally:
        _git(top, "worktree", "remove", "--force", str(worktree))
        shutil.rmtree(temp, ignore_errors=True)
        _git(top, "worktree", "prune")
