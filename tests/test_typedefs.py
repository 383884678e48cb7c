"""A typedef's name, a pointer to one and an array of one resolve to what cffi's parse of them
gives, without that parse (pycparser's, behind a declaration of every typedef of the header)."""

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
# typedefs, pointers and arrays of them (looked up), and what is parsed as before
NAMES = ["Thing", "Thing *", "Thing*", " ConstThing * ", "ConstThing[]", "Callback", "Callback *", "Count",
         "Count *", "Count [ ]"]
PARSED = ["int *", "Thing[3]", "Count (*)(Thing *)", "void(*)(int)"]


@pytest.fixture(autouse=True)
def parser_restored(monkeypatch):
    monkeypatch.setattr(cparser.Parser, "parse_type_and_quals", cparser.Parser.parse_type_and_quals)


def parses_of(monkeypatch) -> list[str]:
    """The type strings that reach pycparser from now on."""
    parsed, parse = [], cparser.Parser._parse
    monkeypatch.setattr(cparser.Parser, "_parse", lambda self, text: parsed.append(text.splitlines()[-2]) or
                        parse(self, text))
    return parsed


def test_a_typedef_a_pointer_and_an_array_of_one_resolve_as_parsed_and_only_the_rest_is_parsed(monkeypatch):
    ffi = FFI()
    ffi.cdef(CDEF)
    expected = {cdecl: ffi._parser.parse_type_and_quals(cdecl) for cdecl in NAMES + PARSED}
    assert resolve_typedefs_directly()
    parsed = parses_of(monkeypatch)
    assert {cdecl: ffi._parser.parse_type_and_quals(cdecl) for cdecl in expected} == expected
    assert parsed == PARSED
    thing = ffi.new("Thing *", {"a": 3})
    assert thing.a == 3 and ffi.typeof("Thing*") is ffi.typeof(thing) and ffi.sizeof("Thing") == ffi.sizeof(thing[0])


def test_a_typedef_of_each_kind_in_wgpus_header_resolves_as_parsed(monkeypatch):
    from wgpu.backends.wgpu_native._ffi import ffi

    parser = ffi._parser
    typedefs = {type(declared).__name__: name.removeprefix("typedef ")
                for name, (declared, _) in parser._declarations.items() if name.startswith("typedef ")}
    assert {"StructType", "EnumType", "PrimitiveType", "PointerType", "FunctionPtrType"} <= set(typedefs)
    strings = [form.format(name) for name in typedefs.values() for form in ("{}", "{} *", "{}[]")]
    expected = {cdecl: parser.parse_type_and_quals(cdecl) for cdecl in strings}
    assert resolve_typedefs_directly()
    parsed = parses_of(monkeypatch)
    assert {cdecl: parser.parse_type_and_quals(cdecl) for cdecl in strings} == expected
    assert parsed == []
