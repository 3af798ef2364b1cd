"""Eager's events: the baseline was measured (with its noise floor, if asked), or it failed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Final, TypedDict

import attrs

from aitune_fp.core.messages import fmt_baseline_line
from aitune_fp.core.report import TuneReport
from aitune_fp.events.kinds import ABSENT, Absent, Keywords, Payload, event
from aitune_fp.events.names import VALIDATION_PREFIX as _V
from aitune_fp.events.names import EagerIsolation

_MIN0: Final = {"minimum": 0}
_MIN1: Final = {"minimum": 1}


class NoiseFloorFields(TypedDict):
    """Eager's own noise floor (``baseline_measured.noise_floor``): rel. L2 per output leaf."""

    rel_l2: Mapping[str, Annotated[float, Keywords(_MIN0)]]
    n_calls: Annotated[int, Keywords(_MIN0)]


@event(_V + "baseline_measured", "info")
@attrs.frozen(kw_only=True)
class BaselineMeasured(Payload):
    """The eager baseline was built and (in point mode) measured; its noise floor if asked."""

    backend_description: str
    batch_size: int = attrs.field(metadata=_MIN1)
    throughput_samples_per_s: float = attrs.field(metadata=_MIN0)
    n_calls: int = attrs.field(metadata=_MIN0)
    duration_s: float = attrs.field(metadata=_MIN0)
    decision: str
    eager_isolation: EagerIsolation = "private_copy"
    noise_floor_rel_l2: float | Absent | None = attrs.field(default=ABSENT, metadata=_MIN0)
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
            batch_size=self.batch_size,
            decision=self.decision,
            noise_floor_rel_l2=None
            if self.noise_floor_rel_l2 is ABSENT
            else self.noise_floor_rel_l2,
            degenerate_outputs=None
            if self.degenerate_outputs is ABSENT
            else self.degenerate_outputs,
            budget_plan=None if self.budget_plan is ABSENT else self.budget_plan,
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
