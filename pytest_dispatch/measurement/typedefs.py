"""A quicker start for every session that loads wgpu-native (``gpu.import_implementation``), above
all the processes the plugin starts by the dozen (an A/B job's workers, a counted session under
callgrind): cffi finds the C type named by a string (``ffi.new("WGPUBufferDescriptor *")``,
wgpu-py's way to make each struct) by parsing it with pycparser behind a line ``typedef int NAME;``
for every typedef of the header, over 400 for wgpu-native: about 10 ms of Python a type natively,
10-20 times that under callgrind, once per type and process, most of a worker's start-up after its
imports.  A typedef's name, a pointer to one or an array of one of unknown length is what that
parse looks up in the parser's declarations (``Parser._get_type_and_quals``), so it is looked up
there directly, and so is a single-word C type (``char``, ``uint32_t``, ``intptr_t``: cffi's own
table), ``const`` either side of a name, and a function type whose result and arguments are each
such a string (``void(WGPUMapAsyncStatus, WGPUStringView, void *, void *)``, a callback's, the
most costly strings a session's wgpu-py parsed after that); any other string is parsed as before.
Only wgpu-native's own ``ffi`` is changed: every other user of cffi in the process parses as it
always did.  Types are resolved before any measured call, so no window's count and no round's
time changes."""

from __future__ import annotations

import re

# "NAME", "NAME *", "NAME[]", with "const" before or after the name
_NAMED = r"\s*(const\s+)?([A-Za-z_]\w*)(\s+const)?\s*"
_NAMED_FORMS = re.compile(_NAMED + r"(\*|\[\s*\])?\s*")
_ARGUMENT = re.compile(_NAMED + r"(\*)?\s*")
_FUNCTION = re.compile(_NAMED + r"\(([^()]*)\)\s*")  # "RESULT(ARGUMENT, ...)"
# words cffi rewrites before it looks them up ("long" is "long int", "signed" alone "int"): parsed
_PREFIXES = ("short", "long", "signed", "unsigned")


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
        from cffi import commontypes, model
    except ImportError:
        return False
    read = [(parser, ("_get_type_pointer", "_as_func_arg")), (commontypes, ("resolve_common_type",)),
            (model, ("ArrayType", "RawFunctionType", "PrimitiveType", "void_type", "Q_CONST"))]
    if parse is None or not isinstance(getattr(parser, "_declarations", None), dict) or not all(
            hasattr(where, name) for where, names in read for name in names):
        return False

    def named(const_before, name, const_after):
        """(type, quals) of a name as cffi's parse resolves it (a typedef, ``void``, a primitive), or None."""
        declared = parser._declarations.get("typedef " + name)
        if declared is None:
            if name == "void":
                declared = model.void_type, 0
            elif name in model.PrimitiveType.ALL_PRIMITIVE_TYPES and name not in _PREFIXES:
                declared = commontypes.resolve_common_type(parser, name)
            else:
                return None
        declared_type, quals = declared
        return declared_type, quals | (model.Q_CONST if const_before or const_after else 0)

    def resolved(match):
        """A name's form: the name, a pointer to it or an array of it of unknown length."""
        declared = named(*match.group(1, 2, 3))
        if declared is None:
            return None
        declared_type, quals = declared
        if match.group(4) == "*":  # as the parse of a pointer declarator: the pointer holds the qualifiers
            return parser._get_type_pointer(declared_type, quals), 0
        if match.group(4):
            return model.ArrayType(declared_type, None), quals
        return declared_type, quals

    def function(match):
        """A function type whose result and arguments are each a name or a pointer to one."""
        result = named(*match.group(1, 2, 3))
        arguments = [_ARGUMENT.fullmatch(text) for text in match.group(4).split(",")]
        if result is None or not all(arguments):
            return None
        types = [resolved(argument) for argument in arguments]
        if not all(types):
            return None
        types = [parser._as_func_arg(*declared) for declared in types]
        if types == [model.void_type]:
            types = []
        return model.RawFunctionType(tuple(types), result[0], False, None), 0

    def parse_type_and_quals(cdecl):
        if isinstance(cdecl, str):
            match = _NAMED_FORMS.fullmatch(cdecl)
            found = resolved(match) if match else None
            if found is None and (match := _FUNCTION.fullmatch(cdecl)):
                found = function(match)
            if found is not None:
                return found
        return parse(cdecl)

    parse_type_and_quals.resolves_typedefs = True
    parser.parse_type_and_quals = parse_type_and_quals  # this parser's, not the class's
    return True
