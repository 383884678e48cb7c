"""A typedef's name, a single-word C type, a pointer to one, an array of one and a function type made
of them resolve to what cffi's parse of them gives, without that parse (pycparser's, behind a
declaration of every typedef of the header); only the ``ffi`` it was asked for changes, and every
session that loads wgpu-native has it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from cffi import FFI, cparser

from pytest_dispatch.measurement.typedefs import resolve_typedefs_directly

CDEF = """
typedef struct { int a; double b; } Thing;
typedef const Thing ConstThing;
typedef int (*Callback)(int);
typedef int Count;
"""
# typedefs, single-word C types, pointers and arrays of them, function types of them (looked up)
NAMES = ["Thing", "Thing *", "Thing*", " ConstThing * ", "ConstThing[]", "Callback", "Callback *", "Count",
         "Count *", "Count [ ]", "int *", "char []", "intptr_t", "void *", "const Thing *", "Thing const*",
         "const char *", "void(Count, Thing *, Thing const *, void *)", "Count(void)",
         "void (Callback, uint32_t)", "Thing(ConstThing)"]
# and what is parsed as before
PARSED = ["Thing[3]", "Count (*)(Thing *)", "void(*)(int)", "unsigned int", "long *", "Thing * const",
          "void(int, ...)", "void(char[])", "int *(int)"]


def parses_of(monkeypatch) -> list[str]:
    """The type strings that reach pycparser from now on."""
    parsed, parse = [], cparser.Parser._parse
    monkeypatch.setattr(cparser.Parser, "_parse", lambda self, text: parsed.append(text.splitlines()[-2]) or
                        parse(self, text))
    return parsed


def new_ffi() -> FFI:
    ffi = FFI()
    ffi.cdef(CDEF)
    return ffi


def test_a_typedef_a_pointer_and_an_array_of_one_resolve_as_parsed_and_only_the_rest_is_parsed(monkeypatch):
    ffi, other = new_ffi(), new_ffi()
    expected = {cdecl: ffi._parser.parse_type_and_quals(cdecl) for cdecl in NAMES + PARSED}
    assert resolve_typedefs_directly(ffi) and resolve_typedefs_directly(ffi)  # once is enough; again changes nothing
    parsed = parses_of(monkeypatch)
    assert {cdecl: ffi._parser.parse_type_and_quals(cdecl) for cdecl in expected} == expected
    assert parsed == PARSED
    thing = ffi.new("Thing *", {"a": 3})
    assert thing.a == 3 and ffi.typeof("Thing*") is ffi.typeof(thing) and ffi.sizeof("Thing") == ffi.sizeof(thing[0])
    del parsed[:]
    other._parser.parse_type_and_quals("Thing *")  # another ffi of the process parses as before
    assert parsed == ["Thing *"]


def test_a_parser_this_was_not_written_for_is_left_as_it_is():
    class Elsewhere:  # an ffi whose cffi keeps its parser otherwise
        _parser = object()

    assert resolve_typedefs_directly(Elsewhere()) is False and resolve_typedefs_directly(None) is False


def test_a_typedef_of_each_kind_in_wgpus_header_resolves_as_parsed(monkeypatch):
    from wgpu.backends.wgpu_native import _ffi

    ffi = FFI()
    ffi.cdef(_ffi.get_wgpu_header())  # wgpu-native's declarations, in an ffi of this test's own
    parser = ffi._parser
    typedefs = {type(declared).__name__: name.removeprefix("typedef ")
                for name, (declared, _) in parser._declarations.items() if name.startswith("typedef ")}
    assert {"StructType", "EnumType", "PrimitiveType", "PointerType", "FunctionPtrType"} <= set(typedefs)
    strings = [form.format(name) for name in typedefs.values() for form in ("{}", "{} *", "{}[]", "{} const *")]
    strings += [f"void({name}, {name} const *, uint32_t, void *)" for name in typedefs.values()]  # callbacks
    strings += [form.format(name) for name in ("char", "uint32_t", "intptr_t", "double") for form in ("{}", "{}[]")]
    expected = {cdecl: parser.parse_type_and_quals(cdecl) for cdecl in strings}
    assert resolve_typedefs_directly(ffi)
    parsed = parses_of(monkeypatch)
    assert {cdecl: parser.parse_type_and_quals(cdecl) for cdecl in strings} == expected
    assert parsed == []


# A fresh interpreter: wgpu-native loaded as a session loads it, then the type strings that reach
# pycparser while a device opens, builds a pipeline, dispatches and reads its buffer back.
# Last, a string that is parsed still (an array of known length): the one that must reach pycparser.
SESSION_PARSES = """
import json
from cffi import cparser
from pytest_dispatch.measurement import gpu
from pytest_dispatch.workloads import AddOne
from wgpu.backends.wgpu_native._ffi import ffi

entry = gpu.gpu_entry("wgpu-native")
parsed, parse = [], cparser.Parser._parse
cparser.Parser._parse = lambda self, text: parsed.append(text.splitlines()[-2]) or parse(self, text)
kernel = AddOne(entry.request_adapter_sync().request_device_sync())
kernel.single_pass(3)
read = kernel.read().tolist()[:2]
ffi.typeof("uint32_t[4]")
print(json.dumps({"read": read, "parsed": parsed}))
"""


@pytest.mark.gpu
def test_every_session_that_loads_wgpu_native_looks_its_struct_types_up(gpu_info):
    """Not only the A/B workers and counted sessions: a plain session's start pays for it too."""
    done = subprocess.run([sys.executable, "-c", SESSION_PARSES], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["read"] == [3.0, 3.0]  # the kernel ran
    *parsed, last = answer["parsed"] or ["nothing reached pycparser: the check below would pass without looking"]
    assert last == "uint32_t[4]", last
    assert parsed == [], f"parsed, not looked up: {parsed}"  # typedefs, C types, callbacks' function types
