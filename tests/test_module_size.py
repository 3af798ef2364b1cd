"""No module of ``aitune_fp`` grows past 500 lines: one that does holds more than one idea.

A module over the limit is split by concept (issue 21), each part reviewable alone; a split
module's old import path keeps working through its package's ``__init__``.
"""

from __future__ import annotations

from pathlib import Path

#: Most lines a module may have.
LIMIT = 500

_PACKAGE = Path(__file__).resolve().parent.parent / "aitune_fp"


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _modules() -> dict[str, int]:
    return {
        str(path.relative_to(_PACKAGE)): _lines(path) for path in sorted(_PACKAGE.rglob("*.py"))
    }


def test_no_module_is_over_the_limit() -> None:
    over = {name: lines for name, lines in _modules().items() if lines > LIMIT}
    assert not over, f"modules over {LIMIT} lines (split them by concept): {over}"


def test_the_limit_is_checked_on_real_modules() -> None:
    """The walk finds the package's modules (not vacuous) and counts their lines."""
    modules = _modules()
    assert "core/stats.py" in modules and "__init__.py" in modules
    assert all(lines > 0 for lines in modules.values())
