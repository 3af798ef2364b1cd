"""One fold from events to a tune's report: what the session keeps and what ``ingest`` rebuilds.

``fold(report, name, fields)`` returns the report with one event added. The session folds every
event it emits into its report, and ``aitune_fp.events.ingest`` folds the events of a log the same way,
so the two reports agree by construction. Adding an event means: its class (with its builder)
in ``aitune_fp/events/``, its line here, and its section in ``docs/events.md``. Pure: no torch,
no clocks, no logging.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from aitune_fp.core.choice import LatencyCheck, selection_from_dict
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.core.report import CandidateFailure, TuneReport
from aitune_fp.core.results import EVENT_KEYS, PerformanceValidationResult

__all__ = ["VALIDATION_PREFIX", "empty_report", "fold", "result_from_event"]

#: The prefix of every event a tune emits (a sweep's own events are not folded).
VALIDATION_PREFIX: Final = "aitune_fp.validation."

_RESULT_FIELDS: Final = tuple(a.name for a in attrs.fields(PerformanceValidationResult))
_RENAMED: Final = {key: field for field, key in EVENT_KEYS.items()}


def result_from_event(fields: Mapping[str, Any]) -> PerformanceValidationResult:
    """Rebuild the :class:`PerformanceValidationResult` a ``candidate_measured`` event carries."""
    data = {_RENAMED.get(k, k): v for k, v in fields.items()}
    return PerformanceValidationResult.from_dict({k: data[k] for k in _RESULT_FIELDS if k in data})


def empty_report(run_id: str, module_name: str) -> TuneReport:
    """The report of a run before any of its events."""
    return TuneReport(run_id=run_id, module_name=module_name)


def _failure(f: Mapping[str, Any]) -> CandidateFailure:
    return CandidateFailure(
        backend_description=f["backend_description"],
        stage=f["stage"],
        error_type=f["error_type"],
        reason=f["reason"],
        traceback_path=f.get("traceback_path"),
    )


def _stamp(f: Mapping[str, Any]) -> str | None:
    """The ``timestamp`` a log writer added to an event (a renderer key), when it is text."""
    stamp = f.get("timestamp")
    return stamp if isinstance(stamp, str) else None


def _changes(short: str, f: Mapping[str, Any], r: TuneReport) -> dict[str, Any]:
    """The report fields one event sets (by its short name); none for progress events."""
    if short == "phase":
        return {"last_phase": f"{f['phase']} of {f['backend_description']}"}
    if short == "started":
        return {
            "started_at": _stamp(f),
            "strategy": f["strategy"],
            "device": f["device"],
            "decision": f["decision"],
            "min_speedup_threshold_percent": f["min_speedup_threshold_percent"],
            "required_speedup": f["required_speedup"],
            "batch_size": f.get("batch_size"),
            "isolation": f.get("isolation"),
            "isolation_note": f.get("isolation_note"),
        }
    if short == "disabled":
        return {"strategy": f["strategy"], "disabled": True}
    if short == "baseline_measured":
        return {
            "baseline_backend": f["backend_description"],
            "baseline_throughput": f["throughput_samples_per_s"],
            "baseline_at": _stamp(f),
            "batch_size": f["batch_size"],
            "decision": f["decision"],
            "noise_floor_rel_l2": f.get("noise_floor_rel_l2"),
            "degenerate_outputs": f.get("degenerate_outputs"),
            "budget_plan": f.get("budget_plan"),
        }
    if short == "baseline_failed":
        return {"baseline_error": f"{f['error_type']}: {f['reason']}"}
    if short == "correctness_checked":
        return {"accuracy": (*r.accuracy, (f["backend_description"], Mismatch.from_fields(f)))}
    if short == "candidate_measured":
        return {"results": (*r.results, result_from_event(f))}
    if short == "candidate_rejected":
        return {"rejected": (*r.rejected, f["backend_description"])}
    if short == "candidate_failed":
        return {"failures": (*r.failures, _failure(f))}
    if short == "selection_decided":
        return {"selection": selection_from_dict(f)}
    if short == "latency_checked":
        return {"latency_checks": (*r.latency_checks, LatencyCheck.from_dict(f))}
    if short == "selected":
        changes = {
            "selected_backend": f["backend_description"],
            "selected_is_baseline": f["is_baseline"],
            "selected_summary": f["summary"],
        }
        eager = f.get("baseline_throughput_samples_per_s")
        if eager is not None and r.baseline_throughput is None:
            changes["baseline_throughput"] = eager
        return changes
    if short == "finished":
        return {"outcome": f["outcome"], "duration_s": f["duration_s"]}
    return {}


def fold(report: TuneReport, name: str, fields: Mapping[str, Any]) -> TuneReport:
    """``report`` with the event ``name`` (its ``fields``) added, and counted.

    A malformed event raises ``KeyError``, ``TypeError`` or ``ValueError`` (ingest reports its
    line as bad and goes on).
    """
    changes = _changes(name.removeprefix(VALIDATION_PREFIX), fields, report)
    return attrs.evolve(report, n_events=report.n_events + 1, **changes)
