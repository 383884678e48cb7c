"""Reading callgrind's dumps, and the prices: what a window's dump counts, by layer and call kind.

``parse_dump`` reads one window's dump; what depends on where things lie in memory (CPython's
type cache misses, allocations, thread-local look-ups) is left out or charged a fixed price
(``Dump``).  ``cffi_entry_names`` names the entries into a stripped wgpu library.
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import functools
import os
import re
import sys
import sysconfig
from typing import Any, Iterable, Mapping, Sequence

CACHE_EVENTS = ("Ir", "Dr", "Dw", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw")

# CPython's type attribute cache (4096 entries) is indexed by a type's version tag and the
# *address* of the attribute's name, so which hot look-ups collide, and then walk the MRO's
# dicts on every call, depends on where the interpreter's strings happen to lie: it moved a
# window's count by up to 3% between identical processes on Dawn's Null backend, and by
# 0.4% typically (docs/RESULTS.md@cb24f50 §11).  What a look-up function calls outside itself is only
# ever that miss path (the MRO walk, tag assignment), so it is left out of the count; the
# look-ups themselves still count.  Names are callgrind's (with a recursion suffix "'2").
TYPE_LOOKUP = re.compile(r"^_PyType_Lookup\w*(?:[.'][\w.']*)?$")

# How much work an allocation or a release takes depends on where earlier allocations left
# the heap: glibc's bins and pymalloc's pools.  Sessions of the same code that ran other tests
# first, or that ran from a longer checkout path, differed by up to 1.2% in glibc's
# `_int_malloc` and `unlink_chunk` alone (docs/RESULTS.md@cb24f50 §11).  So a call into an allocator
# from outside one is charged a fixed price, whatever it did inside; the number of calls still
# counts.  The price is about the mean of what such calls took on Dawn's Null backend (glibc 2.36's
# default malloc, CPython 3.11: pymalloc 25-40, operator new 165, free 94; docs/RESULTS.md §11).
ALLOCATOR = re.compile(
    r"^(?:(?:__libc_|__GI___libc_|__GI_)?(?:malloc|calloc|realloc|reallocarray|free|cfree|posix_memalign|"
    r"aligned_alloc|memalign|valloc|pvalloc)"
    r"|operator (?:new|delete)\b.*"
    r"|_?PyObject_(?:Mi)?(?:Malloc|Calloc|Realloc|Free)|_?PyMem_(?:Raw|Mi|Debug)*(?:Malloc|Calloc|Realloc|Free)"
    r"|(?:__rustc::)?__r(?:ust|dl|g)_(?:alloc|dealloc|realloc|alloc_zeroed))"
    r"(?:\.[\w.]+)?(?:'\d+)?$")
ALLOCATION_PRICE = 90  # instructions charged per call into an allocator

# A threading.local attribute (wgpu-py's error handler reads one on every call into wgpu-native,
# the recorder another) is found by looking up, in the thread's state dict, a key that spells
# the local object's *address* ("thread.local.0x7f..."): how many slots that look-up probes
# depends on where the object landed, which moved with the driver's threads.  On lavapipe,
# processes of the same tests fell into three groups 0.22% of a call apart, all of it in these
# look-ups (docs/RESULTS.md@cb24f50 section 11).  So each dict look-up a thread-local attribute access
# makes is charged a fixed price, as allocations are.
THREAD_LOCAL = re.compile(r"^(?:local_getattro|local_setattro|_ldict|localdummy_\w+)(?:\.[\w.]+)?(?:'\d+)?$")
DICT_LOOKUP = re.compile(r"^(?:_?PyDict_GetItem\w*|_Py_dict_lookup\w*|PyDict_SetItem|_PyDict_SetItem\w*)"
                         r"(?:\.[\w.]+)?(?:'\d+)?$")
# Above this share of a call in interpreter functions without names, the interpreter is taken
# as stripped: with the H200's Ubuntu python3.12 processes of the same code read up to 1.1%
# apart, all of it in one such function (docs/RESULTS.md@cb24f50 §11).
UNNAMED_INTERPRETER_SHARE = 0.01
THREAD_LOCAL_LOOKUP_PRICE = 110  # a look-up of a small dict, probing once (the fewest any process took)

# Where the counted instructions ran, by the object file they belong to (report order).
LAYERS = ("interpreter", "cffi", "wgpu", "driver", "libc", "allocator", "other")
_LAYER_PATTERNS = (
    ("wgpu", re.compile(r"wgpu_native|wgpu_dawn|webgpu_dawn|libdawn", re.I)),
    ("cffi", re.compile(r"_cffi_backend|libffi", re.I)),
    ("interpreter", re.compile(r"libpython|/python[0-9.]*$|/python[0-9.]*[^/]*$", re.I)),
    ("libc", re.compile(r"/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|ld)[.-][^/]*$", re.I)),
    ("driver", re.compile(r"vulkan|lvp|nvidia|radeon|amdgpu|amdvlk|intel|mesa|libLLVM|libdrm|swiftshader|"
                          r"libgallium|libGLX|libEGL|libcuda", re.I)),
)

# A call into wgpu's library from outside it, by the function callgrind names (wgpu-core's
# or Dawn's, after the C entry point's tail call), charged to a call kind of the recorder.
_ENTRY_KINDS = (
    ("encoder", ("createcommandencoder",)),
    ("pass", ("begincomputepass",)),
    ("set_pipeline", ("setpipeline",)),
    ("set_bind_group", ("setbindgroup",)),
    ("dispatch_indirect", ("dispatchworkgroupsindirect",)),
    ("dispatch", ("dispatchworkgroups",)),
    ("end_pass", ("computepassend", "computepassencoderend", "apiend")),
    ("finish", ("encoderfinish", "apifinish")),
    ("submit", ("queuesubmit", "apisubmit")),
    ("write", ("writebuffer", "writetexture")),
    ("copy", ("copybuffertobuffer", "copybuffertotexture", "copytexturetobuffer", "copytexturetotexture")),
    ("readback", ("mapasync", "getmappedrange", "unmap", "devicepoll", "processevents", "instancetick",
                  "waitany", "onsubmittedworkdone")),
    ("release", ("drop", "release")),
)
ENTRY_KINDS = tuple(kind for kind, _ in _ENTRY_KINDS) + ("other",)


@dataclasses.dataclass(frozen=True)
class Dump:
    """One window's counts, read from callgrind's dump of it."""

    instructions: int  # counted: less the type cache's misses, the allocators at their fixed price
    by_object: Mapping[str, int]  # self instructions by object file, as callgrind counted them
    by_entry: Mapping[str, int]  # inclusive instructions of calls into wgpu's library, by callee
    type_cache_misses: int = 0  # instructions left out: CPython's type cache misses (TYPE_LOOKUP)
    thread_local_lookups: int = 0  # dict look-ups of thread-local attributes (THREAD_LOCAL), each at its price
    thread_local_instructions: int = 0  # what those look-ups took, as callgrind counted it (left out)
    allocator_calls: int = 0  # calls into an allocator from outside one (ALLOCATOR), each at ALLOCATION_PRICE
    allocator_instructions: int = 0  # what those calls did inside, as callgrind counted it (left out)
    # the part of allocator_instructions in functions only allocators call, by object file
    allocator_by_object: Mapping[str, int] = dataclasses.field(default_factory=dict)
    estimated_cycles: int | None = None  # with the cache simulation (CACHE_SIM_FLAGS): see estimated_cycles
    # self instructions of the interpreter's functions callgrind knows only by address (a stripped
    # Python): the rules that name CPython's internals (TYPE_LOOKUP, THREAD_LOCAL) cannot see them
    unnamed_interpreter: int = 0

    def by_layer(self) -> dict[str, int]:
        """Instructions by layer (LAYERS), adding up to ``instructions``: the allocators' calls at
        their price in ``allocator``, what they did inside out of every layer (what ran in
        functions that others call too, memset for calloc say, out of libc's)."""
        layers = dict.fromkeys(LAYERS, 0)
        for path, value in self.by_object.items():
            layers[layer_of(path)] += value - self.allocator_by_object.get(path, 0)
        layers["libc"] -= self.allocator_instructions - sum(self.allocator_by_object.values())
        layers["interpreter"] -= self.type_cache_misses + self.thread_local_instructions
        layers["interpreter"] += self.thread_local_lookups * THREAD_LOCAL_LOOKUP_PRICE
        layers["allocator"] = self.allocator_calls * ALLOCATION_PRICE
        return {layer: max(0, value) for layer, value in layers.items()}

    def by_kind(self) -> dict[str, int]:
        kinds = dict.fromkeys(ENTRY_KINDS, 0)
        for name, value in self.by_entry.items():
            kinds[kind_of_entry(name)] += value
        return kinds


def layer_of(object_path: str) -> str:
    """The layer an object file belongs to (LAYERS)."""
    for layer, pattern in _LAYER_PATTERNS:
        if pattern.search(object_path):
            return layer
    return "other"


def kind_of_entry(function: str) -> str:
    """The call kind (ENTRY_KINDS) of a function wgpu's library was entered by."""
    plain = re.sub(r"[^a-z]", "", function.lower().rsplit("::", 1)[-1] if "::" in function else function.lower())
    qualified = re.sub(r"[^a-z]", "", function.lower())
    for kind, needles in _ENTRY_KINDS:
        if any(needle in plain or needle in qualified for needle in needles):
            return kind
    return "other"


# Each asked of every call line of a dump, about names that repeat: answered once a name.
@functools.lru_cache(maxsize=65536)
def _is_type_lookup(function: str | None) -> bool:
    return function is not None and TYPE_LOOKUP.match(function) is not None


@functools.lru_cache(maxsize=65536)
def _matches(pattern: re.Pattern, function: str | None) -> bool:
    return function is not None and pattern.match(function) is not None


@functools.lru_cache(maxsize=65536)
def _is_allocator(function: str | None) -> bool:
    return function is not None and ALLOCATOR.match(function) is not None


@functools.lru_cache(maxsize=4096)
def _is_wgpu_object(path: str | None) -> bool:
    return path is not None and layer_of(path) == "wgpu"


class DumpNames:
    """Callgrind's compressed names: "(3) name" the first time, then "(3)", per space (ob, fn)."""

    def __init__(self) -> None:
        self._names: dict[str, dict[str, str]] = {"ob": {}, "fn": {}}

    def __call__(self, space: str, text: str) -> str:
        text = text.strip()
        if text.startswith("("):
            ident, _, rest = text[1:].partition(")")
            if rest.strip():
                self._names[space][ident] = rest.strip()
            return self._names[space].get(ident, ident)
        return text


def parse_dump(lines: Iterable[str], entry_names: Mapping[str, str] | None = None) -> Dump:
    """A callgrind dump (its text format, names compressed or not): the total, self cost by
    object file, the inclusive cost of each call into wgpu's library from outside it, and what
    is counted otherwise (CPython's type cache misses, the allocators' calls: see ``Dump``).
    ``entry_names`` names the entries callgrind knows only by address (``cffi_entry_names``)."""
    entry_names = entry_names or {}
    name = DumpNames()
    total = None
    obj = function = callee_obj = callee_fn = None
    in_call = False
    calls = 0
    misses = allocator_calls = allocator_instructions = local_lookups = local_instructions = 0
    by_object: collections.Counter[str] = collections.Counter()
    by_function: collections.Counter[tuple[str, str]] = collections.Counter()
    callers: dict[str, set[str]] = collections.defaultdict(set)
    by_entry: collections.Counter[str] = collections.Counter()
    events: list[str] = ["Ir"]
    # with the cache simulation, every event of: what ran, the misses', the allocators' (left out)
    self_events = missed_events = allocator_events = None
    for line in lines:
        head = line[:1]
        if head and (head.isdigit() or head in "+-*"):
            parts = line.split()
            cost = int(parts[1]) if len(parts) > 1 else 0
            vector = _event_vector(parts, len(events)) if self_events is not None else None
            if in_call:  # the inclusive cost of the call just named
                in_call = False
                callers[callee_fn or "?"].add(function or "?")
                if _is_wgpu_object(callee_obj) and not _is_wgpu_object(obj):
                    by_entry[entry_names.get(callee_fn or "?", callee_fn or "?")] += cost
                if _is_type_lookup(function) and not _is_type_lookup(callee_fn):
                    misses += cost
                    if vector is not None:
                        missed_events = [a + b for a, b in zip(missed_events, vector)]
                elif _matches(THREAD_LOCAL, function) and _matches(DICT_LOOKUP, callee_fn):
                    local_lookups += calls
                    local_instructions += cost
                    if vector is not None:  # priced like the lookups, with the misses' events
                        missed_events = [a + b for a, b in zip(missed_events, vector)]
                elif _is_allocator(callee_fn) and not _is_allocator(function):
                    allocator_calls += calls
                    allocator_instructions += cost
                    if vector is not None:
                        allocator_events = [a + b for a, b in zip(allocator_events, vector)]
                callee_obj = None  # cob= holds for one call
            else:
                by_object[obj or "?"] += cost
                by_function[obj or "?", function or "?"] += cost
                if vector is not None:
                    self_events = [a + b for a, b in zip(self_events, vector)]
            continue
        key, sep, value = line.partition("=")
        if not sep:
            if line.startswith(("summary:", "totals:")) and total is None:
                total = int(line.split(":", 1)[1].split()[0])
            elif line.startswith("events:"):
                events = line.split(":", 1)[1].split()
                if set(CACHE_EVENTS) <= set(events):
                    self_events, missed_events, allocator_events = ([0] * len(events) for _ in range(3))
            continue
        if key == "ob":
            obj = name("ob", value)
        elif key == "fn":
            function = name("fn", value)
            callee_obj = None
        elif key == "cob":
            callee_obj = name("ob", value)
        elif key == "cfn":
            callee_fn = name("fn", value)
        elif key == "calls":
            in_call = True
            calls = int(value.split()[0])
            callee_obj = callee_obj or obj
        elif key in ("fl", "fi", "fe", "cfi", "cfl"):
            continue
    if total is None:
        total = sum(by_object.values())
    inside = _allocator_functions(callers)
    allocator_by_object: collections.Counter[str] = collections.Counter()
    for (path, function), cost in by_function.items():
        if function in inside:
            allocator_by_object[path] += cost
    unnamed = sum(cost for (path, function), cost in by_function.items()
                  if function.startswith("0x") and layer_of(path) == "interpreter")
    priced = allocator_calls * ALLOCATION_PRICE + local_lookups * THREAD_LOCAL_LOOKUP_PRICE
    cycles = None
    if self_events is not None:
        counted = dict(zip(events, (a - b - c for a, b, c in zip(self_events, missed_events, allocator_events))))
        cycles = estimated_cycles(counted) + priced
    return Dump(total - misses - local_instructions - allocator_instructions + priced, dict(by_object),
                dict(by_entry), misses, local_lookups, local_instructions, allocator_calls, allocator_instructions,
                dict(allocator_by_object), cycles, unnamed)


def _event_vector(parts: Sequence[str], events: int) -> list[int]:
    """A cost line's events after its position (callgrind leaves trailing zeros out)."""
    values = [int(part) for part in parts[1:1 + events]]
    return values + [0] * (events - len(values))


def estimated_cycles(events: Mapping[str, int]) -> int:
    """Cycles estimated from the cache simulation's events, as iai and CodSpeed do:
    L1 hits + 5 x last-level hits + 35 x RAM accesses, where the RAM accesses are the
    last-level misses (ILmr + DLmr + DLmw), the last-level hits the L1 misses less those, and the
    L1 hits every instruction fetch and data access (Ir + Dr + Dw) less both."""
    ram = events["ILmr"] + events["DLmr"] + events["DLmw"]
    last_level = events["I1mr"] + events["D1mr"] + events["D1mw"] - ram
    l1 = events["Ir"] + events["Dr"] + events["Dw"] - last_level - ram
    return l1 + 5 * last_level + 35 * ram


def _allocator_functions(callers: Mapping[str, set[str]]) -> set[str]:
    """The allocators (ALLOCATOR) and the functions that only they, or functions only they
    call, call: where an allocator's own instructions ran."""
    inside = {function for function in callers if _is_allocator(function)}
    grown = True
    while grown:
        grown = False
        for function, its_callers in callers.items():
            if function not in inside and its_callers <= inside:
                inside.add(function)
                grown = True
    return inside


# cffi modules whose C functions have no symbols callgrind can read (wgpudawn links Dawn into
# one extension module, stripped): their entries are named by address (cffi_entry_names).
CFFI_LIBRARIES = ("wgpudawn.backends.dawn._ffi",)


@functools.lru_cache(maxsize=None)
def _entry_names_of(module_name: str) -> dict[str, str]:
    module = sys.modules.get(module_name)
    lib = getattr(module, "lib", None)
    path = str(getattr(module, "lib_path", "") or "")
    base = _load_base(path) if path else None
    if lib is None or base is None or sysconfig.get_config_var("Py_GIL_DISABLED"):
        return {}
    names = {}
    for name in dir(lib):
        address = _builtin_address(getattr(lib, name, None), name)
        if address is not None:
            names[f"0x{address - base:016x}"] = name
    return names


def cffi_entry_names() -> dict[str, str]:
    """"0x0000000000099280" -> "wgpuComputePassEncoderDispatchWorkgroups": callgrind's name of a
    function it has no symbol for (its offset in the object file) -> the C function cffi's
    wrapper at that offset calls, for the loaded CFFI_LIBRARIES."""
    names: dict[str, str] = {}
    for module_name in CFFI_LIBRARIES:
        if module_name in sys.modules:
            names.update(_entry_names_of(module_name))
    return names


class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p)]


class _CFunctionObject(ctypes.Structure):  # CPython's PyCFunctionObject, up to m_ml
    _fields_ = [("ob_refcnt", ctypes.c_ssize_t), ("ob_type", ctypes.c_void_p), ("m_ml", ctypes.POINTER(_MethodDef))]


def _builtin_address(function: Any, name: str) -> int | None:
    """The C address a cffi builtin runs (its wrapper), checked against its name."""
    if type(function).__name__ != "builtin_function_or_method":
        return None
    definition = _CFunctionObject.from_address(id(function)).m_ml.contents
    return definition.ml_meth if definition.ml_name == name.encode() else None


def _load_base(path: str) -> int | None:
    """Where ``path`` is mapped in this process (its first mapping's address less its offset)."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            for line in maps:
                fields = line.split()
                if len(fields) >= 6 and os.path.realpath(fields[5]) == os.path.realpath(path):
                    return int(fields[0].split("-")[0], 16) - int(fields[2], 16)
    except OSError:
        pass
    return None
