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


# Lower numbers are lower layers; a module may import its own layer and those below.
LAYERS = (
    ("pytest_dispatch._meta", 0), ("pytest_dispatch.errors", 0), ("pytest_dispatch.settings", 0),
    ("pytest_dispatch.measurement", 1), ("pytest_dispatch.workloads", 1),
    ("pytest_dispatch.judgement", 2),
    ("pytest_dispatch.storage", 3),
    ("pytest_dispatch.presentation", 4), ("pytest_dispatch.options", 4),
    ("pytest_dispatch.plugin", 5), ("pytest_dispatch.ab", 5), ("pytest_dispatch.cli", 5),
)
REFERENCE = "pytest_dispatch.reference"  # apart: it may import the measurement layer and the bottom only
# Front ends that must not import each other: the plugin and A/B jobs talk through hooks.
SEPARATE = {("pytest_dispatch.plugin", "pytest_dispatch.ab"), ("pytest_dispatch.ab", "pytest_dispatch.plugin")}
# The worker imports the plugin (the instrument) before the tree's source roots go first on
# sys.path, so both sides are measured by the coordinator's version; it uses none of its names.
ALLOWED = {("pytest_dispatch.ab.worker", "pytest_dispatch.plugin")}
# Arrows that still run back up, to be removed (docs/architecture.md, "Not there yet").
KNOWN: set[tuple[str, str]] = set()


def room_of(module: str) -> tuple[str, int]:
    for prefix, layer in LAYERS:
        if module == prefix or module.startswith(prefix + "."):
            return prefix, layer
    if module == REFERENCE or module.startswith(REFERENCE + "."):
        return REFERENCE, 1
    assert module == "pytest_dispatch", f"{module}: give it a layer in tests/test_layers.py"
    return module, 6


def wrong_arrows() -> set[tuple[str, str]]:
    wrong = set()
    for module, imported in package_modules().items():
        room, layer = room_of(module)
        for target in imported:
            target_room, target_layer = room_of(target)
            if room == target_room:
                continue
            if room == REFERENCE:
                allowed = target_layer <= 1 and target_room != REFERENCE
            else:
                allowed = target_room != REFERENCE and target_layer <= layer and (room, target_room) not in SEPARATE
            if not allowed and (module, target) not in ALLOWED:
                wrong.add((module, target))
    return wrong


def test_imports_run_one_way_down_the_layers():
    assert wrong_arrows() == KNOWN


def test_the_import_graph_has_no_cycle():
    graph = package_modules()
    done, on_path, cycles = set(), [], []

    def visit(module: str) -> None:
        if module in on_path:
            cycles.append(on_path[on_path.index(module):] + [module])
            return
        if module in done:
            return
        on_path.append(module)
        for target in sorted(graph[module]):
            visit(target)
        on_path.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)
    assert cycles == []


def test_no_module_beside_a_folder_of_the_same_name():
    """``measurement/page.py`` beside ``measurement/page/`` hid which one ``import`` meant."""
    clashes = sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py") if path.with_suffix("").is_dir())
    assert clashes == []


FILE_CALLS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "glob", "rglob", "iterdir", "unlink",
              "mkdir", "load_document", "load_runs"}


def test_the_judgement_layer_reads_and_writes_no_file():
    """Judgement decides over what it is given; the storage layer reads, writes and prunes saved runs."""
    found = []
    for path in sorted((PACKAGE / "judgement").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if called in FILE_CALLS:
                    found.append(f"{path.name}:{node.lineno} {called}()")
    imported = {target for module, targets in package_modules().items()
                if module.startswith("pytest_dispatch.judgement") for target in targets}
    assert not any(target.startswith("pytest_dispatch.storage") for target in imported)
    assert found == []
