"""Results as JSON in pytest-benchmark's schema, so ``pytest-benchmark compare`` reads them.

Each measurement is one entry of ``benchmarks[]``; its ``stats`` are over the
wall time per call of each round, in seconds (pytest-benchmark's unit: what
``pytest-benchmark compare`` users compare; per-dispatch figures are in
``extra_info`` and the ``pytest_dispatch`` section), and
``extra_info`` carries the counts, the per-kernel dispatches, the host breakdown,
the sync cost and the method.  Files are written atomically (temp file + rename; a saved run:
temp file + a hard link under the storage's next number), never larger than a reader reads; a
path that is not a regular file (/dev/null, a FIFO, /dev/stdout) is written into, never replaced.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import errno
import functools
import json
import math
import re
import os
import stat
import tempfile
import warnings
from pathlib import Path
from typing import Any

from pytest_dispatch._meta import __version__
from pytest_dispatch.errors import DispatchWarning, StorageError, UsageError
from pytest_dispatch.judgement import validation
from pytest_dispatch.judgement.results import TestResult
from pytest_dispatch.measurement.gpu import GpuInfo
from pytest_dispatch.measurement.key import MeasurementKey

SCHEMA_VERSION = validation.SCHEMA_VERSION


def _stats(samples_seconds: list[float]) -> dict[str, Any]:
    from pytest_benchmark.stats import Stats

    stats = Stats()
    for value in samples_seconds:
        stats.update(value)
    data = stats.as_dict()
    data["data"] = list(samples_seconds)
    data["iterations"] = 1
    return data


# The measurement's keys that pytest-benchmark's extra_info repeats (the same key, the same meaning).
_EXTRA_INFO_KEYS = ("dispatches_per_call", "calls_per_call", "by_kernel_per_call", "host_breakdown_us_per_call",
                    "sync_us", "sync_method", "gpu_us_per_call")


def benchmark_entries(result: TestResult) -> list[dict[str, Any]]:
    entries = []
    for measurement in result.measurements:
        if not measurement.timed:
            continue  # pytest-benchmark's entries are timings; the counts stay in the pytest_dispatch section
        dispatches = max(measurement.dispatches, 1)
        name = result.nodeid.split("::", 1)[-1]
        suffix = measurement.name if measurement.method != "single-op" else f"{measurement.name}:single-op"
        gate_key = str(MeasurementKey(result.nodeid, measurement.name))
        entries.append(
            {
                "group": "pytest-dispatch",
                "name": f"{name}[{suffix}]",
                "fullname": f"{result.nodeid}::{suffix}",
                "params": None,
                "param": None,
                "extra_info": {
                    "nodeid": result.nodeid,
                    "measurement": measurement.name,
                    "method": measurement.method,
                    "unit": "seconds per call (wall, sync subtracted)",
                    **{key: value for key, value in measurement.as_dict().items() if key in _EXTRA_INFO_KEYS},
                    "host_us_per_dispatch": [v / dispatches for v in measurement.host_us_per_call.tolist()],
                    "wall_us_per_dispatch": measurement.wall_us_per_dispatch.tolist(),
                    "budget": result.budget_verdict_of(measurement),
                    "budget_lines": result.budget_lines,
                    "inflation": result.single_op_inflation(measurement),
                    "gate": None if not result.gate else {part: result.gate[part].get(gate_key) for part in ("counts", "timing")},
                },
                "options": {
                    "timer": "perf_counter_ns",
                    "warmup": measurement.warmup,
                    "rounds": measurement.rounds,
                    "per_round": measurement.per_round,
                },
                "stats": _stats([v / 1e6 for v in measurement.wall_us_per_call.tolist()]),
            }
        )
    return entries


@functools.lru_cache(maxsize=1)
def _host_info() -> dict[str, Any]:
    """pytest-benchmark's machine info, once a process: it runs cpuid in a child process (about
    half a second), and the host does not change while a process runs."""
    try:
        from pytest_benchmark.plugin import pytest_benchmark_generate_machine_info

        return pytest_benchmark_generate_machine_info()
    except Exception:  # cpuinfo can fail in sandboxes; the GPU part is what matters here
        import platform

        return {"node": platform.node(), "machine": platform.machine(), "python_version": platform.python_version()}


def _machine_info(gpu: GpuInfo | None) -> dict[str, Any]:
    info = copy.deepcopy(_host_info())
    info["gpu"] = None if gpu is None else gpu.as_dict()
    info["gpu_fingerprint"] = None if gpu is None else gpu.fingerprint
    return info


def _commit_info() -> dict[str, Any]:
    try:
        from pytest_benchmark.utils import get_commit_info

        return get_commit_info()
    except Exception as error:
        return {"id": None, "error": str(error)}


def session_json(results: list[TestResult], gpu: GpuInfo | None,
                 counted: dict[str, Any] | None = None) -> dict[str, Any]:
    """The whole session's document; ``counted``: in counted mode, the software counted with
    (``instructions.Software.as_dict``)."""
    import pytest_benchmark

    return {
        "machine_info": _machine_info(gpu),
        "commit_info": _commit_info(),
        "benchmarks": [entry for result in results for entry in benchmark_entries(result)],
        "datetime": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "version": pytest_benchmark.__version__,
        "pytest_dispatch": {
            "schema": SCHEMA_VERSION,
            "version": __version__,
            "tests": [result.as_dict() for result in results],
            "counted": counted,
        },
    }


def counted_of(document: dict[str, Any]) -> dict[str, Any] | None:
    """The software a counted run was counted with; None for a timed run."""
    return document["pytest_dispatch"].get("counted")


def write_json_atomically(path: str | os.PathLike, document: dict[str, Any]) -> Path:
    """Write ``document`` to ``path`` via a temp file in the same folder and a rename (see
    ``_write_atomically``).  OSError (EFBIG) when it would be larger than a reader accepts
    (``validation.MAX_FILE_BYTES``): nothing is written then."""
    return _write_atomically(path, json_bytes(document, str(path)))


def json_bytes(document: dict[str, Any], where: str) -> bytes:
    """``document`` as the JSON a reader accepts: indented, or compact where indenting would make
    it too large; OSError (EFBIG) naming ``where`` when even that is larger than readers read."""
    data = json.dumps(document, indent=2, allow_nan=False).encode()
    if len(data) > validation.MAX_FILE_BYTES:
        data = json.dumps(document, separators=(",", ":"), allow_nan=False).encode()
    if len(data) > validation.MAX_FILE_BYTES:
        raise OSError(errno.EFBIG, f"the results are {len(data):,} bytes of JSON, more than a reader accepts "
                                   f"({validation.MAX_FILE_BYTES:,}); nothing written: select fewer tests "
                                   "(-k, or one file per test folder)", where)
    return data


def write_text_atomically(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` via a temp file in the same folder and a rename."""
    return _write_atomically(path, text.encode())


def _write_atomically(path: str | os.PathLike, data: bytes) -> Path:
    """A regular file (or none yet) is replaced at once: a temp file in its folder, then a rename,
    so a reader never meets half a file.  What is not a regular file (/dev/null, a FIFO, a
    terminal, or a link to one) is written into, never replaced: a rename would put a regular
    file where the device or the pipe was.  A link to a regular file keeps pointing to it."""
    path = Path(path)
    if _is_special(path):
        with open(path, "ab") as file:  # appended: /dev/stdout may be a log file, not to be cut
            file.write(data)
        return path
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = _temp_file(path.parent, f".{path.name}.", data)
    try:
        os.replace(temp, path)
    finally:
        Path(temp).unlink(missing_ok=True)  # left only where the rename failed
    return path


def _temp_file(folder: Path, prefix: str, data: bytes) -> str:
    """A new temp file in ``folder`` holding ``data``, on disk, readable as the umask allows."""
    handle, temp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=folder)
    umask = os.umask(0o022)  # the umask can only be read by setting it
    os.umask(umask)
    try:
        os.chmod(temp, 0o666 & ~umask)  # mkstemp's 0600 would hide results from the team and CI caches
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return temp


_STREAM = re.compile(r"/dev/(?:stdout|stderr|fd/\d+)|/proc/(?:self|thread-self|\d+)/fd/\d+")


def _is_special(path: Path) -> bool:
    """Whether ``path`` (links followed) is there and neither a regular file nor a folder, or names
    a process's stream (/dev/stdout, /proc/self/fd/1: a link to whatever it writes to, a log
    file included, whose writer keeps its own offset)."""
    if _STREAM.fullmatch(str(path.absolute())):
        return True
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def load_document(path: str | os.PathLike) -> dict[str, Any]:
    """Read a results file written by ``session_json`` (or ``pytest-dispatch merge``), checked once
    (``validation.check_document``); StorageError names the file, the field and what to do."""
    path = Path(path)
    try:
        document = json.loads(_read_regular_file(path).decode("utf-8"), parse_constant=_reject_constant,
                              parse_float=_finite_float)
    except FileNotFoundError:
        raise StorageError(f"{path}: no such file; check the path, or list the saved runs with `pytest-dispatch list`") from None
    except IsADirectoryError:
        raise StorageError(f"{path}: is a folder, not a results file; give one of its .json files") from None
    except PermissionError as error:
        raise StorageError(f"{path}: cannot be read ({error.strerror}); check its permissions, or move it away") from None
    except OSError as error:
        raise StorageError(f"{path}: cannot be read ({error.strerror or error}); move it away or save a new run") from None
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError, RecursionError) as error:
        raise StorageError(f"{path}: not valid JSON ({error}); delete it or save a new baseline") from None
    return load_document_object(document, path)


def _read_regular_file(path: Path) -> bytes:
    """The bytes of a regular file of at most ``validation.MAX_FILE_BYTES``; anything else (a device
    such as /dev/zero, a FIFO, a socket) is refused before it is read, so no read hangs or fills
    memory."""
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, "is a folder", str(path))
    # O_NONBLOCK: a FIFO opens at once (to be refused below) instead of waiting for a writer
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(descriptor, "rb") as file:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise StorageError(f"{path}: not a regular file (a device, a FIFO or a socket); give a results file")
        if info.st_size > validation.MAX_FILE_BYTES:
            raise _too_large(f"{path}: {info.st_size} bytes, larger than any results file "
                             f"({validation.MAX_FILE_BYTES} at most); delete it (`pytest-dispatch prune` removes it) "
                             "or save a new run")
        data = file.read(validation.MAX_FILE_BYTES + 1)
    if len(data) > validation.MAX_FILE_BYTES:  # it grew since
        raise _too_large(f"{path}: larger than any results file ({validation.MAX_FILE_BYTES} bytes at most); "
                         "delete it or save a new run")
    return data


def _too_large(message: str) -> StorageError:
    """A file larger than any results file: not read, yet ``prune`` may delete it (an older version
    could save one), so the error says so (``too_large``)."""
    error = StorageError(message)
    error.too_large = True
    return error


def load_document_object(document: Any, path: str | os.PathLike) -> dict[str, Any]:
    """Check an already parsed document; StorageError names ``path``, the field and the problem."""
    try:
        return validation.check_document(document)
    except UsageError as error:
        message = str(error)
        if "unknown schema" not in message and "not a pytest-dispatch results file" not in message:
            message += "; delete it or save a new run"
        raise StorageError(f"{path}: {message}") from None


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:20]} is out of range")
    return value


def _reject_constant(name: str):
    raise ValueError(f"{name} is not allowed")


def results_of(document: dict[str, Any]) -> list[TestResult]:
    return [TestResult.from_dict(test) for test in document["pytest_dispatch"]["tests"]]


def fingerprint_of(document: dict[str, Any]) -> str | None:
    return (document.get("machine_info") or {}).get("gpu_fingerprint")


def gpu_of(document: dict[str, Any]) -> GpuInfo | None:
    """The GPU a results document was measured on, None when unknown or malformed."""
    data = (document.get("machine_info") or {}).get("gpu")
    try:
        return None if data is None else GpuInfo.from_dict(data)
    except TypeError:  # fields of another version
        return None


_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_STAMP = "%Y%m%dT%H%M%S%fZ"
# what ``BaselineStore.save`` names a file: <sequence>_<UTC time>_<commit>_<name>.json; before the
# sequence it named them <UTC time>_<commit>_<name>.json, and those files are still read (``order_key``)
_RUN_FILE = re.compile(r"(?:(\d{8,})_)?(\d{8}T\d{6}(?:\d{6})?Z)_[A-Za-z0-9._-]*_[A-Za-z0-9._-]*\.json")  # µs: optional
_TEMP_FILE = re.compile(r"\.(?:\d{8,}_)?\d{8}T\d{6}(?:\d{6})?Z_.*\.json\..*\.tmp")  # a save's temp file
STALE_TEMP_SECONDS = 3600  # a save's temp file this old belongs to an interrupted save
FUTURE_SLACK = datetime.timedelta(minutes=5)  # clocks of two machines sharing a storage may differ this much


_NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK}


@dataclasses.dataclass
class Pruned:
    """What ``BaselineStore.prune`` did (or, dry, would do) in one GPU folder."""

    kept: list[Path] = dataclasses.field(default_factory=list)
    removed: list[Path] = dataclasses.field(default_factory=list)  # saved runs older than the kept ones
    left: list[tuple[Path, str]] = dataclasses.field(default_factory=list)  # not the store's: why each stays
    temp_removed: list[Path] = dataclasses.field(default_factory=list)  # interrupted saves' temp files
    temp_left: list[Path] = dataclasses.field(default_factory=list)  # temp files of saves that may be running


class BaselineStore:
    """Results files under ``root/<GPU fingerprint>/<number>_<UTC time>_<commit>_<name>.json``.

    A file of another name, a link, or a file that does not read as a results document is not a
    saved run: lookups pass over it and ``prune`` never deletes it."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)

    @staticmethod
    def safe_name(name: str) -> str:
        return _SAFE_NAME.sub("-", name).strip("-.") or "run"

    def save(self, document: dict[str, Any], name: str) -> Path:
        """Save a run as the newest of the storage: its file name starts with a number above every
        saved run's (``order_key``), whatever the clock says.  Two saves at once take two numbers
        (a hard link never replaces a file); OSError (EFBIG) when it is larger than a reader accepts."""
        fingerprint = fingerprint_of(document) or "no-gpu"
        commit = str((document.get("commit_info") or {}).get("id") or "nocommit")
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime(_STAMP)
        folder = self.root / fingerprint
        data = json_bytes(document, str(folder))
        folder.mkdir(parents=True, exist_ok=True)
        sequence = self._last_sequence() + 1
        temp = _temp_file(folder, f".{sequence:08d}_{stamp}_x.json.", data)
        try:
            while True:
                path = folder / f"{sequence:08d}_{stamp}_{self.safe_name(commit)}_{self.safe_name(name)}.json"
                try:
                    os.link(temp, path)  # unlike a rename, fails where another save took this number
                    return path
                except FileExistsError:
                    sequence = max(sequence, self._last_sequence()) + 1
                except OSError as error:
                    if error.errno not in _NO_HARD_LINKS or os.path.lexists(path):
                        raise
                    os.replace(temp, path)  # a file system without hard links: a rename, checked first
                    return path
        finally:
            Path(temp).unlink(missing_ok=True)

    def _last_sequence(self) -> int:
        """The highest number a saved run's file name starts with in the storage (0: none)."""
        numbers = [self.sequence_of(path) for fingerprint in self.fingerprints()
                   for path in self.run_files(fingerprint)]
        return max((n for n in numbers if n is not None), default=0)

    @staticmethod
    def name_of(path: Path) -> str:
        """The name a file was saved under (``[<sequence>_]<time>_<commit>_<name>.json``)."""
        stem = Path(path).stem
        parts = stem.split("_", 3 if BaselineStore.sequence_of(path) is not None else 2)
        return parts[-1] if len(parts) >= 3 else stem

    @staticmethod
    def sequence_of(path: Path) -> int | None:
        """The number ``save`` gave a run (its order in the storage); None for a run saved before
        runs were numbered, and for any other name."""
        match = _RUN_FILE.fullmatch(Path(path).name)
        return int(match.group(1)) if match is not None and match.group(1) else None

    @staticmethod
    def saved_time(path: Path) -> datetime.datetime | None:
        """When a file named as ``save`` names them was saved (UTC) by the saving machine's clock;
        None for any other name."""
        match = _RUN_FILE.fullmatch(Path(path).name)
        if match is None:
            return None
        try:
            stamp = match.group(2)
            return datetime.datetime.strptime(stamp, _STAMP if len(stamp) > 16 else "%Y%m%dT%H%M%SZ").replace(
                tzinfo=datetime.timezone.utc)
        except ValueError:
            return None

    @classmethod
    def order_key(cls, path: Path) -> tuple:
        """The order runs were saved in: numbered runs by their number, after the runs saved before
        runs were numbered (those by their time).  A clock set wrong never makes a run the newest."""
        sequence = cls.sequence_of(path)
        if sequence is None:
            return (0, cls.saved_time(path), Path(path).name)
        return (1, sequence, Path(path).name)

    @classmethod
    def warn_if_future(cls, path: Path) -> None:
        """A ``DispatchWarning`` naming a run dated after now: its clock was wrong."""
        saved = cls.saved_time(path)
        if saved is not None and saved > datetime.datetime.now(datetime.timezone.utc) + FUTURE_SLACK:
            warnings.warn(DispatchWarning(
                f"{path}: dated {saved:%Y-%m-%d %H:%M} UTC, in the future (a clock was wrong when it was "
                "saved); runs are ordered by when they were saved into the storage, not by their dates"),
                stacklevel=1)  # one place: a run named by several look-ups is one warning

    def files(self, fingerprint: str | None, name: str = "latest") -> list[Path]:
        """Saved runs of this fingerprint (None: every one) with this name ("latest": any), oldest
        first in the order they were saved (``order_key``); files named otherwise and links are
        passed over, and a run dated in the future is named in a ``DispatchWarning``."""
        files = [f for found in ([fingerprint] if fingerprint else self.fingerprints()) for f in self.run_files(found)
                 if self.saved_time(f) is not None and not f.is_symlink()]
        if name != "latest":
            files = [f for f in files if self.name_of(f) == self.safe_name(name)]
        for path in files:
            self.warn_if_future(path)
        return sorted(files, key=self.order_key)

    def fingerprints(self) -> list[str]:
        """The GPU fingerprints that have a folder in the storage, sorted."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))

    def run_files(self, fingerprint: str) -> list[Path]:
        """Every results file in one fingerprint's folder (any name; a reader warns about foreign
        ones), unordered."""
        folder = self.root / fingerprint
        if not folder.is_dir():
            return []
        return [f for f in folder.glob("*.json") if not f.name.startswith(".")]

    def find(self, fingerprint: str | None, name: str = "latest") -> Path | None:
        """The newest saved run of this fingerprint (None: any) with this name, of either kind."""
        files = self.files(fingerprint, name)
        return files[-1] if files else None

    def newest(self, fingerprint: str | None, name: str = "latest", counted: bool = False
               ) -> tuple[Path, dict[str, Any]] | None:
        """The newest saved run of this fingerprint (None: any) and name of one kind: counted
        (``--dispatch-instructions``) or timed, with its document; a counted run and a timed one
        are never each other's baseline.  StorageError when a file of that name cannot be read."""
        for path in reversed(self.files(fingerprint, name)):
            try:
                document = load_document(path)
            except StorageError:
                if not os.path.lexists(path):
                    continue  # pruned since it was listed
                raise
            if (counted_of(document) is not None) == counted:
                return path, document
        return None

    def prune(self, fingerprint: str, keep: int, dry_run: bool = False) -> Pruned:
        """Delete all but the newest ``keep`` saved runs of one GPU; touches only files this store
        wrote (its name and a readable results document), never a link or what one points to.
        Two prunes at once, or one after another, delete each file once and nothing else."""
        outcome = Pruned()
        folder = self.root / fingerprint
        if folder.is_symlink():
            outcome.left.append((folder, "a link; prune never follows one out of the storage"))
            return outcome
        own = []
        for path in sorted(self.run_files(fingerprint)):
            if path.is_symlink():
                outcome.left.append((path, "a link, not a saved run"))
            elif self.saved_time(path) is None:
                outcome.left.append((path, "not a saved run's name (<number>_<UTC time>_<commit>_<name>.json)"))
            else:
                try:
                    document = load_document(path)
                except StorageError as error:
                    if getattr(error, "too_large", False):
                        own.append(path)  # not read, yet saved under the store's name in its GPU's folder
                        continue
                    outcome.left.append((path, str(error).removeprefix(f"{path}: ")))
                    continue
                if (fingerprint_of(document) or "no-gpu") != fingerprint:
                    outcome.left.append((path, f"a run of another GPU ({fingerprint_of(document)})"))
                    continue
                own.append(path)
        for path in own:
            self.warn_if_future(path)
        own.sort(key=self.order_key)
        older = max(len(own) - keep, 0)
        outcome.removed, outcome.kept = own[:older], own[older:]
        now = datetime.datetime.now().timestamp()
        for temp in sorted(folder.glob(".*.tmp")):
            if not _TEMP_FILE.fullmatch(temp.name) or temp.is_symlink():
                continue
            try:
                abandoned = now - temp.lstat().st_mtime > STALE_TEMP_SECONDS
            except FileNotFoundError:
                continue
            (outcome.temp_removed if abandoned else outcome.temp_left).append(temp)
        if not dry_run:
            for path in outcome.removed + outcome.temp_removed:
                path.unlink(missing_ok=True)  # another prune may have been first
        return outcome


def merged_document(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One document holding several runs (``pytest_dispatch.runs``, each a whole document): several
    GPUs' runs in one file, as ``pytest-dispatch merge`` writes them."""
    return {
        "machine_info": {},
        "commit_info": {},
        "benchmarks": [entry for run in runs for entry in run.get("benchmarks", [])],
        "datetime": max((run.get("datetime") or "" for run in runs), default=""),
        "version": runs[0].get("version") if runs else None,
        "pytest_dispatch": {"schema": SCHEMA_VERSION, "tests": [], "runs": runs},
    }
