"""A sweep's own events (``aitune-fp sweep``): ``run_id`` is the sweep's id; ingest builds no run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import attrs

from aitune_fp.events.kinds import Event, Payload, event
from aitune_fp.events.names import SWEEP_PREFIX as _S

__all__ = [
    "SWEEP_FINISHED",
    "SWEEP_STARTED",
    "TASK_FAILED",
    "TASK_FINISHED",
    "SweepFinished",
    "SweepStarted",
    "TaskFailed",
    "TaskFinished",
    "sweep_finished",
    "sweep_started",
    "task_failed",
    "task_finished",
]

_MIN0: Final = {"minimum": 0}


@event(_S + "started", "info")
@attrs.frozen(kw_only=True)
class SweepStarted(Payload):
    """A sweep begins: which models it will run and which ``--resume`` skips."""

    executor: str
    models: list[str]
    skipped_models: list[str]


SWEEP_STARTED: Final = SweepStarted.event_name


def sweep_started(
    sweep_id: str, sweep_name: str, *, executor: str, models: Sequence[str], skipped: Sequence[str]
) -> Event:
    """A sweep begins: which models it will run and which ``--resume`` skips."""
    return SweepStarted(
        run_id=sweep_id,
        module_name=sweep_name,
        executor=executor,
        models=list(models),
        skipped_models=list(skipped),
        summary=f"🧹 Sweep {sweep_name}: {len(models)} model(s) on {executor}"
        + (f", {len(skipped)} already done" if skipped else ""),
    ).to_event()


@event(_S + "task_finished", "info")
@attrs.frozen(kw_only=True)
class TaskFinished(Payload):
    """One model's tune task ended with a report (its verdicts are the run ``tune_run_id``)."""

    tune_run_id: str = attrs.field(metadata={"minLength": 1})
    outcome: str
    hostname: str
    device: str
    device_name: str
    pid: int = attrs.field(metadata=_MIN0)
    threads: int = attrs.field(metadata={"minimum": 1})
    started_unix_s: float = attrs.field(metadata=_MIN0)
    finished_unix_s: float = attrs.field(metadata=_MIN0)
    started_monotonic_s: float
    finished_monotonic_s: float
    duration_s: float = attrs.field(metadata=_MIN0)


TASK_FINISHED: Final = TaskFinished.event_name


def task_finished(
    sweep_id: str,
    model: str,
    *,
    tune_run_id: str,
    outcome: str,
    hostname: str,
    device: str,
    device_name: str,
    pid: int,
    threads: int,
    started_unix_s: float,
    finished_unix_s: float,
    started_monotonic_s: float,
    finished_monotonic_s: float,
) -> Event:
    """One model's tune task ended with a report (its verdicts are the run ``tune_run_id``).

    Wall-clock times place the task across hosts; monotonic ones (comparable on one host only)
    give its duration and order tasks on a host even when the wall clock is stepped.
    """
    return TaskFinished(
        run_id=sweep_id,
        module_name=model,
        tune_run_id=tune_run_id,
        outcome=outcome,
        hostname=hostname,
        device=device,
        device_name=device_name,
        pid=pid,
        threads=threads,
        started_unix_s=started_unix_s,
        finished_unix_s=finished_unix_s,
        started_monotonic_s=started_monotonic_s,
        finished_monotonic_s=finished_monotonic_s,
        duration_s=max(finished_monotonic_s - started_monotonic_s, 0.0),
        summary=f"✅ {model}: tuned on {hostname} ({device_name}): {outcome}",
    ).to_event()


@event(_S + "task_failed", "error")
@attrs.frozen(kw_only=True)
class TaskFailed(Payload):
    """One model's task ended without a report: it raised, its worker or node died, or cancelled."""

    error_type: str
    reason: str
    tune_run_id: str | None
    hostname: str | None


TASK_FAILED: Final = TaskFailed.event_name


def task_failed(
    sweep_id: str,
    model: str,
    *,
    error_type: str,
    reason: str,
    tune_run_id: str | None = None,
    hostname: str | None = None,
) -> Event:
    """One model's task ended without a report: it raised, its worker or node died, or cancelled."""
    return TaskFailed(
        run_id=sweep_id,
        module_name=model,
        error_type=error_type,
        reason=reason,
        tune_run_id=tune_run_id,
        hostname=hostname,
        summary=f"❌ {model}: {error_type}: {reason}",
    ).to_event()


@event(_S + "finished", "info")
@attrs.frozen(kw_only=True)
class SweepFinished(Payload):
    """The sweep ended: which models have a report and which failed (error level when any did)."""

    finished_models: list[str]
    failed_models: list[str]
    duration_s: float = attrs.field(metadata=_MIN0)


SWEEP_FINISHED: Final = SweepFinished.event_name


def sweep_finished(
    sweep_id: str,
    sweep_name: str,
    *,
    finished: Sequence[str],
    failed: Sequence[str],
    duration_s: float,
) -> Event:
    """The sweep ended: which models have a report and which failed (cancelled ones included)."""
    return SweepFinished(
        run_id=sweep_id,
        module_name=sweep_name,
        finished_models=list(finished),
        failed_models=list(failed),
        duration_s=duration_s,
        summary=f"🏁 Sweep {sweep_name}: {len(finished)} done, {len(failed)} failed"
        + (f" ({', '.join(failed)})" if failed else "")
        + f" in {duration_s:.1f}s",
    ).to_event("error" if failed else "info")
