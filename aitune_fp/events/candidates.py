"""A candidate's events (checked, measured, rejected, failed) and the choice among candidates."""

from __future__ import annotations

import math
from typing import Annotated, Final, TypedDict

import attrs

from aitune_fp.core.accuracy import CriterionName
from aitune_fp.core.messages import fmt_candidate_line, fmt_headline
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.core.quantiles import LatencyCheck
from aitune_fp.core.report import CandidateFailure, Stage, TuneReport
from aitune_fp.core.results import PerformanceValidationResult, ResultVerdict
from aitune_fp.core.selection import SelectionState
from aitune_fp.events.kinds import ABSENT, MIN0, Absent, Event, Keywords, Level, Payload, event
from aitune_fp.events.kinds import VALIDATION_PREFIX as _V

__all__ = [
    "CANDIDATE_FAILED",
    "CANDIDATE_MEASURED",
    "CANDIDATE_REJECTED",
    "CORRECTNESS_CHECKED",
    "HEADTOHEAD_LOOK",
    "LATENCY_CHECKED",
    "SELECTION_DECIDED",
    "CandidateFailed",
    "CandidateMeasured",
    "CandidateRejected",
    "CorrectnessChecked",
    "CriterionFields",
    "HeadtoheadLook",
    "LatencyChecked",
    "SelectionDecided",
]

_SHARE: Final = {"exclusiveMinimum": 0, "exclusiveMaximum": 1}
_CONFIDENCE: Final = {"exclusiveMinimum": 0.5, "exclusiveMaximum": 1}


class CriterionFields(TypedDict):
    """One accuracy criterion's worst value against its budget (``correctness_checked``)."""

    name: CriterionName
    value: Annotated[float, Keywords(MIN0)]
    budget: Annotated[float, Keywords(MIN0)]
    path: str | None
    passed: bool
    used: Annotated[float, Keywords(MIN0)]


@event(_V + "correctness_checked", "info")
@attrs.frozen(kw_only=True)
class CorrectnessChecked(Payload):
    """A candidate matched eager within its accuracy budget: how close it came (the worst case)."""

    backend_description: str
    max_abs_error: float = attrs.field(metadata=MIN0)
    max_rel_error: float = attrs.field(metadata=MIN0)
    budget_used: float = attrs.field(metadata=MIN0)
    atol: float | None = attrs.field(metadata=MIN0)
    rtol: float | None = attrs.field(metadata=MIN0)
    output_path: str | None
    n_elements: int = attrs.field(metadata=MIN0)
    criteria: list[CriterionFields] = attrs.field(factory=list)
    notes: list[str] = attrs.field(factory=list)

    def apply(self, report: TuneReport, stamp: str | None = None) -> TuneReport:
        """The report with how close this candidate came to eager."""
        found = (self.backend_description, Mismatch.from_fields(attrs.asdict(self)))
        return attrs.evolve(report, accuracy=(*report.accuracy, found))

    def describe(self) -> str:
        """How close it came: the worst errors against the budget, the criteria, the notes."""
        mismatch = Mismatch.from_fields(attrs.asdict(self))
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
        figures += "".join(f"; {note}" for note in mismatch.notes)
        return f"✅ {self.backend_description} matches eager: {figures}"

    @classmethod
    def of(cls, run_id: str, module_name: str, description: str, mismatch: Mismatch) -> Event:
        """The event of ``mismatch``, the worst case of ``description`` (its path: output_path)."""
        fields = mismatch.to_dict()
        path = fields.pop("path")
        return cls(
            run_id=run_id,
            module_name=module_name,
            backend_description=description,
            output_path=path,
            **fields,
        ).to_event()


@event(_V + "candidate_measured", "info")
@attrs.frozen(kw_only=True)
class CandidateMeasured(Payload):
    """A candidate was timed against eager: its result record, as measured, and the time taken."""

    result: PerformanceValidationResult
    duration_s: float = attrs.field(metadata=MIN0)

    def apply(self, report: TuneReport, stamp: str | None = None) -> TuneReport:
        """The report with this result (the very record measured) appended."""
        return attrs.evolve(report, results=(*report.results, self.result))

    def describe(self) -> str:
        """The sequential rule's figure and verdict, or AITune's line byte for byte (point rule)."""
        result = self.result
        if result.sequential:
            return (
                f"📊 {result.backend_description}: batch size={result.batch_size or 1}, "
                f"speedup {fmt_headline(result)} → {result.verdict}"
            )
        return fmt_candidate_line(  # its ▲/▼ says whether the point rule passed
            result.backend_description,
            result.batch_size or 1,
            result.throughput,
            result.speedup,
            result.passed,
        )


@event(_V + "candidate_rejected", "warning")
@attrs.frozen(kw_only=True)
class CandidateRejected(Payload):
    """A measured candidate did not clear the gate; it is deactivated and not selected."""

    backend_description: str
    verdict: ResultVerdict | None
    speedup: float = attrs.field(metadata=MIN0)
    ci_low: float | None = attrs.field(metadata=MIN0)
    ci_high: float | None = attrs.field(metadata=MIN0)
    required_speedup: float | None = attrs.field(metadata=MIN0)
    reason: str | None

    def apply(self, report: TuneReport, stamp: str | None = None) -> TuneReport:
        """The report with this candidate among the rejected."""
        return attrs.evolve(report, rejected=(*report.rejected, self.backend_description))

    def describe(self) -> str:
        """The candidate, its verdict and why."""
        return f"❌ {self.backend_description} rejected ({self.verdict}): {self.reason}"

    @classmethod
    def of(cls, run_id: str, module_name: str, result: PerformanceValidationResult) -> Event:
        """The event of a measured ``result`` that did not clear the gate."""
        own = {key: getattr(result, key) for key in cls.payload_keys()}
        return cls(run_id=run_id, module_name=module_name, **own).to_event()


@event(_V + "candidate_failed", "warning")
@attrs.frozen(kw_only=True)
class CandidateFailed(Payload):
    """A candidate failed to build, to match eager, or to be profiled; it is rejected."""

    backend_description: str
    stage: Stage
    error_type: str
    reason: str
    traceback_path: str | None

    @property
    def failure(self) -> CandidateFailure:
        """The failure record this event carries (its fields are the record's)."""
        return CandidateFailure(
            **{f.name: getattr(self, f.name) for f in attrs.fields(CandidateFailure)}
        )

    def apply(self, report: TuneReport, stamp: str | None = None) -> TuneReport:
        """The report with this failure appended."""
        return attrs.evolve(report, failures=(*report.failures, self.failure))

    def describe(self) -> str:
        """The candidate, the stage it failed at, its log, and the error."""
        return (
            f"❌ {self.backend_description} failed at {self.stage} (log file: "
            f"{self.traceback_path}): {self.error_type}: {self.reason}"
        )


@event(_V + "headtohead_look", "debug")
@attrs.frozen(kw_only=True)
class HeadtoheadLook(Payload):
    """Progress of a head-to-head selection: who is still in after one look."""

    look: int = attrs.field(metadata=MIN0)
    rounds: int = attrs.field(metadata=MIN0)
    remaining: list[str]
    eliminated: list[str]

    @classmethod
    def of(cls, run_id: str, module_name: str, state: SelectionState) -> Event:
        """Who is still in after ``state``'s look, and who lost there to whom (debug level)."""
        lost = [e for e in state.eliminated if e.at_rounds == state.rounds]
        gone = "".join(
            f"; {e.name} lost to {e.lost_to} ({e.ratio:.3f}x [{e.low:.3f}, "
            f"{'inf' if not math.isfinite(e.high) else f'{e.high:.3f}'}])"
            for e in lost
        )
        return cls(
            run_id=run_id,
            module_name=module_name,
            look=state.look,
            rounds=state.rounds,
            remaining=list(state.remaining),
            eliminated=[e.name for e in lost],
            summary=f"🥊 head-to-head, {state.rounds} rounds: {', '.join(state.remaining)} in{gone}",
        ).to_event()


@event(_V + "selection_decided", "info")
@attrs.frozen(kw_only=True)
class SelectionDecided(Payload):
    """The head-to-head's choice among passing candidates, with every elimination and why."""

    delta: float = attrs.field(metadata=_SHARE)
    selection: SelectionState

    def apply(self, report: TuneReport, stamp: str | None = None) -> TuneReport:
        """The report with this selection."""
        return attrs.evolve(report, selection=self.selection)

    def describe(self) -> str:
        """Why the choice fell as it did."""
        return f"🥇 {self.selection.reason}"


@event(_V + "latency_checked", "info")
@attrs.frozen(kw_only=True)
class LatencyChecked(Payload):
    """A candidate's latency quantile against the budget (warning level when over it)."""

    backend_description: str
    quantile: float = attrs.field(metadata=_SHARE)
    confidence: float = attrs.field(metadata=_CONFIDENCE)
    n_calls: int = attrs.field(metadata={"minimum": 1})
    estimate_s: float
    upper_s: float | None
    upper_rank: int | None = attrs.field(default=None, metadata={"minimum": 1})
    coverage: float | Absent = ABSENT
    budget_s: float = attrs.field(metadata={"exclusiveMinimum": 0})
    within: bool
    reason: str

    def apply(self, report: TuneReport, stamp: str | None = None) -> TuneReport:
        """The report with this latency check."""
        check = LatencyCheck.from_dict(attrs.asdict(self))
        return attrs.evolve(report, latency_checks=(*report.latency_checks, check))

    def describe(self) -> str:
        """The candidate and the check's reason."""
        return f"⏱️ {self.backend_description}: {self.reason}"

    def level(self) -> Level:
        """Info within the budget, warning over it."""
        return "info" if self.within else "warning"


#: The registered event names, for readers that match on them.
CORRECTNESS_CHECKED: Final = CorrectnessChecked.event_name
CANDIDATE_MEASURED: Final = CandidateMeasured.event_name
CANDIDATE_REJECTED: Final = CandidateRejected.event_name
CANDIDATE_FAILED: Final = CandidateFailed.event_name
HEADTOHEAD_LOOK: Final = HeadtoheadLook.event_name
SELECTION_DECIDED: Final = SelectionDecided.event_name
LATENCY_CHECKED: Final = LatencyChecked.event_name
