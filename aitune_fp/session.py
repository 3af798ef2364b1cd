"""One tune call as an explicit value: the baseline, the gate, and the one candidate pipeline.

A :class:`TuneSession` is made by the validating wrapper for each ``tune`` call and handed to
the strategy; ``session.try_candidate(backend)`` builds a candidate, checks it against eager,
times it against eager (when validating), records the result or the failure and releases a
loser. Unvalidated tunes use the same pipeline without the timing (``TuneSession.plain``).
At the end the session becomes a frozen :class:`~aitune_fp.core.report.TuneReport` that holds
no tensors, modules or backends.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import functools
import math
import os
import random
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import attrs
import torch

from aitune_fp import events
from aitune_fp.backends import TorchEagerBackend
from aitune_fp.backends.base import BUILD_LOG_NAME, BackendBase, safe_folder_name
from aitune_fp.core._checks import check_threshold, of_type
from aitune_fp.core.config import ProfilingConfig, for_batch_size
from aitune_fp.core.messages import one_line
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.core.report import CandidateFailure, Outcome, Stage, TuneReport
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.core.speedup import DEFAULT_THRESHOLD_PERCENT, required_speedup
from aitune_fp.correctness import Closeness
from aitune_fp.errors import (
    AitunefpError,
    BackendUnavailableError,
    InvalidStateError,
    InvalidTypeError,
    InvalidValueError,
)
from aitune_fp.guard import ModelGuard, SampleGuard
from aitune_fp.heldout import HeldoutUnavailableError, heldout_batches, heldout_samples
from aitune_fp.inputs import BatchSpec, GraphSpec, Sample, as_sample, copy_sample
from aitune_fp.isolation import ProcessState
from aitune_fp.measure import measure_throughput_steady, rule_for
from aitune_fp.profiling import SpotCheckError, Timer, timer_for
from aitune_fp.watchdog import CandidateHungError, Watchdog

__all__ = [
    "BASELINE_DIR",
    "BUILD",
    "PROFILING_LOG_NAME",
    "CandidateOutcome",
    "ModelChangedError",
    "NoValidBackendError",
    "ProcessChangedError",
    "StageError",
    "TuneSession",
    "TuneTarget",
    "ValidationOptions",
    "active_session",
    "append_failure_log",
    "declared_dtype",
    "infer_of",
    "one_line",
]

BASELINE_DIR = "perf_validation_baseline"
PROFILING_LOG_NAME = "profiling_error.log"


def _threshold(value: object) -> float:
    return check_threshold("min_speedup_threshold_percent", value)


@attrs.frozen(kw_only=True)
class ValidationOptions:
    """How a wrapped strategy validates: the gate, how to measure, whether it is on, which clock.

    The threshold is validated here, once, at the edge; everything downstream carries the value.
    ``timer``: the clock every timed call uses (None: the input's device clock); tests inject
    a fake one so end-to-end gates are deterministic.
    """

    min_speedup_threshold_percent: float = attrs.field(
        default=DEFAULT_THRESHOLD_PERCENT, converter=_threshold
    )
    profiling_config: ProfilingConfig = attrs.field(
        factory=ProfilingConfig, validator=of_type(ProfilingConfig)
    )
    enabled: bool = attrs.field(default=True, validator=of_type(bool))
    timer: Timer | None = attrs.field(default=None, eq=False)

    @property
    def required_speedup(self) -> float:
        """The speedup a candidate must reach: ``1 + pct / 100``."""
        return required_speedup(self.min_speedup_threshold_percent)


@attrs.frozen
class TuneTarget:
    """What one tune call works on: AITune's ``tune`` arguments, checked and normalised."""

    module: torch.nn.Module
    name: str
    graph_spec: BatchSpec
    data: tuple[Sample, ...]
    device: torch.device | str
    cache_dir: Path

    @classmethod
    def of(
        cls,
        module: torch.nn.Module,
        name: object,
        graph_spec: BatchSpec,
        data: Sequence[Sample],
        device: torch.device | str,
        cache_dir: Path | str,
    ) -> TuneTarget:
        """Check the arguments a caller passed to ``tune`` (a clear error naming a bad one)."""
        if not isinstance(name, str):
            raise InvalidTypeError(f"name must be a str (the module's name), got {name!r}")
        return cls(module, name, graph_spec, tuple(data), device, Path(cache_dir))


@attrs.frozen
class CandidateOutcome:
    """What happened to one candidate: the ready backend, or the stage and reason it failed.

    ``mismatch``: how close its outputs came to eager's against its budget, once it passed the
    correctness check (None when it failed before or at it, or when closeness is off).
    ``error``: what a failed candidate raised (a driver such as the AITune adapter re-raises it).
    """

    description: str
    backend: Any
    result: PerformanceValidationResult | None = None
    stage: Stage | None = None
    reason: str | None = None
    log_path: str | None = None
    mismatch: Mismatch | None = None
    error: BaseException | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def ok(self) -> bool:
        """True when the candidate is built, correct and (if gated) measurably faster."""
        return self.backend is not None


class StageError(AitunefpError, RuntimeError):
    """Raised by a driver's own build step to say at which stage the candidate failed.

    The AITune adapter's build runs AITune's correctness check too: a failure there is at stage
    ``correctness``, and the cause (AITune's own exception) is what gets recorded and re-raised.
    """

    def __init__(self, stage: Stage, cause: BaseException) -> None:
        """Wrap ``cause``, which failed at ``stage``."""
        super().__init__(f"{stage}: {cause}")
        self.stage: Stage = stage
        self.cause = cause


def _stage_of(exc: BaseException) -> tuple[Stage, BaseException]:
    """The stage a build step's exception belongs to, and the exception to record."""
    if isinstance(exc, StageError):
        return exc.stage, exc.cause
    if isinstance(exc, CandidateHungError):
        return "hung", exc
    return ("unavailable" if isinstance(exc, BackendUnavailableError) else "build"), exc


def infer_of(backend: Any) -> Callable[..., Any]:
    """How to call a backend: itself when callable (aitune_fp's), else its ``infer`` (AITune's)."""
    return backend if callable(backend) else backend.infer  # type: ignore[no-any-return]


def declared_dtype(backend: Any) -> torch.dtype | None:
    """The reduced precision a backend declares: its ``dtype``, or its config's autocast dtype.

    Its outputs are then compared at that precision tier.
    """
    found = [getattr(backend, "dtype", None)]
    config = getattr(backend, "_config", None)
    if getattr(config, "autocast_enabled", False):
        found.append(getattr(config, "autocast_dtype", None))
    for dtype in found:
        if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
            return dtype
    return None


def _free_bytes(module: torch.nn.Module) -> float:
    """Free memory where ``module`` lives (CUDA: the device's; else the host's; inf: unknown)."""
    first = next(iter([*module.parameters(), *module.buffers()]), None)
    try:
        if first is not None and first.device.type == "cuda":
            return float(torch.cuda.mem_get_info(first.device)[0])
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError, RuntimeError):
        return math.inf


def private_eager(baseline: Any, module: torch.nn.Module) -> tuple[Any, events.EagerIsolation]:
    """A copy of the eager baseline, its model with it, that no candidate can reach.

    Eager is timed and used as the reference on this copy, so a candidate that slows the user's
    model down (a hook, a replaced ``forward``) cannot make itself look faster. The rule: copy
    when the model's tensors take at most half of the free memory where they live; otherwise
    (or when the baseline cannot be copied) eager runs on the user's model (``shared``) and the
    model guard is what catches such a change.
    """
    size = sum(t.numel() * t.element_size() for t in [*module.parameters(), *module.buffers()])
    if 2 * size > _free_bytes(module):
        return baseline, "shared"
    try:
        return copy.deepcopy(baseline), "private_copy"
    except Exception:  # a baseline that cannot be copied: eager shares the user's model
        return baseline, "shared"


#: ``TuneSession.open``'s default: build the eager baseline here (not adopt one built elsewhere).
BUILD: Any = object()


class ModelChangedError(AitunefpError, RuntimeError):
    """A candidate changed the user's model (a tensor, a submodule or a flag); it was restored."""


class ProcessChangedError(AitunefpError, RuntimeError):
    """A candidate changed the process (threads, a torch flag, a torch function); restored.

    What could not be put back is named in the message (``docs/guarantees.md``).
    """


class NoValidBackendError(AitunefpError, RuntimeError):
    """No candidate was built, correct and faster; lists every candidate and why it failed."""

    def __init__(self, name: str, outcomes: Sequence[CandidateOutcome]) -> None:
        """Keep the module name and every outcome; the message lists them one per line."""
        self.module_name = name
        self.outcomes = tuple(outcomes)
        lines = [f"There is no valid backend for module {name!r}:"]
        lines += [f"- {o.description}: {o.stage or 'rejected'}: {o.reason}" for o in outcomes]
        if not outcomes:
            lines.append("- no candidates were given")
        super().__init__("\n".join(lines))


def append_failure_log(path: Path, title: str, exc: BaseException) -> str | None:
    """Append a failure block (type, message, traceback) to ``path``; its path, or None.

    A log that cannot be written (cache dir a file, read-only) never hides the failure it was
    about: the caller records the failure with no log path.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as log:
            log.write(f"\n{title}\nException type: {type(exc).__name__}\n")
            log.write(f"Exception details: {exc}\nFull traceback:\n")
            log.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    except OSError:
        return None
    return str(path)


def _reason(exc: BaseException) -> str:
    name = type(exc).__name__
    return f"{name}: {one_line(exc)}" if str(exc).strip() else name


def _has_lazy(module: torch.nn.Module) -> bool:
    """Whether some parameter or buffer is still uninitialised (a LazyModule before its call)."""
    from torch.nn.parameter import is_lazy

    return any(is_lazy(t) for t in [*module.parameters(), *module.buffers()])


def describe(backend: Any) -> str:
    """A backend's description; its class name when it has none or ``describe`` fails."""
    try:
        return str(backend.describe())
    except Exception:
        return type(backend).__name__


#: The session of the tune running in this context: the compatibility shim through which the
#: public ``try_candidate`` / ``build_and_validate`` reach it from third-party strategies.
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
        self.closeness = closeness if closeness is not None else Closeness()
        self.decides = decides
        self._taken = False
        self.gated = options is not None and options.enabled
        self._emits = options is not None  # a disabled wrapper still says so, and finishes
        self.run_id = events.new_run_id()
        self._started = time.perf_counter()
        self.results: list[PerformanceValidationResult] = []
        self.failures: list[CandidateFailure] = []
        self._rejected: list[str] = []
        self._validated: list[tuple[Any, PerformanceValidationResult | None]] = []
        self.baseline: Any | None = None
        self._eager: Any | None = None  # what eager is timed and referenced on (a private copy)
        self.eager_isolation: events.EagerIsolation = "private_copy"
        self.baseline_throughput: float | None = None
        self._baseline_latencies: tuple[float, ...] | None = None
        self.baseline_error: str | None = None
        config = options.profiling_config if options is not None else ProfilingConfig()
        self.rule = rule_for(config)
        self.config = config
        self.batch_size: int | None = None
        self._batch: Sample | None = None
        self._n_events = 0
        self._selected: tuple[str | None, bool | None, str | None] = (None, None, None)
        self._outcome: Outcome | None = None
        self._guard: ModelGuard | None = None
        self._sample_guard: SampleGuard | None = None
        self._process: ProcessState | None = None
        self._thread = threading.get_ident()
        self._was_training: list[torch.nn.Module] = []
        self._batches: tuple[Sample, ...] = ()  # timed in turn: the batch and held-out ones
        self._references: tuple[Any, ...] = ()  # eager's output on each (the spot checks')
        self._candidate: str | None = None  # the candidate in the pipeline now
        self._closed = False  # set once finished is emitted
        self._heldout_seed = random.SystemRandom().randrange(2**32)  # not guessable ahead
        self._heldout_samples: tuple[Sample, ...] | None = None
        stuck = weakref.WeakMethod(self._stuck)  # no cycle: the session is freed with its tune
        self._watchdog = Watchdog(
            grace_s=config.hang_grace_s,
            on_stuck=lambda what, elapsed: None if (f := stuck()) is None else f(what, elapsed),
        )

    @classmethod
    def plain(cls, target: TuneTarget, *, strategy: str = "") -> TuneSession:
        """A session that builds and checks candidates but times nothing and emits nothing."""
        return cls(target, None, strategy=strategy)

    # -- events ------------------------------------------------------------------------------
    def _emit(self, event: events.Event, *, always: bool = False) -> None:
        """Emit when validating; ``always``: also when the wrapper is there but disabled.

        Nothing is emitted after ``finished`` (a thread the watchdog gave up on may come back).
        """
        if self._closed:
            return
        if self.gated or (always and self._emits):
            self._n_events += 1
            events.emit(event)

    def _phase(self, description: str, phase: events.Phase) -> None:
        self._emit(
            events.phase(
                self.run_id, self.target.name, backend_description=description, phase=phase
            )
        )

    @property
    def _timer(self) -> Timer:
        timer = None if self.options is None else self.options.timer
        assert self._batch is not None
        return timer if timer is not None else timer_for(self._batch)

    # -- the baseline --------------------------------------------------------------------------
    def open(self, *, baseline: Any = BUILD, batch_size: int | None = None) -> None:
        """Emit ``started``, then build (or adopt) and measure the eager baseline; never raises.

        ``baseline``: an eager baseline built elsewhere (AITune's) to adopt instead of building
        one; None adopts one that failed to build there. ``batch_size``: an operating point
        chosen elsewhere (default: the graph spec's max, narrowed by the config).
        """
        assert self.options is not None
        t = self.target
        try:
            self.batch_size = self._resolve_batch_size() if batch_size is None else batch_size
            self.config = for_batch_size(self.options.profiling_config, self.batch_size)
        finally:
            self._emit(
                events.started(
                    self.run_id,
                    t.name,
                    strategy=self.strategy,
                    device=str(t.device),
                    decision=self.rule.name,
                    min_speedup_threshold_percent=self.options.min_speedup_threshold_percent,
                    required_speedup=self.options.required_speedup,
                    batch_size=self.batch_size,
                    cpu=events.cpu_environment(self.options.profiling_config.threads),
                )
            )
        self.take_model()
        if self._was_training:
            self._emit(
                events.eval_mode(self.run_id, t.name, n_training_modules=len(self._was_training))
            )
        adopted = baseline is not BUILD
        description = (
            describe(baseline)
            if adopted and baseline is not None
            else TorchEagerBackend().describe()
        )
        folder = t.cache_dir / BASELINE_DIR
        start = time.perf_counter()
        try:
            if not t.data:
                raise InvalidValueError(
                    f"data for {t.name!r} must hold at least one sample, got none"
                )
            self._batch = copy_sample(
                t.graph_spec.make_batch(as_sample(t.data[0]), self.batch_size)
            )
            if adopted:
                if baseline is None:
                    raise InvalidStateError(
                        f"the eager baseline of {self.strategy} failed to build (see its log)"
                    )
                self.baseline = baseline
            else:
                self._phase(description, "baseline_build")
                spec = cast(GraphSpec, t.graph_spec)  # the built-in path's own graph spec
                self.baseline = TorchEagerBackend().build(
                    t.module, spec, list(t.data), t.device, folder
                )
            if _has_lazy(t.module):  # materialise its parameters before copying them
                self._reference_output(infer_of(self.baseline), self._batch)
            self._eager, self.eager_isolation = private_eager(self.baseline, t.module)
            self._phase(description, "baseline_measure")
            eager = infer_of(self._eager)
            self._batches = self._timing_batches(self._batch)
            throughput, latencies = self.rule.measure_eager(
                eager,
                self._batch,
                self.batch_size,
                self.config,
                timer=self._timer,
                batches=self._batches,
            )
            if not (math.isfinite(throughput) and throughput > 0):
                raise InvalidStateError(f"eager baseline throughput is {throughput!r} samples/s")
            self._references = tuple(self._reference_output(eager, b) for b in self._batches)
            self._settle_guard()
        except Exception as exc:
            path = append_failure_log(folder / "error.log", "Eager baseline failed", exc)
            self.baseline_error = f"{type(exc).__name__}: {one_line(exc)}"
            self.baseline = self._eager = (
                None  # an eager baseline that cannot be measured is no fallback
            )
            self._emit(
                events.baseline_failed(
                    self.run_id,
                    t.name,
                    error_type=type(exc).__name__,
                    reason=one_line(exc),
                    traceback_path=path,
                )
            )
            return
        self.baseline_throughput, self._baseline_latencies = throughput, latencies
        self._emit(
            events.baseline_measured(
                self.run_id,
                t.name,
                backend_description=description,
                batch_size=self.batch_size,
                throughput_samples_per_s=throughput,
                n_calls=len(latencies),
                duration_s=time.perf_counter() - start,
                decision=self.rule.name,
                eager_isolation=self.eager_isolation,
            )
        )

    def _timing_batches(self, batch: Sample) -> tuple[Sample, ...]:
        """The timing batch and two held-out ones derived from it, timed in turn.

        A candidate that returns what it computed for an earlier batch of the same shape is
        then wrong on the batches it did not compute, where the spot checks look.
        """
        return (batch, *self._derive_heldout(heldout_batches, batch, 2))

    def _derive_heldout(
        self, derive: Callable[..., tuple[Sample, ...]], *args: Any
    ) -> tuple[Sample, ...]:
        """Held-out inputs by ``derive`` (``heldout.py``) with the tune's seed and batch axes.

        None when no input can be varied (then only the recorded inputs are used).
        """
        axes = getattr(self.target.graph_spec, "batch_axes", None)
        try:
            return derive(*args, self._heldout_seed, batch_axes=axes)
        except HeldoutUnavailableError:
            return ()

    @staticmethod
    def _reference_output(eager: Callable[..., Any], batch: Sample) -> Any:
        """Eager's output on the timing batch: what every spot check while timing compares with."""
        with torch.no_grad():
            return copy_sample(batch).call(eager)

    def take_model(self) -> None:
        """Put the model in eval mode and snapshot what the tune must not change (once).

        ``open`` does it; a driver whose library runs the model before ``open`` (AITune
        profiles eager in its ``_pre_tune``) calls it first. ``finish`` gives the model back.
        """
        if self._taken:
            return
        self._taken = True
        module = self.target.module
        self._was_training = ModelGuard.training_modules(module)
        if self._was_training:
            module.eval()
        self._guard = None if _has_lazy(module) else ModelGuard(module)
        self._sample_guard = SampleGuard(self.target.data)
        self._thread = threading.get_ident()  # the tune's thread (the watchdog's is another)
        self._process = self._process_state()

    def _settle_guard(self) -> None:
        """After eager's first calls, snapshot again if eager itself changed the model.

        A lazily initialised model gets its parameters then: that state is the one candidates
        must leave alone.
        """
        if self._guard is None or self._guard.changed() is not None:
            self._guard = ModelGuard(self.target.module)
        self._process = self._process_state()  # what eager's first calls set up is the state

    def _process_state(self) -> ProcessState:
        """The process state a candidate must leave alone, the model's own classes included.

        The classes: a candidate that patches the user's class (its ``forward``) reaches eager's
        private copy too.
        """
        own = {
            type(m)
            for m in self.target.module.modules()
            if not type(m).__module__.startswith("torch.")
        }
        return ProcessState.capture(extra=sorted(own, key=repr))

    def _model_changed(self) -> ModelChangedError | ProcessChangedError | None:
        """The error to record when the model, the caller's samples or the process changed.

        Whatever changed is restored; the process to its state at the start of the tune.
        """
        if self._process is not None and threading.get_ident() == self._thread:
            changes = self._process.changed()  # grad mode and friends are per thread
            if changes:
                unrestored = self._process.restore()
                shown = "; ".join(changes[:4]) + (
                    f"; and {len(changes) - 4} more" if len(changes) > 4 else ""
                )
                kept = f" (could not be restored: {'; '.join(unrestored)})" if unrestored else ""
                return ProcessChangedError(
                    f"the candidate changed the process: {shown}; it was restored{kept}"
                )
        if self._sample_guard is not None:
            what = self._sample_guard.changed()
            if what is not None:
                self._sample_guard.restore()
                return ModelChangedError(
                    f"the candidate changed the caller's samples: {what}; they were restored"
                )
        what = None if self._guard is None else self._guard.changed()
        if what is None:
            return None
        assert self._guard is not None
        self._guard.restore()
        return ModelChangedError(f"the candidate changed the model: {what}; the model was restored")

    def _resolve_batch_size(self) -> int:
        """The batch size to validate at: the graph spec's max, or what the config narrows to.

        ``batching=False`` validates the raw sample (batch size 1); ``batch_sizes`` picks the
        largest of them, which must fit the graph spec.
        """
        assert self.options is not None
        config = self.options.profiling_config
        spec_max = self.target.graph_spec.get_max_batch_size()
        if not config.batching:
            return 1
        if not config.batch_sizes:
            return spec_max
        size = max(config.batch_sizes)
        if size > spec_max:
            raise InvalidValueError(
                f"profiling_config.batch_sizes asks for batch size {size}, above the graph "
                f"spec's max_batch_size {spec_max}"
            )
        return size

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
        description = describe(backend)
        folder = self._folder(backend, description)
        log = folder / BUILD_LOG_NAME
        self._phase(description, "build")
        self._candidate = description
        try:
            with self._watchdog.step(f"the build of {description}", self.config.build_timeout_s):
                if build is not None:
                    built = build(backend)
                else:
                    candidate = copy.deepcopy(backend)  # the blueprint stays reusable
                    built = candidate.build(
                        t.module, t.graph_spec, list(t.data), t.device, t.cache_dir
                    )
        except Exception as exc:
            stage, cause = _stage_of(exc)
            if not isinstance(backend, BackendBase):  # aitune_fp's backends write their own
                append_failure_log(log, f"Backend failed at {stage}", cause)
            self._return_module()
            return self._failed(description, stage, cause, log)
        return self._vet(built, description, folder)

    def _vet(self, built: Any, description: str, folder: Path) -> CandidateOutcome:
        """Correctness, then (validating) the timed comparison; a loser is released."""
        t = self.target
        log = folder / BUILD_LOG_NAME
        try:
            self._phase(description, "correctness")
            try:
                changed = self._model_changed()
                if changed is not None:
                    raise changed
                what = f"the correctness check of {description}"
                with self._watchdog.step(what, self._deadline):
                    mismatch = self._check_closeness(built)
            except Exception as exc:
                append_failure_log(log, "Backend correctness check failed", exc)
                self.release(built, log)
                stage: Stage = "hung" if isinstance(exc, CandidateHungError) else "correctness"
                return self._failed(description, stage, exc, log)
            if mismatch is not None:
                self._emit(
                    events.correctness_checked(
                        self.run_id, t.name, backend_description=description, mismatch=mismatch
                    )
                )
            if not self.gated:
                return CandidateOutcome(description, built, mismatch=mismatch)
            if self.baseline is None and not self.decides:  # diagnostic: nothing to compare
                self._validated.append((built, None))
                return CandidateOutcome(description, built, mismatch=mismatch)
            self._phase(description, "measure")
            try:
                with self._watchdog.step(f"the timing of {description}", self._deadline):
                    result = self._measure(built, description, mismatch)
            except CandidateHungError as exc:
                append_failure_log(log, "Backend hung while timed", exc)
                self.release(built, log)
                return self._failed(description, "hung", exc, log)
            except (SpotCheckError, ModelChangedError, ProcessChangedError) as exc:
                append_failure_log(log, "Backend output or model check failed while timing", exc)
                self.release(built, log)
                return self._failed(description, "correctness", exc, log)
            except Exception as exc:
                path = folder / PROFILING_LOG_NAME
                append_failure_log(path, "Backend profiling failed", exc)
                self.release(built, path)
                return self._failed(description, "profiling", exc, path)
        except BaseException:  # interrupted: let the candidate go, then propagate
            self.release(built, log)
            raise
        if not result.passed and self.decides:
            self.release(built, log)
            return CandidateOutcome(
                description,
                None,
                result=result,
                reason=result.reason or result.verdict,
                mismatch=mismatch,
            )
        self._validated.append((built, result))
        return CandidateOutcome(description, built, result=result, mismatch=mismatch)

    def _measure(
        self, backend: Any, description: str, mismatch: Mismatch | None
    ) -> PerformanceValidationResult:
        """Time ``backend`` against eager by the session's rule; record and report the result.

        The result carries the worst mismatch of the correctness check and the spot checks.
        """
        if self._eager is None or self.baseline_throughput is None:
            raise InvalidStateError(
                f"no eager baseline to compare against ({self.baseline_error}); "
                "a candidate cannot be shown faster without one"
            )
        assert self.options is not None and self._batch is not None and self.batch_size
        start = time.perf_counter()
        expected_dtype = declared_dtype(backend)
        tolerances = self.closeness.budget(backend)
        closeness = self.closeness
        seen = [] if mismatch is None else [mismatch]

        def spot_check(output: Any, reference: Any) -> None:
            found = closeness.spot(
                output, reference, expected_dtype=expected_dtype, tolerances=tolerances
            )
            if found is not None:
                seen.append(found)

        result = self.rule.compare(
            infer_of(self._eager),
            infer_of(backend),
            self._batch,
            self.batch_size,
            self.config,
            self.options.min_speedup_threshold_percent,
            self._timer,
            eager_latencies=self._baseline_latencies if self.rule.keeps_eager_latencies else None,
            description=description,
            spot_check=spot_check,
            batches=self._batches,
            references=self._references,
            spot_seed=self._heldout_seed,
            on_look=lambda n, decision: self._emit(
                events.look(
                    self.run_id,
                    self.target.name,
                    backend_description=description,
                    n_pairs=n,
                    max_pairs=self.config.max_pairs,
                    verdict=decision.verdict,
                    estimate=decision.speedup,
                    ci_low=decision.ci_low,
                    ci_high=decision.ci_high,
                )
            ),
        ).result
        changed = self._model_changed()  # while timing: a result that cannot stand
        if changed is not None:
            raise changed
        result = attrs.evolve(result, **Mismatch.combine(seen).result_fields())
        self.results.append(result)
        self._emit(
            events.candidate_measured(
                self.run_id, self.target.name, result, duration_s=time.perf_counter() - start
            )
        )
        if not result.passed:
            self._rejected.append(description)
            self._emit(events.candidate_rejected(self.run_id, self.target.name, result))
        return result

    def _check_closeness(self, built: Any) -> Mismatch | None:
        """Closeness to eager on the recorded samples, then on held-out ones (the worst of both).

        The held-out samples (``heldout.py``) are derived from the recorded ones with a seed
        drawn per tune: a candidate that memorised what it saw at build time or warm-up is
        wrong on them.
        """
        t = self.target
        check = functools.partial(
            self.closeness.check,
            infer_of(built),
            t.module if self._eager is None else infer_of(self._eager),
            t.graph_spec,
            expected_dtype=declared_dtype(built),
            tolerances=self.closeness.budget(built),
            batch_sizes=self.config.batch_sizes,
        )
        recorded = check(list(t.data), name=t.name)
        held = self._heldout()
        if recorded is None or not held:
            return recorded
        name = f"{t.name} (held-out inputs, seed {self._heldout_seed})"
        return Mismatch.combine([recorded, check(list(held), name=name) or Mismatch()])

    def _heldout(self) -> tuple[Sample, ...]:
        """The tune's held-out samples, derived once (none when no input can be varied)."""
        if self._heldout_samples is None:
            self._heldout_samples = self._derive_heldout(heldout_samples, self.target.data)
        return self._heldout_samples

    @property
    def _deadline(self) -> float:
        """The watchdog's deadline for a correctness check or a timed comparison."""
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
        self.record_failure(self._candidate or self.strategy, "hung", exc, None)
        self.finish("error", None, reason=f"CandidateHungError: {exc}")

    def _folder(self, backend: Any, description: str) -> Path:
        """The candidate's folder in the cache dir: its key, made safe; else its description."""
        try:
            name = str(backend.key())
        except Exception:
            name = description
        return self.target.cache_dir / safe_folder_name(name)

    def _failed(
        self, description: str, stage: Stage, exc: BaseException, log: Path | None
    ) -> CandidateOutcome:
        path = None if log is None or not log.is_file() else str(log)
        self.record_failure(description, stage, exc, path)
        return CandidateOutcome(
            description, None, stage=stage, reason=_reason(exc), log_path=path, error=exc
        )

    def record_failure(
        self, description: str, stage: Stage, exc: BaseException, log_path: str | None
    ) -> CandidateFailure:
        """Record a failed candidate (or strategy) and emit its warning event."""
        failure = CandidateFailure.from_exception(description, stage, exc, log_path)
        if self._closed:  # the tune has ended (a hung step): nothing more is recorded
            return failure
        self.failures.append(failure)
        self._emit(events.failed(self.run_id, self.target.name, failure))
        return failure

    def release(self, backend: Any, log: Path | None = None) -> None:
        """Deactivate a candidate that is not kept and return the module to its device.

        A failing ``deactivate`` never takes the tune down: it is written to ``log`` (default:
        the candidate's build log).
        """
        if log is None:
            description = describe(backend)
            log = self._folder(backend, description) / BUILD_LOG_NAME
        try:
            if getattr(backend, "is_active", False):
                backend.deactivate()
        except Exception as exc:
            if log is not None:
                append_failure_log(log, "Releasing the backend failed", exc)
        finally:
            self._return_module()

    def _return_module(self) -> None:
        # a module that cannot move is reported by the next step that needs it
        with contextlib.suppress(Exception):
            self.target.module.to(self.target.device)

    def rank(self, outcome: CandidateOutcome) -> float | None:
        """How good a passing candidate is (higher is better); None when it cannot be measured.

        Gated candidates rank by their speedup over eager timed in the same window (robust to
        the machine changing speed between candidates); in a plain session each is timed on its
        own (AITune's throughput profile) and a candidate whose timing fails is released.
        """
        result = outcome.result
        if result is not None:
            return result.estimate if result.estimate is not None else result.speedup
        t = self.target
        try:
            size = t.graph_spec.get_max_batch_size()
            self._batch = t.graph_spec.make_batch(as_sample(t.data[0]), size)
            throughput, _ = measure_throughput_steady(
                infer_of(outcome.backend), self._batch, size, self.config, timer=self._timer
            )
        except Exception as exc:
            folder = self._folder(outcome.backend, outcome.description)
            path = folder / PROFILING_LOG_NAME
            append_failure_log(path, "Backend profiling failed", exc)
            self.release(outcome.backend, path)
            return None
        return throughput

    def fallback(self, outcomes: Sequence[CandidateOutcome]) -> Any:
        """The eager baseline when nothing passed; NoValidBackendError when there is none."""
        if self.baseline is None:
            raise NoValidBackendError(self.target.name, outcomes)
        return self.baseline

    # -- the whole tune ------------------------------------------------------------------------
    def run(self, call: Callable[[], Any], *, open_first: bool = True) -> Any:
        """Run a strategy's own tune (``call``) in this session, from ``started`` to ``finished``.

        Validating: open (build and measure eager), run the strategy with this session active,
        then conclude on its pick. ``open_first=False``: only take the model first; the driver
        opens from a hook (AITune builds its eager baseline in ``_pre_tune``). Disabled: say so,
        run the strategy, record its pick. Whatever is raised closes the run, then propagates.
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
                self.open()
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
            interrupted = not isinstance(exc, Exception)
            self.finish(
                "error",
                None,
                reason=f"interrupted ({type(exc).__name__})" if interrupted else _reason(exc),
            )
            raise

    # -- the end of the tune -------------------------------------------------------------------
    def conclude(self, backend: Any) -> Any:
        """Validate the strategy's pick if it did not come through the pipeline; report it."""
        if backend is None:
            self.finish("passthrough", None, reason="the strategy returned no backend")
            return None
        if backend is self.baseline:
            self._select(backend, None)
            return backend
        for seen, result in self._validated:
            if seen is backend:
                self._select(backend, result)
                return backend
        description = describe(backend)
        outcome = self._vet(backend, description, self._folder(backend, description))
        if outcome.ok:
            self._select(backend, outcome.result)
            return backend
        if self.baseline is None:
            self.finish("error", None, reason="no valid backend and no eager baseline")
            raise NoValidBackendError(self.target.name, [outcome])
        self._select(self.baseline, None)
        return self.baseline

    def _select(self, backend: Any, result: PerformanceValidationResult | None) -> None:
        is_baseline = backend is self.baseline
        description = describe(backend)
        event = events.selected(
            self.run_id,
            self.target.name,
            backend_description=description,
            is_baseline=is_baseline,
            result=result,
            baseline_throughput=self.baseline_throughput,
            info_on=events.info_enabled(),
        )
        self._selected = (description, is_baseline, str(event.fields["summary"]))
        self._emit(event)
        self.finish("baseline" if is_baseline else "candidate", description)

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
        self._give_model_back()
        self._outcome = outcome
        if self._selected[0] is None and description is not None:
            self._selected = (description, False, None)
        candidates = self.report().candidate_failures
        self._emit(
            events.finished(
                self.run_id,
                self.target.name,
                outcome=outcome,
                backend_description=description,
                n_candidates=len(self.results) + len(candidates),
                n_measured=len(self.results),
                n_passed=sum(r.passed for r in self.results),
                n_failed=len(candidates),
                duration_s=time.perf_counter() - self._started,
                reason=reason,
            ),
            always=True,
        )
        self._closed = True

    def _give_model_back(self) -> None:
        """Undo any change the tune left on the model and return it to its training mode."""
        changed = self._model_changed()
        if changed is not None:
            self.record_failure(self.strategy, "strategy", changed, None)
        for m in self._was_training:
            m.training = True

    def report(self) -> TuneReport:
        """The frozen report of this tune so far (no tensors, modules or backends)."""
        options = self.options
        selected, is_baseline, summary = self._selected
        return TuneReport(
            run_id=self.run_id,
            module_name=self.target.name,
            strategy=self.strategy,
            device=str(self.target.device),
            decision=self.rule.name,
            min_speedup_threshold_percent=(
                None if options is None else options.min_speedup_threshold_percent
            ),
            required_speedup=None if options is None else options.required_speedup,
            batch_size=self.batch_size,
            baseline_backend=None if self.baseline is None else describe(self.baseline),
            baseline_throughput=self.baseline_throughput,
            baseline_error=self.baseline_error,
            disabled=options is not None and not options.enabled,
            results=self.results,
            rejected=self._rejected,
            failures=self.failures,
            selected_backend=selected,
            selected_is_baseline=is_baseline,
            selected_summary=summary,
            outcome=self._outcome,
            duration_s=time.perf_counter() - self._started,
            n_events=self._n_events,
        )

    def disabled(self) -> None:
        """Say that validation is off for this tune (the one event of a disabled tune)."""
        self._emit(
            events.disabled(self.run_id, self.target.name, strategy=self.strategy), always=True
        )

    @contextmanager
    def active(self) -> Iterator[TuneSession]:
        """Make this session the one the public helpers find while the strategy runs."""
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)
