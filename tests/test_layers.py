"""The package's import graph, read from the source with ``ast`` (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_dispatch"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every pytest_dispatch module ``path`` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name.split(".")[0] == "pytest_dispatch"}


def package_modules() -> dict[str, set[str]]:
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: {imported for imported in imports_of(path) if imported in modules}
            for name, path in modules.items()}


def test_no_module_imports_the_package_root():
    """The root is the public facade; the version and the package folder come from _meta."""
    importers = sorted(name for name, imported in package_modules().items()
                       if "pytest_dispatch" in imported and name != "pytest_dispatch")
    assert importers == []
