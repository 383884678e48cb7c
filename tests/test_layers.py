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


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``path`` imports, at the top or inside a function
    (``from pytest_dispatch import settings`` imports the module ``pytest_dispatch.settings``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in modules else node.module)
    return found & modules


def package_modules() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: imports_of(path, set(paths)) for name, path in paths.items()}


def test_no_module_imports_the_package_root():
    """The root is the public facade; the version and the package folder come from _meta."""
    importers = sorted(name for name, imported in package_modules().items()
                       if "pytest_dispatch" in imported and name != "pytest_dispatch")
    assert importers == []
