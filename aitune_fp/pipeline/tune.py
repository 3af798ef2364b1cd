"""The :class:`TuneSession`, one tune call as an explicit value, and the active session.

The active session is what the public helpers find while a strategy runs.
"""

from __future__ import annotations

import contextlib
import contextvars
import random
import threading
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
from aitune_fp.core.choice import LatencyCheck
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.fold import fold
from aitune_fp.core.messages import one_line
from aitune_fp.core.report import CandidateFailure, Outcome, Stage, TuneReport
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.core.selection_values import SelectionState
from aitune_fp.correctness.closeness import Closeness
from aitune_fp.errors import (
    CandidateHungError,
    InvalidStateError,
)
from aitune_fp.events.candidates import failed as failed_event
from aitune_fp.events.names import EagerIsolation, Event, Phase, new_run_id
from aitune_fp.events.sending import emit as emit_event
from aitune_fp.events.validation import disabled as disabled_event
from aitune_fp.events.validation import finished
from aitune_fp.events.validation import phase as phase_event
from aitune_fp.inputs import InputKey, Sample
from aitune_fp.isolation.model import ModelGuard
from aitune_fp.isolation.samples import SampleGuard
from aitune_fp.isolation.snapshot import ProcessState
from aitune_fp.measure.rules import rule_for
from aitune_fp.pipeline.arms import Arm, HereArm
from aitune_fp.pipeline.baseline import open_baseline
from aitune_fp.pipeline.ending import conclude, report_of
from aitune_fp.pipeline.guarding import model_changed, take_model
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
from aitune_fp.pipeline.workers import WorkerArm, close_workers, isolation_of
from aitune_fp.profiling.interference import WorkerGroup
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

    Made by the validating wrapper (``options`` given) or, for a strategy run without the
    wrapper, by :meth:`plain` (built and correct is enough, nothing is timed, no events). The
    AITune adapter drives the same session from AITune's hooks: it adopts AITune's baseline
    (``open(baseline=...)``) and hands in candidates AITune builds (``try_candidate(build=...)``).
    ``closeness``: how outputs are held against eager's. ``decides=False`` (AITune's diagnostic
    mode) measures and records every candidate but releases none for being slow.
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
        self.taken = False
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
        self.guard: ModelGuard | None = None
        self.sample_guard: SampleGuard | None = None
        self.process: ProcessState | None = None
        self.thread = threading.get_ident()
        self.was_training: list[torch.nn.Module] = []
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
        self.selection: SelectionState | None = None  # the head-to-head, when one ran
        self.latency_checks: list[LatencyCheck] = []
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
        """Emit ``event`` of this tune when validating; ``always``: also when disabled.

        Nothing is emitted after ``finished`` (a thread the watchdog gave up on may come back).
        """
        if self._closed:
            return
        self.folded = fold(self.folded, event.name, event.fields)  # the report, as ingest's
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
        """Emit ``started``, then build (or adopt) and measure the eager baseline; never raises.

        ``baseline``: an eager baseline built elsewhere (AITune's) to adopt instead of building
        one; None adopts one that failed to build there. ``batch_size``: an operating point
        chosen elsewhere (default: the graph spec's max, narrowed by the config).
        """
        open_baseline(self, baseline=baseline, batch_size=batch_size)

    def take_model(self) -> None:
        """Put the model in eval mode and snapshot what the tune must not change (once).

        ``open`` does it; a driver whose library runs the model before ``open`` (AITune
        profiles eager in its ``_pre_tune``) calls it first. ``finish`` gives the model back.
        """
        take_model(self)

    def model_changed(self) -> ModelChangedError | ProcessChangedError | None:
        """What a candidate changed in the model, the samples or the process (restored)."""
        return model_changed(self)

    # -- the candidate pipeline ----------------------------------------------------------------
    def try_candidate(
        self, backend: Any, *, build: Callable[[Any], Any] | None = None
    ) -> CandidateOutcome:
        """Build a copy of ``backend``, check it against eager and, when validating, gate it.

        ``build``: a driver's own build step (AITune's build and check), given the blueprint and
        returning the built backend; a :class:`StageError` from it names the failed stage.
        Never raises for a failing candidate (``KeyboardInterrupt``/``SystemExit`` propagate
        after the candidate is released): the outcome says at which stage it failed and why.
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
        return arm.settle(attrs.evolve(outcome, build_s=build_s))

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
        """The watchdog's report of a step that could not be interrupted: end the tune.

        Runs on the watchdog's thread while the tune's thread is still stuck: the candidate is
        recorded as hung and ``finished`` (outcome ``error``) is emitted, so a supervisor sees
        the end; whatever the stuck thread does when (if) it returns changes nothing after.
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
        return infer_of(self.eager)

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
        """Deactivate a candidate that is not kept and return the module to its device.

        A failing ``deactivate`` never takes the tune down: it is written to ``log`` (default:
        the candidate's build log).
        """
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

        Validating: open (build and measure eager), run the strategy with this session active,
        then conclude on its pick. ``open_first=False``: only take the model first; the driver
        opens from a hook (AITune builds its eager baseline in ``_pre_tune``). ``batch_size``:
        the strategy's operating point (min-latency: 1). Disabled: say so, run the strategy,
        record its pick. Whatever is raised closes the run, then propagates.
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
        for m in self.was_training:
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
