"""The count a measurement keeps (``InstructionCount``), and what two counts must share to be
compared (``Software``)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
from typing import Any, Mapping, Sequence

from pytest_dispatch.measurement.instructions.dumps import (ALLOCATION_PRICE, ENTRY_KINDS, LAYERS,
                                                            THREAD_LOCAL_LOOKUP_PRICE, UNNAMED_INTERPRETER_SHARE, Dump)
from pytest_dispatch.measurement.instructions.launch import COUNTED_IN_SESSION, VALGRIND_VERSION_ENV, counted_in_here
from pytest_dispatch.measurement.instructions.windows import ENCODERS_SET_ASIDE

# What is counted, and how: a count made by other rules is not compared with this one (Software).
# Raise it when what parse_dump leaves out or charges changes.
COUNTING_RULES = (f"6: type cache misses out, allocations at {ALLOCATION_PRICE}, "
                  f"thread-local look-ups at {THREAD_LOCAL_LOOKUP_PRICE}, warm-up from the first call, "
                  f"{ENCODERS_SET_ASIDE} pooled encoders set aside first")


def _slope(calls: Sequence[int], values: Sequence[float]) -> tuple[float, float]:
    """Least-squares line through (calls, values): (per call, fixed part of a window)."""
    n = len(calls)
    mean_x = sum(calls) / n
    mean_y = sum(values) / n
    var_x = sum((x - mean_x) ** 2 for x in calls)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(calls, values)) / var_x
    return slope, mean_y - slope * mean_x


@dataclasses.dataclass(frozen=True)
class InstructionCount:
    """Host instructions of the calling thread per call of a measured function, counted by
    callgrind in windows of K and 2K calls: ``per_call`` is the slope, ``fixed`` what a
    window costs beyond its calls.  ``by_layer`` splits ``per_call`` by where it ran
    (LAYERS); ``by_kind`` gives the part inside wgpu's library by call kind (ENTRY_KINDS)."""

    per_call: float  # host instructions per call of the measured function: the windows' slope
    fixed: float  # what a window costs beyond its calls: the intercept
    windows: tuple[tuple[int, int], ...]  # (calls, instructions) of each window
    by_layer: Mapping[str, float]  # per call, by where it ran: interpreter, cffi, wgpu, driver, libc, other
    by_kind: Mapping[str, float]  # per call, inside wgpu's library, by the call kind that entered it
    tool: str = "callgrind"  # what counted, with its version
    type_cache_misses_per_call: float = 0.0  # left out of per_call: CPython's type cache misses (TYPE_LOOKUP)
    allocator_calls_per_call: float = 0.0  # calls into an allocator, each counted at ALLOCATION_PRICE
    estimated_cycles_per_call: float | None = None  # with --dispatch-instructions-cycles (estimated_cycles)
    allocation_price: int | None = ALLOCATION_PRICE  # what each allocator call counted; None: as it ran (old runs)
    unnamed_interpreter_per_call: float = 0.0  # of per_call: interpreter functions without a name (Dump)
    call_budget_asked: int | None = None  # where rounds x per_round cut the windows: the budget the rules' windows need

    @property
    def interpreter_unnamed(self) -> bool:
        """Whether much of the interpreter ran in functions without names (a stripped Python),
        so that its address-dependent look-ups were counted as they ran (docs/counted.md)."""
        return self.unnamed_interpreter_per_call > UNNAMED_INTERPRETER_SHARE * abs(self.per_call)

    @classmethod
    def from_windows(cls, sizes: Sequence[int], dumps: Sequence[Dump], tool: str = "callgrind",
                     call_budget_asked: int | None = None) -> "InstructionCount":
        """From the windows' sizes (calls) and their dumps, by least squares."""
        per_call, fixed = _slope(sizes, [d.instructions for d in dumps])
        layers = [d.by_layer() for d in dumps]
        kinds = [d.by_kind() for d in dumps]
        by_layer = {layer: _slope(sizes, [x[layer] for x in layers])[0] for layer in LAYERS}
        by_kind = {kind: _slope(sizes, [x[kind] for x in kinds])[0] for kind in ENTRY_KINDS}
        misses = _slope(sizes, [d.type_cache_misses for d in dumps])[0]
        allocations = _slope(sizes, [d.allocator_calls for d in dumps])[0]
        cycles = None
        if all(d.estimated_cycles is not None for d in dumps):
            cycles = _slope(sizes, [d.estimated_cycles for d in dumps])[0]
        unnamed = _slope(sizes, [d.unnamed_interpreter for d in dumps])[0]
        return cls(per_call, fixed, tuple(zip(sizes, (d.instructions for d in dumps))), by_layer, by_kind, tool,
                   misses, allocations, cycles, unnamed_interpreter_per_call=unnamed,
                   call_budget_asked=call_budget_asked)

    def per_dispatch(self, dispatches: int) -> float:
        """Host instructions per dispatch, for a call of ``dispatches`` dispatches."""
        return self.per_call / max(dispatches, 1)

    @property
    def spread(self) -> float | None:
        """The largest relative difference between the per-call slopes of consecutive K/2K pairs
        of windows (None with one pair): how repeatable this count was."""
        slopes = [(big - small) / (big_calls - small_calls)
                  for (small_calls, small), (big_calls, big) in zip(self.windows[::2], self.windows[1::2])
                  if big_calls != small_calls]
        if len(slopes) < 2 or not self.per_call:
            return None
        return (max(slopes) - min(slopes)) / abs(self.per_call)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (docs/schema.md)."""
        return {"per_call": self.per_call, "fixed_per_window": self.fixed,
                "windows": [list(window) for window in self.windows],
                "by_layer_per_call": dict(self.by_layer), "by_kind_per_call": dict(self.by_kind),
                "tool": self.tool, "thread": "calling",
                "type_cache_misses_per_call": self.type_cache_misses_per_call,
                "allocator_calls_per_call": self.allocator_calls_per_call, "allocation_price": self.allocation_price,
                "estimated_cycles_per_call": self.estimated_cycles_per_call,
                "unnamed_interpreter_per_call": self.unnamed_interpreter_per_call,
                "call_budget_asked": self.call_budget_asked}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "InstructionCount":
        """The inverse of ``as_dict``."""
        windows = tuple((int(calls), int(value)) for calls, value in data["windows"])
        return cls(float(data["per_call"]), float(data["fixed_per_window"]), windows,
                   {str(k): float(v) for k, v in data["by_layer_per_call"].items()},
                   {str(k): float(v) for k, v in data["by_kind_per_call"].items()}, str(data.get("tool", "callgrind")),
                   float(data.get("type_cache_misses_per_call", 0.0)), float(data.get("allocator_calls_per_call", 0.0)),
                   None if data.get("estimated_cycles_per_call") is None else float(data["estimated_cycles_per_call"]),
                   None if data.get("allocation_price") is None else int(data["allocation_price"]),
                   float(data.get("unnamed_interpreter_per_call", 0.0)),
                   None if data.get("call_budget_asked") is None else int(data["call_budget_asked"]))


@dataclasses.dataclass(frozen=True)
class Software:
    """What a count depends on besides the code measured: equal fingerprints, comparable counts."""

    python: str
    wgpu: str  # wgpu-py
    implementation: str  # e.g. "wgpu-native 0.32.0"
    backend: str
    adapter: str
    driver: str
    valgrind: str
    cpu_vendor: str
    machine: str
    numpy: str
    counting: str = COUNTING_RULES  # what counting left out and charged (COUNTING_RULES)
    # where the counting process ran (counted_in_here): a session's process or a pytest-xdist
    # worker start with other arguments and environment, and that layout moves counts (by
    # 0.13-0.33% on lavapipe when the workers' start changed, docs/RESULTS.md@cb24f50 §11)
    counted_in: str = COUNTED_IN_SESSION

    @property
    def fingerprint(self) -> str:
        text = json.dumps(dataclasses.asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def differences(self, other: "Software") -> list[str]:
        """'python 3.11.7 -> 3.12.1' for each field that differs."""
        mine, theirs = dataclasses.asdict(self), dataclasses.asdict(other)
        return [f"{key} {theirs[key]} -> {value}" for key, value in mine.items() if theirs[key] != value]

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "fingerprint": self.fingerprint}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Software":
        # runs saved before counted_in existed: a pytest-xdist worker then started otherwise, so
        # only a whole session's process is what it is today
        missing = {"counted_in": COUNTED_IN_SESSION}
        return cls(**{field.name: str(data.get(field.name, missing.get(field.name, "?")))
                      for field in dataclasses.fields(cls)})

    @classmethod
    def here(cls, gpu) -> "Software":
        """This process's, with ``gpu`` a GpuInfo."""
        import numpy
        import wgpu

        return cls(
            python=f"{platform.python_implementation()} {platform.python_version()}",
            wgpu=str(getattr(wgpu, "__version__", "?")),
            implementation=f"{gpu.implementation} {gpu.implementation_version}",
            backend=gpu.backend, adapter=gpu.adapter_name, driver=gpu.driver,
            valgrind=os.environ.get(VALGRIND_VERSION_ENV, "?"), cpu_vendor=_cpu_vendor(),
            machine=platform.machine(), numpy=numpy.__version__, counted_in=counted_in_here(),
        )


def _cpu_vendor() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(("vendor_id", "CPU implementer")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"
