"""One candidate after its build: correctness against eager, then timing; losers released."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from aitune_fp.backends.base import BUILD_LOG_NAME
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.core.verdict import SpeedupDecision
from aitune_fp.events.candidates import CandidateMeasured, CandidateRejected, CorrectnessChecked
from aitune_fp.events.validation import Look
from aitune_fp.inputs import as_sample
from aitune_fp.measure.statistical import measure_throughput_steady
from aitune_fp.pipeline.stages import (
    Arena,
    Step,
    call_deadline,
    check_closeness,
    failure_of,
    measure,
    release,
)
from aitune_fp.pipeline.values import (
    PROFILING_LOG_NAME,
    CandidateOutcome,
    append_failure_log,
    candidate_folder,
    infer_of,
)
from aitune_fp.profiling.workers import Worker


def vet(arena: Arena, built: Any, description: str, folder: Path) -> CandidateOutcome:
    """Correctness, then (validating) the timed comparison; a loser is released."""
    t = arena.target
    log = folder / BUILD_LOG_NAME
    try:
        arena.phase(description, "correctness")
        try:
            arena.heldout()  # the held-out draw (kept once made) fails this candidate, if at all
            arena.unchanged()
            what = f"the correctness check of {description}"
            with _guarded(arena, built, what):
                mismatch = check_closeness(arena, built)
        except Exception as exc:
            return _failed(arena, built, description, folder, exc, "correctness")
        if mismatch is not None:
            arena.emit(CorrectnessChecked.of(arena.run_id, t.name, description, mismatch))
        # plain, or diagnostic without eager: nothing to time, or nothing to compare with
        if not arena.gated or (arena.baseline is None and not arena.decides):
            return CandidateOutcome(description, built, mismatch=mismatch)
        arena.phase(description, "measure")
        try:
            with _guarded(arena, built, f"the timing of {description}"):
                result = _timed(arena, built, description, mismatch)
        except Exception as exc:
            return _failed(arena, built, description, folder, exc, "timing")
    except BaseException:  # interrupted: let the candidate go, then propagate
        release(t, built, log)
        raise
    if not result.passed and arena.decides:
        release(t, built, log)
        return CandidateOutcome(
            description,
            None,
            result=result,
            reason=result.reason or result.verdict,
            mismatch=mismatch,
        )
    return CandidateOutcome(description, built, result=result, mismatch=mismatch)


def _failed(
    arena: Arena, built: Any, description: str, folder: Path, exc: Exception, step: Step
) -> CandidateOutcome:
    """A stage failed: its log written, the candidate released, the failure recorded."""
    f = failure_of(exc, step)
    return arena.failed(
        description, f.stage, exc, folder / f.log_name, heading=f.heading, built=built
    )


def _guarded(arena: Arena, built: Any, what: str) -> contextlib.AbstractContextManager[Any]:
    """A step's deadline per call: a worker bounds its own calls, else the watchdog does."""
    if isinstance(infer_of(built), Worker):
        return contextlib.nullcontext()
    return per_call_step(arena, what)


def per_call_step(arena: Arena, what: str) -> contextlib.AbstractContextManager[Any]:
    """The watchdog on a step here, per call: a slow step still completing calls is not hung."""
    deadline, note = call_deadline(arena.config, arena.latencies)
    return arena.watchdog.step(what, deadline, per_call=True, note=note)


def _timed(
    arena: Arena, built: Any, description: str, mismatch: Mismatch | None
) -> PerformanceValidationResult:
    """The timing stage, its looks and result emitted; a model changed meanwhile voids it."""
    start = time.perf_counter()
    config = arena.config

    def on_look(n: int, decision: SpeedupDecision) -> None:
        arena.emit(
            Look(
                run_id=arena.run_id,
                module_name=arena.target.name,
                backend_description=description,
                n_pairs=n,
                max_pairs=config.max_pairs,
                verdict=decision.verdict,
                estimate=decision.speedup,
                ci_low=decision.ci_low,
                ci_high=decision.ci_high,
                held_back=decision.held_back,
            ).to_event()
        )

    result = measure(arena, built, description, mismatch, on_look)
    arena.unchanged()  # while timing: a result that cannot stand
    name, duration = arena.target.name, time.perf_counter() - start
    measured = CandidateMeasured(
        run_id=arena.run_id, module_name=name, result=result, duration_s=duration
    )
    arena.emit(measured.to_event())
    if not result.passed:
        arena.emit(CandidateRejected.of(arena.run_id, name, result))
    return result


def rank(arena: Arena, outcome: CandidateOutcome) -> float | None:
    """How good a passing candidate is: gated, its speedup; plain, its throughput; or None."""
    result = outcome.result
    if result is not None:
        return result.estimate if result.estimate is not None else result.speedup
    t = arena.target
    try:
        size = t.graph_spec.get_max_batch_size()
        batch = t.graph_spec.make_batch(as_sample(t.data[0]), size)
        throughput, _ = measure_throughput_steady(
            infer_of(outcome.backend), batch, size, arena.config, timer=arena.timer_on(batch)
        )
    except Exception as exc:
        folder = candidate_folder(t.cache_dir, outcome.backend, outcome.description)
        path = folder / PROFILING_LOG_NAME
        append_failure_log(path, "Backend profiling failed", exc)
        release(t, outcome.backend, path)
        return None
    return throughput


def recheck(arena: Arena, outcome: CandidateOutcome) -> bool:
    """Whether a candidate run outside the gate is still correct; recorded and released if not."""
    try:
        with _guarded(arena, outcome.backend, f"the re-check of {outcome.description}"):
            check_closeness(arena, outcome.backend)
        arena.unchanged()
    except Exception as exc:
        folder = candidate_folder(arena.target.cache_dir, outcome.backend, outcome.description)
        _failed(arena, outcome.backend, outcome.description, folder, exc, "recheck")
        return False
    return True
