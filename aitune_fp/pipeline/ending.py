"""The end of a tune: the strategy's pick (validated if new), ``selected`` and the report."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import attrs

from aitune_fp.core.report import TuneReport
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.events.sending import info_enabled
from aitune_fp.events.validation import selected
from aitune_fp.pipeline.values import (
    NoValidBackendError,
    describe,
)
from aitune_fp.pipeline.workers import WorkerBackend, adopt, soaked

if TYPE_CHECKING:
    from aitune_fp.pipeline.tune import TuneSession


def conclude(session: TuneSession, backend: Any) -> Any:
    """Validate the strategy's pick if it did not come through the pipeline; report it."""
    if backend is None:
        session.finish("passthrough", None, reason="the strategy returned no backend")
        return None
    if backend is session.baseline:
        select(session, backend, None)
        return backend
    for seen, result in session.validated:
        if seen is backend:
            if isinstance(seen, WorkerBackend):  # chosen: now it may run here
                return _adopted(session, seen, result)
            if not soaked(session, backend):
                return _eager_instead(session)
            select(session, backend, result)
            return backend
    description = describe(backend)
    outcome = session.vet(backend, description, session.folder(backend, description))
    if outcome.ok:
        select(session, backend, outcome.result)
        return backend
    if session.baseline is None:
        session.finish("error", None, reason="no valid backend and no eager baseline")
        raise NoValidBackendError(session.target.name, [outcome])
    select(session, session.baseline, None)
    return session.baseline


def _adopted(
    session: TuneSession, chosen: WorkerBackend, result: PerformanceValidationResult | None
) -> Any:
    """The chosen candidate rebuilt in the user's process; eager when that rebuild fails."""
    built, restored, how = adopt(session, chosen)
    if built is not None:
        select(session, built, result, restored=restored, handed_back=how)
        return built
    return _eager_instead(session)


def _eager_instead(session: TuneSession) -> Any:
    """Eager, handed back instead of a chosen candidate that failed its last check."""
    if session.baseline is None:
        session.finish("error", None, reason="the chosen backend failed its last check, no eager")
        raise NoValidBackendError(session.target.name, [])
    select(session, session.baseline, None)
    return session.baseline


def select(
    session: TuneSession,
    backend: Any,
    result: PerformanceValidationResult | None,
    *,
    restored: tuple[str, ...] = (),
    handed_back: str = "",
) -> None:
    """Emit ``selected`` for ``backend``, with what its hand-back changed and how it came back."""
    is_baseline = backend is session.baseline
    description = describe(backend)
    event = selected(
        session.run_id,
        session.target.name,
        backend_description=description,
        is_baseline=is_baseline,
        result=result,
        baseline_throughput=session.baseline_throughput,
        info_on=info_enabled(),
        restored=restored,
        handed_back=handed_back,
    )
    session.emit(event)
    session.finish("baseline" if is_baseline else "candidate", description)


def report_of(session: TuneSession) -> TuneReport:
    """The frozen report so far: the fold of every event emitted, as ``ingest`` folds them."""
    folded = session.folded
    return attrs.evolve(
        folded,
        n_events=session.n_events,
        duration_s=(
            folded.duration_s
            if folded.outcome is not None
            else time.perf_counter() - session.started
        ),
    )
