"""Write docs/api.md, the reference of the public API, from the docstrings.

    python scripts/api_reference.py           # write docs/api.md
    python scripts/api_reference.py --check   # exit 1 when docs/api.md is not what this writes

What it documents: the fixtures, the markers, and the names in ``pytest_dispatch.__all__``.
A dataclass field is described by the comment on its line, a property or method by its
docstring; a public member with neither is an error, so nothing new goes undocumented.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import importlib
import inspect
import io
import sys
import textwrap
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "docs" / "api.md"
FIXTURES = ("gpu_adapter", "gpu_device", "gpu_info", "dispatch_meter")
# name in docs -> (module, attribute); all but Speedup are in pytest_dispatch.__all__
CLASSES = {"Measurement": ("pytest_dispatch", "Measurement"), "Counts": ("pytest_dispatch", "Counts"),
           "DispatchMeter": ("pytest_dispatch", "DispatchMeter"),
           "Speedup": ("pytest_dispatch.judgement.speedup", "Speedup"), "GpuInfo": ("pytest_dispatch", "GpuInfo"),
           "InstructionCount": ("pytest_dispatch.measurement.instructions", "InstructionCount")}
FUNCTIONS = ("count_dispatches", "exact", "request_device")


class Undocumented(Exception):
    """Public members without a description."""


_missing: list[str] = []  # filled while rendering; render() raises Undocumented with all of them


def _doc(obj, where: str) -> str:
    doc = inspect.getdoc(obj)
    if not doc:
        _missing.append(f"{where} has no docstring")
    return doc or ""


def _field_comments(cls) -> dict[str, str]:
    """The comment on each annotated field's line in the class body."""
    source = textwrap.dedent(inspect.getsource(cls))
    comments = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
    fields = {}
    for node in ast.parse(source).body[0].body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if node.lineno in comments:
                fields[node.target.id] = comments[node.lineno]
    return fields


def _signature(name: str, obj) -> str:
    """``name(arguments) -> result``, without self or cls (and without a class's ``-> None``)."""
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return name
    parameters = [p for p in signature.parameters.values() if p.name not in ("self", "cls")]
    signature = signature.replace(parameters=parameters)
    if inspect.isclass(obj):
        signature = signature.replace(return_annotation=inspect.Signature.empty)
    return f"{name}{signature}".replace("'", "").replace('"', "")


def _type_text(annotation) -> str:
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))


def _class_section(name: str, module: str, cls) -> list[str]:
    lines = [f"## `{module}.{name}`", "", _doc(cls, name), ""]
    members = []
    if dataclasses.is_dataclass(cls):
        comments = _field_comments(cls)
        for field in dataclasses.fields(cls):
            if field.name not in comments:
                _missing.append(f"{name}.{field.name} is a field without a comment on its line")
            members.append((f"`{field.name}`: {_type_text(field.type)}", comments.get(field.name, "")))
    for member, value in vars(cls).items():
        if member.startswith("_"):
            continue
        if isinstance(value, (property, functools.cached_property)):
            members.append((f"`{member}` (property)", _doc(value, f"{name}.{member}").split("\n\n")[0]))
        elif isinstance(value, classmethod):
            members.append((f"`{_signature(member, value.__func__)}` (classmethod)",
                            _doc(value.__func__, f"{name}.{member}")))
        elif inspect.isfunction(value):
            members.append((f"`{_signature(member, value)}`", _doc(value, f"{name}.{member}")))
    if members:
        lines += ["| member | what |", "|---|---|"]
        lines += [f"| {title.replace('|', '&#124;')} | {' '.join(text.split()).replace('|', '&#124;')} |"
                  for title, text in members]
        lines.append("")
    return lines


def _fixture_sections() -> list[str]:
    import pytest_dispatch.plugin as plugin

    tree = ast.parse(Path(plugin.__file__).read_text(encoding="utf-8"))
    scopes = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in FIXTURES:
            scope = "function"
            for decorator in node.decorator_list:
                for keyword in getattr(decorator, "keywords", []):
                    if keyword.arg == "scope" and isinstance(keyword.value, ast.Constant):
                        scope = keyword.value.value
            scopes[node.name] = (scope, ast.get_docstring(node))
    lines = ["## Fixtures", ""]
    for name in FIXTURES:
        scope, doc = scopes[name]
        if not doc:
            _missing.append(f"fixture {name} has no docstring")
        lines += [f"### `{name}` ({scope} scope)", "", doc, ""]
    return lines


def _marker_sections() -> list[str]:
    from pytest_dispatch import settings
    from pytest_dispatch.judgement import budget

    lines = ["## Markers", ""]
    details = {budget.MARKER: _doc(budget, "pytest_dispatch.judgement.budget").split("\n\n", 1)[1]}
    for marker, help_text in ((budget.MARKER, budget.MARKER_HELP), (settings.TIMING_MARKER, settings.TIMING_MARKER_HELP)):
        signature, _, what = help_text.partition(": ")
        lines += [f"### `@pytest.mark.{signature}`", "", what[:1].upper() + what[1:], ""]
        if marker in details:
            lines += [details[marker], ""]
    lines += ["A marker whose name starts with `dispatch_` but is none of these is a usage error.", ""]
    return lines


def render() -> str:
    """docs/api.md's text; Undocumented names every public member without a description."""
    import pytest_dispatch

    _missing.clear()

    lines = ["# API reference", "",
             "Generated from the docstrings by `python scripts/api_reference.py`; "
             "`tests/test_api_reference.py` fails when this file is stale. Edit the docstrings, not this file.",
             "A walk-through with a kernel of one's own: [own_kernel.md](own_kernel.md).", ""]
    lines += _fixture_sections() + _marker_sections()
    for name, (module, attribute) in CLASSES.items():
        lines += _class_section(name, module, getattr(importlib.import_module(module), attribute))
        if name == "Counts":
            from pytest_dispatch.measurement import recorder

            lines += ["Call kinds, for `count(kind)` and `calls`: " + ", ".join(f"`{k}`" for k in recorder.KINDS)
                      + ".", ""]
    lines += ["## Functions", ""]
    for name in FUNCTIONS:
        obj = getattr(pytest_dispatch, name)
        lines += [f"### `pytest_dispatch.{_signature(name, obj)}`", "", _doc(obj, name), ""]
    if _missing:
        raise Undocumented("; ".join(_missing))
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/api.md is stale")
    args = parser.parse_args(argv)
    try:
        text = render()
    except Undocumented as error:
        print(f"api_reference: {error}: describe it", file=sys.stderr)
        return 1
    if args.check:
        if not OUTPUT.exists() or OUTPUT.read_text(encoding="utf-8") != text:
            print(f"api_reference: {OUTPUT.relative_to(ROOT)} is stale: run python scripts/api_reference.py",
                  file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
