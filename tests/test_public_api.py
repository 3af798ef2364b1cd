"""Specs of the public surface: a small top level that README and docs/ use, every exported name
resolves, the rest lives in modules with their own ``__all__``, the pure API never imports torch.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import aitune_fp

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "aitune_fp"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

PURE_NAMES = [
    "compute_speedup",
    "required_speedup",
    "meets_threshold",
    "fmt_speedup_msg",
    "fmt_speedup_msg_short",
    "fmt_throughput_detail",
    "PerformanceValidationResult",
    "PerformanceValidationMixinResult",
    "ProfilingConfig",
    "decide_speedup",
    "SpeedupDecision",
    "Sample",
    "GraphSpec",
    "AitunefpError",
    "TuneReport",
    "CandidateFailure",
]

#: Public modules whose names are not at the top level: each has its own ``__all__``.
SUBMODULES = [
    "aitune_fp.backends.base",
    "aitune_fp.backends.registry",
    "aitune_fp.core.config",
    "aitune_fp.core.messages",
    "aitune_fp.core.mismatch",
    "aitune_fp.core.report",
    "aitune_fp.core.results",
    "aitune_fp.correctness.check",
    "aitune_fp.correctness.tolerances",
    "aitune_fp.errors",
    "aitune_fp.events.candidates",
    "aitune_fp.events.ingest",
    "aitune_fp.inputs",
    "aitune_fp.measure.rules",
    "aitune_fp.pipeline.strategies",
    "aitune_fp.sweep.run",
    "aitune_fp.sweep.spec",
    "aitune_fp.testing",
    "aitune_fp.adapters.validation",
]


def _doc_code(path: Path) -> str:
    """The text of ``path``'s ```python blocks and its inline `code`."""
    text = path.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    return "\n".join(blocks) + "\n" + "\n".join(re.findall(r"`([^`\n]+)`", text))


def _doc_imports() -> dict[str, set[str]]:
    """Name -> the docs that import it from ``aitune_fp`` or call it as ``aitune_fp.<name>``."""
    found: dict[str, set[str]] = {}
    for path in DOCS:
        code = _doc_code(path)
        for group in re.findall(r"from aitune_fp import \(([^)]*)\)", code):
            for name in re.findall(r"\b(\w+)\b(?:\s+as\s+\w+)?\s*,?", group):
                found.setdefault(name, set()).add(path.name)
        for line in re.findall(r"from aitune_fp import ([^(\n]+)", code):
            for name in re.findall(r"\w+", line.split("#")[0]):
                found.setdefault(name, set()).add(path.name)
        for name in re.findall(r"\baitune_fp\.(\w+)\b(?!\.)", code):
            if not (PACKAGE / name).is_dir() and not (PACKAGE / f"{name}.py").is_file():
                found.setdefault(name, set()).add(path.name)
    found.pop("as", None)
    return found


def _top_level_imports() -> tuple[dict[str, str], dict[str, str]]:
    """Name -> module of aitune_fp/__init__.py's plain imports, and of its TYPE_CHECKING ones."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    plain: dict[str, str] = {}
    typed: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("aitune_fp"):
            plain.update({a.name: node.module for a in node.names})
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module is not None
                typed.update({a.name: stmt.module for a in stmt.names})
    return plain, typed


def _private_modules() -> list[Path]:
    """The source of every module of the package whose own name starts with one underscore."""
    return sorted(
        p
        for p in PACKAGE.rglob("_*.py")
        if not p.name.startswith("__")
        or (p.name == "__init__.py" and p.parent.name.startswith("_") and p.parent != PACKAGE)
    )


class TestSurface:
    def test_every_public_name_resolves(self) -> None:
        """Each name in __all__ is an attribute of the package (the torch-bound ones load on access)."""
        for name in aitune_fp.__all__:
            assert getattr(aitune_fp, name) is not None, name

    def test_all_is_sorted_and_unique(self) -> None:
        """__all__ is sorted (ruff's order) and has no duplicates."""
        assert len(set(aitune_fp.__all__)) == len(aitune_fp.__all__)
        assert aitune_fp.__all__ == sorted(aitune_fp.__all__, key=lambda n: (not n.isupper(), n))

    def test_small_enough_to_hold_in_your_head(self) -> None:
        """About 30 names: the rest lives in the subpackage or module that owns it."""
        assert len(aitune_fp.__all__) <= 32

    def test_every_name_the_docs_import_from_the_top_level_is_there(self) -> None:
        """README and docs/ import only names the top level exports."""
        missing = {n: sorted(d) for n, d in _doc_imports().items() if n not in aitune_fp.__all__}
        assert not missing, missing

    def test_the_docs_use_the_top_level(self) -> None:
        """Each top-level name is used by README or docs/ (else it belongs to its module)."""
        text = "\n".join(p.read_text(encoding="utf-8") for p in DOCS)
        unused = [n for n in aitune_fp.__all__ if n != "__version__" and n not in text]
        assert not unused, unused

    def test_each_name_comes_from_the_module_that_defines_it(self) -> None:
        """Plain imports and the torch-bound names (typed, loaded on first use) make __all__."""
        plain, typed = _top_level_imports()
        assert not set(plain) & set(typed)
        assert set(plain) | set(typed) == set(aitune_fp.__all__) - {"__version__"}
        assert typed == aitune_fp._NEEDS_TORCH
        for name, module in {**plain, **typed}.items():
            value = getattr(importlib.import_module(module), name)
            assert value is getattr(aitune_fp, name)
            assert getattr(value, "__module__", module) == module, name

    @pytest.mark.parametrize("module", SUBMODULES)
    def test_the_rest_is_in_modules_with_their_own_all(self, module: str) -> None:
        """A public module lists its names in __all__, and each resolves."""
        mod = importlib.import_module(module)
        exported = getattr(mod, "__all__", None)
        assert exported, f"{module} has no __all__"
        for name in exported:
            assert hasattr(mod, name), f"{module}.{name}"

    def test_private_modules_have_no_all(self) -> None:
        """A module named ``_x`` exports nothing: no __all__ (checked in the source)."""
        offenders = []
        for source in _private_modules():
            for node in ast.parse(source.read_text(encoding="utf-8")).body:
                targets = node.targets if isinstance(node, ast.Assign) else []
                if isinstance(node, ast.AnnAssign | ast.AugAssign):
                    targets = [node.target]
                if any(getattr(t, "id", None) == "__all__" for t in targets):
                    offenders.append(str(source.relative_to(ROOT)))
        assert _private_modules(), "no private module found: the walk is wrong"
        assert not offenders, offenders

    def test_unknown_name(self) -> None:
        """An unknown attribute raises AttributeError naming it."""
        with pytest.raises(AttributeError, match="no_such_thing"):
            aitune_fp.no_such_thing  # type: ignore[attr-defined]  # noqa: B018

    def test_a_name_moved_out_is_not_served(self) -> None:
        """A name of a submodule that is not in __all__ is not an attribute of the package."""
        with pytest.raises(AttributeError, match="make_backend"):
            aitune_fp.make_backend  # type: ignore[attr-defined]  # noqa: B018

    def test_dir_lists_the_public_names(self) -> None:
        """dir(aitune_fp) shows every public name, loaded or not."""
        assert set(aitune_fp.__all__) <= set(dir(aitune_fp))

    def test_py_typed_shipped(self) -> None:
        """The package carries py.typed so type checkers use its annotations."""
        from importlib.resources import files

        assert files("aitune_fp").joinpath("py.typed").is_file()


class TestAITuneNames:
    """The names AITune's performance validation gives stay importable from the top level."""

    def test_aitunes_names_import_from_the_top_level(self) -> None:
        """``fmt_speedup_msg`` and ``PerformanceValidationMixinResult`` beside the short message."""
        from aitune_fp import (
            PerformanceValidationMixinResult,
            PerformanceValidationResult,
            fmt_speedup_msg,
            fmt_speedup_msg_short,
            fmt_throughput_detail,
        )
        from aitune_fp.core import messages

        assert {"fmt_speedup_msg", "fmt_speedup_msg_short", "PerformanceValidationMixinResult"} <= (
            set(aitune_fp.__all__)
        )
        assert PerformanceValidationMixinResult is PerformanceValidationResult
        assert fmt_speedup_msg is messages.fmt_speedup_msg
        assert fmt_speedup_msg_short is messages.fmt_speedup_msg_short
        detail = fmt_throughput_detail(100, 200)
        assert fmt_speedup_msg(2.0, detail, "mlp", "TorchCompileBackend()") == (
            "⚡ mlp | backend: TorchCompileBackend() | speedup: 2.00x (100.00 → 200.00 samples/s)"
        )


class TestImportCost:
    def test_pure_api_does_not_import_torch(self) -> None:
        """A CI job that only computes a speedup never pays for importing torch."""
        code = (
            "import sys\n"
            f"from aitune_fp import {', '.join(PURE_NAMES)}\n"
            "print(compute_speedup(2.0, 1.0), meets_threshold(1.5))\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=False
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "2.0 True"
