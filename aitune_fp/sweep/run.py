"""Run a sweep: one tune task per model, one JSON-lines log for them all, a summary at the end."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import attrs

from aitune_fp.events.names import new_run_id
from aitune_fp.events.sending import open_log, to_record, write_records
from aitune_fp.events.sweep import TASK_FINISHED, SweepFinished, SweepStarted
from aitune_fp.sweep.local_executor import LocalExecutor
from aitune_fp.sweep.spec import SweepSpec
from aitune_fp.sweep.task import (
    CANCELLED,
    SweepTask,
    TaskOutcome,
    failed_outcome,
    make_tasks,
)

__all__ = [
    "Executor",
    "ModelStatus",
    "SweepResult",
    "completed_models",
    "run_sweep",
]


class Executor(Protocol):
    """Runs tasks, handing each outcome to ``on_outcome`` in completion order (Ctrl-C cancels)."""

    name: str

    def run(self, tasks: Sequence[SweepTask], on_outcome: Callable[[TaskOutcome], None]) -> None:
        """Run ``tasks``; call ``on_outcome`` once per task that ends."""


@attrs.frozen(kw_only=True)
class ModelStatus:
    """How one model of the sweep ended: done (with its tune's run id), failed, or skipped."""

    model: str
    state: str  # "finished", "failed", "skipped" (--resume: finished in an earlier sweep)
    tune_run_id: str | None = None
    error_type: str | None = None
    reason: str | None = None
    hostname: str | None = None


@attrs.frozen(kw_only=True)
class SweepResult:
    """The sweep's outcome per model (file order), its log, and whether Ctrl-C stopped it."""

    sweep_id: str
    log_path: str
    executor: str
    statuses: tuple[ModelStatus, ...]
    duration_s: float
    interrupted: bool = False
    #: Where the builds went: ``cache_dir``, the temp folder made for them, or None when no
    #: model was left to run (nothing is created then).
    cache_dir: str | None = None
    #: ``--resume``: lines of the log that were not events (a line cut mid-event), skipped.
    skipped_lines: tuple[tuple[int, str], ...] = ()

    @property
    def failed(self) -> tuple[str, ...]:
        """Models that ended without a report."""
        return tuple(s.model for s in self.statuses if s.state == "failed")


def completed_models(path: str, skipped: list[tuple[int, str]] | None = None) -> dict[str, str]:
    """Models with a finished task in the log at ``path``: model -> its latest tune run id.

    ``skipped`` collects the lines that are not events (a line cut mid-event): number and why.
    """
    from aitune_fp.events.ingest import read_events
    from aitune_fp.events.ingest.values import BadLine

    done: dict[str, str] = {}
    if not os.path.exists(path):
        return done
    for item in read_events(path):
        if isinstance(item, BadLine):
            if skipped is not None:
                skipped.append((item.line_no, item.reason))
        elif item.event == TASK_FINISHED:
            done[str(item.fields["module_name"])] = str(item.fields["tune_run_id"])
    return done


def _status(outcome: TaskOutcome) -> ModelStatus:
    last = outcome.records[-1] if outcome.records else {}
    return ModelStatus(
        model=outcome.model,
        state="finished" if outcome.ok else "failed",
        tune_run_id=last.get("tune_run_id"),
        error_type=None if outcome.ok else last.get("error_type"),
        reason=None if outcome.ok else last.get("reason"),
        hostname=last.get("hostname"),
    )


def run_sweep(
    spec: SweepSpec,
    *,
    log_path: str,
    executor: Executor | None = None,
    resume: bool = False,
    cache_dir: str | None = None,
    on_outcome: Callable[[TaskOutcome], None] | None = None,
) -> SweepResult:
    """Run every model of ``spec`` (``resume``: not those finished); each ends in the log."""
    executor = executor or LocalExecutor()
    start = time.time()
    sweep_id = new_run_id()
    skipped_lines: list[tuple[int, str]] = []
    done = completed_models(log_path, skipped_lines) if resume else {}
    todo = [m for m in spec.models if m.name not in done]
    cache = cache_dir or (tempfile.mkdtemp(prefix="aitune_fp-sweep-") if todo else None)
    todo_names = {m.name for m in todo}
    tasks = (
        [t for t in make_tasks(spec, sweep_id, cache) if t.model.name in todo_names]
        if cache is not None
        else []
    )
    statuses: dict[str, ModelStatus] = {
        name: ModelStatus(model=name, state="skipped", tune_run_id=run_id)
        for name, run_id in done.items()
        if name in spec.model_names()
    }
    interrupted = False
    by = ""
    with open_log(log_path) as handle:
        write_records(
            handle,
            [
                to_record(
                    SweepStarted(
                        run_id=sweep_id,
                        module_name=spec.name,
                        executor=executor.name,
                        models=[t.model.name for t in tasks],
                        skipped_models=sorted(statuses),
                    ).to_event()
                )
            ],
        )

        def accept(outcome: TaskOutcome) -> None:
            if outcome.model in statuses:
                return  # a second outcome for one model (cannot happen; keep the first)
            write_records(handle, outcome.records)
            statuses[outcome.model] = _status(outcome)
            if on_outcome is not None:
                on_outcome(outcome)

        broken: Exception | None = None
        try:
            executor.run(tasks, accept)
        except KeyboardInterrupt as exc:  # Ctrl-C, or a signal an application raises as one
            interrupted = True
            by = str(exc) or "Ctrl-C"
        except Exception as exc:  # the executor itself failed (no cluster, no slot): record it
            broken = exc
        for task in tasks:
            if task.model.name not in statuses:
                if interrupted:
                    kind = CANCELLED
                    why = f"cancelled: the sweep was interrupted ({by}) before this model finished"
                elif broken is not None:
                    kind = type(broken).__name__
                    why = f"the {executor.name} executor failed: {broken}"
                else:
                    kind, why = "Lost", "the executor returned no outcome for this model"
                accept(failed_outcome(task, kind, why))
        ordered = tuple(statuses[m.name] for m in spec.models if m.name in statuses)
        duration = time.time() - start
        write_records(
            handle,
            [
                to_record(
                    SweepFinished(
                        run_id=sweep_id,
                        module_name=spec.name,
                        finished_models=[s.model for s in ordered if s.state != "failed"],
                        failed_models=[s.model for s in ordered if s.state == "failed"],
                        duration_s=duration,
                    ).to_event()
                )
            ],
        )
    return SweepResult(
        sweep_id=sweep_id,
        log_path=log_path,
        executor=executor.name,
        statuses=ordered,
        duration_s=duration,
        interrupted=interrupted,
        cache_dir=cache,
        skipped_lines=tuple(skipped_lines),
    )
