"""What a counted session's start-up is spared: cffi's parse of each pointer type.

wgpu-py allocates its structs with ``ffi.new("WGPUSomething *")``, and cffi reads every new
type string with pycparser, after a line ``typedef int NAME;`` for each of the header's
typedefs (over 400 in wgpu.h): about 10 ms of Python a type, and under callgrind, where Python
runs 10-20 times slower, about 4 s of a lavapipe session's 13 before its first window (the
adapter, the device and the first kernel each draw new types).  ``fast_cffi_types`` reads
"NAME *" and "NAME[]", where NAME is a typedef the header declared, straight from cffi's
declarations, as its parser resolves them (``Parser._get_type_and_quals``: the typedef's type and
qualifiers, then ``_get_type_pointer`` or an array of unknown length); any other string is parsed
as before.  Types are parsed once a process,
before the warm-up calls, so what a window counts is not changed.
"""

from __future__ import annotations

import re

_POINTER_OR_ARRAY = re.compile(r"\s*([A-Za-z_]\w*)\s*(\*|\[\s*\])\s*")  # "NAME *", "NAME[]"
INSTALLED = "_pytest_dispatch_fast_cffi_types"


def fast_cffi_types() -> bool:
    """Install the shortcut in cffi's parser (once a process); False where cffi is not the one
    this was written against (its parser lacks what the shortcut reads), and nothing changes."""
    try:
        from cffi import cparser, model
    except ImportError:
        return False
    parser = cparser.Parser
    if getattr(parser, INSTALLED, False):
        return True
    parse = getattr(parser, "parse_type_and_quals", None)
    if parse is None or not hasattr(parser, "_get_type_pointer"):
        return False

    def parse_type_and_quals(self, cdecl):
        match = _POINTER_OR_ARRAY.fullmatch(cdecl)
        typedef = match and getattr(self, "_declarations", {}).get("typedef " + match.group(1))
        if not typedef:
            return parse(self, cdecl)
        item, item_quals = typedef
        if match.group(2) == "*":
            return self._get_type_pointer(item, item_quals), 0
        return model.ArrayType(item, None), item_quals

    parser.parse_type_and_quals = parse_type_and_quals
    setattr(parser, INSTALLED, True)
    return True
