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

Its parts, by concern: ``launch`` (the relaunch under valgrind, its environment), ``dumps``
(reading callgrind's dumps, and the prices of what is not counted as it ran), ``windows``
(the windows' sizes, the warm calls before them, ``Counter`` that opens them) and ``count``
(``InstructionCount``, and ``Software``: what two counts must share).  Their public names are
this package's.
"""

from __future__ import annotations

from pytest_dispatch.measurement.instructions.launch import (  # noqa: F401
    CACHE_SIM_FLAGS, CALLGRIND_FLAGS, COUNTED_ENV, COUNTED_IN_SESSION, COUNTED_IN_WORKERS, ENVIRONMENT_BYTES,
    FIXED_VARIABLES, HELPER_SOURCE, KEEP_DUMPS_ENV, PAD_ENV, REMOVED_VARIABLES, VALGRIND_VERSION_ENV,
    WORKER_LAUNCHER_ENV, build_helper, counted_in_here, fixed_environment, relaunch,
    valgrind_executable, valgrind_version, worker_python
)
from pytest_dispatch.measurement.instructions.dumps import (  # noqa: F401
    ALLOCATION_PRICE, ALLOCATOR, CACHE_EVENTS, CFFI_LIBRARIES, DICT_LOOKUP, ENTRY_KINDS, LAYERS, THREAD_LOCAL,
    THREAD_LOCAL_LOOKUP_PRICE, TYPE_LOOKUP, UNNAMED_INTERPRETER_SHARE, Dump, DumpNames, cffi_entry_names,
    estimated_cycles, kind_of_entry, layer_of, parse_dump
)
from pytest_dispatch.measurement.instructions.windows import (  # noqa: F401
    ENCODERS_SET_ASIDE, MAX_WINDOW_CALLS, WARM_DISPATCHES, WINDOW_INSTRUCTIONS, WINDOW_PAIRS, WINDOW_SUBMITS,
    Counter, Helper, call_budget_for, retire_all, session_counter, set_aside_pooled_encoders,
    warm_calls, window_calls, window_sizes
)
from pytest_dispatch.measurement.instructions.count import (  # noqa: F401
    COUNTING_RULES, InstructionCount, Software
)
