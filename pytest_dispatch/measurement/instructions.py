"""Counted mode (``--dispatch-instructions``): host instructions counted by Valgrind's callgrind.

A dispatch's cost is mostly host CPU work (validation, encoding, submit), and host
work can be counted instead of timed: the count does not move with the machine's load.
The session re-executes itself under ``valgrind --tool=callgrind`` with collection off
(``relaunch``), in an environment fixed so that two sessions can be compared
(``fixed_environment``).  For each measurement the meter then opens counting windows
of K and 2K calls of the measured function (``Counter.count``): callgrind counts the
calling thread only, between two client requests of a small C helper built at first
use against ``valgrind/callgrind.h`` (``build_helper``), and writes one dump per
window, read back by ``parse_dump``.  The slope of instructions over calls is the
cost per call (``InstructionCount``); the wait for the GPU stays outside the windows.
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import functools
import gc
import glob
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

COUNTED_ENV = "PYTEST_DISPATCH_COUNTED"  # in the relaunched session: the folder callgrind dumps into
VALGRIND_VERSION_ENV = "PYTEST_DISPATCH_VALGRIND"  # in the relaunched session: `valgrind --version`
PAD_ENV = "PYTEST_DISPATCH_PAD"  # pads the environment to a fixed size (see fixed_environment)
KEEP_DUMPS_ENV = "PYTEST_DISPATCH_KEEP_DUMPS"  # a folder: each window's dump is moved there, not deleted
# in a relaunched session whose tests run in pytest-xdist's workers: the command (a JSON list)
# that starts each worker's Python under callgrind; the controller itself runs natively
WORKER_LAUNCHER_ENV = "PYTEST_DISPATCH_WORKER_LAUNCHER"
HELPER_SOURCE = Path(__file__).with_name("callgrind_helper.c")
# Arguments and environment of the relaunched session padded to this many bytes: their size
# moves the initial stack, and with it the instructions of code that does not change.
ENVIRONMENT_BYTES = 32768
# Variables that change what the interpreter does, set or removed the same way for every session.
# glibc's malloc: fixed thresholds, no per-thread caches and no fast bins.  What an allocation
# does inside is charged a fixed price anyway (ALLOCATION_PRICE), but *where* it lands is not:
# with the caches, which chunk the calling thread gets depends on what the driver's threads
# freed and when, and hash tables keyed by addresses (the driver's, the interpreter's) then
# probe differently: without these settings two lavapipe sessions of the same tests read
# every test 0.6-0.9% apart; with them, 0.03% (docs/RESULTS.md section 11).
FIXED_VARIABLES = {
    "PYTHONHASHSEED": "0",
    "PYTHONMALLOC": "pymalloc",
    # the first session after a change would compile and write .pyc files that later ones read:
    # another history before the windows (0.2-0.7% on Dawn's Null backend)
    "PYTHONDONTWRITEBYTECODE": "1",
    "GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=4194304:glibc.malloc.trim_threshold=1073741824:"
                      "glibc.malloc.top_pad=268435456:glibc.malloc.mxfast=0:glibc.malloc.tcache_count=0",
}
REMOVED_VARIABLES = ("PYTHONPERFSUPPORT", "PYTHON_PERF_JIT_SUPPORT", "PYTHONTRACEMALLOC", "PYTHONDEVMODE",
                     "PYTHONPROFILEIMPORTTIME", "PYTHONASYNCIODEBUG", "PYTHONMALLOCSTATS", "PYTHONBREAKPOINT")
# Each thread's counts in a dump of its own: only the thread that opened a window collects, but
# callgrind counts every thread's calls, and wgpu-py's poll thread runs Python while the calling
# thread waits, so a merged dump's call counts (which the allocators' price needs) are not the
# window's own.
# Children too (--trace-children): pytest-xdist's workers are the processes that measure.
CALLGRIND_FLAGS = ("--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no", "--separate-threads=yes",
                   "--trace-children=yes", "-q")
# --dispatch-instructions-cycles: callgrind simulates the caches too (about 2x slower) and the
# windows' events give estimated cycles (estimated_cycles); reported, not gated: which accesses
# miss depends on addresses, so they repeat less well than instructions.
CACHE_SIM_FLAGS = ("--cache-sim=yes",)
CACHE_EVENTS = ("Ir", "Dr", "Dw", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw")

# A window holds at least this many instructions and, when a call holds fewer, this many
# submits: lavapipe retires finished submissions in its own threads at moments the CPU's load
# decides, and a larger window makes one retirement more or less a smaller share of it.
WINDOW_INSTRUCTIONS = 20_000_000
WINDOW_SUBMITS = 40
MAX_WINDOW_CALLS = 100_000
WINDOW_PAIRS = 2  # windows of K and 2K calls, this many times each (K, 2K, K, 2K)
# Before the windows, uncounted calls until the code measured ran this many dispatches (the
# calls made before counting, the warm-up and the check rounds, included): the interpreter
# retries a failed specialisation of an instruction after a back-off that doubles up to 4,096
# executions, so a pass of 100 dispatches still counted 0.7% less from its fourth window of
# 21 calls on than in its first (docs/RESULTS.md).
WARM_DISPATCHES = 10_000

# CPython's type attribute cache (4096 entries) is indexed by a type's version tag and the
# *address* of the attribute's name, so which hot look-ups collide, and then walk the MRO's
# dicts on every call, depends on where the interpreter's strings happen to lie: it moved a
# window's count by up to 3% between identical processes on Dawn's Null backend, and by
# 0.4% typically (docs/RESULTS.md).  What a look-up function calls outside itself is only
# ever that miss path (the MRO walk, tag assignment), so it is left out of the count; the
# look-ups themselves still count.  Names are callgrind's (with a recursion suffix "'2").
TYPE_LOOKUP = re.compile(r"^_PyType_Lookup\w*(?:[.'][\w.']*)?$")

# How much work an allocation or a release takes depends on where earlier allocations left
# the heap: glibc's bins and pymalloc's pools.  Sessions of the same code that ran other tests
# first, or that ran from a longer checkout path, differed by up to 1.2% in glibc's
# `_int_malloc` and `unlink_chunk` alone (docs/RESULTS.md §11).  So a call into an allocator
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
# What is counted, and how: a count made by other rules is not compared with this one (Software).
# Raise it when what parse_dump leaves out or charges changes.

# A threading.local attribute (wgpu-py's error handler reads one on every call into wgpu-native,
# the recorder another) is found by looking up, in the thread's state dict, a key that spells
# the local object's *address* ("thread.local.0x7f..."): how many slots that look-up probes
# depends on where the object landed, which moved with the driver's threads.  On lavapipe,
# processes of the same tests fell into three groups 0.22% of a call apart, all of it in these
# look-ups (docs/RESULTS.md section 11).  So each dict look-up a thread-local attribute access
# makes is charged a fixed price, as allocations are.
THREAD_LOCAL = re.compile(r"^(?:local_getattro|local_setattro|_ldict|localdummy_\w+)(?:\.[\w.]+)?(?:'\d+)?$")
DICT_LOOKUP = re.compile(r"^(?:_?PyDict_GetItem\w*|_Py_dict_lookup\w*|PyDict_SetItem|_PyDict_SetItem\w*)"
                         r"(?:\.[\w.]+)?(?:'\d+)?$")
# Above this share of a call in interpreter functions without names, the interpreter is taken
# as stripped: with the H200's Ubuntu python3.12 processes of the same code read up to 1.1%
# apart, all of it in one such function (docs/RESULTS.md §11).
UNNAMED_INTERPRETER_SHARE = 0.01
THREAD_LOCAL_LOOKUP_PRICE = 110  # a look-up of a small dict, probing once (the fewest any process took)

COUNTED_IN_SESSION = "the session's process"
COUNTED_IN_WORKERS = "pytest-xdist workers"

ENCODERS_SET_ASIDE = 64  # pooled command encoders drawn and kept before a counted measurement
_ENCODERS_ASIDE = "_pytest_dispatch_encoders_aside"
COUNTING_RULES = (f"6: type cache misses out, allocations at {ALLOCATION_PRICE}, "
                  f"thread-local look-ups at {THREAD_LOCAL_LOOKUP_PRICE}, warm-up from the first call, "
                  f"{ENCODERS_SET_ASIDE} pooled encoders set aside first")

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


class CountingUnavailable(RuntimeError):
    """Counted mode cannot run here; the message says why and what to do."""


class CountingError(RuntimeError):
    """A counting window failed (callgrind wrote no dump for it)."""


# -- the relaunch (in the process pytest was started in)


def valgrind_executable() -> str:
    """valgrind's path; CountingUnavailable where it cannot run."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "aarch64", "arm64"):
        raise CountingUnavailable(f"counting needs Valgrind on Linux (x86-64 or arm64), not {sys.platform} "
                                  f"{platform.machine()}")
    path = shutil.which("valgrind")
    if path is None:
        raise CountingUnavailable("valgrind is not on PATH (Debian/Ubuntu: apt-get install valgrind)")
    return path


def valgrind_version(valgrind: str) -> str:
    """'valgrind-3.19.0'."""
    done = subprocess.run([valgrind, "--version"], capture_output=True, text=True)
    return done.stdout.strip() or "valgrind-?"


def _cache_folder() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "pytest-dispatch"


def build_helper(valgrind: str | None = None) -> Path:
    """The client-request helper, compiled once per source and Valgrind into the user's cache
    folder (``cc -shared`` against ``valgrind/callgrind.h``); CountingUnavailable without
    a C compiler or the header."""
    valgrind = valgrind or valgrind_executable()
    source = HELPER_SOURCE.read_bytes()
    version = os.environ.get(VALGRIND_VERSION_ENV) or valgrind_version(valgrind)
    digest = hashlib.sha256(source + version.encode() + platform.machine().encode()).hexdigest()[:12]
    target = _cache_folder() / f"callgrind-helper-{digest}.so"
    if target.exists():
        return target
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        raise CountingUnavailable("no C compiler to build the callgrind helper (Debian/Ubuntu: apt-get install gcc)")
    include = Path(valgrind).resolve().parent.parent / "include"  # a valgrind installed under a prefix
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(prefix=".callgrind-helper-", suffix=".so", dir=target.parent)
    os.close(handle)
    try:
        done = subprocess.run([compiler, "-O2", "-shared", "-fPIC", f"-I{include}", "-o", temp, str(HELPER_SOURCE)],
                              capture_output=True, text=True)
        failure = done.stderr if done.returncode != 0 else None
    except OSError as error:
        failure = f"{compiler}: {error.strerror}"
    if failure is not None:
        Path(temp).unlink(missing_ok=True)
        first = (failure.strip().splitlines() or ["?"])[0]
        raise CountingUnavailable(f"cannot build the callgrind helper ({first}): it needs valgrind/callgrind.h "
                                  "(Debian/Ubuntu: apt-get install valgrind)")
    os.replace(temp, target)
    return target


def fixed_environment(environ: Mapping[str, str], args: Sequence[str], dump_folder: str,
                      valgrind_release: str, worker_launcher: Sequence[str] | None = None) -> dict[str, str]:
    """The relaunched session's environment: the user's, with the interpreter's switches fixed
    and padded so that arguments plus environment take ``ENVIRONMENT_BYTES`` (another checkout
    path or an unrelated variable then moves no count); with ``worker_launcher`` where only
    pytest-xdist's workers run under callgrind (relaunch)."""
    ours = (PAD_ENV, WORKER_LAUNCHER_ENV)
    env = {key: value for key, value in environ.items() if key not in REMOVED_VARIABLES and key not in ours}
    env.update(FIXED_VARIABLES)
    env[COUNTED_ENV] = dump_folder
    env[VALGRIND_VERSION_ENV] = valgrind_release
    if worker_launcher is not None:
        env[WORKER_LAUNCHER_ENV] = json.dumps(list(worker_launcher))
    used = sum(len(key) + len(value) + 2 for key, value in env.items()) + sum(len(arg) + 1 for arg in args)
    target = ENVIRONMENT_BYTES
    while target < used + len(PAD_ENV) + 64:
        target += 4096
    env[PAD_ENV] = "x" * (target - used - len(PAD_ENV) - 2)
    return env


def relaunch(pytest_args: Sequence[str], *, cwd: str | os.PathLike, cache_sim: bool = False,
             in_workers: bool = False, announce: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> int:
    """Run this pytest session again under callgrind (simulating the caches with ``cache_sim``);
    its exit status.  ``in_workers`` (the tests run in pytest-xdist's workers): only the
    workers run under callgrind (worker_python), the controller, which counts nothing,
    natively: under callgrind its start-up and collection held up every worker's start.

    CountingUnavailable (before anything ran) where Valgrind or the helper cannot be had."""
    valgrind = valgrind_executable()
    release = valgrind_version(valgrind)
    os.environ[VALGRIND_VERSION_ENV] = release
    build_helper(valgrind)
    with tempfile.TemporaryDirectory(prefix="pytest-dispatch-callgrind-") as dumps:
        launcher = [valgrind, *CALLGRIND_FLAGS, *(CACHE_SIM_FLAGS if cache_sim else ()),
                    f"--callgrind-out-file={dumps}/callgrind.%p"]
        session = [sys.executable, "-m", "pytest", *pytest_args]
        if in_workers:  # the workers' own arguments are the same in every session: the environment alone is padded
            command = session
            env = fixed_environment(os.environ, [], dumps, release, worker_launcher=launcher)
        else:
            command = [*launcher, *session]
            env = fixed_environment(os.environ, command, dumps, release)
        where = "pytest-xdist's workers run" if in_workers else "the session runs"
        announce(f"dispatch: counting host instructions under callgrind ({release}); {where} 10-50x slower")
        return subprocess.run(command, env=env, cwd=cwd).returncode


def worker_python(python: str | None) -> str | None:
    """In a counted session whose tests run in pytest-xdist's workers: the command line that
    starts a worker's Python (``python``, else this interpreter) under callgrind; else None."""
    launcher = os.environ.get(WORKER_LAUNCHER_ENV)
    if not launcher:
        return None
    return shlex.join([*json.loads(launcher), *(shlex.split(python) if python else [sys.executable])])


# -- in the relaunched session


_counter: "Counter | None | bool" = False  # False: not looked up yet


def session_counter() -> "Counter | None":
    """This process's counter when it runs counted (relaunched under callgrind), else None."""
    global _counter
    if _counter is False:
        folder = os.environ.get(COUNTED_ENV)
        _counter = None
        if folder:
            helper = Helper(build_helper(shutil.which("valgrind") or "valgrind"))
            if helper.running_on_valgrind():
                _counter = Counter(helper, Path(folder))
    return _counter or None


class Helper:
    """The C helper's client requests (no-ops outside Valgrind)."""

    def __init__(self, path: Path) -> None:
        self._lib = ctypes.CDLL(str(path))
        self._lib.pytest_dispatch_window_close.argtypes = [ctypes.c_char_p]
        self.window_open = self._lib.pytest_dispatch_window_open
        self.window_close = self._lib.pytest_dispatch_window_close
        self.start_instrumentation = self._lib.pytest_dispatch_start_instrumentation
        self.stop_instrumentation = self._lib.pytest_dispatch_stop_instrumentation

    def running_on_valgrind(self) -> bool:
        return bool(self._lib.pytest_dispatch_running_on_valgrind())


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


def _is_type_lookup(function: str | None) -> bool:
    return function is not None and TYPE_LOOKUP.match(function) is not None


def _matches(pattern: re.Pattern, function: str | None) -> bool:
    return function is not None and pattern.match(function) is not None


def _is_allocator(function: str | None) -> bool:
    return function is not None and ALLOCATOR.match(function) is not None


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


_SUMMARY = re.compile(r"^(?:summary|totals): *(\d+)", re.M)


class Counter:
    """Counting windows around calls of a function, in a session relaunched under callgrind."""

    def __init__(self, helper: Helper, dump_folder: Path) -> None:
        self.helper = helper
        self.dump_folder = dump_folder
        self._dumps = 0
        self.tool = os.environ.get(VALGRIND_VERSION_ENV, "valgrind").replace("valgrind-", "callgrind ")

    def count(self, run: Callable[[int], None], sizes: Sequence[int], between: Callable[[], None],
              warm: int = 0, more: Callable[[list[int]], tuple[int, Sequence[int]]] | None = None) -> list[Dump]:
        """One window per size: ``run(size)`` counted, ``between()`` (the wait for the GPU)
        before each window, not counted; first ``run(warm)``, uninstrumented.  ``more``, given
        the instructions of those windows, names further uncounted calls (uninstrumented) and
        further windows (a probe that sizes the windows can then be the first of them).
        The interpreter's cyclic garbage collector is paused meanwhile (it would run at moments
        that depend on what ran before)."""
        paths: list[tuple[Path, str]] = []
        gc_was_enabled = gc.isenabled()
        gc.collect()
        gc.disable()
        if warm:
            run(warm)
        self.helper.start_instrumentation()
        try:
            for size in sizes:
                paths.append(self._window(run, size, between))
            if more is not None:
                warm_more, sizes_more = more([self._total(path) for path, _ in paths])
                if warm_more:
                    self.helper.stop_instrumentation()
                    run(warm_more)
                    self.helper.start_instrumentation()
                for size in sizes_more:
                    paths.append(self._window(run, size, between))
            between()
        finally:
            self.helper.stop_instrumentation()
            if gc_was_enabled:
                gc.enable()
        return [self._read(path, label) for path, label in paths]

    def _window(self, run: Callable[[int], None], size: int, between: Callable[[], None]) -> tuple[Path, str]:
        between()
        self._dumps += 1
        label = f"pytest-dispatch window {self._dumps}"
        self.helper.window_open()
        try:
            run(size)
        finally:  # a call that raised still closes its window: the next one must toggle on
            self.helper.window_close(label.encode())
        return self.dump_folder / f"callgrind.{os.getpid()}.{self._dumps}", label

    @staticmethod
    def _total(path: Path) -> int:
        """A window's instructions from its dumps' summary lines alone: read while instrumented,
        where parsing a whole dump would cost seconds."""
        totals = [0]
        for part in sorted(path.parent.glob(glob.escape(path.name) + "-*")) or [path]:
            match = _SUMMARY.search(part.read_text(encoding="utf-8", errors="replace"))
            if match:
                totals.append(int(match.group(1)))
        return max(totals)

    @staticmethod
    def _read(path: Path, label: str) -> Dump:
        """The window's dump: of the thread that collected, where callgrind wrote one per thread
        (``PATH-01``, ``PATH-02``...; the others counted nothing)."""
        parts = sorted(path.parent.glob(glob.escape(path.name) + "-*")) or [path]
        dumps = []
        for part in parts:
            try:
                text = part.read_text(encoding="utf-8", errors="replace")
            except FileNotFoundError:
                raise CountingError(f"callgrind wrote no dump for {label} ({path}): was the session started "
                                    "with callgrind's --callgrind-out-file by --dispatch-instructions?") from None
            if f"Trigger: Client Request: {label}" not in text:
                raise CountingError(f"{part} is not the dump of {label}")
            dumps.append((parse_dump(text.splitlines(), cffi_entry_names()), part))
        dump, counted = max(dumps, key=lambda pair: sum(pair[0].by_object.values()))
        keep = os.environ.get(KEEP_DUMPS_ENV)
        for _, part in dumps:
            if keep and part == counted:  # for benchmarks/dump_diff.py: where two counts differ, by function
                os.makedirs(keep, exist_ok=True)
                shutil.move(part, os.path.join(keep, f"{path.name}.{label.rsplit(' ', 1)[-1]}"))
            else:
                part.unlink(missing_ok=True)
        return dump


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


def retire_all(device) -> Callable[[], None]:
    """What ends a window: a blocking poll of ``device`` on the calling thread, counted.

    wgpu-core retires finished submissions (frees their command buffers and trackers) at the
    next submit or poll, on whichever thread makes it; left to chance, a window's end cut a
    varying number of its own submissions' retirements off (+-1.5% a call of 20 submits on
    the H200).  Polling to idle inside the window retires them all there: the window holds its
    own submissions' whole host cost.  The wait is a blocking one (a fence), not a spin loop.
    wgpu-py's wgpu-native device has the poll as ``_poll_wait``; elsewhere nothing is done."""
    poll = getattr(device, "_poll_wait", None)
    return poll if callable(poll) else (lambda: None)


def set_aside_pooled_encoders(device, encoders: int = ENCODERS_SET_ASIDE) -> None:
    """Before a counted measurement, its device idle: draw ``encoders`` command encoders and
    keep them as long as the device lives, so that the measurement's calls get new ones.

    wgpu-core keeps finished encoders on a stack, each a Vulkan command pool holding as many
    command buffers as it ever needed at once (16 at a time), and resetting one costs lavapipe
    work for each buffer it holds.  Which pooled encoders a measurement drew was set by what
    ran before and by when its submissions happened to retire: `write` after a test of 10
    passes in one encoder counted 0.3-0.5% more in some processes than in others.  The pool
    holds what the calls before left (a measurement's own in-flight encoders, a few), so
    drawing ``encoders`` empties it; those drawn beyond it are new, about 1.5 KB each."""
    attributes = getattr(device, "__dict__", None)  # on the device: they go when it goes
    if attributes is not None:
        attributes.setdefault(_ENCODERS_ASIDE, []).extend(device.create_command_encoder() for _ in range(encoders))


def warm_calls(dispatches_per_call: int, made: int = 0, max_calls: int | None = None,
               windows: int | None = None) -> int:
    """The uncounted calls before the windows: WARM_DISPATCHES' worth less the ``made`` calls
    already made, within ``max_calls``: half of it while the windows' size is unknown, else
    what the ``windows`` calls (the probe's included) leave."""
    calls = max(0, -(-WARM_DISPATCHES // max(dispatches_per_call, 1)) - made)
    if max_calls is not None:
        calls = min(calls, max_calls // 2 if windows is None else max(0, max_calls - windows))
    return int(calls)


def window_calls(instructions_per_call: float, submits_per_call: int, max_calls: int | None = None,
                 warm: int = 0) -> int:
    """K: the calls of the smaller window, so that it holds WINDOW_INSTRUCTIONS and WINDOW_SUBMITS,
    and the probe and every window (1 + 3K x WINDOW_PAIRS) fit in what ``warm`` calls leave
    of ``max_calls``."""
    if instructions_per_call >= WINDOW_INSTRUCTIONS:
        return 1  # each window retires its own submissions (retire_all): their number matters no more
    by_instructions = -(-WINDOW_INSTRUCTIONS // max(int(instructions_per_call), 1))
    by_submits = -(-WINDOW_SUBMITS // submits_per_call) if submits_per_call else 1
    k = min(max(by_instructions, by_submits, 1), MAX_WINDOW_CALLS)
    if max_calls is not None:
        k = min(k, max(1, (max_calls - warm - 1) // (3 * WINDOW_PAIRS)))
    return int(k)


def call_budget_for(k: int, dispatches_per_call: int, made: int = 0) -> int:
    """The smallest call budget (rounds x per_round) that gives windows of K calls after ``made``
    calls: the whole warm-up, the probe and the windows, or, where the warm-up is longer, twice
    the probe and the windows (warm_calls gives the warm-up up to half of a budget)."""
    probe_and_windows = 1 + 3 * k * WINDOW_PAIRS
    return min(warm_calls(dispatches_per_call, made) + probe_and_windows, 2 * probe_and_windows - 1)


def window_sizes(k: int, instructions_per_call: float) -> list[int]:
    """The windows' calls: K, 2K, K, 2K (WINDOW_PAIRS pairs, whose slopes' difference is the
    spread); one pair of 1 and 2 calls where one call alone holds WINDOW_INSTRUCTIONS (a decode
    step: a window's noise is then a negligible share of it, and each call costs seconds)."""
    if k == 1 and instructions_per_call >= WINDOW_INSTRUCTIONS:
        return [1, 2]
    return [k, 2 * k] * WINDOW_PAIRS


# -- what a measurement keeps


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


# -- what two counted runs must share to be compared


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
    # 0.13-0.33% on lavapipe when the workers' start changed, docs/RESULTS.md §11)
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


def counted_in_here() -> str:
    """Where this session's counts are made: its own process, or pytest-xdist's workers
    (started under callgrind by the controller, relaunch)."""
    return COUNTED_IN_WORKERS if os.environ.get(WORKER_LAUNCHER_ENV) else COUNTED_IN_SESSION


def _cpu_vendor() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(("vendor_id", "CPU implementer")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"
