"""The end of a tune: the strategy's pick (validated if new) and its ``selected`` event."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from aitune_fp.core.report import Outcome
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.events.sending import info_enabled
from aitune_fp.events.validation import Selected
from aitune_fp.pipeline.stages import Arena
from aitune_fp.pipeline.values import NoValidBackendError, candidate_folder, describe
from aitune_fp.pipeline.vetting import vet
from aitune_fp.pipeline.workers import WorkerBackend, adopt, soaked


@attrs.frozen
class Final:
    """How the tune ends: what it hands back, and the outcome (and reason) ``finished`` says.

    ``error``: what the tune raises once finished (nothing valid and no eager to hand back).
    """

    backend: Any
    outcome: Outcome
    description: str | None = None
    reason: str | None = None
    error: Exception | None = None


def conclude(
    arena: Arena,
    backend: Any,
    validated: Sequence[tuple[Any, PerformanceValidationResult | None]],
) -> Final:
    """Validate the strategy's pick if it did not come through the pipeline (``validated``)."""
    if backend is None:
        return Final(None, "passthrough", reason="the strategy returned no backend")
    if backend is arena.baseline:
        return select(arena, backend, None)
    for seen, result in validated:
        if seen is backend:
            if isinstance(seen, WorkerBackend):  # chosen: now it may run here (else eager)
                built, restored, how = adopt(arena, seen)
                if built is None:  # what its failed hand-back changed is named all the same
                    return _eager_instead(arena, restored)
                return select(arena, built, result, restored=restored, handed_back=how)
            if not soaked(arena, backend):
                return _eager_instead(arena)
            return select(arena, backend, result)
    description = describe(backend)
    folder = candidate_folder(arena.target.cache_dir, backend, description)
    outcome = vet(arena, backend, description, folder)
    if outcome.ok:
        return select(arena, backend, outcome.result)
    if arena.baseline is None:
        error = NoValidBackendError(arena.target.name, [outcome])
        return Final(None, "error", reason="no valid backend and no eager baseline", error=error)
    return select(arena, arena.baseline, None)


def _eager_instead(arena: Arena, restored: tuple[str, ...] = ()) -> Final:
    """Eager, handed back instead of a chosen candidate that failed its last check."""
    if arena.baseline is None:
        reason = "the chosen backend failed its last check, no eager"
        return Final(None, "error", reason=reason, error=NoValidBackendError(arena.target.name, []))
    return select(arena, arena.baseline, None, restored=restored)


def select(
    arena: Arena,
    backend: Any,
    result: PerformanceValidationResult | None,
    *,
    restored: tuple[str, ...] = (),
    handed_back: str = "",
) -> Final:
    """Emit ``selected`` for ``backend``, with what its hand-back changed and how it came back."""
    is_baseline = backend is arena.baseline
    description = describe(backend)
    event = Selected.of(
        arena.run_id,
        arena.target.name,
        backend_description=description,
        is_baseline=is_baseline,
        result=result,
        baseline_throughput=None if arena.opened is None else arena.opened.throughput,
        info_on=info_enabled(),
        restored=restored,
        handed_back=handed_back,
    )
    arena.emit(event)
    return Final(backend, "baseline" if is_baseline else "candidate", description)
