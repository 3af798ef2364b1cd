"""The :class:`TuneSession` (one tune call as an explicit value) and the active session."""

from __future__ import annotations

import contextvars
import random
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import attrs
import torch

from aitune_fp.backends.base import BUILD_LOG_NAME, BackendBase
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.messages import one_line
from aitune_fp.core.report import CandidateFailure, Outcome, Stage, TuneReport
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.correctness.closeness import Closeness
from aitune_fp.errors import (
    CandidateHungError,
    InvalidStateError,
)
from aitune_fp.events.candidates import CandidateFailed
from aitune_fp.events.kinds import Event, fold, new_run_id
from aitune_fp.events.sending import emit as emit_event
from aitune_fp.events.validation import Disabled, EvalMode, Finished
from aitune_fp.inputs import Sample
from aitune_fp.measure.rules import rule_for
from aitune_fp.pipeline.baseline import (
    BaselineFailed,
    measured,
    open_eager,
    operating_point,
    started,
)
from aitune_fp.pipeline.ending import conclude
from aitune_fp.pipeline.stages import Arena, Arm, Guards, HereArm, build_failure, checked_inputs
from aitune_fp.pipeline.values import (
    BUILD,
    CandidateOutcome,
    NoValidBackendError,
    Opened,
    TuneTarget,
    ValidationOptions,
    append_failure_log,
    describe,
    failure_reason,
    infer_of,
)
from aitune_fp.pipeline.vetting import vet
from aitune_fp.pipeline.workers import EagerStart, WorkerArm, isolation_of, start_eager
from aitune_fp.profiling import stops
from aitune_fp.profiling.interference import WorkerGroup
from aitune_fp.profiling.placement import moving
from aitune_fp.profiling.watchdog import Watchdog

_ACTIVE: contextvars.ContextVar[TuneSession | None] = contextvars.ContextVar(
    "aitune_fp_session", default=None
)


def active_session(module: torch.nn.Module) -> TuneSession | None:
    """The validating session tuning ``module`` in this context, if any."""
    session = _ACTIVE.get()
    return session if session is not None and session.target.module is module else None


class TuneSession:
    """One tune call: the eager baseline, the gate, the candidate pipeline and what they found.

    ``decides=False`` (AITune's diagnostic mode) measures all candidates, releasing none as slow.
    """

    def __init__(
        self,
        target: TuneTarget,
        options: ValidationOptions | None,
        *,
        strategy: str,
        closeness: Closeness | None = None,
        decides: bool = True,
        guards: Guards | None = None,
    ) -> None:
        """Start a session for ``target``; ``options=None`` makes it plain (not validating).

        ``guards``: taken by a driver before it ran any candidate code here (else at open or run).
        """
        self.target = target
        self.options = options
        self.strategy = strategy
        if closeness is None and options is not None:
            closeness = options.closeness
        self.closeness = closeness if closeness is not None else Closeness()
        self.decides = decides
        self.gated = options is not None and options.enabled
        self._emits = options is not None  # a disabled wrapper still says so, and finishes
        self.run_id = new_run_id()
        self.started = time.perf_counter()
        self.validated: list[tuple[Any, PerformanceValidationResult | None]] = []
        self.opened: Opened | None = None  # eager, built and measured at open
        #: Where candidates run until chosen, and why in process when not in workers.
        self.isolation, self.isolation_note = isolation_of(options, target)
        self.workers = WorkerGroup()
        self.eager_start = EagerStart(None)  # eager's worker (process isolation), processes' states
        self.baseline_error: str | None = None
        config = options.profiling_config if options is not None else ProfilingConfig()
        self.rule = rule_for(config)
        self.config = config
        self.batch_size: int | None = None
        self.n_events = 0
        self._outcome: Outcome | None = None
        self.guards = guards  # taken once (driver, open or run), settled after eager's
        self.candidate: str | None = None  # the candidate in the pipeline now
        self._closed = False  # set once finished is emitted
        self.folded = TuneReport(  # what is known before any event; events fold in the rest
            run_id=self.run_id,
            module_name=target.name,
            strategy=strategy,
            device=str(target.device),
            decision=self.rule.name,
            min_speedup_threshold_percent=(
                None if options is None else options.min_speedup_threshold_percent
            ),
            required_speedup=None if options is None else options.required_speedup,
            disabled=options is not None and not options.enabled,
        )
        self.heldout_seed = random.SystemRandom().randrange(2**32)  # not guessable ahead
        self._heldout_samples: tuple[Sample, ...] | None = None
        stuck = weakref.WeakMethod(self._stuck)  # no cycle: the session is freed with its tune
        self.watchdog = Watchdog(
            grace_s=config.hang_grace_s,
            on_stuck=lambda what, elapsed: None if (f := stuck()) is None else f(what, elapsed),
        )

    # -- events ------------------------------------------------------------------------------
    def emit(self, event: Event, *, always: bool = False) -> None:
        """Emit ``event`` when validating (``always``: even disabled); none after ``finished``."""
        if self._closed:
            return
        if event.payload is not None:  # the report, folded as ingest folds a log
            self.folded = fold(self.folded, event.payload)
        if self.gated or (always and self._emits):
            self.n_events += 1
            emit_event(event)

    @property
    def baseline(self) -> Any | None:
        """The eager baseline (built or adopted at open); None before, or when it failed."""
        return None if self.opened is None else self.opened.baseline

    def arena(self) -> Arena:
        """What candidates are checked and timed against now: the value the stages take."""
        o = self.opened
        arm: Callable[..., Any] | None = self.eager_start.worker  # eager's worker, else its copy
        if arm is None and o is not None:
            arm = moving(infer_of(o.eager), o.eager)  # its weights move now and then
        return Arena(
            run_id=self.run_id,
            target=self.target,
            config=self.config,
            closeness=self.closeness,
            rule=self.rule,
            gate=None if self.options is None else self.options.gate,
            gated=self.gated,
            decides=self.decides,
            opened=o,
            eager_arm=arm,
            batch_size=self.batch_size,
            heldout=self.heldout,
            seed=self.heldout_seed,
            clock=None if self.options is None else self.options.timer,
            baseline_error=self.baseline_error,
            isolation=self.isolation,
            guards=self.guards,
            watchdog=self.watchdog,
            emit=self.emit,
            record=self.record_failure,
        )

    # -- the baseline --------------------------------------------------------------------------
    def open(self, *, baseline: Any = BUILD, batch_size: int | None = None) -> None:
        """Emit ``started``, then build (or adopt: ``baseline``, AITune's) and measure eager."""
        assert self.options is not None
        try:
            self.batch_size, self.config = operating_point(
                self.options, self.target, self.isolation, batch_size
            )
        finally:
            self.emit(started(self.arena(), self.strategy, self.isolation_note))
        if self.guards is None:  # taken once: a driver may have taken the model before (run)
            self.guards = Guards.take(self.target)
        guards = self.guards
        if guards.was_training:
            n = len(guards.was_training)
            mode = EvalMode(run_id=self.run_id, module_name=self.target.name, n_training_modules=n)
            self.emit(mode.to_event())
        opened = open_eager(self.arena(), baseline, self.strategy)
        if isinstance(opened, BaselineFailed):  # an eager that cannot be measured is no fallback
            self.baseline_error, self.opened = opened.error, None
            self.emit(opened.event)
            return
        self.opened, self._heldout_samples = opened, opened.heldout
        self.closeness = opened.closeness
        self.guards = guards.settled(self.target)  # what eager's first calls set up is the state
        if self.isolation == "process":
            eager = start_eager(self.arena(), self.workers)  # before any candidate code ran
            self.eager_start = eager
            if eager.failed is not None:  # eager stays on its copy, the candidates here too
                self.isolation, self.isolation_note = "in_process", eager.failed
        where = "process" if self.isolation == "process" else opened.copied
        self.emit(measured(self.arena(), opened, where))

    # -- the candidate pipeline ----------------------------------------------------------------
    def try_candidate(
        self, backend: Any, *, build: Callable[[Any], Any] | None = None
    ) -> CandidateOutcome:
        """Build a copy of ``backend``, check it and, when validating, gate it; never raises."""
        t = self.target
        if self._outcome is not None:
            raise InvalidStateError(
                f"the tune of {t.name!r} has ended ({self._outcome}); no candidate is tried after"
            )
        arena = self.arena()
        arm: Arm = (  # process isolation: nothing of the candidate runs here
            WorkerArm(arena, self.eager_start, self.workers, backend, build)
            if self.eager_start.worker is not None
            else HereArm(t, backend, build)
        )
        start = 0.0
        try:
            arm.open()  # a worker's start is not the candidate's build time (it reads as a tie)
            start = time.perf_counter()
            arena.phase(arm.description, "build")
            self.candidate = arm.description
            with self.watchdog.step(f"the build of {arm.description}", self.config.build_timeout_s):
                built = arm.build()
        except Exception as exc:
            arm.abandon()
            stage, cause = build_failure(exc)
            # aitune_fp's backends write their own build log
            heading = "" if isinstance(backend, BackendBase) else f"Backend failed at {stage}"
            log = arm.folder / BUILD_LOG_NAME
            return arena.failed(arm.description, stage, cause, log, heading=heading)
        build_s = time.perf_counter() - start
        outcome = vet(arena, built, arm.description, arm.folder)
        outcome = arm.settle(attrs.evolve(outcome, build_s=build_s))
        if self.gated and outcome.backend is not None:  # kept: the strategy may pick it
            self.validated.append((outcome.backend, outcome.result))
        return outcome

    def heldout(self) -> tuple[Sample, ...]:
        """The tune's held-out samples, derived once (``stages.checked_inputs``)."""
        if self._heldout_samples is None:
            limits = {} if self.opened is None else self.opened.id_limits
            self._heldout_samples = checked_inputs(self.arena(), self.heldout_seed, limits)
        return self._heldout_samples

    def _stuck(self, what: str, elapsed_s: float) -> None:
        """The watchdog's report of a stuck step (its thread): record it hung, emit ``finished``."""
        exc = CandidateHungError(
            f"{what} is still running {elapsed_s:.0f} s after it started and could not be "
            "interrupted (stuck outside Python code)"
        )
        self.record_failure(self.candidate or self.strategy, "hung", exc, None)
        self.finish("error", None, reason=f"CandidateHungError: {exc}")

    def record_failure(
        self, description: str, stage: Stage, exc: BaseException, log_path: str | None
    ) -> CandidateFailure:
        """Record a failed candidate (or strategy) and emit its warning event."""
        failure = CandidateFailure.from_exception(description, stage, exc, log_path)
        if self._closed:  # the tune has ended (a hung step): nothing more is recorded
            return failure
        fields = attrs.asdict(failure)
        self.emit(
            CandidateFailed(run_id=self.run_id, module_name=self.target.name, **fields).to_event()
        )
        return failure

    def fallback(self, outcomes: Sequence[CandidateOutcome]) -> Any:
        """The eager baseline when nothing passed; NoValidBackendError when there is none."""
        if self.baseline is None:
            raise NoValidBackendError(self.target.name, outcomes)
        return self.baseline

    # -- the whole tune ------------------------------------------------------------------------
    def run(
        self, call: Callable[[], Any], *, open_first: bool = True, batch_size: int | None = None
    ) -> Any:
        """Run a strategy's own tune (``call``) in this session, ``started`` to ``finished``."""
        try:
            if not self.gated:  # the one event of a disabled tune
                off = Disabled(
                    run_id=self.run_id, module_name=self.target.name, strategy=self.strategy
                )
                self.emit(off.to_event(), always=True)
                backend = call()
                self.finish(
                    "candidate" if backend is not None else "passthrough",
                    None if backend is None else describe(backend),
                )
                return backend
            if open_first:
                self.open(batch_size=batch_size)
            else:  # the driver opens later (AITune's _pre_tune): the model is taken now
                self.guards = self.guards or Guards.take(self.target)
            with self.active(), stops.counting():  # a stop of this process: a block timed again
                try:
                    backend = call()
                except Exception as exc:  # the strategy's own failure, logged and recorded
                    log = self.target.cache_dir / "strategy_error.log"
                    path = append_failure_log(log, f"Strategy {self.strategy} failed", exc)
                    self.record_failure(self.strategy, "strategy", exc, path)
                    self.finish("error", None, reason=f"{type(exc).__name__}: {one_line(exc)}")
                    raise
            # the strategy's pick, validated if it did not come through the pipeline
            final = conclude(self.arena(), backend, self.validated)
            self.finish(final.outcome, final.description, reason=final.reason)
            if final.error is not None:
                raise final.error
            return final.backend
        except BaseException as exc:  # interrupted, or failed while concluding: close the run
            if isinstance(exc, Exception):
                self.finish("error", None, reason=failure_reason(exc))
                raise
            said = one_line(exc) if str(exc).strip() else ""  # "Terminated: SIGTERM", say
            reason = f"interrupted ({type(exc).__name__}{': ' + said if said else ''})"
            self.finish("interrupted", None, reason=reason)
            raise

    # -- the end of the tune -------------------------------------------------------------------
    def finish(
        self, outcome: Outcome, description: str | None, *, reason: str | None = None
    ) -> None:
        """Give the model back as it came, then emit the finished event (once)."""
        if self._outcome is not None:
            return
        for worker in self.workers.live():  # eager's and any candidate's not chosen
            worker.close()
        self.eager_start = EagerStart(None)
        if self.guards is not None:  # undo any change the tune left on the model, and its mode
            changed = self.guards.changed()
            if changed is not None:
                self.record_failure(self.strategy, "strategy", changed, None)
            for m in self.guards.was_training:
                m.training = True
        self._outcome = outcome
        folded = self.folded
        candidates = folded.candidate_failures
        self.emit(
            Finished(
                run_id=self.run_id,
                module_name=self.target.name,
                outcome=outcome,
                backend_description=description,
                n_candidates=len(folded.results) + len(candidates),
                n_measured=len(folded.results),
                n_passed=sum(r.passed for r in folded.results),
                n_failed=len(candidates),
                duration_s=time.perf_counter() - self.started,
                reason=reason,
            ).to_event(),
            always=True,
        )
        self._closed = True

    def report(self) -> TuneReport:
        """The frozen report so far: the fold of every event emitted, as ``ingest`` folds them."""
        folded = self.folded
        running = folded.outcome is None
        duration = time.perf_counter() - self.started if running else folded.duration_s
        return attrs.evolve(folded, n_events=self.n_events, duration_s=duration)

    @contextmanager
    def active(self) -> Iterator[TuneSession]:
        """Make this session the one the public helpers find while the strategy runs."""
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)
