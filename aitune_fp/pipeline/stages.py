"""The candidate pipeline's stages: pure functions of values, touching only what they are handed.

``Guards`` is what a tune must not change (the model, the caller's samples, the process).
"""

from __future__ import annotations

import contextlib
import copy
import random
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

import attrs
import torch

from aitune_fp.backends.base import BUILD_LOG_NAME
from aitune_fp.backends.support import safe_folder_name
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.core.report import STAGES, Stage
from aitune_fp.core.results import IsolationMode, PerformanceValidationResult
from aitune_fp.core.speedup import Gate
from aitune_fp.correctness.closeness import Closeness
from aitune_fp.errors import BackendUnavailableError, CandidateHungError, InvalidStateError
from aitune_fp.events.kinds import Event, Phase
from aitune_fp.events.validation import PhaseEntered
from aitune_fp.inputs import InputKey, Sample
from aitune_fp.isolation.domain import heldout_domain
from aitune_fp.isolation.heldout import HeldoutUnavailableError, heldout_draws
from aitune_fp.isolation.model import ModelGuard, SampleGuard
from aitune_fp.isolation.snapshot import ProcessState
from aitune_fp.measure.measurement import Comparison, OnLook
from aitune_fp.measure.rules import DecisionRule
from aitune_fp.pipeline.values import (
    PROFILING_LOG_NAME,
    CandidateOutcome,
    ModelChangedError,
    Opened,
    ProcessChangedError,
    StageError,
    TuneTarget,
    append_failure_log,
    candidate_folder,
    declared_dtype,
    describe,
    failure_reason,
    has_lazy,
    infer_of,
)
from aitune_fp.profiling.calls import SpotCheckError
from aitune_fp.profiling.interference import InterferenceError
from aitune_fp.profiling.timers import Timer, timer_for
from aitune_fp.profiling.watchdog import Watchdog
from aitune_fp.profiling.workers import WorkerError

#: The project's own modules that decide and measure: a candidate that rebinds one of their
#: functions (a patched verdict) is a change to the process like a patched torch function.
_JUDGES = ("aitune_fp.core.", "aitune_fp.measure.", "aitune_fp.profiling.", "aitune_fp.pipeline.")


@attrs.frozen(eq=False)
class Guards:
    """Snapshots of model, samples and process; the tune's thread; the model's modes to restore."""

    model: ModelGuard | None
    samples: SampleGuard
    process: ProcessState
    thread: int
    was_training: tuple[torch.nn.Module, ...]

    @classmethod
    def take(cls, target: TuneTarget) -> Guards:
        """Put the model in eval mode and snapshot what the tune must not change."""
        module = target.module
        was_training = tuple(m for m in module.modules() if m.training)
        if was_training:
            module.eval()
        return cls(
            model=None if has_lazy(module) else ModelGuard(module),
            samples=SampleGuard(target.data),
            process=process_state(target),
            thread=threading.get_ident(),  # the tune's thread (the watchdog's is another)
            was_training=was_training,
        )

    def settled(self, target: TuneTarget) -> Guards:
        """Snapshot again after eager's first calls (a lazy model has its parameters then)."""
        model = self.model
        if model is None or model.changed() is not None:
            model = ModelGuard(target.module)
        return attrs.evolve(self, model=model, process=process_state(target))

    def changed(self) -> ModelChangedError | ProcessChangedError | None:
        """The error to record when the model, the samples or the process changed (restored)."""
        if threading.get_ident() == self.thread:  # grad mode and friends are per thread
            changes = self.process.changed()
            if changes:
                unrestored = self.process.restore()
                shown = "; ".join(changes[:4]) + (
                    f"; and {len(changes) - 4} more" if len(changes) > 4 else ""
                )
                kept = f" (could not be restored: {'; '.join(unrestored)})" if unrestored else ""
                return ProcessChangedError(
                    f"the candidate changed the process: {shown}; it was restored{kept}"
                )
        what = self.samples.changed()
        if what is not None:
            self.samples.restore()
            return ModelChangedError(
                f"the candidate changed the caller's samples: {what}; they were restored"
            )
        what = None if self.model is None else self.model.changed()
        if what is None or self.model is None:
            return None
        self.model.restore()
        return ModelChangedError(f"the candidate changed the model: {what}; the model was restored")


def process_state(target: TuneTarget) -> ProcessState:
    """The process state a candidate must leave alone, including the model's classes and our judges.

    A patched model class would reach eager's private copy; a patched judge would fake a verdict.
    """
    own = {type(m) for m in target.module.modules() if not type(m).__module__.startswith("torch.")}
    return ProcessState.capture(extra=[*sorted(own, key=repr), *_judges()])


def _judges() -> list[object]:
    """The judges' modules and the classes they define.

    A judge's method replaced (``Worker.run_block`` reading eager's blocks twice as long) fakes a
    verdict as a replaced module function does.
    """
    judges = [m for name, m in sorted(sys.modules.items()) if name.startswith(_JUDGES)]
    classes = [
        c
        for m in judges
        for c in vars(m).values()
        if isinstance(c, type) and c.__module__ == m.__name__
    ]
    return [*judges, *classes]


@attrs.frozen(kw_only=True)
class Arena:
    """What one tune's candidates are checked and timed against, and what the stages report to.

    ``eager`` None: the baseline failed (the recorded module is the reference); ``gate`` None: off.
    ``heldout`` draws the held-out samples (once per tune, when a check first needs them);
    ``clock``: the injected timer, if any. The tune owns what ``guards``, ``watchdog``, ``emit``
    and ``record`` (a failed candidate or strategy) act on; a stage only calls them.
    """

    run_id: str
    target: TuneTarget
    config: ProfilingConfig
    closeness: Closeness
    rule: DecisionRule
    gate: Gate | None
    gated: bool
    decides: bool
    opened: Opened | None
    eager_arm: Callable[..., Any] | None
    batch_size: int | None
    heldout: Callable[[], tuple[Sample, ...]]
    seed: int
    clock: Timer | None
    baseline_error: str | None
    isolation: IsolationMode
    guards: Guards | None
    watchdog: Watchdog
    emit: Callable[[Event], None]
    record: Callable[[str, Stage, BaseException, str | None], object]

    def timer_on(self, batch: Sample) -> Timer:
        """The clock for calls on ``batch``: the injected one, else the one for its device."""
        return self.clock if self.clock is not None else timer_for(batch)

    @property
    def baseline(self) -> Any | None:
        """The eager baseline; None before the tune opens, or when it failed."""
        return None if self.opened is None else self.opened.baseline

    @property
    def latencies(self) -> tuple[float, ...] | None:
        """Eager's timed call latencies; None before the tune opens, or when it failed."""
        return None if self.opened is None else self.opened.latencies

    def timing(self) -> tuple[Opened, Timer]:
        """What opening found (the batches timed in turn) and the clock; an error before it."""
        if self.opened is None:
            raise InvalidStateError("the session is not open: nothing to time candidates on")
        return self.opened, self.timer_on(self.opened.batch)

    def unchanged(self) -> None:
        """Raise what a candidate changed in the model, the samples or the process (restored)."""
        changed = None if self.guards is None else self.guards.changed()
        if changed is not None:
            raise changed

    def phase(self, description: str, phase: Phase) -> None:
        """Say that ``description`` enters ``phase``."""
        entered = PhaseEntered(
            run_id=self.run_id,
            module_name=self.target.name,
            backend_description=description,
            phase=phase,
        )
        self.emit(entered.to_event())

    def failed(
        self,
        description: str,
        stage: Stage,
        exc: BaseException,
        log: Path,
        heading: str = "",
        built: Any = None,
    ) -> CandidateOutcome:
        """Record a failed candidate (``heading``: logged first; ``built``: released) as an outcome."""
        if heading:
            append_failure_log(log, heading, exc)
        if built is not None:
            release(self.target, built, log)
        path = str(log) if log.is_file() else None
        self.record(description, stage, exc, path)
        return CandidateOutcome(
            description, None, stage=stage, reason=failure_reason(exc), log_path=path, error=exc
        )


def folder_of(target: TuneTarget, name: str) -> Path:
    """The folder in the cache dir for ``name``, made safe."""
    return target.cache_dir / safe_folder_name(name)


def release(target: TuneTarget, backend: Any, log: Path | None = None) -> None:
    """Deactivate a candidate not kept, back on its device; failures go to ``log``."""
    if log is None:
        description = describe(backend)
        log = candidate_folder(target.cache_dir, backend, description) / BUILD_LOG_NAME
    try:
        if getattr(backend, "is_active", False):
            backend.deactivate()
    except Exception as exc:
        append_failure_log(log, "Releasing the backend failed", exc)
    finally:
        return_module(target)


def return_module(target: TuneTarget) -> None:
    """Move the module back to the tune's device (after a candidate moved it)."""
    # a module that cannot move is reported by the next step that needs it
    with contextlib.suppress(Exception):
        target.module.to(target.device)


#: The stages after a build whose failures :func:`failure_of` sorts.
Step = Literal["correctness", "timing", "recheck"]


@attrs.frozen
class StageFailure:
    """A stage's failure as a value: the stage it is recorded at, and its log and heading."""

    stage: Stage
    heading: str

    @property
    def log_name(self) -> str:
        """The log it is written to: profiling's own, else the build log."""
        return PROFILING_LOG_NAME if self.stage == "profiling" else BUILD_LOG_NAME


def build_failure(exc: BaseException) -> tuple[Stage, BaseException]:
    """The stage a build's exception is recorded at, and the exception to record."""
    if isinstance(exc, StageError):
        return exc.stage, exc.cause
    if isinstance(exc, CandidateHungError):
        return "hung", exc
    if isinstance(exc, BackendUnavailableError):
        return "unavailable", exc
    if isinstance(exc, WorkerError):
        return next((s for s in STAGES if s == exc.stage), "build"), exc
    return "build", exc


def failure_of(exc: BaseException, step: Step) -> StageFailure:
    """The one table from an exception in ``step`` to the stage it is recorded at."""
    if step == "recheck":
        return StageFailure("correctness", "Backend failed its check after the head-to-head")
    if step == "correctness":
        hung = isinstance(exc, CandidateHungError) or isinstance(exc.__cause__, CandidateHungError)
        return StageFailure("hung" if hung else "correctness", "Backend correctness check failed")
    if isinstance(exc, CandidateHungError):
        return StageFailure("hung", "Backend hung while timed")
    if isinstance(exc, InterferenceError):  # its process ran while another arm was timed
        return StageFailure("interference", "Backend's process ran while eager was timed")
    if isinstance(exc, (SpotCheckError, WorkerError, ModelChangedError, ProcessChangedError)):
        return StageFailure("correctness", "Backend output or model check failed while timing")
    return StageFailure("profiling", "Backend profiling failed")


def build_here(target: TuneTarget, blueprint: Any, build: Callable[[Any], Any] | None) -> Any:
    """The build stage: a driver's own build step, else a copy of ``blueprint`` built."""
    if build is not None:
        return build(blueprint)
    t = target
    return copy.deepcopy(blueprint).build(
        t.module, t.graph_spec, list(t.data), t.device, t.cache_dir
    )


def held_out(
    derive: Callable[..., tuple[Sample, ...]],
    *args: Any,
    seed: int,
    graph_spec: Any,
    **options: Any,
) -> tuple[Sample, ...]:
    """Held-out inputs from ``derive`` and ``seed``; None when no input can be varied."""
    try:
        return derive(*args, seed, batch_axes=getattr(graph_spec, "batch_axes", None), **options)
    except HeldoutUnavailableError:
        return ()


def checked_inputs(
    arena: Arena, seed: int, id_limits: Mapping[InputKey, int]
) -> tuple[Sample, ...]:
    """The correctness check's held-out inputs: domain draws, then ``input_generator``'s."""
    data, spec = arena.target.data, arena.target.graph_spec
    own = held_out(heldout_domain, data, seed=seed, graph_spec=spec, id_limits=id_limits)
    return own + arena.closeness.generated(data, seed, spec)


def call_deadline(
    config: ProfilingConfig, baseline_latencies: tuple[float, ...] | None
) -> tuple[float, str]:
    """One call's deadline (20x eager's slowest call, at least the grace) and what set it."""
    grace = config.hang_grace_s
    if not baseline_latencies:
        deadline = config.max_seconds + grace
        return deadline, (
            f"ProfilingConfig.max_seconds + hang_grace_s ({deadline:g} s): eager was not timed"
        )
    slowest = max(baseline_latencies)
    return max(20 * slowest, grace), (
        f"20x eager's slowest call ({slowest:.3g} s), at least ProfilingConfig.hang_grace_s "
        f"({grace:g} s)"
    )


def spot_check_of(closeness: Closeness, backend: Any) -> Callable[[Any, Any], Mismatch | None]:
    """How ``backend``'s timed outputs are compared with eager's; the check raises out of budget."""
    expected_dtype = declared_dtype(backend)
    tolerances = closeness.budget(backend)

    def check(output: Any, reference: Any) -> Mismatch | None:
        return closeness.spot(
            output, reference, expected_dtype=expected_dtype, tolerances=tolerances
        )

    return check


def unforeseen_seed() -> int:
    """A seed for one comparison's timed inputs and spot checks, drawn as it starts.

    Not the tune's: a worker forked before holds that in its copy of this process (a check's
    message writes it to the cache dir too), and computed eager's outputs for them untimed.
    """
    return random.SystemRandom().randrange(2**32)


def fresh_batches(batch: Sample, seed: int, graph_spec: Any) -> Callable[[int], Sample] | None:
    """Timed call ``i``'s own held-out batch, seeded per tune; None when no input can vary."""
    try:
        draw = heldout_draws(batch, batch_axes=getattr(graph_spec, "batch_axes", None))
    except HeldoutUnavailableError:
        return None
    return lambda index: draw((seed * 1_000_003 + index) % 2**63)


def check_closeness(arena: Arena, built: Any, name: str = "") -> Mismatch | None:
    """Closeness to eager on recorded and held-out samples in one pass (catches memorising)."""
    t, heldout = arena.target, arena.heldout()
    return arena.closeness.check(
        infer_of(built),
        t.module if arena.opened is None else infer_of(arena.opened.eager),
        t.graph_spec,
        list(t.data),
        expected_dtype=declared_dtype(built),
        tolerances=arena.closeness.budget(built),
        name=name or t.name,
        batch_sizes=arena.config.batch_sizes,
        heldout=list(heldout),
        heldout_seed=arena.seed if heldout else None,
    )


def measure(
    arena: Arena,
    backend: Any,
    description: str,
    mismatch: Mismatch | None,
    on_look: OnLook | None = None,
) -> PerformanceValidationResult:
    """Time ``backend`` against eager by the tune's rule; the result has the worst mismatch."""
    o = arena.opened
    if arena.eager_arm is None or o is None:
        raise InvalidStateError(
            f"no eager baseline to compare against ({arena.baseline_error}); "
            "a candidate cannot be shown faster without one"
        )
    assert arena.gate is not None and arena.batch_size
    seed = unforeseen_seed()
    comparison = Comparison(
        eager=arena.eager_arm,
        candidate=infer_of(backend),
        batch=o.batch,
        size=arena.batch_size,
        config=arena.config,
        gate=arena.gate,
        timer=arena.timer_on(o.batch),
        eager_latencies=o.latencies if arena.rule.keeps_eager_latencies else None,
        description=description,
        spot_check=spot_check_of(arena.closeness, backend),
        batches=o.batches,
        references=o.references,
        spot_seed=seed,
        spot_rate=arena.config.spot_rate,
        mismatch=Mismatch() if mismatch is None else mismatch,  # recorded even when none found
        isolation=arena.isolation,
        fresh=fresh_batches(o.batch, seed, arena.target.graph_spec),
    )
    return arena.rule.compare(comparison, on_look).result


class Arm(Protocol):
    """Where a candidate is built, checked and timed: open, build, then abandon or settle."""

    description: str
    folder: Path

    def open(self) -> None:
        """Start where the candidate runs; a worker says its description and folder first."""

    def build(self) -> Any:
        """The built candidate; raises what its build raised."""

    def abandon(self) -> None:
        """Let go of what a failed build holds."""

    def settle(self, outcome: CandidateOutcome) -> CandidateOutcome:
        """The outcome, after what the arm itself finds once the candidate was vetted."""


class HereArm:
    """A candidate built, checked and timed in this process (an :class:`~.stages.Arm`)."""

    def __init__(self, target: TuneTarget, backend: Any, build: Callable[[Any], Any] | None):
        """The candidate's description and folder are known here at once."""
        self.target, self.backend, self.build_step = target, backend, build
        self.description = describe(backend)
        self.folder = candidate_folder(target.cache_dir, backend, self.description)

    def open(self) -> None:
        """Nothing to start."""

    def build(self) -> Any:
        """The build stage, here."""
        return build_here(self.target, self.backend, self.build_step)

    def abandon(self) -> None:
        """A failed build may have moved the module: back to its device."""
        return_module(self.target)

    def settle(self, outcome: CandidateOutcome) -> CandidateOutcome:
        """Nothing more to find: the guards ran while it was vetted."""
        return outcome
