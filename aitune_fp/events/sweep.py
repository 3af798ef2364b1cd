"""A sweep's own events (``aitune-fp sweep``): ``run_id`` is the sweep's id; ingest builds no run."""

from __future__ import annotations

from typing import Final

import attrs

from aitune_fp.core.messages import counted
from aitune_fp.events.kinds import MIN0, Level, Payload, event
from aitune_fp.events.kinds import SWEEP_PREFIX as _S


@event(_S + "started", "info")
@attrs.frozen(kw_only=True)
class SweepStarted(Payload):
    """A sweep begins: which models it will run and which ``--resume`` skips."""

    executor: str
    models: list[str]
    skipped_models: list[str]

    def describe(self) -> str:
        """The sweep, how many models on which executor, and how many are done already."""
        done = f", {len(self.skipped_models)} already done" if self.skipped_models else ""
        models = counted(len(self.models), "model")
        return f"🧹 Sweep {self.module_name}: {models} on {self.executor}{done}"


@event(_S + "task_finished", "info")
@attrs.frozen(kw_only=True)
class TaskFinished(Payload):
    """One model's tune task ended with a report (its verdicts are the run ``tune_run_id``).

    Wall-clock times place it across hosts; monotonic ones order it on a host (wall clock stepped).
    """

    tune_run_id: str = attrs.field(metadata={"minLength": 1})
    outcome: str
    hostname: str
    device: str
    device_name: str
    pid: int = attrs.field(metadata=MIN0)
    threads: int = attrs.field(metadata={"minimum": 1})
    started_unix_s: float = attrs.field(metadata=MIN0)
    finished_unix_s: float = attrs.field(metadata=MIN0)
    started_monotonic_s: float
    finished_monotonic_s: float
    duration_s: float = attrs.field(metadata=MIN0)

    def describe(self) -> str:
        """The model, where it was tuned, and the outcome."""
        return (
            f"✅ {self.module_name}: tuned on {self.hostname} ({self.device_name}): {self.outcome}"
        )


@event(_S + "task_failed", "error")
@attrs.frozen(kw_only=True)
class TaskFailed(Payload):
    """One model's task ended without a report: it raised, its worker or node died, or cancelled."""

    error_type: str
    reason: str
    tune_run_id: str | None
    hostname: str | None

    def describe(self) -> str:
        """The model and the error."""
        return f"❌ {self.module_name}: {self.error_type}: {self.reason}"


@event(_S + "finished", "info")
@attrs.frozen(kw_only=True)
class SweepFinished(Payload):
    """The sweep ended: which models have a report and which failed (error level when any did)."""

    finished_models: list[str]
    failed_models: list[str]
    duration_s: float = attrs.field(metadata=MIN0)

    def describe(self) -> str:
        """How many models are done and failed (which failed), and the time taken."""
        failed = self.failed_models
        which = f" ({', '.join(failed)})" if failed else ""
        return (
            f"🏁 Sweep {self.module_name}: {len(self.finished_models)} done, {len(failed)} failed"
            f"{which} in {self.duration_s:.1f}s"
        )

    def level(self) -> Level:
        """Error when any model failed."""
        return "error" if self.failed_models else "info"


#: The registered event names, for readers that match on them.
SWEEP_STARTED: Final = SweepStarted.event_name
TASK_FINISHED: Final = TaskFinished.event_name
TASK_FAILED: Final = TaskFailed.event_name
SWEEP_FINISHED: Final = SweepFinished.event_name
