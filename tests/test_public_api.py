"""Specs of the public surface: every exported name resolves; the pure API never imports torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

import aitune_fp

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
    "for_batch_size",
]


class TestSurface:
    def test_every_public_name_resolves(self) -> None:
        """Each name in __all__ is an attribute of the package (lazy ones load on access)."""
        for name in aitune_fp.__all__:
            assert getattr(aitune_fp, name) is not None, name

    def test_all_is_sorted_and_unique(self) -> None:
        """__all__ has no duplicates."""
        assert len(set(aitune_fp.__all__)) == len(aitune_fp.__all__)

    def test_unknown_name(self) -> None:
        """An unknown attribute raises AttributeError naming it."""
        with pytest.raises(AttributeError, match="no_such_thing"):
            aitune_fp.no_such_thing  # type: ignore[attr-defined]  # noqa: B018

    def test_py_typed_shipped(self) -> None:
        """The package carries py.typed so type checkers use its annotations."""
        from importlib.resources import files

        assert files("aitune_fp").joinpath("py.typed").is_file()


class TestImportCost:
    def test_pure_api_does_not_import_torch(self) -> None:
        """A CI job that only computes a speedup never pays for importing torch."""
        code = (
            "import sys\n"
            f"from aitune_fp import {', '.join(PURE_NAMES)}\n"
            "import aitune_fp.core.stats, aitune_fp.inputs\n"
            "from aitune_fp import decide_speedup, SpeedupDecision, Sample, GraphSpec\n"
            "print(compute_speedup(2.0, 1.0), meets_threshold(1.5))\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=False
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "2.0 True"


class TestLazyTable:
    def test_lazy_names_are_public(self) -> None:
        """Every lazily served name is listed in __all__ (so type checkers see it)."""
        assert set(aitune_fp._LAZY) <= set(aitune_fp.__all__)
