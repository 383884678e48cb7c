"""The one check of a results document read from disk: every field's type and size.

Every reader of a results file (``storage.load_document``: the gate's baseline, ``history``,
``pytest-dispatch show``, ``compare``, ``merge``, ``list``) goes through ``check_document`` once,
so code after it never meets a wrong type, an unbounded array or a non-finite number.  A
problem is a ``UsageError`` naming the field (``pytest_dispatch.tests[0].measurements[1].rounds``)
and what is wrong with it.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

from pytest_dispatch.errors import UsageError

SCHEMA_VERSION = 4  # docs/schema.md

MAX_FILE_BYTES = 256 * 2**20  # a results file larger than this is not read at all
MAX_ITEMS = 1_000_000  # entries of one list or object (rounds, tests, benchmarks, kernels)
MAX_STRING = 100_000  # characters of one string (node ids, names, budget lines)
MAX_COUNT = 2**53  # a count or a round number: exact in a float
MAX_MAGNITUDE = 1e12  # µs or instructions per call; anything above is a corrupt file
METHODS = ("sequential", "single-op")


def _invalid(where: str, problem: str) -> UsageError:
    """A field of a results document is missing, of the wrong type or too large."""
    return UsageError(f"{where}: {problem}" if where else problem)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null",
            int: "a whole number", float: "a number"}.get(type(value), type(value).__name__)


def _field(where: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{where}[{key}]"
    return f"{where}.{key}" if where else key


def _container(value: Any, where: str, kind: type, name: str) -> Any:
    if not isinstance(value, kind):
        raise _invalid(where, f"{name} expected, not {_kind(value)}")
    if len(value) > MAX_ITEMS:
        raise _invalid(where, f"{len(value)} entries, at most {MAX_ITEMS} are read")
    return value


def obj(value: Any, where: str) -> dict[str, Any]:
    return _container(value, where, dict, "an object")


def array(value: Any, where: str) -> list[Any]:
    return _container(value, where, list, "a list")


def text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _invalid(where, f"a string expected, not {_kind(value)}")
    if len(value) > MAX_STRING:
        raise _invalid(where, f"a string of {len(value)} characters, at most {MAX_STRING} are read")
    return value


def count(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < MAX_COUNT:
        raise _invalid(where, f"a whole number from 0 to 2**53 expected, not {_describe(value)}")
    return value


def number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or abs(value) > MAX_MAGNITUDE:
        raise _invalid(where, f"a finite number up to 1e12 expected, not {_describe(value)}")
    return float(value)


def flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise _invalid(where, f"true or false expected, not {_kind(value)}")
    return value


def _describe(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "a larger number" if isinstance(value, int) else repr(value)
    return _kind(value)


def optional(check: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    """``check``, or null."""
    return lambda value, where: None if value is None else check(value, where)


def list_of(check: Callable[[Any, str], Any]) -> Callable[[Any, str], list[Any]]:
    def checked(value: Any, where: str) -> list[Any]:
        return [check(item, _field(where, i)) for i, item in enumerate(array(value, where))]
    return checked


def map_of(check: Callable[[Any, str], Any]) -> Callable[[Any, str], dict[str, Any]]:
    """An object of any keys (each a string of bounded size), every value passing ``check``."""
    def checked(value: Any, where: str) -> dict[str, Any]:
        for key, item in obj(value, where).items():
            text(key, where)
            check(item, _field(where, key))
        return value
    return checked


def fields(value: Any, where: str, required: Mapping[str, Callable], optional_fields: Mapping[str, Callable] = {}
           ) -> dict[str, Any]:
    """An object with these fields (others are kept unread)."""
    data = obj(value, where)
    for key, check in required.items():
        if key not in data:
            raise _invalid(_field(where, key), "missing")
        check(data[key], _field(where, key))
    for key, check in optional_fields.items():
        if key in data:
            check(data[key], _field(where, key))
    return data


def anything(value: Any, where: str) -> Any:
    return value


def object_of(required: Mapping[str, Callable], optional_fields: Mapping[str, Callable] = {}
              ) -> Callable[[Any, str], dict[str, Any]]:
    """``fields`` as a check of one value."""
    return lambda value, where: fields(value, where, required, optional_fields)


def _pair(value: Any, where: str) -> list[int]:
    pair = array(value, where)
    if len(pair) != 2:
        raise _invalid(where, "a [calls, instructions] pair expected")
    return [count(pair[0], _field(where, 0)), count(pair[1], _field(where, 1))]


def _method(value: Any, where: str) -> str:
    if value not in METHODS:
        raise _invalid(where, f"one of {', '.join(METHODS)} expected, not {_describe(value)[:40]}")
    return value


_COUNTS = map_of(count)
_TIMES = map_of(number)
_INSTRUCTIONS = object_of(
    {"per_call": number, "fixed_per_window": number, "windows": list_of(_pair), "by_layer_per_call": _TIMES,
     "by_kind_per_call": _TIMES},
    {"tool": text, "type_cache_misses_per_call": number, "allocator_calls_per_call": number,
     "estimated_cycles_per_call": optional(number), "allocation_price": optional(count),
     "unnamed_interpreter_per_call": number, "call_budget_asked": optional(count)})
_MEASUREMENT = {"name": text, "method": _method, "warmup": count, "rounds": count, "per_round": count,
                "calls_per_call": _COUNTS, "by_kernel_per_call": _COUNTS,
                "host_us_per_call": list_of(number), "wall_us_per_call": list_of(number), "sync_us": list_of(number),
                "host_breakdown_us_per_call": _TIMES}
_MEASUREMENT_OPTIONAL = {"dispatches_per_call": count, "sync_method": text, "gpu_us_per_call": optional(list_of(number)),
                         "gpu_is_indicative": flag, "instructions": optional(_INSTRUCTIONS)}


def _measurement(value: Any, where: str) -> None:
    data = fields(value, where, _MEASUREMENT, _MEASUREMENT_OPTIONAL)
    for kind in ("dispatch", "submit"):
        if kind not in data["calls_per_call"]:
            raise _invalid(_field(where, "calls_per_call"), f"no {kind!r} count")
    for key in ("wall_us_per_call", "host_us_per_call", "sync_us"):
        if len(data[key]) != data["rounds"]:
            raise _invalid(_field(where, key), f"{len(data[key])} values for {data['rounds']} rounds")


_GPU = object_of({"implementation": text, "implementation_version": text, "backend": text, "adapter_name": text,
                  "vendor": text, "vendor_id": count, "device_id": count, "driver": text, "adapter_type": text},
                 {"features": list_of(text)})
_TEST = {"nodeid": text, "measurements": list_of(_measurement),
         "call": object_of({}, {"dispatches": count, "calls": _COUNTS, "by_kernel": _COUNTS, "host_us": _TIMES})}
_TEST_OPTIONAL = {"budget_lines": optional(list_of(text)), "outcome": text, "gate": optional(map_of(anything)),
                  "speedups": optional(list_of(text)), "gate_overrides": optional(_TIMES),
                  "over_budget": optional(list_of(text)), "gpu": optional(_GPU)}


def _test(value: Any, where: str) -> None:
    data = fields(value, where, _TEST, _TEST_OPTIONAL)
    if not data["measurements"]:  # the report then shows the whole call phase's counts
        call = fields(data["call"], _field(where, "call"), {"dispatches": count, "calls": _COUNTS})
        if "submit" not in call["calls"]:
            raise _invalid(_field(where, "call.calls"), "no 'submit' count")


_SOFTWARE = ("python", "wgpu", "implementation", "backend", "adapter", "driver", "valgrind", "cpu_vendor",
             "machine", "numpy")


def _schema(value: Any, where: str) -> None:
    if value != SCHEMA_VERSION or isinstance(value, bool) or not isinstance(value, int):
        raise _invalid("", f"unknown schema {repr(value)[:40]} (this "
                           f"pytest-dispatch reads schema {SCHEMA_VERSION}); re-save it: run the tests again with "
                           "--dispatch-save or --dispatch-json")


_SECTION = {"schema": _schema, "tests": list_of(_test)}
_SECTION_OPTIONAL = {"version": optional(text), "counted": optional(object_of(
    dict.fromkeys(_SOFTWARE, text), {"counting": text, "counted_in": text, "fingerprint": text}))}
_DOCUMENT_OPTIONAL = {
    "machine_info": object_of({}, {"gpu": optional(_GPU), "gpu_fingerprint": optional(text)}),
    "commit_info": object_of({}, {"id": optional(text), "branch": optional(text), "time": optional(text),
                                  "dirty": optional(flag)}),
    "datetime": optional(text), "benchmarks": list_of(obj)}


def check_document(document: Any, merged_runs: bool = True) -> dict[str, Any]:
    """``document`` if it is a results document of this schema; else a ``UsageError`` naming the field.

    A merged file's ``pytest_dispatch.runs`` are documents themselves (``merged_runs``: allowed
    here; never inside a run)."""
    if not isinstance(document, dict) or not isinstance(document.get("pytest_dispatch"), dict):
        raise _invalid("", "not a pytest-dispatch results file (no 'pytest_dispatch' section); give a file written "
                           "by --dispatch-json or --dispatch-save, and keep other files out of the storage folder")
    _schema(document["pytest_dispatch"].get("schema"), "pytest_dispatch.schema")
    fields(document, "", {}, _DOCUMENT_OPTIONAL)
    section = fields(document["pytest_dispatch"], "pytest_dispatch", _SECTION, _SECTION_OPTIONAL)
    if "runs" in section:
        if not merged_runs:
            raise _invalid("pytest_dispatch.runs", "a merged file inside a merged file")
        for i, run in enumerate(array(section["runs"], "pytest_dispatch.runs")):
            try:
                check_document(run, merged_runs=False)
            except UsageError as error:
                raise _invalid(f"pytest_dispatch.runs[{i}]", str(error)) from None
    return document
