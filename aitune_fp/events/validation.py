"""A tune's own events and eager's: it starts, eager is measured (or fails), progress, the end."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Final, TypedDict

import attrs

from aitune_fp.core.messages import (
    counted,
    fmt_baseline_line,
    fmt_baseline_selected,
    fmt_disabled_line,
    fmt_speedup_msg,
    fmt_speedup_msg_short,
    fmt_throughput_detail,
)
from aitune_fp.core.report import Outcome, TuneReport
from aitune_fp.core.results import IsolationMode, PerformanceValidationResult, ResultVerdict
from aitune_fp.core.verdict import HELD_BACK
from aitune_fp.events.kinds import (
    ABSENT,
    MIN0,
    MIN1,
    Absent,
    EagerIsolation,
    Event,
    Keywords,
    Level,
    Payload,
    Phase,
    event,
)
from aitune_fp.events.kinds import VALIDATION_PREFIX as _V

#: The level ``finished`` is logged at, by outcome (info otherwise).
_FINISHED_LEVELS: Final[dict[str, Level]] = {"error": "error", "interrupted": "warning"}


@event(_V + "started", "info")
@attrs.frozen(kw_only=True)
class Started(Payload):
    """A validating tune begins: what is tuned, where, and against which gate (and the CPU)."""

    strategy: str
    device: str
    decision: str
    min_speedup_threshold_percent: float = attrs.field(metadata={"exclusiveMinimum": -100})
    required_speedup: float = attrs.field(metadata=MIN0)
    batch_size: int | None = attrs.field(metadata=MIN1)
    threads: int | Absent = attrs.field(
        default=ABSENT,
        metadata={**MIN1, "description": "torch intra-op threads both arms run with (issue 24)"},
    )
    interop_threads: int | Absent = attrs.field(
        default=ABSENT, metadata={**MIN1, "description": "torch inter-op threads"}
    )
    omp_num_threads: int | Absent | None = attrs.field(
        default=ABSENT,
        metadata={
            **MIN1,
            "description": "OMP_NUM_THREADS in the environment (null: unset or not one integer)",
        },
    )
    cpus: int | Absent = attrs.field(
        default=ABSENT,
        metadata={**MIN1, "description": "CPUs this process may run on (its affinity mask)"},
    )
    load_avg_1m: float | Absent | None = attrs.field(
        default=ABSENT,
        metadata={
            **MIN0,
            "description": "1-minute load average when the tune started (null: none on this "
            "platform)",
        },
    )
    isolation: IsolationMode | Absent = attrs.field(
        default=ABSENT,
        metadata={
            "description": "where candidates run until chosen: 'process' (a worker process "
            "each, eager in another) or 'in_process' (the user's process, guarded)"
        },
    )
    isolation_note: str | Absent = attrs.field(
        default=ABSENT,
        metadata={"description": "why the tune runs in process (left out in process mode)"},
    )

    def apply(self, report: TuneReport, stamp: str | None = None) -> TuneReport:
        """The report with what the tune runs, where, and against which gate."""
        keys = ("strategy", "device", "decision", "min_speedup_threshold_percent")
        more = ("required_speedup", "batch_size", "isolation", "isolation_note")
        return attrs.evolve(report, started_at=stamp, **self.present(*keys, *more))

    def describe(self) -> str:
        """What the user waits for first."""
        return "🔄 Profiling eager baseline...please wait"


class NoiseFloorFields(TypedDict):
    """Eager's own noise floor (``baseline_measured.noise_floor``): rel. L2 per output leaf."""

    rel_l2: Mapping[str, Annotated[float, Keywords(MIN0)]]
    n_calls: Annotated[int, Keywords(MIN0)]


@event(_V + "baseline_measured", "info")
@attrs.frozen(kw_only=True)
class BaselineMeasured(Payload):
    """The eager baseline was built and (in point mode) measured; its noise floor if asked."""

    backend_description: str
    batch_size: int = attrs.field(metadata=MIN1)
    throughput_samples_per_s: float = attrs.field(metadata=MIN0)
    n_calls: int = attrs.field(metadata=MIN0)
    duration_s: float = attrs.field(metadata=MIN0)
    decision: str
    eager_isolation: EagerIsolation = "private_copy"
    noise_floor_rel_l2: float | Absent | None = attrs.field(default=ABSENT, metadata=MIN0)
    noise_floor: NoiseFloorFields | Absent = ABSENT
    noise_floor_note: str | Absent = ABSENT
    #: Why eager's outputs cannot tell candidates apart (constant or near zero); absent: they can.
    degenerate_outputs: str | Absent = ABSENT
    #: What the per-candidate budget buys at eager's call time (statistical rule).
    budget_plan: str | Absent = ABSENT

    def apply(self, report: TuneReport, stamp: str | None = None) -> TuneReport:
        """The report with eager's figures."""
        return attrs.evolve(
            report,
            baseline_backend=self.backend_description,
            baseline_throughput=self.throughput_samples_per_s,
            baseline_at=stamp,
            **self.present("batch_size", "decision", "noise_floor_rel_l2", "degenerate_outputs"),
            **self.present("budget_plan"),
        )

    def describe(self) -> str:
        """AITune's baseline line: the batch size and eager's throughput."""
        return fmt_baseline_line(self.batch_size, self.throughput_samples_per_s)


@event(_V + "baseline_failed", "error")
@attrs.frozen(kw_only=True)
class BaselineFailed(Payload):
    """The eager baseline could not be built or measured; no candidate can be gated."""

    error_type: str
    reason: str
    traceback_path: str | None

    def apply(self, report: TuneReport, stamp: str | None = None) -> TuneReport:
        """The report of a tune whose baseline failed."""
        return attrs.evolve(report, baseline_error=f"{self.error_type}: {self.reason}")

    def describe(self) -> str:
        """That the baseline failed, its log, and why."""
        return (
            f"⚠️ Performance validation baseline failed (log: {self.traceback_path}): {self.reason}"
        )


@event(_V + "disabled", "warning")
@attrs.frozen(kw_only=True)
class Disabled(Payload):
    """Validation is off for this tune: no eager build, no profiling."""

    strategy: str

    def apply(self, report: TuneReport, stamp: str | None = None) -> TuneReport:
        """The report of a tune that validated nothing."""
        return attrs.evolve(report, strategy=self.strategy, disabled=True)

    def describe(self) -> str:
        """That nothing is validated."""
        return fmt_disabled_line()


@event(_V + "eval_mode", "warning")
@attrs.frozen(kw_only=True)
class EvalMode(Payload):
    """The model came in training mode: it is validated in eval mode, returned as it came."""

    n_training_modules: int = attrs.field(metadata=MIN1)

    def describe(self) -> str:
        """How the model was validated and how it is returned."""
        return (
            f"⚠️ {self.module_name} was in training mode "
            f"({counted(self.n_training_modules, 'module')}): "
            "validated in eval mode (no dropout, running statistics not updated) and returned "
            "in training mode"
        )


@event(_V + "phase", "debug")
@attrs.frozen(kw_only=True)
class PhaseEntered(Payload):
    """Progress: a backend enters a phase (the ``phase`` event; ``Phase`` names the phases)."""

    backend_description: str
    phase: Phase

    def apply(self, report: TuneReport, stamp: str | None = None) -> TuneReport:
        """The report with where the tune is now (where an incomplete run stopped)."""
        return attrs.evolve(report, last_phase=f"{self.phase} of {self.backend_description}")

    def describe(self) -> str:
        """The backend and its phase."""
        return f"{self.backend_description}: {self.phase.replace('_', ' ')}"


@event(_V + "look", "debug")
@attrs.frozen(kw_only=True)
class Look(Payload):
    """Progress of a statistical measurement: the interval at one planned look."""

    backend_description: str
    n_pairs: int = attrs.field(metadata=MIN0)
    max_pairs: int = attrs.field(metadata=MIN1)
    verdict: ResultVerdict
    estimate: float = attrs.field(metadata=MIN0)
    ci_low: float = attrs.field(metadata=MIN0)
    ci_high: float | None = attrs.field(metadata=MIN0)
    #: Why an inconclusive look stayed open (the first condition of ``HELD_BACK``; None: settled).
    held_back: str | None = attrs.field(default=None, metadata={"enum": list(HELD_BACK)})

    def describe(self) -> str:
        """The look's pairs, estimate, interval and verdict (and why it is held back)."""
        high = self.ci_high
        shown = "inf" if high is None or not math.isfinite(high) else f"{high:.3f}"
        why = "" if self.held_back is None else f" (held back: {self.held_back})"
        return (
            f"🔎 {self.backend_description}: {self.n_pairs}/{self.max_pairs} pairs, "
            f"{self.estimate:.2f}x [{self.ci_low:.3f}, {shown}] → {self.verdict}{why}"
        )


@event(_V + "selected", "info")
@attrs.frozen(kw_only=True)
class Selected(Payload):
    """The tune's outcome line: the chosen backend (or eager) and its speedup (warning: info off)."""

    backend_description: str
    is_baseline: bool
    speedup: float | None = attrs.field(metadata=MIN0)
    throughput_samples_per_s: float | None = attrs.field(metadata=MIN0)
    baseline_throughput_samples_per_s: float | None = attrs.field(metadata=MIN0)
    #: What the chosen candidate's rebuild changed in the process and was put back (names);
    #: on eager's, what a chosen candidate's failed hand-back changed.
    restored: list[str] = attrs.field(factory=list)
    #: How a candidate chosen in its worker reached this process: "loaded from ..." its worker's
    #: artefact (what was timed), or "rebuilt: why"; empty for eager and an in-process tune.
    handed_back: str = ""

    def apply(self, report: TuneReport, stamp: str | None = None) -> TuneReport:
        """The report with what the tune returned (and eager's throughput, if not yet known)."""
        eager = report.baseline_throughput
        return attrs.evolve(
            report,
            selected_backend=self.backend_description,
            selected_is_baseline=self.is_baseline,
            selected_summary=self.summary,
            baseline_throughput=self.baseline_throughput_samples_per_s if eager is None else eager,
        )

    @classmethod
    def of(
        cls,
        run_id: str,
        module_name: str,
        *,
        backend_description: str,
        is_baseline: bool,
        result: PerformanceValidationResult | None,
        baseline_throughput: float | None,
        info_on: bool,
        color: bool = False,
        restored: tuple[str, ...] = (),
        handed_back: str = "",
    ) -> Event:
        """The outcome line of ``result`` (at warning level with info off, so it stays visible)."""
        summary = fmt_baseline_selected(backend_description, baseline_throughput)
        if result is not None and not is_baseline:
            detail = fmt_throughput_detail(result.baseline_throughput, result.throughput)
            summary = (
                fmt_speedup_msg_short(result.speedup, detail, color=color)
                if info_on
                else fmt_speedup_msg(
                    result.speedup, detail, module_name, backend_description, color=color
                )
            )
        return cls(
            run_id=run_id,
            module_name=module_name,
            backend_description=backend_description,
            is_baseline=is_baseline,
            speedup=None if result is None else result.speedup,
            throughput_samples_per_s=None if result is None else result.throughput,
            baseline_throughput_samples_per_s=baseline_throughput,
            restored=list(restored),
            handed_back=handed_back,
            summary=summary if info_on else f"[aitune_fp] {summary}",
        ).to_event("info" if info_on else "warning")


@event(_V + "finished", "info")
@attrs.frozen(kw_only=True)
class Finished(Payload):
    """The tune ended: its outcome and how many candidates were measured, passed, failed."""

    outcome: Outcome
    backend_description: str | None
    n_candidates: int = attrs.field(metadata=MIN0)
    n_measured: int = attrs.field(metadata=MIN0)
    n_passed: int = attrs.field(metadata=MIN0)
    n_failed: int = attrs.field(metadata=MIN0)
    duration_s: float = attrs.field(metadata=MIN0)
    reason: str | None = None

    def apply(self, report: TuneReport, stamp: str | None = None) -> TuneReport:
        """The report of a tune that ended."""
        return attrs.evolve(report, outcome=self.outcome, duration_s=self.duration_s)

    def describe(self) -> str:
        """The outcome, the backend returned and the time taken."""
        chosen = f" ({self.backend_description})" if self.backend_description else ""
        return f"⏱️ Tune of {self.module_name}: {self.outcome}{chosen} in {self.duration_s:.2f}s"

    def level(self) -> Level:
        """Error for an error, warning for an interrupted tune, info otherwise."""
        return _FINISHED_LEVELS.get(self.outcome, "info")


#: The registered event names, for readers that match on them.
STARTED: Final = Started.event_name
PHASE: Final = PhaseEntered.event_name
SELECTED: Final = Selected.event_name
FINISHED: Final = Finished.event_name
