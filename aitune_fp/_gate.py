"""The hook between strategies and the validating wrapper: the gate of the current tune call.

A ``ContextVar`` holds the gate, so each thread (and each tune call) sees only its own; strategies
never import the wrapper, the wrapper installs a gate for the duration of ``tune``.
"""

from __future__ import annotations

from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal, Protocol

from aitune_fp.core.results import PerformanceValidationResult

__all__ = ["CURRENT_GATE", "Gate", "Stage"]

Stage = Literal["build", "correctness", "profiling", "strategy"]


class Gate(Protocol):
    """What a validating tune offers the build-and-validate helper while it runs."""

    @property
    def baseline(self) -> Any | None:
        """The built eager baseline to fall back to (None when none could be built)."""

    def measure(
        self, backend: Any, description: str, cache_dir: Path
    ) -> PerformanceValidationResult:
        """Time ``backend`` against the baseline and return the result (raises on failure)."""

    def record_failure(
        self, description: str, stage: Stage, exc: BaseException, log_path: Path | None
    ) -> None:
        """Record (and report) that a candidate failed at ``stage``."""

    def mark_validated(self, backend: Any, result: PerformanceValidationResult | None) -> None:
        """Remember that ``backend`` went through the helper (with its gate result, if measured)."""

    def phase(self, description: str, phase: str) -> None:
        """Report progress: ``description`` enters ``phase``."""


#: The gate of the tune call running in this context, if any.
CURRENT_GATE: ContextVar[Gate | None] = ContextVar("aitune_fp_gate", default=None)
