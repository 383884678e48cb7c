"""Results as JSON in pytest-benchmark's schema, so ``pytest-benchmark compare`` reads them.

Each measurement is one entry of ``benchmarks[]``; its ``stats`` are over the
wall time per call of each round, in seconds (pytest-benchmark's unit: what
``pytest-benchmark compare`` users compare; per-dispatch figures are in
``extra_info`` and the ``pytest_dispatch`` section), and
``extra_info`` carries the counts, the per-kernel dispatches, the host breakdown,
the sync cost and the method.  Files are written atomically (temp file + rename).
"""

from __future__ import annotations

import datetime
import json
import math
import re
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, TextIO

import numpy as np

from pytest_dispatch._meta import __version__
from pytest_dispatch.judgement.results import TestResult
from pytest_dispatch.measurement.gpu import GpuInfo
from pytest_dispatch.measurement.key import MeasurementKey

# docs/schema.md; 2 gave every per-call figure its _per_call suffix; 3 counted instructions;
# 4 made pytest-benchmark's stats per call (they were per dispatch)
SCHEMA_VERSION = 4
READABLE_SCHEMAS = (1, 2, 3, 4)


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
                    "budget": result.budget_verdict,
                    "budget_lines": result.budget_lines,
                    "inflation": result.single_op_inflation(measurement),
                    "gate": _gate_entry(result, measurement),
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


def _gate_entry(result: TestResult, measurement) -> dict[str, Any] | None:
    if not result.gate:
        return None
    key = str(MeasurementKey(result.nodeid, measurement.name))
    return {
        "counts": result.gate["counts"].get(key),
        "timing": result.gate["timing"].get(key),
    }


def _machine_info(gpu: GpuInfo | None) -> dict[str, Any]:
    try:
        from pytest_benchmark.plugin import pytest_benchmark_generate_machine_info

        info = pytest_benchmark_generate_machine_info()
    except Exception:  # cpuinfo can fail in sandboxes; the GPU part is what matters here
        import platform

        info = {"node": platform.node(), "machine": platform.machine(), "python_version": platform.python_version()}
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
    counted = document["pytest_dispatch"].get("counted")
    return counted if isinstance(counted, dict) else None


def write_json_atomically(path: str | os.PathLike, document: dict[str, Any]) -> Path:
    """Write ``document`` to ``path`` via a temp file in the same folder and a rename."""
    return _write_atomically(path, lambda file: json.dump(document, file, indent=2, allow_nan=False))


def write_text_atomically(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` via a temp file in the same folder and a rename."""
    return _write_atomically(path, lambda file: file.write(text))


def _write_atomically(path: str | os.PathLike, write: Callable[[TextIO], Any]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(temp, 0o666 & ~_umask())  # mkstemp's 0600 would hide results from the team and CI caches
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    """The process's umask (it can only be read by setting it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class BaselineError(Exception):
    """A baseline file cannot be used; the message names the file and what to do."""


def load_document(path: str | os.PathLike) -> dict[str, Any]:
    """Read and validate a results file written by ``session_json``."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as file:
            document = json.load(file, parse_constant=_reject_constant, parse_float=_finite_float)
    except FileNotFoundError:
        raise BaselineError(f"{path}: no such file; check the path, or list the saved runs with `pytest-dispatch list`") from None
    except IsADirectoryError:
        raise BaselineError(f"{path}: is a folder, not a results file; give one of its .json files") from None
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError, RecursionError) as error:
        raise BaselineError(f"{path}: not valid JSON ({error}); delete it or save a new baseline") from None
    return load_document_object(document, path)


def load_document_object(document: Any, path: str | os.PathLike) -> dict[str, Any]:
    """Validate an already parsed document; BaselineError names ``path`` and the problem."""
    if not isinstance(document, dict) or not isinstance(document.get("pytest_dispatch"), dict):
        raise BaselineError(f"{path}: not a pytest-dispatch results file (no 'pytest_dispatch' section); give a "
                            "file written by --dispatch-json or --dispatch-save, and keep other files out of "
                            "the storage folder")
    schema = document["pytest_dispatch"].get("schema")
    if schema not in READABLE_SCHEMAS:
        raise BaselineError(
            f"{path}: schema version {schema!r}, this pytest-dispatch reads "
            f"{', '.join(map(str, READABLE_SCHEMAS))}; save a new baseline"
        )
    try:
        for test in document["pytest_dispatch"]["tests"]:
            _check_result(TestResult.from_dict(test))
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as error:
        raise BaselineError(f"{path}: malformed test results ({type(error).__name__}: {error}); delete it or "
                            "save a new run") from None
    runs = document["pytest_dispatch"].get("runs") or []  # a merged file: each run is a document
    if not isinstance(runs, list):
        raise BaselineError(f"{path}: 'runs' must be a list of results documents; write merged files with "
                            "`pytest-dispatch merge`")
    for run in runs:
        load_document_object(run, path)
    return document


def _check_result(result: TestResult) -> None:
    """Types a hostile or hand-edited file could get wrong, checked before any arithmetic."""
    if not isinstance(result.nodeid, str):
        raise TypeError(f"nodeid must be a string, not {type(result.nodeid).__name__}")
    for m in result.measurements:
        if not isinstance(m.name, str) or not isinstance(m.method, str):
            raise TypeError("measurement name and method must be strings")
        for table in (m.calls, m.by_kernel):
            if not isinstance(table, dict) or not all(
                isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**53
                for k, v in table.items()
            ):
                raise ValueError(f"{m.name}: counts must map names to whole numbers below 2**53")
        if "dispatch" not in m.calls or "submit" not in m.calls:
            raise KeyError(f"{m.name}: calls lack 'dispatch'/'submit'")
        for array in (m.wall_us_per_call, m.host_us_per_call, m.sync_us):
            if array.ndim != 1 or array.size != m.rounds or (
                    m.rounds and (not np.all(np.isfinite(array)) or np.abs(array).max() > 1e12)):
                raise ValueError(f"{m.name}: timing samples must be lists of finite numbers, one per round")


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
    if not isinstance(data, dict):
        return None
    try:
        return GpuInfo.from_dict(data)
    except TypeError:
        return None


_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


class BaselineStore:
    """Results files under ``root/<GPU fingerprint>/<UTC time>_<commit>_<name>.json``."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)

    @staticmethod
    def safe_name(name: str) -> str:
        return _SAFE_NAME.sub("-", name).strip("-.") or "run"

    def save(self, document: dict[str, Any], name: str) -> Path:
        fingerprint = fingerprint_of(document) or "no-gpu"
        commit = str((document.get("commit_info") or {}).get("id") or "nocommit")
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        path = self.root / fingerprint / f"{stamp}_{self.safe_name(commit)}_{self.safe_name(name)}.json"
        return write_json_atomically(path, document)

    @staticmethod
    def name_of(path: Path) -> str:
        """The name a file was saved under (``<time>_<commit>_<name>.json``)."""
        parts = Path(path).stem.split("_", 2)
        return parts[2] if len(parts) == 3 else Path(path).stem

    def files(self, fingerprint: str | None, name: str = "latest") -> list[Path]:
        """Files of this fingerprint (None: every one) with this name ("latest": any), oldest first."""
        return self._files(fingerprint, name)

    def fingerprints(self) -> list[str]:
        """The GPU fingerprints that have a folder in the storage, sorted."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))

    def run_files(self, fingerprint: str) -> list[Path]:
        """The saved-run files of one fingerprint (any name), unordered."""
        folder = self.root / fingerprint
        if not folder.is_dir():
            return []
        return [f for f in folder.glob("*.json") if not f.name.startswith(".")]

    def _files(self, fingerprint: str | None, name: str) -> list[Path]:
        files = [f for found in ([fingerprint] if fingerprint else self.fingerprints()) for f in self.run_files(found)]
        if name != "latest":
            files = [f for f in files if self.name_of(f) == self.safe_name(name)]
        return sorted(files, key=lambda f: f.name.split("_", 1)[0])

    def find(self, fingerprint: str, name: str = "latest") -> Path | None:
        """The newest file of this fingerprint with this name ("latest": any name)."""
        files = self._files(fingerprint, name)
        return files[-1] if files else None

    def find_other_gpu(self, name: str = "latest") -> Path | None:
        """The newest file of any fingerprint: timing is then incomparable, counts are not."""
        files = self._files(None, name)
        return files[-1] if files else None
