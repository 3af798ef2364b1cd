"""``with_performance_validation``: wrap any tuning strategy so no candidate ships unless faster.

Decorates a strategy class (returns a subclass) or instance (returns a validating copy of it),
with or without arguments. Per ``tune`` call it builds the eager baseline, gates every candidate
built through :func:`aitune_fp.strategies.try_candidate` by measurement against it, validates a
backend the strategy built on its own after the fact, and reports every step as an event.
"""

from __future__ import annotations

import math
import shutil
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar, cast, overload

import attrs
import torch

from aitune_fp import events
from aitune_fp._gate import CURRENT_GATE, Stage
from aitune_fp.backends import TorchEagerBackend
from aitune_fp.core._checks import check_threshold
from aitune_fp.core.config import ProfilingConfig, for_batch_size
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.core.speedup import required_speedup
from aitune_fp.correctness import check_correctness
from aitune_fp.inputs import GraphSpec, Sample, as_sample
from aitune_fp.measure import (
    Measurement,
    measure_baseline_point,
    measure_speedup,
    measure_throughput_steady,
)
from aitune_fp.strategies import (
    PROFILING_LOG_NAME,
    CandidateOutcome,
    NoValidBackendError,
    append_failure_log,
    one_line,
    release,
)

__all__ = [
    "CandidateFailure",
    "ValidatingStrategy",
    "ValidationOptions",
    "is_validating",
    "validation_of",
    "with_performance_validation",
]

BASELINE_DIR = "perf_validation_baseline"


class Strategy(Protocol):
    """Anything with AITune's ``tune`` signature."""

    def tune(
        self,
        module: torch.nn.Module,
        name: str,
        graph_spec: GraphSpec,
        data: Sequence[Sample],
        device: torch.device | str,
        cache_dir: Path | str,
    ) -> Any:
        """Return a built, active backend for ``module``."""


S = TypeVar("S", bound=Strategy)


def _threshold(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_threshold(attribute.name, value)


def _bool(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{attribute.name} must be a bool, got {value!r}")


@attrs.frozen(kw_only=True)
class ValidationOptions:
    """How a wrapped strategy validates: the gate, how to measure, and whether it is on."""

    min_speedup_threshold_percent: float = attrs.field(default=1.0, validator=_threshold)
    profiling_config: ProfilingConfig = attrs.field(
        factory=ProfilingConfig, validator=attrs.validators.instance_of(ProfilingConfig)
    )
    enabled: bool = attrs.field(default=True, validator=_bool)


@attrs.frozen
class CandidateFailure:
    """A candidate (or the strategy itself) that failed: where, why, and the saved traceback."""

    backend_description: str
    stage: Stage
    error_type: str
    reason: str
    traceback_path: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return attrs.asdict(self)


class _Run:
    """State of one validating tune call; also the gate candidates pass through."""

    def __init__(
        self,
        options: ValidationOptions,
        strategy_name: str,
        module: torch.nn.Module,
        name: str,
        graph_spec: GraphSpec,
        data: Sequence[Sample],
        device: torch.device | str,
        cache_dir: Path,
    ) -> None:
        self.options = options
        self.strategy_name = strategy_name
        self.module = module
        self.name = name
        self.graph_spec = graph_spec
        self.data = list(data)
        self.device = device
        self.cache_dir = cache_dir
        self.run_id = events.new_run_id()
        self.started = time.perf_counter()
        self.results: list[PerformanceValidationResult] = []
        self.failures: list[CandidateFailure] = []
        self._validated: list[tuple[Any, PerformanceValidationResult | None]] = []
        self._baseline: Any | None = None
        self.baseline_throughput: float | None = None
        self.baseline_latencies: tuple[float, ...] | None = None
        self.baseline_error: str | None = None
        self.batch_size: int | None = None
        self.config: ProfilingConfig | None = None
        self.batch: Sample | None = None

    # -- the Gate protocol -------------------------------------------------------------------
    @property
    def baseline(self) -> Any | None:
        """The built eager baseline (fallback), or None when it could not be built."""
        return self._baseline

    def phase(self, description: str, phase: str) -> None:
        """Report progress of one backend."""
        events.emit(
            events.phase(self.run_id, self.name, backend_description=description, phase=phase)  # type: ignore[arg-type]
        )

    def record_failure(
        self, description: str, stage: Stage, exc: BaseException, log_path: Path | None
    ) -> None:
        """Record a failed candidate and emit its warning event."""
        failure = CandidateFailure(
            description,
            stage,
            type(exc).__name__,
            one_line(exc),
            None if log_path is None else str(log_path),
        )
        self.failures.append(failure)
        events.emit(
            events.candidate_failed(
                self.run_id,
                self.name,
                backend_description=description,
                stage=stage,
                error_type=failure.error_type,
                reason=failure.reason,
                traceback_path=failure.traceback_path,
            )
        )

    def mark_validated(self, backend: Any, result: PerformanceValidationResult | None) -> None:
        """Remember a backend that passed the helper (by identity, not description)."""
        self._validated.append((backend, result))

    def measure(
        self, backend: Any, description: str, cache_dir: Path
    ) -> PerformanceValidationResult:
        """Time ``backend`` against eager with the tune's config; record and report the result."""
        if self._baseline is None or self.baseline_throughput is None:
            raise RuntimeError(
                f"no eager baseline to compare against ({self.baseline_error}); "
                "a candidate cannot be shown faster without one"
            )
        assert self.config is not None
        assert self.batch is not None
        assert self.batch_size is not None
        start = time.perf_counter()
        pct = self.options.min_speedup_threshold_percent
        measurement = measure_speedup(
            self._baseline,
            backend,
            self.batch,
            self.batch_size,
            self.config,
            pct,
            baseline_latencies=self.baseline_latencies if self.config.decision == "point" else None,
        )
        result = _to_result(description, measurement, pct)
        self.results.append(result)
        events.emit(
            events.candidate_measured(
                self.run_id, self.name, result, duration_s=time.perf_counter() - start
            )
        )
        if not result.passed:
            events.emit(events.candidate_rejected(self.run_id, self.name, result))
        return result

    # -- the run ---------------------------------------------------------------------------
    def validated_result(self, backend: Any) -> tuple[bool, PerformanceValidationResult | None]:
        """Whether ``backend`` passed through the helper, and its gate result."""
        for seen, result in self._validated:
            if seen is backend:
                return True, result
        return False, None

    def prepare_baseline(self) -> None:
        """Build and measure the eager baseline; any failure is reported, never raised."""
        pct = self.options.min_speedup_threshold_percent
        cache = self.cache_dir / BASELINE_DIR
        shutil.rmtree(cache, ignore_errors=True)
        description = TorchEagerBackend().describe()
        try:
            self.batch_size = self.graph_spec.get_max_batch_size()
            self.config = for_batch_size(
                self.options.profiling_config, self.batch_size, batching=True
            )
            events.emit(
                events.started(
                    self.run_id,
                    self.name,
                    strategy=self.strategy_name,
                    device=str(self.device),
                    decision=self.config.decision,
                    min_speedup_threshold_percent=pct,
                    required_speedup=required_speedup(pct),
                    batch_size=self.batch_size,
                )
            )
            if not self.data:
                raise ValueError(f"data for {self.name!r} must hold at least one sample, got none")
            self.batch = self.graph_spec.make_batch(as_sample(self.data[0]), self.batch_size)
            self.phase(description, "baseline_build")
            start = time.perf_counter()
            self._baseline = TorchEagerBackend().build(
                self.module, self.graph_spec, self.data, self.device, cache
            )
            self.phase(description, "baseline_measure")
            # point mode: AITune's fixed warm-up, exactly; statistical: warm up until steady
            measure_eager = (
                measure_baseline_point
                if self.config.decision == "point"
                else measure_throughput_steady
            )
            throughput, latencies = measure_eager(
                self._baseline, self.batch, self.batch_size, self.config
            )
            if not throughput > 0:
                raise RuntimeError(f"eager baseline throughput is {throughput!r} samples/s")
            self.baseline_throughput, self.baseline_latencies = throughput, latencies
            events.emit(
                events.baseline_measured(
                    self.run_id,
                    self.name,
                    backend_description=description,
                    batch_size=self.batch_size,
                    throughput_samples_per_s=throughput,
                    n_calls=len(latencies),
                    duration_s=time.perf_counter() - start,
                    decision=self.config.decision,
                )
            )
        except Exception as exc:
            cache.mkdir(parents=True, exist_ok=True)
            path = cache / "error.log"
            path.write_text(
                "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
                encoding="utf-8",
            )
            self.baseline_error = f"{type(exc).__name__}: {one_line(exc)}"
            # an eager baseline that cannot be measured is no fallback either
            self._baseline = None
            events.emit(
                events.baseline_failed(
                    self.run_id,
                    self.name,
                    error_type=type(exc).__name__,
                    reason=one_line(exc),
                    traceback_path=str(path),
                )
            )

    def check_after_the_fact(self, backend: Any) -> PerformanceValidationResult | None:
        """Validate a backend the strategy built without the helper; None when it fails."""
        description = _describe(backend)
        key = getattr(backend, "key", None)
        folder = self.cache_dir / (key() if callable(key) else "post_hoc")
        log = folder / "build.log"
        try:
            self.phase(description, "correctness")
            check_correctness(
                backend,
                self.module,
                self.graph_spec,
                self.data,
                expected_dtype=getattr(backend, "dtype", None),
                name=self.name,
            )
        except Exception as exc:
            append_failure_log(log, "Backend correctness check failed", exc)
            self.record_failure(description, "correctness", exc, log)
            return None
        try:
            self.phase(description, "measure")
            result = self.measure(backend, description, folder)
        except Exception as exc:
            path = folder / PROFILING_LOG_NAME
            append_failure_log(path, "Backend profiling failed", exc)
            self.record_failure(description, "profiling", exc, path)
            return None
        return result if result.passed else None

    def conclude(self, backend: Any) -> Any:
        """Validate the strategy's choice if needed, fall back when it fails, report the pick."""
        if backend is None:
            self.finish("passthrough", None, reason="the strategy returned no backend")
            return None
        if backend is self._baseline:
            self.select(backend, None)
            return backend
        seen, result = self.validated_result(backend)
        if not seen:
            result = self.check_after_the_fact(backend)
            if result is None:
                release(backend, self.module, self.device)
                if self._baseline is None:
                    outcome = CandidateOutcome(
                        _describe(backend), None, reason="failed validation after the fact"
                    )
                    self.finish("error", None, reason="no valid backend and no eager baseline")
                    raise NoValidBackendError(self.name, [outcome])
                self.select(self._baseline, None)
                return self._baseline
        self.select(backend, result)
        return backend

    def select(self, backend: Any, result: PerformanceValidationResult | None) -> None:
        """Emit the outcome line and the finished event."""
        is_baseline = backend is self._baseline
        events.emit(
            events.selected(
                self.run_id,
                self.name,
                backend_description=_describe(backend),
                is_baseline=is_baseline,
                result=result,
                baseline_throughput=self.baseline_throughput,
                info_on=events.info_enabled(),
            )
        )
        self.finish("baseline" if is_baseline else "candidate", _describe(backend))

    def finish(self, outcome: Any, description: str | None, *, reason: str | None = None) -> None:
        """Emit the finished event with the counts of this run."""
        events.emit(
            events.finished(
                self.run_id,
                self.name,
                outcome=outcome,
                backend_description=description,
                n_candidates=len(self.results) + sum(f.stage != "strategy" for f in self.failures),
                n_measured=len(self.results),
                n_passed=sum(r.passed for r in self.results),
                n_failed=sum(f.stage != "strategy" for f in self.failures),
                duration_s=time.perf_counter() - self.started,
                reason=reason,
            )
        )


def _describe(backend: Any) -> str:
    describe = getattr(backend, "describe", None)
    return str(describe()) if callable(describe) else type(backend).__name__


def _to_result(description: str, m: Measurement, pct: float) -> PerformanceValidationResult:
    """Turn a measurement into the public result record."""
    d = m.decision
    # too few pairs for the confidence give an unbounded interval: record "no bound", not inf
    ci_high = None if d is None or not math.isfinite(d.ci_high) else d.ci_high
    return PerformanceValidationResult(
        description,
        m.throughput,
        m.baseline_throughput,
        m.speedup,
        m.passed,
        estimate=None if d is None else d.speedup,
        ci_low=None if d is None else d.ci_low,
        ci_high=ci_high,
        confidence=None if d is None else d.confidence,
        n_baseline=m.n_baseline,
        n_candidate=m.n_candidate,
        batch_size=m.batch_size,
        required_speedup=required_speedup(pct),
        verdict=m.verdict,
        decision=m.mode,
        reason=m.reason,
        flags=m.flags,
    )


# -- the validating class ---------------------------------------------------------------------

_STATE_LOCK = threading.Lock()
_T = TypeVar("_T")


class _Runs:
    """The runs of one strategy: this thread's last and the latest of any thread.

    Copies and pickles of a strategy start with an empty record (results belong to the tune
    calls that made them, not to copies).
    """

    def __init__(self) -> None:
        self.local = threading.local()
        self.last: _Run | None = None

    def __reduce__(self) -> tuple[type[_Runs], tuple[()]]:
        """Copy or pickle as an empty record."""
        return (_Runs, ())

    def current(self) -> _Run | None:
        """The last run of the calling thread if it tuned, else the latest of any thread."""
        run: _Run | None = getattr(self.local, "run", None)
        return run if run is not None else self.last

    def store(self, run: _Run) -> None:
        """Record a finished run for this thread and as the latest."""
        self.local.run = run
        self.last = run


class _RunValue(Generic[_T]):
    """A read-out of the last tune (``perf_validation_results``, ...), AITune's names.

    A strategy may assign the same name itself (AITune-style code does): that value is kept
    and returned until the wrapper has run a tune.
    """

    def __init__(self, read: Callable[[_Run], _T], default: _T, doc: str) -> None:
        self._read = read
        self._default = default
        self.__doc__ = doc
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> _RunValue[_T]: ...
    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> _T: ...
    def __get__(self, obj: object | None, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        run = _runs(obj).current()
        if run is not None:
            return self._read(run)
        return obj.__dict__.get(f"_aitune_fp_own_{self._name}", self._default)

    def __set__(self, obj: object, value: _T) -> None:
        obj.__dict__[f"_aitune_fp_own_{self._name}"] = value


def _runs(obj: object) -> _Runs:
    """The run record of a validating strategy (created on first use)."""
    runs = obj.__dict__.get("_aitune_fp_runs")
    if runs is None:
        with _STATE_LOCK:
            runs = obj.__dict__.setdefault("_aitune_fp_runs", _Runs())
    return runs  # type: ignore[no-any-return]


class _Validating:
    """Mixin placed before a strategy class: validated ``tune`` plus AITune's state attributes."""

    _aitune_fp_options: ValidationOptions = ValidationOptions()
    __aitune_fp_base__: type

    @property
    def validation_options(self) -> ValidationOptions:
        """The options this strategy validates with."""
        return self._aitune_fp_options

    @property
    def min_speedup_threshold_percent(self) -> float:
        """The gate: a candidate must be this many percent faster than eager."""
        return self._aitune_fp_options.min_speedup_threshold_percent

    @min_speedup_threshold_percent.setter
    def min_speedup_threshold_percent(self, value: float) -> None:
        self._aitune_fp_options = attrs.evolve(
            self._aitune_fp_options, min_speedup_threshold_percent=value
        )

    @property
    def performance_validation_enabled(self) -> bool:
        """Whether ``tune`` validates (False: no eager build, no profiling)."""
        return self._aitune_fp_options.enabled

    def enable_performance_validation(self: _V, enable: bool = True) -> _V:
        """Switch validation on or off for this strategy; returns the strategy for chaining."""
        self._aitune_fp_options = attrs.evolve(self._aitune_fp_options, enabled=enable)
        return self

    perf_validation_results = _RunValue[tuple[PerformanceValidationResult, ...]](
        lambda run: tuple(run.results),
        (),
        "One result per measured candidate of the last tune (this thread's, if it tuned).",
    )
    candidate_failures = _RunValue[tuple[CandidateFailure, ...]](
        lambda run: tuple(run.failures),
        (),
        "Candidates of the last tune that failed to build, to match eager, or to be profiled.",
    )
    baseline_throughput = _RunValue[float | None](
        lambda run: run.baseline_throughput,
        None,
        "Eager throughput (samples/s) measured up front in the last tune.",
    )
    baseline_backend = _RunValue[Any](
        lambda run: run.baseline, None, "The eager baseline backend of the last tune."
    )
    resolved_batch_size = _RunValue[int | None](
        lambda run: run.batch_size,
        None,
        "The batch size the last tune validated at (the graph spec's max).",
    )
    run_id = _RunValue[str | None](
        lambda run: run.run_id, None, "The run id of the last tune (shared by all its events)."
    )

    # tune ------------------------------------------------------------------------------------
    def tune(
        self,
        module: torch.nn.Module,
        name: str,
        graph_spec: GraphSpec,
        data: Sequence[Sample],
        device: torch.device | str,
        cache_dir: Path | str,
    ) -> Any:
        """Run the strategy's own ``tune`` with every candidate gated against eager."""
        inner: Callable[..., Any] = super().tune  # type: ignore[misc]
        options = self._aitune_fp_options
        run = _Run(
            options,
            type(self).__name__,
            module,
            name,
            graph_spec,
            data,
            device,
            Path(cache_dir),
        )
        token = CURRENT_GATE.set(run if options.enabled else None)
        try:
            if not options.enabled:
                events.emit(events.disabled(run.run_id, name, strategy=run.strategy_name))
                backend = inner(module, name, graph_spec, data, device, cache_dir)
                run.finish(
                    "candidate" if backend is not None else "passthrough",
                    None if backend is None else _describe(backend),
                )
                return backend
            run.prepare_baseline()
            try:
                backend = inner(module, name, graph_spec, data, device, cache_dir)
            except Exception as exc:
                path = Path(cache_dir) / "strategy_error.log"
                append_failure_log(path, f"Strategy {run.strategy_name} failed", exc)
                run.record_failure(run.strategy_name, "strategy", exc, path)
                run.finish("error", None, reason=f"{type(exc).__name__}: {one_line(exc)}")
                raise
            return run.conclude(backend)
        except BaseException as exc:
            if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit: close the run
                run.finish("error", None, reason=f"interrupted ({type(exc).__name__})")
            raise
        finally:
            CURRENT_GATE.reset(token)
            _runs(self).store(run)

    # copy / pickle ---------------------------------------------------------------------------
    def __reduce_ex__(self, protocol: Any) -> Any:
        """Pickle and copy through an importable class, keeping options and the object's state.

        The strategy's own ``__getstate__``/``__setstate__`` are honoured.
        """
        cls = type(self)
        target: type = cls if _importable(cls) else cls.__aitune_fp_base__
        return (_rebuild, (target, self._aitune_fp_options), _get_state(self))


_V = TypeVar("_V", bound=_Validating)


def _importable(cls: type) -> bool:
    module = sys.modules.get(cls.__module__)
    obj: Any = module
    for part in cls.__qualname__.split("."):
        obj = getattr(obj, part, None)
    return obj is cls


def _get_state(obj: object) -> Any:
    """The object's state as pickle would take it (its own ``__getstate__`` if it has one)."""
    getstate = getattr(obj, "__getstate__", None)
    if getstate is not None:
        return getstate()
    slots = {n: getattr(obj, n) for n in _slot_names(type(obj)) if hasattr(obj, n)}
    state = dict(getattr(obj, "__dict__", {}))
    return (state or None, slots) if slots else state


def _set_state(obj: object, state: Any) -> None:
    """Apply a state as pickle would (the object's own ``__setstate__`` if it has one)."""
    setstate = getattr(obj, "__setstate__", None)
    if setstate is not None:
        setstate(state)
        return
    slots: dict[str, Any] | None = None
    if isinstance(state, tuple) and len(state) == 2:
        state, slots = state
    if state:
        obj.__dict__.update(state)
    for key, value in (slots or {}).items():
        object.__setattr__(obj, key, value)


def _slot_names(cls: type) -> list[str]:
    names: list[str] = []
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names += [slots] if isinstance(slots, str) else list(slots)
    return [n for n in names if n not in ("__dict__", "__weakref__")]


def _rebuild(cls: type, options: ValidationOptions | None = None) -> Any:
    """An empty validating instance of ``cls`` (made validating if it is not) with ``options``."""
    target: Any = cls if is_validating(cls) else _validating_class(cls, None)
    obj = target.__new__(target)
    if options is not None and options != target._aitune_fp_options:
        obj.__dict__["_aitune_fp_options"] = options
    return obj


_CLASS_CACHE: dict[type, type] = {}


def is_validating(target: object) -> bool:
    """Whether ``target`` (a class or instance) already validates performance."""
    cls = target if isinstance(target, type) else type(target)
    return issubclass(cls, _Validating)


def _validating_class(base: type, options: ValidationOptions | None) -> type:
    """A subclass of ``base`` with validated ``tune`` (cached per base when options is None).

    ``base`` may itself validate already (a user's subclass of a decorated class): the new
    class derives from it, so nothing the user added is lost, and only the options change.
    """
    if options is None:
        with _STATE_LOCK:
            cached = _CLASS_CACHE.get(base)
        if cached is not None:
            return cached
    namespace: dict[str, Any] = {
        "__module__": base.__module__,
        "__qualname__": base.__qualname__,
        "__doc__": base.__doc__,
        "__wrapped__": base,
        "__aitune_fp_base__": base,
    }
    if options is not None:
        namespace["_aitune_fp_options"] = options
    bases = (base,) if is_validating(base) else (_Validating, base)
    cls = type(base.__name__, bases, namespace)
    if options is None:
        with _STATE_LOCK:
            cls = _CLASS_CACHE.setdefault(base, cls)
    return cls


def _check_strategy(target: object) -> None:
    tune = getattr(target, "tune", None)
    if not callable(tune):
        raise TypeError(
            f"with_performance_validation needs a strategy with a tune(module, name, graph_spec, "
            f"data, device, cache_dir) method, got {target!r}"
        )


def _wrap_class(cls: type, options: ValidationOptions) -> type:
    return _validating_class(cls, options)


def _wrap_instance(obj: Any, options: ValidationOptions) -> Any:
    """A validating shallow copy of ``obj`` (its own type kept when it validates already)."""
    if is_validating(obj):
        cls: Any = type(obj)
        inner = obj.__dict__.get("__wrapped__", obj)
    else:
        cls, inner = _validating_class(type(obj), None), obj
    new = cls.__new__(cls)
    _set_state(new, _get_state(obj))
    new.__dict__.pop("_aitune_fp_runs", None)  # a copy starts with no runs of its own
    new.__dict__["__wrapped__"] = inner
    new.__dict__["_aitune_fp_options"] = options
    return new


class ValidatingStrategy(Strategy, Protocol):
    """What a wrapped strategy offers beyond its own type, for type checkers (see ``validation_of``)."""

    @property
    def validation_options(self) -> ValidationOptions:
        """The options it validates with."""

    @property
    def min_speedup_threshold_percent(self) -> float:
        """The gate in percent."""

    @property
    def performance_validation_enabled(self) -> bool:
        """Whether tune validates."""

    @property
    def perf_validation_results(self) -> tuple[PerformanceValidationResult, ...]:
        """One result per measured candidate of the last tune."""

    @property
    def candidate_failures(self) -> tuple[CandidateFailure, ...]:
        """Candidates of the last tune that failed."""

    @property
    def baseline_throughput(self) -> float | None:
        """Eager throughput measured up front in the last tune."""

    @property
    def baseline_backend(self) -> Any:
        """The eager baseline backend of the last tune."""

    @property
    def resolved_batch_size(self) -> int | None:
        """The batch size the last tune validated at."""

    @property
    def run_id(self) -> str | None:
        """The run id of the last tune."""

    def enable_performance_validation(self, enable: bool = True) -> Any:
        """Switch validation on or off; returns the strategy."""


def validation_of(strategy: object) -> ValidatingStrategy:
    """``strategy`` typed as validating, so its read-outs type-check; TypeError if it is not.

    ``with_performance_validation`` keeps the strategy's own type for mypy; use this to reach
    ``perf_validation_results`` and friends without a cast.
    """
    if not is_validating(strategy) or isinstance(strategy, type):
        raise TypeError(
            f"validation_of needs a strategy instance wrapped by with_performance_validation, "
            f"got {strategy!r}"
        )
    return cast(ValidatingStrategy, strategy)


class _Decorator(Protocol):
    @overload
    def __call__(self, target: type[S], /) -> type[S]: ...
    @overload
    def __call__(self, target: S, /) -> S: ...


@overload
def with_performance_validation(
    target: type[S],
    /,
    *,
    min_speedup_threshold_percent: float = ...,
    profiling_config: ProfilingConfig | None = ...,
    enabled: bool = ...,
) -> type[S]: ...
@overload
def with_performance_validation(
    target: S,
    /,
    *,
    min_speedup_threshold_percent: float = ...,
    profiling_config: ProfilingConfig | None = ...,
    enabled: bool = ...,
) -> S: ...
@overload
def with_performance_validation(
    target: None = None,
    /,
    *,
    min_speedup_threshold_percent: float = ...,
    profiling_config: ProfilingConfig | None = ...,
    enabled: bool = ...,
) -> _Decorator: ...
def with_performance_validation(
    target: Any = None,
    /,
    *,
    min_speedup_threshold_percent: float = 1.0,
    profiling_config: ProfilingConfig | None = None,
    enabled: bool = True,
) -> Any:
    """Make a strategy (class or instance) gate every candidate against eager PyTorch.

    A class gives a subclass; an instance gives a validating shallow copy whose ``__wrapped__``
    is the original. Wrapping a validating strategy again only re-configures it.
    """
    options = ValidationOptions(
        min_speedup_threshold_percent=min_speedup_threshold_percent,
        profiling_config=profiling_config if profiling_config is not None else ProfilingConfig(),
        enabled=enabled,
    )

    def apply(t: Any) -> Any:
        _check_strategy(t)
        return _wrap_class(t, options) if isinstance(t, type) else _wrap_instance(t, options)

    return apply if target is None else apply(target)
