"""The tune's state has one writer: no module but ``pipeline/tune.py`` assigns to the session.

Other modules take values (the ``Arena``) and return values (``Guards``, ``Opened``,
``EagerStart``, ``Final``, outcomes) that the session takes; an assignment, an augmented one, a
subscript write or a mutating call on ``session.<attr>`` anywhere else is a second writer.
"""

from __future__ import annotations

import ast
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent / "aitune_fp"
_OWNER = "pipeline/tune.py"
_MUTATORS = frozenset(
    {"append", "extend", "insert", "remove", "pop", "clear", "update", "add", "discard", "sort"}
)


def _session_attribute(node: ast.AST) -> str | None:
    """``session.x`` (or ``session.x[...]``): the attribute written, else None."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "session"
    ):
        return node.attr
    return None


def writes(tree: ast.AST) -> list[str]:
    """Each write to the session's state in ``tree``: ``line: what``."""
    found: list[str] = []
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            for target in node.targets:
                targets += list(target.elts) if isinstance(target, ast.Tuple) else [target]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _MUTATORS
        ):
            attr = _session_attribute(node.func.value)
            if attr is not None:
                found.append(f"{node.lineno}: session.{attr}.{node.func.attr}(...)")
        for target in targets:
            attr = _session_attribute(target)
            if attr is not None:
                found.append(f"{node.lineno}: session.{attr} written")
    return found


def test_only_the_session_writes_its_state() -> None:
    found = {
        str(path.relative_to(_PACKAGE)): writes(ast.parse(path.read_text(encoding="utf-8")))
        for path in sorted(_PACKAGE.rglob("*.py"))
        if str(path.relative_to(_PACKAGE)) != _OWNER
    }
    assert not {module: lines for module, lines in found.items() if lines}


def test_the_check_sees_each_kind_of_write() -> None:
    """Assignment, tuple assignment, augmented, subscript and mutating calls are all found."""
    source = (
        "session.a = 1\n"
        "session.b, x = 1, 2\n"
        "session.c += 1\n"
        "session.d[0] = 1\n"
        "session.e.append(1)\n"
        "y = session.f\n"
        "session.g()\n"
    )
    assert [line.split(": ")[1] for line in writes(ast.parse(source))] == [
        "session.a written",
        "session.b written",
        "session.c written",
        "session.d written",
        "session.e.append(...)",
    ]
