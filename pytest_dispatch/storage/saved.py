"""Reading saved runs back: one run (``read_run``), every run of one GPU in commit order
(``load_runs``), the run a name designates (``resolve``), and each GPU's history (``histories``).

A file that cannot be read is skipped with one ``DispatchWarning`` naming it (``skip``).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Callable

from pytest_dispatch.errors import DispatchWarning, StorageError, UsageError
from pytest_dispatch.judgement.history import (CountedRunMeasurement, GpuHistory, Settings, StoredRun, history_of,
                                              parse_time, summarise)
from pytest_dispatch.judgement.results import sequential_measurements
from pytest_dispatch.measurement.instructions import Software
from pytest_dispatch.measurement.recorder import COUNT_KINDS
from pytest_dispatch.storage import (BaselineStore, counted_of, fingerprint_of, gpu_of, load_document,
                                     results_of)


SKIPPED = " (skipped)"  # how a warning says a stored file was skipped (corrupt, hostile, of another GPU, merged)


def skip(message: str) -> None:
    """Warn that a stored file was skipped; ``message`` names it and why."""
    warnings.warn(f"{message}{SKIPPED}", DispatchWarning, stacklevel=3)


def skipped(warning: warnings.WarningMessage) -> bool:
    """Whether a recorded warning is one of ``skip``'s."""
    return issubclass(warning.category, DispatchWarning) and str(warning.message).endswith(SKIPPED)


EMPTY_HINT = ("no saved runs in {root}/: run `pytest --dispatch-save` on each commit (e.g. in CI on main); "
              "every saved run is kept there, one folder per GPU")


def read_run(path: str | os.PathLike, fingerprint: str | None = None) -> StoredRun:
    """Read one saved run; ``StorageError`` names the file and the problem.

    With ``fingerprint``, a run of another GPU is refused, so GPUs never mix."""
    path = Path(path)
    document = load_document(path)
    if document["pytest_dispatch"].get("runs"):
        raise StorageError(f"{path}: a merged file of several runs, not one saved run; keep merged "
                                    "files outside the storage folder")
    found = fingerprint_of(document)
    gpu = gpu_of(document)
    if fingerprint is not None and found != fingerprint:
        raise StorageError(f"{path}: a run of GPU {found!r}, not {fingerprint!r}; move or delete it")
    commit_info = document.get("commit_info") or {}  # validated: an object, its fields strings or null
    time = parse_time(document.get("datetime")) or BaselineStore.saved_time(path)
    if time is None:
        raise StorageError(f"{path}: no valid 'datetime'; delete it or save a new run")
    sequential = sequential_measurements(results_of(document))
    counted = counted_of(document)
    return StoredRun(
        path=path,
        fingerprint=str(found or "no-gpu"),
        gpu=gpu.describe() if gpu else str(found or "no GPU"),
        name=BaselineStore.name_of(path),
        commit=commit_info.get("id") or None,
        branch=commit_info.get("branch") or None,
        time=time,
        commit_time=parse_time(commit_info.get("time")),
        dirty=bool(commit_info.get("dirty")),
        measurements={key: summarise(key, m) for key, m in sequential.items() if m.timed},
        counted={key: CountedRunMeasurement(m.instructions.per_call, {kind: m.count(kind) for kind in COUNT_KINDS})
                 for key, m in sequential.items() if m.instructions is not None},
        counted_with=None if counted is None else Software.from_dict(counted),
        saved_order=BaselineStore.order_key(path),
    )


def load_runs(
    storage_root: str | os.PathLike,
    fingerprint: str,
    progress: Callable[[int, int], None] | None = None,
) -> list[StoredRun]:
    """Every saved run of one GPU fingerprint, in commit order (commit time, then run time).

    A corrupt, hostile or foreign file is skipped with one ``DispatchWarning`` naming it;
    ``progress(done, total)`` is called after each file.
    """
    files = sorted(BaselineStore(storage_root).run_files(fingerprint))
    runs = []
    for done, path in enumerate(files, 1):
        BaselineStore.warn_if_future(path)
        try:
            runs.append(read_run(path, fingerprint))
        except (StorageError, OSError) as error:
            if not os.path.lexists(path):
                pass  # pruned since it was listed: no run, and nothing wrong
            elif isinstance(error, StorageError):
                skip(str(error))
            else:
                skip(f"{path}: cannot be read ({error})")
        if progress is not None:
            progress(done, len(files))
    return sorted(runs, key=StoredRun.order_key)


def match_fingerprint(storage_root: str | os.PathLike, wanted: str | None) -> list[str]:
    """The stored fingerprints containing ``wanted`` (all when None); UsageError when none does."""
    found = BaselineStore(storage_root).fingerprints()
    if not wanted:
        return found
    matching = [fp for fp in found if wanted.lower() in fp.lower()]
    if not matching:
        known = ", ".join(found) or "none"
        raise UsageError(f"no GPU fingerprint in {storage_root}/ contains {wanted!r} (stored: {known})")
    return matching


def resolve(storage_root: str | os.PathLike, name: str, fingerprint: str | None = None) -> StoredRun:
    """The newest saved run that ``name`` designates: 'latest', a --dispatch-save name, a branch,
    or a commit prefix (4+ hex digits); ``fingerprint`` (a substring) picks the GPU when several
    are stored.  UsageError says what is missing or ambiguous."""
    candidates = match_fingerprint(storage_root, fingerprint)
    if not candidates:
        raise UsageError(EMPTY_HINT.format(root=storage_root))
    if len(candidates) > 1:
        raise UsageError(f"runs of {len(candidates)} GPUs in {storage_root}/: pick one with --fingerprint "
                         f"({', '.join(candidates)})")
    runs = sorted(load_runs(storage_root, candidates[0]), key=lambda run: run.saved_order)
    where = f"{storage_root}/{candidates[0]}"
    if not runs:
        raise UsageError(EMPTY_HINT.format(root=storage_root))
    if name == "latest":
        return runs[-1]
    for matches in ([r for r in runs if r.name == BaselineStore.safe_name(name)],
                    [r for r in runs if r.branch == name]):
        if matches:
            return matches[-1]
    if len(name) >= 4 and all(c in "0123456789abcdefABCDEF" for c in name):
        matches = [r for r in runs if r.commit and r.commit.lower().startswith(name.lower())]
        commits = sorted({r.commit for r in matches})
        if len(commits) > 1:
            raise UsageError(f"commit prefix {name!r} is ambiguous in {where}: {', '.join(c[:12] for c in commits)}")
        if matches:
            return matches[-1]
    raise UsageError(f"no saved run named {name!r}, on branch {name!r} or at a commit starting {name!r} "
                     f"(4+ hex digits) in {where}; see `pytest-dispatch list`")


def histories(
    storage_root: str | os.PathLike,
    fingerprint: str | None = None,
    expression: str | None = None,
    settings: Settings = Settings(),
    branch: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[GpuHistory]:
    """The history of every stored GPU (or those matching ``fingerprint``).  UsageError for a bad
    selection."""
    found_histories = []
    for found in match_fingerprint(storage_root, fingerprint):
        runs = load_runs(storage_root, found, (lambda done, total: progress(f"read {found}/ file {done} of {total}"))
                         if progress else None)
        found_histories.append(history_of(found, runs, expression, settings, branch, progress))
    return found_histories
