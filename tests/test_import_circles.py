"""No module of ``aitune_fp`` is in an import circle, counting imports under ``TYPE_CHECKING``.

import-linter's contracts skip ``TYPE_CHECKING`` imports and compare parts, not modules; this
reads every import of every module with :mod:`ast` (module level, inside ``if`` blocks and inside
functions alike) and asserts the module graph is acyclic.
"""

from __future__ import annotations

import ast
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent / "aitune_fp"


def module_names(package: Path) -> dict[str, Path]:
    """Each module of ``package`` by its dotted name (a package by its ``__init__``)."""
    names = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports, wherever in the file the import stands."""
    here = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:  # a submodule imported by name, else the module itself
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {m for m in found if m in modules and m != name}


def circles(package: Path) -> list[list[str]]:
    """The import circles among ``package``'s modules (each strongly connected set, sorted)."""
    modules = module_names(package)
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


def test_no_module_of_the_package_is_in_an_import_circle() -> None:
    assert circles(_PACKAGE) == []


def test_a_circle_through_type_checking_imports_is_found(tmp_path: Path) -> None:
    """The check is not vacuous: an import only for type checking still closes a circle."""
    package = tmp_path / "circled"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "inner" / "__init__.py").write_text("")
    (package / "a.py").write_text("from circled.inner import b\n")
    (package / "inner" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import A\n"
    )
    (package / "c.py").write_text("import circled.a\n")
    assert circles(package) == [["circled.a", "circled.inner.b"]]
