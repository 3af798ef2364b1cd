"""What one tune call leaves behind: its failures and its frozen report (no tensors, no modules).

A :class:`TuneReport` is made by the validating wrapper at the end of a tune and rebuilt by
``aitune_fp.events.ingest`` from the events of a run, so the two agree by construction. The result of a
measured candidate is built here too, by one pure function (:func:`make_result`), from the
decision that settled it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

import attrs

from aitune_fp.core._checks import of_type, one_of
from aitune_fp.core.choice import LatencyCheck, selection_to_dict
from aitune_fp.core.messages import one_line
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.core.results import PerformanceValidationResult, ResultVerdict
from aitune_fp.core.selection_values import SelectionState
from aitune_fp.core.verdict import SpeedupDecision
from aitune_fp.errors import error_name

__all__ = [
    "OUTCOMES",
    "STAGES",
    "CandidateFailure",
    "Outcome",
    "Stage",
    "TuneReport",
    "make_result",
]

#: Where a candidate (or the strategy itself) failed. ``unavailable``: the backend cannot run on
#: this machine or device (a missing optional package, no CUDA, no CUDA provider); nothing built.
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
#: ``interference``: the candidate's process ran while another arm was timed; ``rebuild``: the
#: chosen candidate, rebuilt in the user's process, failed there or differed from its worker's.
STAGES: tuple[Stage, ...] = get_args(Stage)
#: How a tune ended: a candidate selected, the eager baseline, the strategy's own pick passed
#: through (validation disabled or nothing returned), an error, or interrupted (Ctrl-C, SIGTERM,
#: SIGHUP, any other ``BaseException``: the tune was stopped, nothing in it failed).
Outcome = Literal["candidate", "baseline", "passthrough", "error", "interrupted"]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)

_opt_str = attrs.validators.optional(of_type(str))


@attrs.frozen(kw_only=True)
class CandidateFailure:
    """A candidate (or the strategy) that failed: where, why, and the saved traceback's path.

    The one failure record: the wrapper records it, ``candidate_failed`` events carry its
    fields, and ingest rebuilds it from them.
    """

    backend_description: str = attrs.field(validator=of_type(str))
    stage: Stage = attrs.field(validator=one_of(STAGES))
    error_type: str = attrs.field(validator=of_type(str))
    reason: str = attrs.field(validator=of_type(str))
    traceback_path: str | None = attrs.field(default=None, validator=_opt_str)

    @classmethod
    def from_exception(
        cls, description: str, stage: Stage, exc: BaseException, traceback_path: str | None
    ) -> CandidateFailure:
        """The failure record of ``exc`` (its type and its message on one line).

        An error that stands for another (raised in a worker process) names it: ``error_type``.
        """
        return cls(
            backend_description=description,
            stage=stage,
            error_type=error_name(exc),
            reason=one_line(exc),
            traceback_path=traceback_path,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field."""
        return attrs.asdict(self)


def _tuple(value: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(value)


@attrs.frozen(kw_only=True)
class TuneReport:
    """Everything one tune call (one ``run_id``) decided and measured, as plain values.

    ``results``: one per measured candidate, in order; ``failures``: candidates (and the
    strategy) that failed; ``rejected``: descriptions of measured candidates that did not pass.
    ``selected_backend`` is the description of what the tune returned (None on error).
    ``selection``: the head-to-head among passing candidates, when one ran; ``latency_checks``:
    candidates held against a latency budget.
    """

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
    #: Eager's own noise floor (the largest rel-L2 of float32 eager against float64 over the
    #: output leaves) when the tune measured it (``Closeness(calibrate=True)``) or was given one.
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
    #: How close each candidate that passed the correctness check came to eager, by its
    #: description: the worst mismatch and each accuracy criterion against its budget.
    accuracy: tuple[tuple[str, Mismatch], ...] = attrs.field(default=(), converter=_tuple)
    #: When a log writer stamped the run's ``started`` and ``baseline_measured`` events (their
    #: ``timestamp``, as written; None where nothing stamped them, as in the session itself).
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
        data["results"] = [r.to_dict() for r in self.results]
        data["failures"] = [f.to_dict() for f in self.failures]
        data["selection"] = None if self.selection is None else selection_to_dict(self.selection)
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


def make_result(
    description: str,
    *,
    baseline_throughput: float,
    throughput: float,
    speedup: float,
    batch_size: int,
    n_baseline: int,
    n_candidate: int,
    required_speedup: float,
    decision: SpeedupDecision | None,
    passed_point: bool | None = None,
    reason: str,
    flags: Sequence[str] = (),
    rule: str | None = None,
    note: str | None = None,
    mismatch: Mismatch | None = None,
    context: Mapping[str, Any] | None = None,
) -> PerformanceValidationResult:
    """The one result record of a measured candidate, built once and complete: nothing evolves it.

    ``decision``: the statistical decision (its verdict, estimate and bounds are taken as they
    are; an interval unbounded for lack of pairs is recorded as no bound, ``ci_high=None``).
    Without one, ``passed_point`` is the outcome of AITune's point rule; with neither, the
    statistical mode could not decide at all (budget spent before the first look): the record
    is ``inconclusive`` with no interval. ``rule``: the deciding rule's name (by default
    ``"point"`` with ``passed_point``, else ``"statistical"``); ``note`` is appended to the
    reason in brackets; ``mismatch``: how close the candidate came to eager (correctness check
    and spot checks); ``context``: any further result fields by name (where it ran, the clock).
    """
    label = rule or ("point" if decision is None and passed_point is not None else "statistical")
    if note is not None:
        reason = f"{reason} ({note})" if reason else note
    extra: dict[str, Any] = {
        **({} if mismatch is None else mismatch.result_fields()),
        **(context or {}),
    }
    common: dict[str, Any] = {
        "n_baseline": n_baseline,
        "n_candidate": n_candidate,
        "batch_size": batch_size,
        "required_speedup": required_speedup,
        "decision": label,
        "reason": reason,
        "flags": tuple(flags),
        **extra,
    }
    if decision is None:
        verdict: ResultVerdict = (
            "inconclusive" if passed_point is None else "faster" if passed_point else "not_faster"
        )
        return PerformanceValidationResult(
            description,
            throughput,
            baseline_throughput,
            speedup,
            bool(passed_point),
            verdict=verdict,
            **common,
        )
    return PerformanceValidationResult(
        description,
        throughput,
        baseline_throughput,
        speedup,
        decision.verdict == "faster",
        estimate=decision.speedup,
        ci_low=decision.ci_low,
        ci_high=decision.ci_high if math.isfinite(decision.ci_high) else None,
        confidence=decision.confidence,
        guarantee=decision.overall,
        futility_margin_percent=decision.futility_margin * 100.0,
        method=decision.method,
        autocorrelation=decision.autocorrelation,
        verdict=decision.verdict,
        **common,
    )
