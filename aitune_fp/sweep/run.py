"""Run a sweep: one tune task per model, one JSON-lines log for them all, a summary as values."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import attrs

from aitune_fp.core.messages import headline_speedup
from aitune_fp.core.report import TuneReport
from aitune_fp.events.kinds import new_run_id
from aitune_fp.events.sending import open_log, to_record, write_records
from aitune_fp.events.sweep import TASK_FINISHED, SweepFinished, SweepStarted
from aitune_fp.sweep.spec import SweepSpec
from aitune_fp.sweep.task import (
    CANCELLED,
    LocalExecutor,
    SweepTask,
    TaskOutcome,
    failed_outcome,
    make_tasks,
)

__all__ = [
    "Executor",
    "ModelStatus",
    "SummaryCell",
    "SweepResult",
    "SweepSummary",
    "completed_models",
    "run_sweep",
    "summarize_sweep",
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
    from aitune_fp.events.ingest import BadLine, read_events

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
    todo = {m.name for m in spec.models if m.name not in done}
    cache = cache_dir or (tempfile.mkdtemp(prefix="aitune_fp-sweep-") if todo else None)
    tasks = [t for t in make_tasks(spec, sweep_id, cache) if t.model.name in todo] if cache else []
    statuses: dict[str, ModelStatus] = {
        name: ModelStatus(model=name, state="skipped", tune_run_id=run_id)
        for name, run_id in done.items()
        if name in {m.name for m in spec.models}
    }
    by = ""  # what interrupted the sweep (empty: nothing)
    with open_log(log_path) as handle:
        ids = {"run_id": sweep_id, "module_name": spec.name}
        models = [t.model.name for t in tasks]
        started = SweepStarted(**ids, executor=executor.name, models=models, skipped_models=sorted(statuses))  # fmt: skip
        write_records(handle, [to_record(started.to_event())])

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
            by = str(exc) or "Ctrl-C"
        except Exception as exc:  # the executor itself failed (no cluster, no slot): record it
            broken = exc
        if by:
            kind = CANCELLED
            why = f"cancelled: the sweep was interrupted ({by}) before this model finished"
        elif broken is not None:
            kind, why = type(broken).__name__, f"the {executor.name} executor failed: {broken}"
        else:
            kind, why = "Lost", "the executor returned no outcome for this model"
        for task in tasks:
            if task.model.name not in statuses:
                accept(failed_outcome(task, kind, why))
        ordered = tuple(statuses[m.name] for m in spec.models if m.name in statuses)
        duration = time.time() - start
        failed = [s.model for s in ordered if s.state == "failed"]
        kept = [s.model for s in ordered if s.state != "failed"]
        finished = SweepFinished(**ids, finished_models=kept, failed_models=failed, duration_s=duration)  # fmt: skip
        write_records(handle, [to_record(finished.to_event())])
    return SweepResult(
        sweep_id=sweep_id,
        log_path=log_path,
        executor=executor.name,
        statuses=ordered,
        duration_s=duration,
        interrupted=bool(by),
        cache_dir=cache,
        skipped_lines=tuple(skipped_lines),
    )


@attrs.frozen(kw_only=True)
class SummaryCell:
    """One model × backend: the verdict, the headline estimate and its interval (None: none)."""

    model: str
    backend: str
    verdict: str
    estimate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    note: str = ""


@attrs.frozen(kw_only=True)
class SweepSummary:
    """Models (rows, sweep order), backends (columns, first-seen order), cells, failed models."""

    models: tuple[str, ...]
    backends: tuple[str, ...]
    cells: tuple[SummaryCell, ...]
    failed: tuple[ModelStatus, ...]

    def cell(self, model: str, backend: str) -> SummaryCell | None:
        """The cell for ``model`` × ``backend`` (None when that pair has none)."""
        return next((c for c in self.cells if c.model == model and c.backend == backend), None)


def summarize_sweep(
    statuses: Sequence[ModelStatus], reports: Mapping[str, TuneReport]
) -> SweepSummary:
    """The summary of ``statuses``, verdicts from ``reports`` by run id (none: failed)."""
    cells: list[SummaryCell] = []
    failed: list[ModelStatus] = []
    for status in statuses:
        model, report = status.model, reports.get(status.tune_run_id or "")
        if status.state == "failed":
            failed.append(status)
        elif report is None or report.baseline_error:
            kind, why = (
                ("MissingRun", f"run {status.tune_run_id} is not in the log")
                if report is None
                else ("BaselineFailed", report.baseline_error)
            )
            failed.append(attrs.evolve(status, state="failed", error_type=kind, reason=why))
        else:
            for r in report.results:
                verdict = r.verdict or ("faster" if r.passed else "not_faster")
                estimate = headline_speedup(r)
                cells.append(
                    SummaryCell(
                        model=model,
                        backend=r.backend_description,
                        verdict=verdict,
                        estimate=estimate,
                        ci_low=r.ci_low,
                        ci_high=r.ci_high,
                    )
                )
            for f in report.candidate_failures:
                note = f"{f.stage}: {f.error_type}"
                cells.append(
                    SummaryCell(
                        model=model, backend=f.backend_description, verdict="failed", note=note
                    )
                )
    return SweepSummary(
        models=tuple(s.model for s in statuses),
        backends=tuple(dict.fromkeys(c.backend for c in cells)),
        cells=tuple(cells),
        failed=tuple(failed),
    )
