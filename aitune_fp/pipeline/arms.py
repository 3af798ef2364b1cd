"""Where a candidate is built, checked and timed: this process (:class:`HereArm`) or a worker."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from aitune_fp.pipeline.stages import build_here, return_module
from aitune_fp.pipeline.values import CandidateOutcome, TuneTarget, candidate_folder, describe


class Arm(Protocol):
    """Where a candidate is built, checked and timed: open, build, then abandon or settle."""

    description: str
    folder: Path

    def open(self) -> None:
        """Start where the candidate runs; a worker says its description and folder first."""

    def build(self) -> Any:
        """The built candidate; raises what its build raised."""

    def abandon(self) -> None:
        """Let go of what a failed build holds."""

    def settle(self, outcome: CandidateOutcome) -> CandidateOutcome:
        """The outcome, after what the arm itself finds once the candidate was vetted."""


class HereArm:
    """A candidate built, checked and timed in this process (an :class:`~.values.Arm`)."""

    def __init__(self, target: TuneTarget, backend: Any, build: Callable[[Any], Any] | None):
        """The candidate's description and folder are known here at once."""
        self.target, self.backend, self.build_step = target, backend, build
        self.description = describe(backend)
        self.folder = candidate_folder(target.cache_dir, backend, self.description)

    def open(self) -> None:
        """Nothing to start."""

    def build(self) -> Any:
        """The build stage, here."""
        return build_here(self.target, self.backend, self.build_step)

    def abandon(self) -> None:
        """A failed build may have moved the module: back to its device."""
        return_module(self.target)

    def settle(self, outcome: CandidateOutcome) -> CandidateOutcome:
        """Nothing more to find: the guards ran while it was vetted."""
        return outcome
