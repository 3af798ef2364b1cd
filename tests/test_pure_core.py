"""The pure core holds no state: no function of ``aitune_fp/core/`` changes a module-level value.

A registry (of decision modes, or anything else) that code adds to at run time is the shell's
(``aitune_fp.measure.rules``); the core's module-level values are constants.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from aitune_fp.adapters.validation import with_performance_validation
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.errors import InvalidValueError
from aitune_fp.pipeline.strategies import FirstWinsStrategy

CORE = Path(__file__).resolve().parent.parent / "aitune_fp" / "core"
#: Methods that change a list, dict or set in place.
MUTATORS = frozenset(
    {"append", "extend", "insert", "add", "update", "setdefault", "pop", "popitem", "clear"}
    | {"remove", "discard", "sort", "reverse", "__setitem__", "__delitem__"}
)


def _module_names(tree: ast.Module) -> set[str]:
    """Names bound at module level."""
    names: set[str] = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        names |= {t.id for target in targets for t in ast.walk(target) if isinstance(t, ast.Name)}
    return names


def _mutations(source: str) -> list[str]:
    """Where a function changes a module-level name: ``global``, item stores, mutating calls."""
    tree = ast.parse(source)
    shared = _module_names(tree)
    found = []
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        for node in ast.walk(func):
            if isinstance(node, ast.Global):
                found.append(f"line {node.lineno}: global {', '.join(node.names)}")
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)):
                if isinstance(node.value, ast.Name) and node.value.id in shared:
                    found.append(f"line {node.lineno}: {node.value.id}[...] changed")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                named = isinstance(owner, ast.Name) and owner.id in shared
                if named and node.func.attr in MUTATORS:
                    found.append(f"line {node.lineno}: {ast.unparse(owner)}.{node.func.attr}(...)")
    return found


def test_no_core_function_changes_module_state() -> None:
    """Every module of the core: no ``global``, no store into or mutating call on its names."""
    found = {
        path.name: where
        for path in sorted(CORE.glob("*.py"))
        if (where := _mutations(path.read_text()))
    }
    assert found == {}


def test_the_check_sees_a_registry() -> None:
    """Not vacuous: a module-level dict added to by a function is found."""
    source = "KNOWN = {}\n\ndef add(name):\n    KNOWN[name] = None\n\ndef drop(name):\n    KNOWN.pop(name)\n"
    assert len(_mutations(source)) == 2


def test_an_unregistered_mode_is_refused_where_the_config_enters_the_shell() -> None:
    """The config checks the name is a word; the decorator refuses a rule nobody registered."""
    config = ProfilingConfig(decision="no-such-rule")
    with pytest.raises(InvalidValueError, match="no-such-rule"):
        with_performance_validation(FirstWinsStrategy([]), profiling_config=config)
    with pytest.raises(InvalidValueError, match="decision rule's name"):
        ProfilingConfig(decision="two words")
