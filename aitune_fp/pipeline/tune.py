"""The :class:`TuneSession` (one tune call as an explicit value) and the active session."""

from __future__ import annotations

import contextlib
import contextvars
import random
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import torch

from aitune_fp.backends.base import BUILD_LOG_NAME, BackendBase
from aitune_fp.backends.support import safe_folder_name
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.messages import one_line
from aitune_fp.core.report import CandidateFailure, Outcome, Stage, TuneReport
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.correctness.closeness import Closeness
from aitune_fp.errors import (
    CandidateHungError,
    InvalidStateError,
)
from aitune_fp.events.candidates import failed as failed_event
from aitune_fp.events.kinds import Event, fold
from aitune_fp.events.names import EagerIsolation, Phase, new_run_id
from aitune_fp.events.sending import emit as emit_event
from aitune_fp.events.validation import disabled as disabled_event
from aitune_fp.events.validation import eval_mode, finished
from aitune_fp.events.validation import phase as phase_event
from aitune_fp.inputs import InputKey, Sample
from aitune_fp.measure.rules import rule_for
from aitune_fp.pipeline.arms import Arm, HereArm
from aitune_fp.pipeline.baseline import (
    BaselineFailed,
    measured,
    open_eager,
    operating_point,
    started,
)
from aitune_fp.pipeline.ending import conclude, report_of
from aitune_fp.pipeline.guarding import Guards
from aitune_fp.pipeline.stages import Arena, build_failure, checked_inputs
from aitune_fp.pipeline.values import (
    BUILD,
    CandidateOutcome,
    ModelChangedError,
    NoValidBackendError,
    ProcessChangedError,
    TuneTarget,
    ValidationOptions,
    append_failure_log,
    candidate_folder,
    describe,
    failure_reason,
    infer_of,
)
from aitune_fp.pipeline.vetting import rank, recheck, vet
from aitune_fp.pipeline.workers import WorkerArm, close_workers, isolation_of, start_eager
from aitune_fp.profiling.interference import WorkerGroup
from aitune_fp.profiling.placement import moving
from aitune_fp.profiling.timers import Timer, timer_for
from aitune_fp.profiling.watchdog import Watchdog
from aitune_fp.profiling.workers import Worker

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
    ) -> None:
        """Start a session for ``target``; ``options=None`` makes it plain (not validating)."""
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
        self.failures: list[CandidateFailure] = []
        self.validated: list[tuple[Any, PerformanceValidationResult | None]] = []
        self.baseline: Any | None = None
        self.eager: Any | None = None  # what eager is timed and referenced on (a private copy)
        self.eager_isolation: EagerIsolation = "private_copy"
        #: Where candidates run until chosen, and why in process when not in workers.
        self.isolation, self.isolation_note = isolation_of(options, target)
        self.workers = WorkerGroup()
        self.eager_worker: Worker | None = None  # eager's worker (process isolation)
        self.os_states: dict[int, tuple[frozenset[int], int]] = {}  # this process's and eager's
        self.baseline_throughput: float | None = None
        self.baseline_latencies: tuple[float, ...] | None = None
        self.baseline_error: str | None = None
        config = options.profiling_config if options is not None else ProfilingConfig()
        self.rule = rule_for(config)
        self.config = config
        self.batch_size: int | None = None
        self.batch: Sample | None = None
        self.n_events = 0
        self._outcome: Outcome | None = None
        self.guards: Guards | None = None  # taken once (take_model), settled after eager's calls
        self.batches: tuple[Sample, ...] = ()  # timed in turn: the batch and held-out ones
        self.reference_outputs: tuple[Any, ...] = ()  # eager's output on each (the spot checks')
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
        #: Per integer input an embedding reads, its table's rows (found on eager at open).
        self.id_limits: dict[InputKey, int] = {}
        stuck = weakref.WeakMethod(self._stuck)  # no cycle: the session is freed with its tune
        self.watchdog = Watchdog(
            grace_s=config.hang_grace_s,
            on_stuck=lambda what, elapsed: None if (f := stuck()) is None else f(what, elapsed),
        )

    @classmethod
    def plain(cls, target: TuneTarget, *, strategy: str = "") -> TuneSession:
        """A session that builds and checks candidates but times nothing and emits nothing."""
        return cls(target, None, strategy=strategy)

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

    def arena(self) -> Arena:
        """What candidates are checked and timed against now: the value the stages take."""
        return Arena(
            target=self.target,
            config=self.config,
            closeness=self.closeness,
            rule=self.rule,
            gate=None if self.options is None else self.options.gate,
            eager=self.eager,
            eager_arm=None if self.eager is None else self.eager_arm,
            batch=self.batch,
            batch_size=self.batch_size,
            batches=self.batches,
            references=self.reference_outputs,
            heldout=self.heldout(),
            seed=self.heldout_seed,
            timer=None if self.batch is None else self.timer,
            baseline_throughput=self.baseline_throughput,
            baseline_latencies=self.baseline_latencies,
            baseline_error=self.baseline_error,
            isolation=self.isolation,
        )

    def phase(self, description: str, phase: Phase) -> None:
        self.emit(
            phase_event(self.run_id, self.target.name, backend_description=description, phase=phase)
        )

    @property
    def timer(self) -> Timer:
        assert self.batch is not None
        return self.timer_on(self.batch)

    def timer_on(self, batch: Sample) -> Timer:
        """The clock for calls on ``batch``: the injected one, else the one for its device."""
        timer = None if self.options is None else self.options.timer
        return timer if timer is not None else timer_for(batch)

    # -- the baseline --------------------------------------------------------------------------
    def open(self, *, baseline: Any = BUILD, batch_size: int | None = None) -> None:
        """Emit ``started``, then build (or adopt: ``baseline``, AITune's) and measure eager."""
        try:
            self.batch_size, self.config = operating_point(self, batch_size)
        finally:
            self.emit(started(self))
        self.take_model()
        assert self.guards is not None
        if self.guards.was_training:
            n = len(self.guards.was_training)
            self.emit(eval_mode(self.run_id, self.target.name, n_training_modules=n))
        opened = open_eager(self, baseline)
        if isinstance(opened, BaselineFailed):  # an eager that cannot be measured is no fallback
            self.baseline_error, self.baseline, self.eager = opened.error, None, None
            self.emit(opened.event)
            return
        self.batch, self.baseline, self.eager = opened.batch, opened.baseline, opened.eager
        self.batches, self.reference_outputs = opened.batches, opened.reference_outputs
        self.id_limits, self._heldout_samples = opened.id_limits, opened.heldout
        self.closeness = opened.closeness
        self.baseline_throughput, self.baseline_latencies = opened.throughput, opened.latencies
        self.eager_isolation = "process" if self.isolation == "process" else opened.copied
        assert self.guards is not None  # again: what eager's first calls set up is the state
        self.guards = self.guards.settled(self.target)
        if self.isolation == "process":
            eager = start_eager(self)  # now: before any candidate code ran anywhere
            self.eager_worker, self.os_states = eager.worker, dict(eager.os_states)
            if eager.failed is not None:  # eager stays on its copy, the candidates here too
                self.isolation, self.isolation_note = "in_process", eager.failed
                self.eager_isolation = opened.copied
        self.emit(measured(self, opened))

    def take_model(self) -> None:
        """Put the model in eval mode and snapshot what the tune must not change (once).

        A driver that runs the model before ``open`` (AITune's ``_pre_tune``) calls it first.
        """
        if self.guards is None:
            self.guards = Guards.take(self.target)

    def model_changed(self) -> ModelChangedError | ProcessChangedError | None:
        """What a candidate changed in the model, the samples or the process (restored)."""
        return None if self.guards is None else self.guards.changed()

    # -- the candidate pipeline ----------------------------------------------------------------
    def try_candidate(
        self, backend: Any, *, build: Callable[[Any], Any] | None = None
    ) -> CandidateOutcome:
        """Build a copy of ``backend``, check it against eager and, when validating, gate it.

        Never raises for a failing candidate (``KeyboardInterrupt``/``SystemExit`` propagate).
        """
        t = self.target
        if self._outcome is not None:
            raise InvalidStateError(
                f"the tune of {t.name!r} has ended ({self._outcome}); no candidate is tried after"
            )
        arm: Arm = (  # process isolation: nothing of the candidate runs here
            WorkerArm(self, backend, build)
            if self.eager_worker is not None
            else HereArm(self, backend, build)
        )
        start = 0.0
        try:
            arm.open()  # a worker's start is not the candidate's build time (it reads as a tie)
            start = time.perf_counter()
            self.phase(arm.description, "build")
            self.candidate = arm.description
            with self.watchdog.step(f"the build of {arm.description}", self.config.build_timeout_s):
                built = arm.build()
        except Exception as exc:
            arm.abandon()
            stage, cause = build_failure(exc)
            log = arm.folder / BUILD_LOG_NAME
            if not isinstance(backend, BackendBase):  # aitune_fp's backends write their own
                append_failure_log(log, f"Backend failed at {stage}", cause)
            return self.failed(arm.description, stage, cause, log)
        build_s = time.perf_counter() - start
        outcome = self.vet(built, arm.description, arm.folder)
        outcome = arm.settle(attrs.evolve(outcome, build_s=build_s))
        if self.gated and outcome.backend is not None:  # kept: the strategy may pick it
            self.validated.append((outcome.backend, outcome.result))
        return outcome

    def vet(self, built: Any, description: str, folder: Path) -> CandidateOutcome:
        """Correctness, then (validating) the timed comparison; a loser is released."""
        return vet(self, built, description, folder)

    def heldout(self) -> tuple[Sample, ...]:
        """The tune's held-out samples, derived once (``stages.checked_inputs``)."""
        if self._heldout_samples is None:
            self._heldout_samples = checked_inputs(
                self.closeness,
                self.target.data,
                self.heldout_seed,
                self.target.graph_spec,
                self.id_limits,
            )
        return self._heldout_samples

    @property
    def deadline(self) -> float:
        """A call's deadline when eager was not timed: ``max_seconds + hang_grace_s``."""
        return self.config.max_seconds + self.config.hang_grace_s

    def _stuck(self, what: str, elapsed_s: float) -> None:
        """The watchdog's report of a stuck step: record the candidate hung, emit ``finished``.

        Runs on the watchdog's thread; a stuck thread that returns later changes nothing.
        """
        exc = CandidateHungError(
            f"{what} is still running {elapsed_s:.0f} s after it started and could not be "
            "interrupted (stuck outside Python code)"
        )
        self.record_failure(self.candidate or self.strategy, "hung", exc, None)
        self.finish("error", None, reason=f"CandidateHungError: {exc}")

    def folder(self, backend: Any, description: str) -> Path:
        """The candidate's folder in the cache dir (:func:`~.values.candidate_folder`)."""
        return candidate_folder(self.target.cache_dir, backend, description)

    def folder_of(self, name: str) -> Path:
        """The folder in the cache dir for ``name``, made safe."""
        return self.target.cache_dir / safe_folder_name(name)

    @property
    def eager_arm(self) -> Callable[..., Any]:
        """What eager is timed as: its worker (process isolation), else its private copy."""
        if self.eager_worker is not None:
            return self.eager_worker
        return moving(infer_of(self.eager), self.eager)  # its weights move now and then

    def failed(
        self, description: str, stage: Stage, exc: BaseException, log: Path | None
    ) -> CandidateOutcome:
        path = None if log is None or not log.is_file() else str(log)
        self.record_failure(description, stage, exc, path)
        return CandidateOutcome(
            description, None, stage=stage, reason=failure_reason(exc), log_path=path, error=exc
        )

    def record_failure(
        self, description: str, stage: Stage, exc: BaseException, log_path: str | None
    ) -> CandidateFailure:
        """Record a failed candidate (or strategy) and emit its warning event."""
        failure = CandidateFailure.from_exception(description, stage, exc, log_path)
        if self._closed:  # the tune has ended (a hung step): nothing more is recorded
            return failure
        self.failures.append(failure)
        self.emit(failed_event(self.run_id, self.target.name, failure))
        return failure

    def release(self, backend: Any, log: Path | None = None) -> None:
        """Deactivate a candidate not kept, back on its device; failures go to ``log``."""
        if log is None:
            description = describe(backend)
            log = self.folder(backend, description) / BUILD_LOG_NAME
        try:
            if getattr(backend, "is_active", False):
                backend.deactivate()
        except Exception as exc:
            if log is not None:
                append_failure_log(log, "Releasing the backend failed", exc)
        finally:
            self.return_module()

    def return_module(self) -> None:
        """Move the module back to the tune's device (after a candidate moved it)."""
        # a module that cannot move is reported by the next step that needs it
        with contextlib.suppress(Exception):
            self.target.module.to(self.target.device)

    def recheck(self, outcome: CandidateOutcome) -> bool:
        """Still correct after running outside the gate? (:func:`~.vetting.recheck`)."""
        return recheck(self, outcome)

    def rank(self, outcome: CandidateOutcome) -> float | None:
        """How good a passing candidate is (higher is better); None when it cannot be measured."""
        return rank(self, outcome)

    def fallback(self, outcomes: Sequence[CandidateOutcome]) -> Any:
        """The eager baseline when nothing passed; NoValidBackendError when there is none."""
        if self.baseline is None:
            raise NoValidBackendError(self.target.name, outcomes)
        return self.baseline

    # -- the whole tune ------------------------------------------------------------------------
    def run(
        self, call: Callable[[], Any], *, open_first: bool = True, batch_size: int | None = None
    ) -> Any:
        """Run a strategy's own tune (``call``) in this session, from ``started`` to ``finished``.

        ``open_first=False`` only takes the model (the driver opens from a hook); errors propagate.
        """
        try:
            if not self.gated:
                self.disabled()
                backend = call()
                self.finish(
                    "candidate" if backend is not None else "passthrough",
                    None if backend is None else describe(backend),
                )
                return backend
            if open_first:
                self.open(batch_size=batch_size)
            else:
                self.take_model()
            with self.active():
                try:
                    backend = call()
                except Exception as exc:
                    self.strategy_failed(exc)
                    raise
            return self.conclude(backend)
        except BaseException as exc:  # interrupted, or failed while concluding: close the run
            if isinstance(exc, Exception):
                self.finish("error", None, reason=failure_reason(exc))
                raise
            said = one_line(exc) if str(exc).strip() else ""  # "Terminated: SIGTERM", say
            reason = f"interrupted ({type(exc).__name__}{': ' + said if said else ''})"
            self.finish("interrupted", None, reason=reason)
            raise

    # -- the end of the tune -------------------------------------------------------------------
    def conclude(self, backend: Any) -> Any:
        """Validate the strategy's pick if it did not come through the pipeline; report it."""
        return conclude(self, backend)

    def strategy_failed(self, exc: BaseException) -> None:
        """The strategy raised: record it as the strategy's failure and close the run."""
        path = append_failure_log(
            self.target.cache_dir / "strategy_error.log", f"Strategy {self.strategy} failed", exc
        )
        self.record_failure(self.strategy, "strategy", exc, path)
        self.finish("error", None, reason=f"{type(exc).__name__}: {one_line(exc)}")

    def finish(
        self, outcome: Outcome, description: str | None, *, reason: str | None = None
    ) -> None:
        """Give the model back as it came, then emit the finished event (once)."""
        if self._outcome is not None:
            return
        close_workers(self)
        self.eager_worker = None
        self._give_model_back()
        self._outcome = outcome
        folded = self.folded
        candidates = folded.candidate_failures
        self.emit(
            finished(
                self.run_id,
                self.target.name,
                outcome=outcome,
                backend_description=description,
                n_candidates=len(folded.results) + len(candidates),
                n_measured=len(folded.results),
                n_passed=sum(r.passed for r in folded.results),
                n_failed=len(candidates),
                duration_s=time.perf_counter() - self.started,
                reason=reason,
            ),
            always=True,
        )
        self._closed = True

    def _give_model_back(self) -> None:
        """Undo any change the tune left on the model and return it to its training mode."""
        changed = self.model_changed()
        if changed is not None:
            self.record_failure(self.strategy, "strategy", changed, None)
        for m in () if self.guards is None else self.guards.was_training:
            m.training = True

    def report(self) -> TuneReport:
        """The frozen report of this tune so far (no tensors, modules or backends)."""
        return report_of(self)

    def disabled(self) -> None:
        """Say that validation is off for this tune (the one event of a disabled tune)."""
        self.emit(
            disabled_event(self.run_id, self.target.name, strategy=self.strategy), always=True
        )

    @contextmanager
    def active(self) -> Iterator[TuneSession]:
        """Make this session the one the public helpers find while the strategy runs."""
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)
