"""Each idea has one home: a concept is defined in the module that owns it, and nowhere else.

No package ``__init__`` re-exports its modules' names (import from the defining module); the one
exception is the top level's public API.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "aitune_fp"

#: A responsibility -> the module that holds it and names that module must define.
HOMES: dict[str, tuple[str, tuple[str, ...]]] = {
    "timing sequences, throughput, noise, warm-up": (
        "core/timings.py",
        ("throughput_from_latencies", "coefficient_of_variation", "is_steady", "is_settled"),
    ),
    "critical counts of the rank tests": (
        "core/hodges_lehmann.py",
        ("signed_rank_critical_count", "mann_whitney_critical_count"),
    ),
    "Hodges-Lehmann bounds": (
        "core/hodges_lehmann.py",
        ("paired_log_speedup_bounds", "unpaired_log_speedup_bounds"),
    ),
    "the three-outcome verdict": ("core/verdict.py", ("SpeedupDecision", "rule_verdict")),
    "the decisions, one look or group-sequential": (
        "core/sequential.py",
        ("decide_speedup", "decide_at_look", "look_alpha"),
    ),
    "dependence checks": ("core/dependence.py", ("lag1_rank_autocorrelation", "inflation_factor")),
    "what an interval rules out, in words": ("core/messages.py", ("ruled_out_statement",)),
    "the backend registry": ("backends/registry.py", ("BACKENDS", "make_backend")),
    "the decision rules by name": ("measure/rules.py", ("RULES", "rule_for", "register")),
}


def _definitions(path: Path) -> set[str]:
    """Names ``path`` defines at its top level (def, class, assignment)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


@pytest.mark.parametrize("responsibility", sorted(HOMES))
def test_each_responsibility_lives_in_its_one_module(responsibility: str) -> None:
    """The module defines the names, and no other module of the package defines them too."""
    home, names = HOMES[responsibility]
    assert set(names) <= _definitions(PACKAGE / home), home
    for path in PACKAGE.rglob("*.py"):
        if path != PACKAGE / home:
            twice = set(names) & _definitions(path)
            assert not twice, f"{path.relative_to(PACKAGE)} defines {twice} too"


def _exported(path: Path) -> set[str]:
    """The names in ``path``'s ``__all__``."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "__all__":
            return {ast.literal_eval(e) for e in getattr(node.value, "elts", [])}
    return set()


def test_no_package_init_re_exports_its_modules() -> None:
    """An ``__init__`` below the top level exports only what it defines, or its own modules."""
    offenders = {}
    for init in PACKAGE.rglob("*/__init__.py"):
        modules = {p.stem for p in init.parent.glob("*.py")} | {
            p.parent.name for p in init.parent.glob("*/__init__.py")
        }
        foreign = _exported(init) - _definitions(init) - modules
        if foreign:
            offenders[str(init.relative_to(PACKAGE))] = sorted(foreign)
    assert not offenders, offenders


def test_the_walk_sees_the_package() -> None:
    """Not vacuous: the walk finds the package's modules and their definitions."""
    assert len(list(PACKAGE.rglob("*.py"))) > 50
    assert "decide_speedup" in _definitions(PACKAGE / "core/sequential.py")
    assert {"ProfilingConfig", "with_performance_validation"} <= _exported(PACKAGE / "__init__.py")
