"""What one tune call leaves behind: its failures and its frozen report (no tensors, no modules)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, get_args

import attrs

from aitune_fp.core._checks import of_type, one_of, optional
from aitune_fp.core.messages import one_line
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.core.quantiles import LatencyCheck
from aitune_fp.core.results import PerformanceValidationResult, unstructure
from aitune_fp.core.selection import SelectionState
from aitune_fp.errors import error_name

__all__ = [
    "OUTCOMES",
    "STAGES",
    "CandidateFailure",
    "Outcome",
    "Stage",
    "TuneReport",
]

#: Where a candidate (or the strategy itself) failed (docs/architecture.md says what each means).
Stage = Literal[
    "unavailable",
    "build",
    "correctness",
    "profiling",
    "interference",
    "hung",
    "rebuild",
    "strategy",
]
STAGES: tuple[Stage, ...] = get_args(Stage)
#: How a tune ended (docs/architecture.md says what each means).
Outcome = Literal["candidate", "baseline", "passthrough", "error", "interrupted"]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)


@attrs.frozen(kw_only=True)
class CandidateFailure:
    """A candidate (or the strategy) that failed: where, why, and the saved traceback's path."""

    backend_description: str = attrs.field(validator=of_type(str))
    stage: Stage = attrs.field(validator=one_of(STAGES))
    error_type: str = attrs.field(validator=of_type(str))
    reason: str = attrs.field(validator=of_type(str))
    traceback_path: str | None = optional(of_type(str))

    @classmethod
    def from_exception(
        cls, description: str, stage: Stage, exc: BaseException, traceback_path: str | None
    ) -> CandidateFailure:
        """The failure record of ``exc``: its (stood-for) type and its message on one line."""
        return cls(
            backend_description=description,
            stage=stage,
            error_type=error_name(exc),
            reason=one_line(exc),
            traceback_path=traceback_path,
        )


def _tuple(value: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(value)


@attrs.frozen(kw_only=True)
class TuneReport:
    """Everything one tune call decided and measured, as plain values (the fold of its events)."""

    run_id: str = attrs.field(validator=of_type(str))
    module_name: str = attrs.field(validator=of_type(str))
    strategy: str | None = None
    device: str | None = None
    decision: str | None = None
    min_speedup_threshold_percent: float | None = None
    required_speedup: float | None = None
    batch_size: int | None = None
    baseline_backend: str | None = None
    baseline_throughput: float | None = None
    baseline_error: str | None = None
    #: Eager's own noise floor (largest rel-L2, float32 against float64), measured or given.
    noise_floor_rel_l2: float | None = None
    #: Why eager's outputs cannot tell candidates apart (constant or near zero); None: they can.
    degenerate_outputs: str | None = None
    #: What the per-candidate budget buys at eager's call time (statistical rule).
    budget_plan: str | None = None
    #: Where candidates ran until chosen (``process`` or ``in_process``) and why in process.
    isolation: str | None = None
    isolation_note: str | None = None
    disabled: bool = False
    results: tuple[PerformanceValidationResult, ...] = attrs.field(default=(), converter=_tuple)
    rejected: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    failures: tuple[CandidateFailure, ...] = attrs.field(default=(), converter=_tuple)
    selected_backend: str | None = None
    selected_is_baseline: bool | None = None
    selected_summary: str | None = None
    outcome: str | None = None
    duration_s: float | None = None
    n_events: int = 0
    selection: SelectionState | None = None
    latency_checks: tuple[LatencyCheck, ...] = attrs.field(default=(), converter=_tuple)
    #: How close each candidate that passed the correctness check came to eager, by description.
    accuracy: tuple[tuple[str, Mismatch], ...] = attrs.field(default=(), converter=_tuple)
    #: The ``timestamp`` of the ``started`` and ``baseline_measured`` events (None: unstamped).
    started_at: str | None = None
    baseline_at: str | None = None
    #: The last progress phase seen (``"measure of B()"``): where an incomplete run stopped.
    last_phase: str | None = None

    @property
    def complete(self) -> bool:
        """Whether the run ended: its ``finished`` event was seen (or validation was off)."""
        return self.outcome is not None or self.disabled

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; results and failures as lists of dicts."""
        data = attrs.asdict(self, recurse=False)
        data["accuracy"] = [
            {"backend_description": name, **mismatch.to_dict()} for name, mismatch in self.accuracy
        ]
        data["results"] = unstructure(self.results)
        data["failures"] = unstructure(self.failures)
        data["selection"] = unstructure(self.selection)
        data["latency_checks"] = [c.to_dict() for c in self.latency_checks]
        data["rejected"] = list(self.rejected)
        data["complete"] = self.complete
        return data

    @property
    def sequential(self) -> bool:
        """Whether the run decided by the statistical (sequential, interval) rule."""
        return self.decision == "statistical"

    @property
    def candidate_failures(self) -> tuple[CandidateFailure, ...]:
        """Failures of candidates only (the strategy's own failure left out)."""
        return tuple(f for f in self.failures if f.stage != "strategy")
