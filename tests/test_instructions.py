"""Counted mode (--dispatch-instructions) without Valgrind: the dump parser, prices of allocations and
thread-local look-ups, estimated cycles, and who runs under callgrind (test_instruction_windows.py
has the windows, the environment, the verdicts and the budget)."""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys

import pytest

from helpers import DUMP, WGPU, environment_size

from pytest_dispatch.measurement import instructions
from pytest_dispatch.measurement.instructions import InstructionCount, launch

def test_a_dump_is_read_by_object_and_by_entry_into_wgpu():
    dump = instructions.parse_dump(DUMP.splitlines())
    assert dump.instructions == 800
    assert sum(dump.by_object.values()) == 800  # self costs add up to the summary
    assert dump.by_object[WGPU] == 350
    assert dump.by_object["/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so"] == 60
    # only calls into wgpu from outside it, inclusive; wgpu's own call into the driver is not an entry
    assert dump.by_entry == {
        "wgpu_core::device::queue::<impl wgpu_core::global::Global>::queue_submit": 400,
        "wgpu_core::command::<impl wgpu_core::global::Global>::command_encoder_finish": 150,
    }
    assert dump.by_layer() == {"interpreter": 300, "cffi": 50, "wgpu": 350, "driver": 60, "libc": 40, "allocator": 0,
                               "other": 0}
    kinds = dump.by_kind()
    assert kinds["submit"] == 400 and kinds["finish"] == 150 and sum(kinds.values()) == 550


# An attribute look-up that missed CPython's type cache: _PyType_Lookup walks the MRO
# (find_name_in_mro, or inlined dict look-ups in builds that inline it) and assigns a tag.
MISSES = """# callgrind format
desc: Trigger: Client Request: pytest-dispatch window 2
events: Ir
summary: 1000
ob=(1) /usr/lib/libpython3.12.so.1.0
fn=(1) _PyEval_EvalFrameDefault
0 500
cfn=(2) _PyType_Lookup
calls=10 0
0 300
fn=(2)
0 60
cfn=(3) find_name_in_mro
calls=2 0
0 150
cfn=(4) _Py_dict_lookup'2
calls=1 0
0 50
cfn=(5) _PyType_LookupRef
calls=1 0
0 40
fn=(5)
0 30
cfn=(6) assign_version_tag.isra.0
calls=1 0
0 10
fn=(3)
0 110
cfn=(4)
calls=4 0
0 40
fn=(4)
0 90
fn=(6)
0 10
fn=(7) PyDict_GetItem
0 200
"""


def test_type_cache_misses_are_left_out_and_the_lookups_kept():
    dump = instructions.parse_dump(MISSES.splitlines())
    # what the look-ups called outside themselves: the MRO walk 150, a dict look-up 50, a tag 10;
    # the call from one look-up function into another (_PyType_LookupRef, 40) is not a miss
    assert dump.type_cache_misses == 210
    assert dump.instructions == 1000 - 210
    assert dump.by_layer()["interpreter"] == 1000 - 210  # the layers add up to what is counted
    assert instructions.TYPE_LOOKUP.match("_PyType_Lookup'2") and not instructions.TYPE_LOOKUP.match("find_name_in_mro")
    count = InstructionCount.from_windows([1, 2], [dump, dataclasses.replace(dump, type_cache_misses=2 * 210)])
    assert count.type_cache_misses_per_call == 210
    assert InstructionCount.from_dict(count.as_dict()) == count


# Calls into allocators from outside them: pymalloc from the interpreter (which calls glibc's
# malloc inside: not a call of its own) and operator new from a C++ library; INSIDE_MALLOC is
# what the allocators did inside, which depends on the heap's history.
def allocations_dump(inside_malloc: int) -> str:
    third = inside_malloc // 3
    return f"""# callgrind format
desc: Trigger: Client Request: pytest-dispatch window 3
events: Ir
ob=(1) /usr/lib/libpython3.12.so.1.0
fn=(1) _PyEval_EvalFrameDefault
0 500
cfn=(2) PyObject_Malloc
calls=3 0
0 {60 + 10 + third}
fn=(2)
0 60
cob=(2) /usr/lib/x86_64-linux-gnu/libc.so.6
cfn=(3) malloc
calls=1 0
0 {10 + third}
ob=(2)
fn=(3)
0 30
cfn=(4) _int_malloc
calls=3 0
0 {inside_malloc}
fn=(4)
0 {inside_malloc}
ob=(3) /usr/lib/libdawn.so
fn=(5) dawn::native::CommandEncoder::Finish
0 200
cob=(4) /usr/lib/x86_64-linux-gnu/libstdc++.so.6
cfn=(6) operator new(unsigned long)
calls=2 0
0 {50 + 20 + 2 * third}
ob=(4)
fn=(6)
0 50
cob=(2)
cfn=(3)
calls=2 0
0 {20 + 2 * third}
"""


def test_allocator_calls_are_counted_at_a_fixed_price_whatever_they_did_inside():
    quick, slow = (instructions.parse_dump(allocations_dump(inside).splitlines()) for inside in (300, 9_000))
    price = instructions.ALLOCATION_PRICE
    assert quick.allocator_calls == 3 + 2  # the malloc inside PyObject_Malloc is not a call of its own
    assert quick.instructions == slow.instructions == 500 + 200 + 5 * price
    assert quick.by_layer() == slow.by_layer() == {"interpreter": 500, "cffi": 0, "wgpu": 200, "driver": 0,
                                                    "libc": 0, "allocator": 5 * price, "other": 0}
    assert sum(quick.by_layer().values()) == quick.instructions
    count = InstructionCount.from_windows([1, 2], [quick, dataclasses.replace(slow, allocator_calls=10)])
    assert count.allocator_calls_per_call == 5
    assert InstructionCount.from_dict(count.as_dict()) == count


def test_the_window_is_read_from_the_dump_of_the_thread_that_collected(tmp_path, monkeypatch):
    monkeypatch.delenv(instructions.KEEP_DUMPS_ENV, raising=False)
    label = "pytest-dispatch window 3"
    idle = "\n".join(line if not line[:1].isdigit() else "0 0" for line in allocations_dump(300).splitlines())
    (tmp_path / "callgrind.9.3-01").write_text(idle)  # another thread: calls seen, nothing collected
    (tmp_path / "callgrind.9.3-02").write_text(allocations_dump(300))
    dump = instructions.Counter._read(tmp_path / "callgrind.9.3", label)
    assert dump.instructions == 500 + 200 + 5 * instructions.ALLOCATION_PRICE
    assert not list(tmp_path.iterdir())  # every thread's part deleted


# The same window with callgrind's cache simulation: every cost line carries Ir Dr Dw I1mr D1mr
# D1mw ILmr DLmr DLmw (trailing zeros left out); a type cache miss and an allocation to leave out.
CACHE_SIM = """# callgrind format
desc: Trigger: Client Request: pytest-dispatch window 4
events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
ob=(1) /usr/lib/libpython3.12.so.1.0
fn=(1) _PyEval_EvalFrameDefault
0 1000 300 100 10 20 5 1 2
cfn=(2) _PyType_Lookup
calls=1 0
0 40 10
cfn=(3) PyObject_Malloc
calls=2 0
0 70 20 20 0 4
fn=(2)
0 10 5
cfn=(4) find_name_in_mro
calls=1 0
0 30 5 0 1 1
fn=(4)
0 30 5 0 1 1
fn=(3)
0 70 20 20 0 4
"""


def test_estimated_cycles_follow_the_formula_with_the_same_parts_left_out():
    dump = instructions.parse_dump(CACHE_SIM.splitlines())
    price = instructions.ALLOCATION_PRICE
    # counted: the interpreter's 1000 and the look-up's own 10 (the miss below it and the
    # allocations out, the 2 allocations at their price)
    assert dump.instructions == 1010 + 2 * price
    ram = 1 + 2 + 0
    last_level = (10 + 20 + 5) - ram
    l1 = (1010 + 305 + 100) - last_level - ram
    assert dump.estimated_cycles == l1 + 5 * last_level + 35 * ram + 2 * price
    count = InstructionCount.from_windows([1, 2], [dump, dataclasses.replace(dump, estimated_cycles=2 * dump.estimated_cycles)])
    assert count.estimated_cycles_per_call == dump.estimated_cycles
    assert InstructionCount.from_dict(count.as_dict()) == count
    assert instructions.parse_dump(DUMP.splitlines()).estimated_cycles is None  # no cache simulation, no cycles


def test_the_cache_simulation_is_asked_of_callgrind_only_with_cycles(monkeypatch, tmp_path):
    launched = [_launched(monkeypatch, tmp_path, cache_sim=cache_sim)[0] for cache_sim in (False, True)]
    assert [("--cache-sim=yes" in command) for command in launched] == [False, True]
    assert all("--separate-threads=yes" in command for command in launched)


def _launched(monkeypatch, tmp_path, **options) -> tuple[list[str], dict[str, str]]:
    """The command and environment ``relaunch(**options)`` runs (nothing is run)."""
    launched = []
    monkeypatch.setattr(launch, "valgrind_executable", lambda: "/usr/bin/valgrind")
    monkeypatch.setattr(launch, "valgrind_version", lambda valgrind: "valgrind-3.19.0")
    monkeypatch.setattr(launch, "build_helper", lambda valgrind: tmp_path / "helper.so")
    monkeypatch.setattr(launch, "run_to_the_end", lambda command, env, cwd, announce: launched.append((command, env)) or 0)
    assert instructions.relaunch(["tests", "-n", "2"], cwd=tmp_path, announce=lambda line: None, **options) == 0
    return launched[0]


def test_with_xdist_only_the_workers_run_under_callgrind(monkeypatch, tmp_path):
    monkeypatch.setenv(instructions.WORKER_LAUNCHER_ENV, '["stale"]')
    command, env = _launched(monkeypatch, tmp_path)
    assert command[0] == "/usr/bin/valgrind" and instructions.WORKER_LAUNCHER_ENV not in env

    command, env = _launched(monkeypatch, tmp_path, in_workers=True)
    assert command == [sys.executable, "-m", "pytest", "tests", "-n", "2"]  # the controller: natively
    launcher = json.loads(env[instructions.WORKER_LAUNCHER_ENV])
    assert launcher[0] == "/usr/bin/valgrind" and "--tool=callgrind" in launcher
    # every worker starts with the same arguments (pytest-xdist's bootstrap): the environment alone is padded
    assert environment_size(env, []) == instructions.ENVIRONMENT_BYTES


@pytest.mark.parametrize("xdist, options, in_workers", [
    (True, dict(numprocesses=2), True),
    (True, dict(numprocesses="auto"), True),
    (True, dict(numprocesses="auto", usepdb=True), False),  # pytest-xdist runs --pdb sessions serially
    (True, dict(numprocesses=0), False),
    (True, dict(numprocesses=None, dist="load", tx=["2*popen"]), True),
    (True, dict(numprocesses=None, dist="no", tx=[]), False),
    (False, dict(numprocesses=2), False),  # -p no:xdist
])
def test_only_a_session_that_pytest_xdist_distributes_runs_its_controller_natively(xdist, options, in_workers):
    from types import SimpleNamespace

    from pytest_dispatch import plugin

    option = SimpleNamespace(**{"usepdb": False, "dist": "no", "tx": [], **options})
    config = SimpleNamespace(option=option, getoption=lambda name, default=None: getattr(option, name, default),
                             pluginmanager=SimpleNamespace(has_plugin=lambda name: xdist and name == "xdist"))
    assert plugin._tests_run_in_xdist_workers(config) is in_workers


def test_xdist_s_local_workers_are_started_under_callgrind(monkeypatch):
    execnet = pytest.importorskip("execnet")
    from pytest_dispatch import plugin

    specs = [execnet.XSpec("popen"), execnet.XSpec("popen//python=python3.12 -X dev"), execnet.XSpec("ssh=host")]
    plugin.pytest_xdist_setupnodes(config=None, specs=specs)
    assert [spec.python for spec in specs] == [None, "python3.12 -X dev", None]  # not a counted session

    monkeypatch.setenv(instructions.WORKER_LAUNCHER_ENV, json.dumps(["/usr/bin/valgrind", "--tool=callgrind"]))
    plugin.pytest_xdist_setupnodes(config=None, specs=specs)
    assert shlex.split(specs[0].python) == ["/usr/bin/valgrind", "--tool=callgrind", sys.executable]
    assert shlex.split(specs[1].python) == ["/usr/bin/valgrind", "--tool=callgrind", "python3.12", "-X", "dev"]
    assert specs[2].python is None  # a remote worker: not ours to wrap


def test_entries_known_only_by_address_are_named_for_their_call_kind():
    dawn = "/venv/site-packages/wgpudawn/_lib/_wgpu_dawn.abi3.so"  # Dawn linked in, stripped
    dump = DUMP.replace(WGPU, dawn).replace(
        "wgpu_core::device::queue::<impl wgpu_core::global::Global>::queue_submit", "0x0000000000092d20").replace(
        "wgpu_core::command::<impl wgpu_core::global::Global>::command_encoder_finish", "0x0000000000099f50")
    names = {"0x0000000000092d20": "wgpuQueueSubmit", "0x0000000000099f50": "wgpuCommandEncoderFinish"}
    assert instructions.parse_dump(dump.splitlines()).by_kind()["other"] == 550  # unnamed: no kind
    kinds = instructions.parse_dump(dump.splitlines(), names).by_kind()
    assert (kinds["submit"], kinds["finish"], kinds["other"]) == (400, 150, 0)


def test_a_stripped_cffi_library_s_entries_are_named_by_their_offset():
    ffi_module = pytest.importorskip("wgpudawn.backends.dawn._ffi")
    names = instructions.cffi_entry_names()
    by_name = {name: address for address, name in names.items()}
    assert {"wgpuQueueSubmit", "wgpuCommandEncoderFinish", "wgpuComputePassEncoderDispatchWorkgroups"} <= set(by_name)
    offset = int(by_name["wgpuQueueSubmit"], 16)
    base = instructions.dumps._load_base(ffi_module.lib_path)
    assert instructions.dumps._builtin_address(ffi_module.lib.wgpuQueueSubmit, "wgpuQueueSubmit") == base + offset
    assert instructions.kind_of_entry("wgpuComputePassEncoderDispatchWorkgroups") == "dispatch"


def thread_local_dump(probing: int) -> str:
    """wgpu-py's error handler reading a threading.local attribute 4 times: each read looks up
    the thread's dict under a key spelling the local's address, probing ``probing`` more."""
    return f"""# callgrind format
desc: Trigger: Client Request: pytest-dispatch window 5
events: Ir
ob=(1) /usr/lib/libpython3.11.so.1.0
fn=(1) _PyEval_EvalFrameDefault
0 1000
cfn=(2) local_getattro
calls=4 0
0 {4 * 20 + 4 * (50 + probing)}
fn=(2)
0 80
cfn=(3) PyDict_GetItemWithError
calls=4 0
0 {4 * (50 + probing)}
fn=(3)
0 {4 * (50 + probing)}
fn=(4) PyDict_GetItem
0 300
"""


def test_thread_local_lookups_are_counted_at_a_fixed_price_however_far_they_probe():
    near, far = (instructions.parse_dump(thread_local_dump(probing).splitlines()) for probing in (0, 37))
    price = instructions.THREAD_LOCAL_LOOKUP_PRICE
    assert near.thread_local_lookups == far.thread_local_lookups == 4
    assert near.instructions == far.instructions == 1000 + 80 + 300 + 4 * price  # other look-ups count as they ran
    assert near.by_layer() == far.by_layer() and sum(near.by_layer().values()) == near.instructions
