"""A quicker start for every session that loads wgpu-native (``gpu.import_implementation``), above
all the processes the plugin starts by the dozen (an A/B job's workers, a counted session under
callgrind): cffi finds the C type named by a string (``ffi.new("WGPUBufferDescriptor *")``,
wgpu-py's way to make each struct) by parsing it with pycparser behind a line ``typedef int NAME;``
for every typedef of the header, over 400 for wgpu-native: about 10 ms of Python a type natively,
10-20 times that under callgrind, once per type and process, most of a worker's start-up after its
imports.  A typedef's name, a pointer to one or an array of one of unknown length is what that
parse looks up in the parser's declarations (``Parser._get_type_and_quals``), so it is looked up
there directly; any other string is parsed as before.  Only wgpu-native's own ``ffi`` is changed:
every other user of cffi in the process parses as it always did.  Types are resolved before any
measured call, so no window's count and no round's time changes."""

from __future__ import annotations

import re

_TYPEDEF_FORMS = re.compile(r"\s*([A-Za-z_]\w*)\s*(\*|\[\s*\])?\s*")  # "NAME", "NAME *", "NAME[]"


def wgpu_native_ffi():
    """wgpu-py's ``ffi`` of wgpu-native (its backend imported), or None."""
    try:
        from wgpu.backends.wgpu_native._ffi import ffi
    except Exception:  # noqa: BLE001 - another wgpu-py, or none: its types are parsed as before
        return None
    return ffi


def resolve_typedefs_directly(ffi) -> bool:
    """From now on, for ``ffi``'s types; False where its parser is not the one this was written
    for (it lacks what the lookup reads), and nothing changes."""
    parser = getattr(ffi, "_parser", None)
    parse = getattr(parser, "parse_type_and_quals", None)
    if getattr(parse, "resolves_typedefs", False):
        return True
    try:
        from cffi import model
    except ImportError:
        return False
    if parse is None or not hasattr(parser, "_get_type_pointer") or not isinstance(
            getattr(parser, "_declarations", None), dict) or not hasattr(model, "ArrayType"):
        return False

    def parse_type_and_quals(cdecl):
        match = _TYPEDEF_FORMS.fullmatch(cdecl) if isinstance(cdecl, str) else None
        declared = match and parser._declarations.get("typedef " + match.group(1))
        if not declared:
            return parse(cdecl)
        declared_type, quals = declared
        if match.group(2) == "*":  # as the parse of a pointer declarator: the pointer holds the qualifiers
            return parser._get_type_pointer(declared_type, quals), 0
        if match.group(2):
            return model.ArrayType(declared_type, None), quals
        return declared_type, quals

    parse_type_and_quals.resolves_typedefs = True
    parser.parse_type_and_quals = parse_type_and_quals  # this parser's, not the class's
    return True
