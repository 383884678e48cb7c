"""A quicker start for a process that uses wgpu: cffi finds the C type named by a string
(``ffi.new("WGPUBufferDescriptor *")``, wgpu's way to make each struct) by parsing it with
pycparser behind a declaration of every typedef the library has, hundreds for wgpu-native, once
per type and process: most of a worker's start-up after its imports. A typedef's name, or a
pointer to one, is what that parse looks up in the parser's declarations, so it is looked up
there directly; any other string is parsed as before. Loaded as a pytest plugin
(``-p pytest_dispatch.measurement.typedefs``), it does so in that session."""

from __future__ import annotations

import re

_TYPEDEF_OR_POINTER = re.compile(r"\s*([A-Za-z_]\w*)\s*(\*?)\s*$")


def resolve_typedefs_directly() -> None:
    """From now on, in this process; nothing where cffi's parser is not the one this was written
    for."""
    try:
        from cffi import cparser
    except ImportError:
        return
    parser = cparser.Parser
    parse = parser.parse_type_and_quals
    if getattr(parse, "resolves_typedefs", False) or not hasattr(parser, "_get_type_pointer"):
        return

    def parse_type_and_quals(self, cdecl):
        match = _TYPEDEF_OR_POINTER.match(cdecl) if isinstance(cdecl, str) else None
        declared = match and getattr(self, "_declarations", {}).get("typedef " + match.group(1))
        if not declared:
            return parse(self, cdecl)
        declared_type, quals = declared
        if match.group(2):  # as the parse of a pointer declarator: the pointer holds the qualifiers
            return self._get_type_pointer(declared_type, quals), 0
        return declared_type, quals

    parse_type_and_quals.resolves_typedefs = True
    parser.parse_type_and_quals = parse_type_and_quals


def pytest_configure(config) -> None:
    resolve_typedefs_directly()
