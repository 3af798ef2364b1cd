"""No module of ``aitune_fp`` reads or writes another module's private names (issue 34).

A name with one leading underscore belongs to the module that defines it: its functions,
classes, constants, and the attributes its classes set on ``self``. Another module may use
neither ``from aitune_fp.x import _name`` nor ``obj._name`` for such a name; what crosses a
module's edge is public, so a reader of one module knows what others may touch.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent / "aitune_fp"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _owned(tree: ast.AST) -> set[str]:
    """The private names a module defines: top-level names, class bodies, ``self.``/``cls.``."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            found.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.add(node.target.id)
    return {n for n in found if _private(n)}


def _trees() -> dict[str, ast.AST]:
    return {
        str(path.relative_to(_PACKAGE.parent)): ast.parse(path.read_text(encoding="utf-8"))
        for path in sorted(_PACKAGE.rglob("*.py"))
    }


def crossings(trees: dict[str, ast.AST]) -> dict[str, list[str]]:
    """Each module's uses of a private name another module of the package owns."""
    owned = {module: _owned(tree) for module, tree in trees.items()}
    owners: dict[str, set[str]] = defaultdict(set)
    for module, names in owned.items():
        for name in names:
            owners[name].add(module)
    found: dict[str, list[str]] = defaultdict(list)
    for module, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aitune_fp"):
                found[module] += [
                    f"line {node.lineno}: from {node.module} import {a.name}"
                    for a in node.names
                    if _private(a.name)
                ]
            elif (
                isinstance(node, ast.Attribute)
                and _private(node.attr)
                and node.attr in owners
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                and module not in owners[node.attr]
            ):
                found[module].append(f"line {node.lineno}: {ast.unparse(node)}")
    return {module: uses for module, uses in found.items() if uses}


def test_no_module_uses_another_modules_private_names() -> None:
    found = crossings(_trees())
    total = sum(map(len, found.values()))
    listing = "\n".join(f"{m}: {', '.join(uses[:5])}" for m, uses in sorted(found.items()))
    assert not found, f"{total} uses of another module's private names:\n{listing}"


def test_the_rule_sees_a_crossing() -> None:
    """Not vacuous: a private import and a private attribute from another module are found."""
    trees = {
        "aitune_fp/a.py": ast.parse("def _helper(): pass\nclass S:\n    def f(self): self._x = 1"),
        "aitune_fp/b.py": ast.parse(
            "from aitune_fp.a import _helper\ndef g(s):\n    return s._x\n"
        ),
    }
    found = crossings(trees)
    assert list(found) == ["aitune_fp/b.py"]
    assert len(found["aitune_fp/b.py"]) == 2
