"""A quicker start for every session that loads wgpu-native (``gpu.import_implementation``), above
all the processes the plugin starts by the dozen (an A/B job's workers, a counted session under
callgrind): cffi finds the C type named by a string
(``ffi.new("WGPUBufferDescriptor *")``, wgpu-py's way to make each struct) by parsing it with
pycparser behind a line ``typedef int NAME;`` for every typedef of the header, over 400 for
wgpu-native: about 10 ms of Python a type natively, 10-20 times that under callgrind, once per
type and process, most of a worker's start-up after its imports.  A typedef's name, a pointer to
one or an array of one of unknown length is what that parse looks up in the parser's
declarations (``Parser._get_type_and_quals``), so it is looked up there directly; any other
string is parsed as before.  Types are resolved before any measured call, so no window's count
and no round's time changes."""

from __future__ import annotations

import re

_TYPEDEF_FORMS = re.compile(r"\s*([A-Za-z_]\w*)\s*(\*|\[\s*\])?\s*")  # "NAME", "NAME *", "NAME[]"


def resolve_typedefs_directly() -> bool:
    """From now on, in this process; False where cffi's parser is not the one this was written
    for (it lacks what the lookup reads), and nothing changes."""
    try:
        from cffi import cparser, model
    except ImportError:
        return False
    parser = cparser.Parser
    parse = getattr(parser, "parse_type_and_quals", None)
    if getattr(parse, "resolves_typedefs", False):
        return True
    if parse is None or not hasattr(parser, "_get_type_pointer") or not hasattr(model, "ArrayType"):
        return False

    def parse_type_and_quals(self, cdecl):
        match = _TYPEDEF_FORMS.fullmatch(cdecl) if isinstance(cdecl, str) else None
        declared = match and getattr(self, "_declarations", {}).get("typedef " + match.group(1))
        if not declared:
            return parse(self, cdecl)
        declared_type, quals = declared
        if match.group(2) == "*":  # as the parse of a pointer declarator: the pointer holds the qualifiers
            return self._get_type_pointer(declared_type, quals), 0
        if match.group(2):
            return model.ArrayType(declared_type, None), quals
        return declared_type, quals

    parse_type_and_quals.resolves_typedefs = True
    parse_type_and_quals.parsed = parse  # cffi's own, for what is compared with it
    parser.parse_type_and_quals = parse_type_and_quals
    return True
