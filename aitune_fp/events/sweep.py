"""The builders of a sweep's own events (``aitune-fp sweep``): started, each task, finished.

``run_id`` is the sweep's id and ``module_name`` the model entry (the sweep's name for
``started`` / ``finished``); ingest builds no run of them.
"""

from __future__ import annotations

from collections.abc import Sequence

from aitune_fp.events.names import (
    SWEEP_FINISHED,
    SWEEP_STARTED,
    TASK_FAILED,
    TASK_FINISHED,
    Event,
    _event,
)

__all__ = ["sweep_finished", "sweep_started", "task_failed", "task_finished"]


def sweep_started(
    sweep_id: str, sweep_name: str, *, executor: str, models: Sequence[str], skipped: Sequence[str]
) -> Event:
    """A sweep begins: which models it will run and which ``--resume`` skips."""
    return _event(
        SWEEP_STARTED,
        "info",
        sweep_id,
        sweep_name,
        executor=executor,
        models=list(models),
        skipped_models=list(skipped),
        summary=f"🧹 Sweep {sweep_name}: {len(models)} model(s) on {executor}"
        + (f", {len(skipped)} already done" if skipped else ""),
    )


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
    return _event(
        TASK_FINISHED,
        "info",
        sweep_id,
        model,
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
    )


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
    return _event(
        TASK_FAILED,
        "error",
        sweep_id,
        model,
        error_type=error_type,
        reason=reason,
        tune_run_id=tune_run_id,
        hostname=hostname,
        summary=f"❌ {model}: {error_type}: {reason}",
    )


def sweep_finished(
    sweep_id: str,
    sweep_name: str,
    *,
    finished: Sequence[str],
    failed: Sequence[str],
    duration_s: float,
) -> Event:
    """The sweep ended: which models have a report and which failed (cancelled ones included)."""
    return _event(
        SWEEP_FINISHED,
        "error" if failed else "info",
        sweep_id,
        sweep_name,
        finished_models=list(finished),
        failed_models=list(failed),
        duration_s=duration_s,
        summary=f"🏁 Sweep {sweep_name}: {len(finished)} done, {len(failed)} failed"
        + (f" ({', '.join(failed)})" if failed else "")
        + f" in {duration_s:.1f}s",
    )
