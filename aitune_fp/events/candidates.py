"""The builders of a candidate's events: checked, measured, rejected or failed, and chosen among.

Each returns an :class:`~aitune_fp.events.names.Event` (pure); the session and the head-to-head
selection emit them.
"""

from __future__ import annotations

import math

from aitune_fp.core.choice import LatencyCheck, selection_to_dict
from aitune_fp.core.messages import fmt_candidate_line, fmt_headline
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.core.report import CandidateFailure, Stage
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.core.selection import SelectionState
from aitune_fp.events.names import (
    CANDIDATE_FAILED,
    CANDIDATE_MEASURED,
    CANDIDATE_REJECTED,
    CORRECTNESS_CHECKED,
    HEADTOHEAD_LOOK,
    LATENCY_CHECKED,
    SELECTION_DECIDED,
    Event,
    _event,
)

__all__ = [
    "candidate_failed",
    "candidate_measured",
    "candidate_rejected",
    "correctness_checked",
    "failed",
    "headtohead_look",
    "latency_checked",
    "selection_decided",
]


def correctness_checked(
    run_id: str, module_name: str, *, backend_description: str, mismatch: Mismatch
) -> Event:
    """A candidate matched eager within its accuracy budget: how close it came (the worst case)."""
    if mismatch.atol is None:
        figures = "exact on every compared value"
    else:
        figures = (
            f"worst abs error {mismatch.max_abs_error:.3g}, rel {mismatch.max_rel_error:.3g}, "
            f"{mismatch.budget_used:.0%} of the budget (atol={mismatch.atol:g}, "
            f"rtol={mismatch.rtol:g}) at {mismatch.path}"
        )
    if mismatch.criteria:
        figures += f"; {mismatch.describe_criteria()}"
    return _event(
        CORRECTNESS_CHECKED,
        "info",
        run_id,
        module_name,
        backend_description=backend_description,
        max_abs_error=mismatch.max_abs_error,
        max_rel_error=mismatch.max_rel_error,
        budget_used=mismatch.budget_used,
        atol=mismatch.atol,
        rtol=mismatch.rtol,
        output_path=mismatch.path,
        n_elements=mismatch.n_elements,
        criteria=[c.to_dict() for c in mismatch.criteria],
        summary=f"✅ {backend_description} matches eager: {figures}",
    )


def candidate_measured(
    run_id: str, module_name: str, result: PerformanceValidationResult, *, duration_s: float
) -> Event:
    """A candidate was timed against eager; carries every figure the verdict was based on."""
    fields = result.to_dict()
    if result.sequential:  # the figure the verdict was decided on, and the verdict
        summary = (
            f"📊 {result.backend_description}: batch size={result.batch_size or 1}, "
            f"speedup {fmt_headline(result)} → {result.verdict}"
        )
    else:  # AITune's line, byte for byte: its ▲/▼ says whether the point rule passed
        summary = fmt_candidate_line(
            result.backend_description,
            result.batch_size or 1,
            result.throughput,
            result.speedup,
            result.passed,
        )
    return _event(
        CANDIDATE_MEASURED,
        "info",
        run_id,
        module_name,
        backend_description=fields.pop("backend_description"),
        throughput_samples_per_s=fields.pop("throughput"),
        baseline_throughput_samples_per_s=fields.pop("baseline_throughput"),
        duration_s=duration_s,
        **fields,
        summary=summary,
    )


def candidate_rejected(run_id: str, module_name: str, result: PerformanceValidationResult) -> Event:
    """A measured candidate did not clear the gate; it is deactivated and not selected."""
    return _event(
        CANDIDATE_REJECTED,
        "warning",
        run_id,
        module_name,
        backend_description=result.backend_description,
        verdict=result.verdict,
        speedup=result.speedup,
        ci_low=result.ci_low,
        ci_high=result.ci_high,
        required_speedup=result.required_speedup,
        reason=result.reason,
        summary=f"❌ {result.backend_description} rejected ({result.verdict}): {result.reason}",
    )


def candidate_failed(
    run_id: str,
    module_name: str,
    *,
    backend_description: str,
    stage: Stage,
    error_type: str,
    reason: str,
    traceback_path: str | None,
) -> Event:
    """A candidate failed to build, to match eager, or to be profiled; it is rejected."""
    return _event(
        CANDIDATE_FAILED,
        "warning",
        run_id,
        module_name,
        backend_description=backend_description,
        stage=stage,
        error_type=error_type,
        reason=reason,
        traceback_path=traceback_path,
        summary=(
            f"❌ {backend_description} failed at {stage} (log file: {traceback_path}): "
            f"{error_type}: {reason}"
        ),
    )


def failed(run_id: str, module_name: str, failure: CandidateFailure) -> Event:
    """``candidate_failed`` for a recorded failure (the record's fields are the event's keys)."""
    return candidate_failed(run_id, module_name, **failure.to_dict())


def headtohead_look(run_id: str, module_name: str, state: SelectionState) -> Event:
    """Progress of a head-to-head selection: who is still in after one look (debug level)."""
    lost = [e for e in state.eliminated if e.at_rounds == state.rounds]
    gone = "".join(
        f"; {e.name} lost to {e.lost_to} ({e.ratio:.3f}x [{e.low:.3f}, "
        f"{'inf' if not math.isfinite(e.high) else f'{e.high:.3f}'}])"
        for e in lost
    )
    return _event(
        HEADTOHEAD_LOOK,
        "debug",
        run_id,
        module_name,
        look=state.look,
        rounds=state.rounds,
        remaining=list(state.remaining),
        eliminated=[e.name for e in lost],
        summary=f"🥊 head-to-head, {state.rounds} rounds: {', '.join(state.remaining)} in{gone}",
    )


def selection_decided(
    run_id: str, module_name: str, state: SelectionState, *, delta: float
) -> Event:
    """The head-to-head's choice among passing candidates, with every elimination and why."""
    return _event(
        SELECTION_DECIDED,
        "info",
        run_id,
        module_name,
        delta=delta,
        **selection_to_dict(state),
        summary=f"🥇 {state.reason}",
    )


def latency_checked(run_id: str, module_name: str, check: LatencyCheck) -> Event:
    """A candidate's latency quantile held against the budget (``latency-budget``)."""
    return _event(
        LATENCY_CHECKED,
        "info" if check.within else "warning",
        run_id,
        module_name,
        **check.to_dict(),
        summary=f"⏱️ {check.backend_description}: {check.reason}",
    )
