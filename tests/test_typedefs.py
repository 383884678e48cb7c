"""A typedef's name, or a pointer to one, resolves to what cffi's parse of it gives, without that
parse (pycparser's, behind a declaration of every typedef the library has)."""

from __future__ import annotations

import pytest
from cffi import FFI, cparser

from pytest_dispatch.measurement.typedefs import resolve_typedefs_directly

CDEF = """
typedef struct { int a; double b; } Thing;
typedef const Thing ConstThing;
typedef int (*Callback)(int);
typedef int Count;
"""
# typedefs and pointers to them (looked up), and what is parsed as before
NAMES = ["Thing", "Thing *", "Thing*", " ConstThing * ", "Callback", "Callback *", "Count", "Count *",
         "int *", "Thing[3]", "Count (*)(Thing *)"]


@pytest.fixture(autouse=True)
def parser_restored(monkeypatch):
    monkeypatch.setattr(cparser.Parser, "parse_type_and_quals", cparser.Parser.parse_type_and_quals)


def resolved(parser, names: list[str]) -> list:
    return [parser.parse_type_and_quals(name) for name in names]


def test_a_typedef_and_a_pointer_to_one_resolve_as_parsed():
    ffi = FFI()
    ffi.cdef(CDEF)
    parsed = resolved(ffi._parser, NAMES)
    resolve_typedefs_directly()
    assert resolved(ffi._parser, NAMES) == parsed


def test_wgpus_structs_resolve_as_parsed():
    from wgpu.backends.wgpu_native._ffi import ffi

    names = sorted(key.removeprefix("typedef ") for key in ffi._parser._declarations if key.startswith("typedef "))
    names = [f"{name} *" for name in names[::len(names) // 6]]
    parsed = resolved(ffi._parser, names)
    resolve_typedefs_directly()
    assert resolved(ffi._parser, names) == parsed


def test_a_typedef_and_a_pointer_to_one_are_not_parsed(monkeypatch):
    ffi = FFI()
    ffi.cdef(CDEF)
    resolve_typedefs_directly()
    monkeypatch.setattr(cparser, "_get_parser", lambda: pytest.fail("parsed by pycparser"))
    thing = ffi.new("Thing *", {"a": 3})
    assert thing.a == 3 and ffi.typeof("Thing*") is ffi.typeof(thing) and ffi.sizeof("Thing") == ffi.sizeof(thing[0])


def test_as_a_plugin_it_resolves_typedefs_in_that_session(pytester):
    pytester.makepyfile("from cffi import cparser\n\ndef test_resolved():\n"
                        "    assert getattr(cparser.Parser.parse_type_and_quals, 'resolves_typedefs', False)\n")
    result = pytester.runpytest_inprocess("-p", "pytest_dispatch.measurement.typedefs")
    result.assert_outcomes(passed=1)


def test_a_counted_ab_jobs_sides_load_the_plugin(tmp_path):
    from pytest_dispatch.ab import counted

    command = counted._side_command(tmp_path / "side.json", ["tests/perf"])  # relaunched under callgrind as is
    assert command[command.index("pytest_dispatch.measurement.typedefs") - 1] == "-p"
