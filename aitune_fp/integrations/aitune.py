"""Gate NVIDIA AITune's own strategies with aitune_fp's interleaved statistical decision.

``aitune_fp.with_performance_validation(strategy_or_class)`` sends an AITune strategy here. What
comes back is a strategy of the same AITune class (a trivial subclass; for an instance, a
strategy of that subclass sharing the instance's state) whose every candidate is decided by
aitune_fp instead of AITune's point estimate:

* mixin strategies (``OneBackendStrategy``, ``FirstWinsStrategy`` and their subclasses): each
  candidate passes through ``_build_validate_and_check_perf``, which is replaced;
* ``MaxThroughputStrategy``: ``_run_backends`` is replaced and ``_resolve_winner`` no longer
  re-applies AITune's comparison to a candidate the gate already passed.

Per candidate: AITune builds it and runs its own correctness check (``_build_and_validate_backend``,
unchanged), aitune_fp checks its output is close to eager's, then times ``baseline.infer`` against
``candidate.infer`` interleaved on AITune's own batch at AITune's resolved batch size and decides
with the rule of ``ProfilingConfig.decision`` (``statistical`` or ``point``). AITune keeps its
contract: its ``perf_validation_results`` list gets one AITune-shaped record per measured
candidate (so its log lines and ⚡ post-tune line print as before), its threshold and
``enable_performance_validation(mode)`` keep their meaning (enabled / diagnostic / disabled), and
its fallbacks stay (OneBackend falls back to eager, FirstWins raises, MaxThroughput falls back to
eager). aitune_fp's own results, failures and report are available through
``validation_of(strategy)``; its structlog events are emitted with the usual schema.

The hooks are private names of AITune 0.6: each is checked by name when a strategy is decorated,
and a missing one is a clear :class:`AituneVersionError` naming the AITune version and the name;
the decorated strategy never falls back to AITune's own gate. This module does not import AITune
at import time (it works on the strategy it is given and imports AITune's modules on first use).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import importlib
import importlib.metadata
import math
import time
from pathlib import Path
from typing import Any, Final, NoReturn

import attrs
import torch

from aitune_fp import events
from aitune_fp.core._checks import check_threshold, of_type
from aitune_fp.core.config import ProfilingConfig, for_batch_size
from aitune_fp.core.report import CandidateFailure, Outcome, Stage, TuneReport
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.core.speedup import DEFAULT_THRESHOLD_PERCENT, required_speedup
from aitune_fp.correctness import Tolerances, compare_outputs
from aitune_fp.errors import AitunefpError, InvalidStateError, InvalidTypeError
from aitune_fp.inputs import Sample, copy_sample
from aitune_fp.measure import rule_for
from aitune_fp.profiling import SpotCheckError, Timer, timer_for
from aitune_fp.session import (
    BASELINE_DIR,
    PROFILING_LOG_NAME,
    ValidationOptions,
    append_failure_log,
    describe,
    one_line,
)
from aitune_fp.validation import _current, _reports

__all__ = [
    "SUPPORTED_AITUNE",
    "AituneOptions",
    "AituneValidation",
    "AituneVersionError",
    "aitune_version",
    "is_aitune_strategy",
    "with_performance_validation",
]

#: The AITune versions whose private hooks this adapter was written against and tested with.
SUPPORTED_AITUNE: Final = "0.6.x"

_MIXIN_MODULE = "aitune.torch.tune_strategy.mixin.performance_validation_mixin"
_PROFILING_MODULE = "aitune.torch.tune_strategy.profiling_tune_strategy"
_FORMATTING_MODULE = "aitune.torch.tune_strategy.formatting"
_REPORTING_MODULE = "aitune.torch.tune_data.reporting"
_LOGGING_MODULE = "aitune.utils.logging"

#: Methods every gated strategy must have (AITune's tune flow and its build + correctness step).
_COMMON_HOOKS: Final = (
    "tune",
    "_pre_tune",
    "_post_tune",
    "_tune",
    "_build_and_validate_backend",
    "check_correctness",
    "enable_performance_validation",
    "_log_file",
)
_MIXIN_HOOKS: Final = ("_build_validate_and_check_perf",)
_PROFILING_HOOKS: Final = ("_run_backends", "_resolve_winner", "_record_perf_result", "_fmt")
#: Module-level names the adapter uses, per AITune module.
_MODULE_NAMES: Final = {
    _MIXIN_MODULE: ("PerformanceValidationMixinResult",),
    _PROFILING_MODULE: ("BackendPerfResult", "_TuneCandidate"),
    _FORMATTING_MODULE: ("fmt_speedup_comparison",),
    _REPORTING_MODULE: ("report_backend_metric",),
    _LOGGING_MODULE: ("log",),
}
#: Strategy state AITune sets in ``__init__``/``_pre_tune`` and the adapter reads, per kind.
_MIXIN_STATE: Final = (
    "perf_validation_results",
    "_performance_validation_mode",
    "_baseline_backend",
    "_resolved_batch_size",
    "_sink",
)
_PROFILING_STATE: Final = (
    "perf_validation_results",
    "_performance_validation_mode",
    "_baseline_backend",
    "_baseline_result",
    "_backends",
    "_sink",
)


class AituneVersionError(AitunefpError, RuntimeError):
    """The installed AITune lacks a private hook the adapter needs; nothing was gated."""


def aitune_version() -> str:
    """The installed AITune's version ("unknown" when it cannot be read)."""
    try:
        return importlib.metadata.version("aitune")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def is_aitune_strategy(target: object) -> bool:
    """Whether ``target`` (a class or instance) is an AITune strategy, judged by module names only.

    Never imports AITune: a class whose MRO has a class from an ``aitune.`` module qualifies.
    """
    cls = target if isinstance(target, type) else type(target)
    return any(str(getattr(k, "__module__", "")).startswith("aitune.") for k in cls.__mro__)


def _optional_threshold(value: object) -> float | None:
    return None if value is None else check_threshold("min_speedup_threshold_percent", value)


@attrs.frozen(kw_only=True)
class AituneOptions:
    """How a decorated AITune strategy is gated.

    ``min_speedup_threshold_percent``: None keeps the strategy's own
    (``min_speedup_threshold_percent`` given to AITune's constructor; MaxThroughput has none and
    gets aitune_fp's default of 1 %). ``closeness_check``: also compare each candidate's output
    with eager's (``tolerances``; a backend that declares an autocast dtype gets the reduced
    precision tier); switch it off for quantized backends whose outputs differ by design.
    """

    min_speedup_threshold_percent: float | None = attrs.field(
        default=None, converter=_optional_threshold
    )
    profiling_config: ProfilingConfig = attrs.field(
        factory=ProfilingConfig, validator=of_type(ProfilingConfig)
    )
    enabled: bool = attrs.field(default=True, validator=of_type(bool))
    timer: Timer | None = attrs.field(default=None, eq=False)
    closeness_check: bool = attrs.field(default=True, validator=of_type(bool))
    tolerances: Tolerances = attrs.field(factory=Tolerances, validator=of_type(Tolerances))


# -- AITune's modules and names, checked by name ----------------------------------------------


def _missing(what: str, name: str) -> AituneVersionError:
    return AituneVersionError(
        f"aitune_fp cannot gate {what} of AITune {aitune_version()}: it has no {name!r} "
        f"(the adapter uses AITune {SUPPORTED_AITUNE}'s private hooks; see docs/aitune.md). "
        "Nothing was gated: use a supported AITune version or AITune's own validation."
    )


def _aitune(module: str, name: str) -> Any:
    """``module.name`` from AITune, or AituneVersionError naming what is missing."""
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise _missing("strategies", module) from exc
    if not hasattr(mod, name):
        raise _missing("strategies", f"{module}.{name}")
    return getattr(mod, name)


def _check_hooks(base: type) -> type[_AituneGate]:
    """The gate class for ``base`` after checking every hook it needs exists."""
    what = f"{base.__name__}"
    for name in _COMMON_HOOKS:
        if not callable(getattr(base, name, None)):
            raise _missing(what, name)
    for module, names in _MODULE_NAMES.items():
        for name in names:
            _aitune(module, name)
    if callable(getattr(base, "_build_validate_and_check_perf", None)):
        return _MixinGate
    if not callable(getattr(base, "_run_backends", None)):
        raise _missing(what, "_build_validate_and_check_perf")
    for name in _PROFILING_HOOKS:
        if not callable(getattr(base, name, None)):
            raise _missing(what, name)
    owner = _defined_in(base, "_measure")
    if (
        owner is None
        or owner.__name__ != "MaxThroughputStrategy"
        or _defined_in(base, "_resolve_winner") is not _defined_in(base, "_run_backends")
    ):
        raise InvalidTypeError(
            f"{base.__name__} is not supported: aitune_fp gates AITune's OneBackendStrategy, "
            "FirstWinsStrategy, MaxThroughputStrategy and their subclasses that keep how they "
            "measure (MinLatency and LatencyBudget select by latency; see docs/aitune.md)"
        )
    return _ThroughputGate


def _defined_in(cls: type, name: str) -> type | None:
    for klass in cls.__mro__:
        if name in vars(klass) and not issubclass(klass, _AituneGate):
            return klass
    return None


def _check_state(strategy: Any, names: tuple[str, ...]) -> None:
    for name in names:
        if not hasattr(strategy, name):
            raise _missing(f"{type(strategy).__name__} instances", name)


def _mode(strategy: Any) -> str:
    """AITune's validation mode as a string: "enabled", "diagnostic" or "disabled"."""
    mode = strategy._performance_validation_mode
    value = getattr(mode, "value", mode)
    if isinstance(value, bool):  # AITune's main branch: a plain on/off flag
        return "enabled" if value else "disabled"
    return str(value)


def _log(strategy: Any, msg: str, *args: Any, depth: int = 0) -> None:
    """A line through AITune's own sink and indentation (as AITune's strategies log)."""
    _aitune(_LOGGING_MODULE, "log")(msg, *args, sink=strategy._sink, depth=depth)


# -- one decorated tune ----------------------------------------------------------------------

_RUN: contextvars.ContextVar[_Run | None] = contextvars.ContextVar(
    "aitune_fp_aitune_run", default=None
)


class _RejectedError(Exception):
    """A candidate the adapter let go (recorded already); ``exc`` is what AITune may re-raise."""

    def __init__(self, stage: Stage, exc: BaseException) -> None:
        super().__init__(str(exc))
        self.stage = stage
        self.exc = exc


class _Run:
    """One ``tune`` call of a decorated AITune strategy: the gate's state, events and report."""

    def __init__(self, strategy: Any, options: AituneOptions, target: tuple[Any, ...]) -> None:
        module, name, graph_spec, samples, device, cache_dir = target
        self.strategy = strategy
        self.options = options
        self.module: torch.nn.Module = module
        self.name = str(name)
        self.graph_spec = graph_spec
        self.samples = samples
        self.device = device
        self.cache_dir = Path(cache_dir)
        self.mode = _mode(strategy)
        own = getattr(strategy, "min_speedup_threshold_percent", None)
        pct = options.min_speedup_threshold_percent
        if pct is None:
            pct = check_threshold(
                "min_speedup_threshold_percent", DEFAULT_THRESHOLD_PERCENT if own is None else own
            )
        self.pct: float = pct
        self.config = options.profiling_config
        self.rule = rule_for(self.config)
        self.run_id = events.new_run_id()
        self._started = time.perf_counter()
        self.results: list[PerformanceValidationResult] = []
        self.failures: list[CandidateFailure] = []
        self.rejected: list[str] = []
        self.kept: list[tuple[Any, PerformanceValidationResult]] = []
        self.baseline: Any = None
        self.baseline_throughput: float | None = None
        self.baseline_latencies: tuple[float, ...] | None = None
        self.baseline_error: str | None = None
        self.batch: Sample | None = None
        self.batch_size: int | None = None
        self.reference: Any = None
        self.stage: Stage = "build"
        self.n_events = 0
        self.selected: tuple[str | None, bool | None, str | None] = (None, None, None)
        self.outcome: Outcome | None = None
        self.reason: str | None = None

    # -- events --------------------------------------------------------------------------------
    def emit(self, event: events.Event) -> None:
        self.n_events += 1
        events.emit(event)

    def phase(self, description: str, phase: events.Phase) -> None:
        if self.mode != "disabled":
            self.emit(
                events.phase(self.run_id, self.name, backend_description=description, phase=phase)
            )

    @property
    def timer(self) -> Timer:
        assert self.batch is not None
        return self.options.timer if self.options.timer is not None else timer_for(self.batch)

    # -- the baseline --------------------------------------------------------------------------
    def open(self, baseline: Any, batch_size: int, batching: bool, baseline_dir: str) -> None:
        """After AITune's ``_pre_tune``: emit ``started``, then measure AITune's eager baseline.

        ``baseline`` is AITune's built TorchEager backend (None when AITune's own baseline
        failed: no candidate can then be shown faster). Never raises for the baseline.
        """
        size = int(batch_size) if batching else 1
        self.batch_size = size
        self.config = for_batch_size(self.options.profiling_config, size)
        self.emit(
            events.started(
                self.run_id,
                self.name,
                strategy=type(self.strategy).__name__,
                device=str(self.device),
                decision=self.rule.name,
                min_speedup_threshold_percent=self.pct,
                required_speedup=required_speedup(self.pct),
                batch_size=size,
            )
        )
        folder = self.cache_dir / baseline_dir
        description = "TorchEagerBackend()" if baseline is None else describe(baseline)
        start = time.perf_counter()
        try:
            if baseline is None:
                raise InvalidStateError(
                    f"AITune's eager baseline failed (see {folder / 'error.log'})"
                )
            description = describe(baseline)
            args, kwargs = self.samples[0]
            if batching:
                args, kwargs = self.graph_spec.make_batch(args, kwargs, size)
            self.batch = Sample(tuple(args), dict(kwargs))
            self.phase(description, "baseline_measure")
            throughput, latencies = self.rule.measure_eager(
                baseline.infer, self.batch, size, self.config, timer=self.timer
            )
            if not (math.isfinite(throughput) and throughput > 0):
                raise InvalidStateError(f"eager baseline throughput is {throughput!r} samples/s")
            with torch.no_grad():
                self.reference = copy_sample(self.batch).call(baseline.infer)
        except Exception as exc:
            path: str | None = str(folder / "error.log")
            if baseline is not None:
                path = append_failure_log(folder / "error.log", "Eager baseline failed", exc)
            self.baseline_error = f"{type(exc).__name__}: {one_line(exc)}"
            self.emit(
                events.baseline_failed(
                    self.run_id,
                    self.name,
                    error_type=type(exc).__name__,
                    reason=one_line(exc),
                    traceback_path=path,
                )
            )
            return
        self.baseline = baseline
        self.baseline_throughput, self.baseline_latencies = float(throughput), latencies
        self.emit(
            events.baseline_measured(
                self.run_id,
                self.name,
                backend_description=description,
                batch_size=size,
                throughput_samples_per_s=float(throughput),
                n_calls=len(latencies),
                duration_s=time.perf_counter() - start,
                decision=self.rule.name,
            )
        )

    # -- one candidate -------------------------------------------------------------------------
    def build(self, backend: Any, target: tuple[Any, ...]) -> Any:
        """AITune's build and correctness check (its logs and ``backend_results`` unchanged).

        Raises what AITune raised (after AITune's own clean-up), recorded as a failure.
        """
        description = describe(backend)
        self.phase(description, "build")
        self.stage = "build"
        try:
            return self.strategy._build_and_validate_backend(
                backend, *target, raise_on_failure=True
            )
        except Exception as exc:
            log = self.cache_dir / _key(backend) / "build.log"
            self.record_failure(description, self.stage, exc, str(log) if log.is_file() else None)
            raise

    def vet(self, built: Any, description: str, folder: Path) -> PerformanceValidationResult | None:
        """aitune_fp's closeness check, then the timed comparison with eager; the result.

        None: nothing to compare with (no eager baseline) in diagnostic mode. Raises
        :class:`_RejectedError` for a candidate that failed here (released, recorded).
        """
        if self.baseline is None or self.batch is None or self.batch_size is None:
            if self.mode == "diagnostic":
                return None
            exc = InvalidStateError(
                f"no eager baseline to compare against ({self.baseline_error}); a candidate "
                "cannot be shown faster without one"
            )
            self._reject(built, description, "profiling", exc, None)
        dtype = _declared_dtype(built)
        log = folder / "build.log"
        if self.options.closeness_check:
            self.phase(description, "correctness")
            try:
                with torch.no_grad():
                    output = copy_sample(self.batch).call(built.infer)
                compare_outputs(
                    output,
                    self.reference,
                    expected_dtype=dtype,
                    tolerances=self.options.tolerances,
                )
            except Exception as exc:
                append_failure_log(log, "aitune_fp closeness check against eager failed", exc)
                self._mark_failed(description)
                self._reject(built, description, "correctness", exc, log)
        self.phase(description, "measure")
        reference, tolerances, check = self.reference, self.options.tolerances, self.options
        start = time.perf_counter()

        def spot_check(output: Any) -> None:
            if check.closeness_check:
                compare_outputs(output, reference, expected_dtype=dtype, tolerances=tolerances)

        try:
            result = self.rule.compare(
                self.baseline.infer,
                built.infer,
                self.batch,
                self.batch_size,
                self.config,
                self.pct,
                self.timer,
                eager_latencies=self.baseline_latencies
                if self.rule.keeps_eager_latencies
                else None,
                description=description,
                spot_check=spot_check,
            ).result
        except SpotCheckError as exc:
            append_failure_log(log, "Backend output check failed while timing", exc)
            self._mark_failed(description)
            self._reject(built, description, "correctness", exc, log)
        except Exception as exc:
            path = folder / PROFILING_LOG_NAME
            append_failure_log(path, "Backend profiling failed", exc)
            self._reject(built, description, "profiling", exc, path)
        self.results.append(result)
        self.emit(
            events.candidate_measured(
                self.run_id, self.name, result, duration_s=time.perf_counter() - start
            )
        )
        if not result.passed:
            self.rejected.append(description)
            self.emit(events.candidate_rejected(self.run_id, self.name, result))
        if result.passed or self.mode == "diagnostic":
            self.kept.append((built, result))
        return result

    def _mark_failed(self, description: str) -> None:
        """AITune's ``backend_results`` entry of a candidate aitune_fp found wrong: failed."""
        entries = getattr(self.strategy, "backend_results", None)
        if entries and isinstance(entries[-1], dict) and entries[-1].get("backend") == description:
            entries[-1]["success"] = False

    def _reject(
        self, built: Any, description: str, stage: Stage, exc: BaseException, log: Path | None
    ) -> NoReturn:
        self.release(built)
        path = None if log is None or not log.is_file() else str(log)
        self.record_failure(description, stage, exc, path)
        raise _RejectedError(stage, exc)

    def release(self, built: Any) -> None:
        """Deactivate a candidate that is not kept and put the module back on its device."""
        with contextlib.suppress(Exception):
            if getattr(built, "is_active", False):
                built.deactivate()
        with contextlib.suppress(Exception):
            self.module.to(self.device)

    def record_failure(
        self, description: str, stage: Stage, exc: BaseException, path: str | None
    ) -> None:
        """Record a failed candidate and, unless validation is disabled, emit its event."""
        failure = CandidateFailure.from_exception(description, stage, exc, path)
        self.failures.append(failure)
        if self.mode != "disabled":
            self.emit(events.failed(self.run_id, self.name, failure))

    # -- the end -------------------------------------------------------------------------------
    def conclude(self, backend: Any) -> None:
        """The strategy returned ``backend``: emit ``selected`` (when gating) and ``finished``."""
        if backend is None:
            self.finish("passthrough", None, reason="the strategy returned no backend")
            return
        description = describe(backend)
        if self.mode == "disabled":
            self.finish("candidate", description)
            return
        is_baseline = backend is getattr(self.strategy, "_baseline_backend", None)
        result = next((r for b, r in self.kept if b is backend), None)
        event = events.selected(
            self.run_id,
            self.name,
            backend_description=description,
            is_baseline=is_baseline,
            result=None if is_baseline else result,
            baseline_throughput=self.baseline_throughput,
            info_on=events.info_enabled(),
        )
        self.selected = (description, is_baseline, str(event.fields["summary"]))
        self.emit(event)
        self.finish("baseline" if is_baseline else "candidate", description)

    def failed(self, exc: BaseException) -> None:
        """The tune raised (AITune's own error when nothing passed, or an interrupt)."""
        if isinstance(exc, Exception):
            path = append_failure_log(
                self.cache_dir / "strategy_error.log",
                f"Strategy {type(self.strategy).__name__} failed",
                exc,
            )
            self.record_failure(type(self.strategy).__name__, "strategy", exc, path)
            reason = f"{type(exc).__name__}: {one_line(exc)}"
        else:
            reason = f"interrupted ({type(exc).__name__})"
        self.finish("error", None, reason=reason)

    def finish(
        self, outcome: Outcome, description: str | None, *, reason: str | None = None
    ) -> None:
        if self.outcome is not None:
            return
        self.outcome, self.reason = outcome, reason
        if self.selected[0] is None and description is not None:
            self.selected = (description, False, None)
        n_failed = sum(f.stage != "strategy" for f in self.failures)
        self.emit(
            events.finished(
                self.run_id,
                self.name,
                outcome=outcome,
                backend_description=description,
                n_candidates=len(self.results) + n_failed,
                n_measured=len(self.results),
                n_passed=sum(r.passed for r in self.results),
                n_failed=n_failed,
                duration_s=time.perf_counter() - self._started,
                reason=reason,
            )
        )

    def report(self) -> TuneReport:
        selected, is_baseline, summary = self.selected
        disabled = self.mode == "disabled"
        return TuneReport(
            run_id=self.run_id,
            module_name=self.name,
            strategy=type(self.strategy).__name__,
            device=str(self.device),
            decision=self.rule.name,
            min_speedup_threshold_percent=None if disabled else self.pct,
            required_speedup=None if disabled else required_speedup(self.pct),
            batch_size=self.batch_size,
            baseline_backend=None if self.baseline is None else describe(self.baseline),
            baseline_throughput=self.baseline_throughput,
            baseline_error=self.baseline_error,
            disabled=disabled,
            results=self.results,
            rejected=self.rejected,
            failures=self.failures,
            selected_backend=selected,
            selected_is_baseline=is_baseline,
            selected_summary=summary,
            outcome=self.outcome,
            duration_s=time.perf_counter() - self._started,
            n_events=self.n_events,
        )


def _key(backend: Any) -> str:
    try:
        return str(backend.key())
    except Exception:
        return describe(backend)


def _declared_dtype(backend: Any) -> torch.dtype | None:
    """The reduced precision a backend declares (its ``dtype``, or its config's autocast dtype)."""
    candidates = [getattr(backend, "dtype", None)]
    config = getattr(backend, "_config", None)
    if getattr(config, "autocast_enabled", False):
        candidates.append(getattr(config, "autocast_dtype", None))
    for dtype in candidates:
        if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
            return dtype
    return None


def _run_of(strategy: object) -> _Run | None:
    run = _RUN.get()
    return run if run is not None and run.strategy is strategy else None


def _record(strategy: Any, result: PerformanceValidationResult, record_type: Any) -> None:
    """Append AITune's own record of ``result`` to its list and report its metric."""
    strategy.perf_validation_results.append(
        record_type(
            result.backend_description,
            result.throughput,
            result.baseline_throughput,
            result.speedup,
            result.passed,
        )
    )
    _aitune(_REPORTING_MODULE, "report_backend_metric")(
        "throughput", result.backend_description, result.throughput
    )


def _speedup_text(result: PerformanceValidationResult) -> str:
    return str(_aitune(_FORMATTING_MODULE, "fmt_speedup_comparison")(result.speedup, result.passed))


# -- the gated classes -----------------------------------------------------------------------


class _AituneGate:
    """Placed before an AITune strategy class: ``tune`` runs a :class:`_Run` around AITune's."""

    _aitune_fp_options: AituneOptions = AituneOptions()
    __aitune_fp_base__: type
    _aitune_fp_state: tuple[str, ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """AITune's constructor; the decorator's ``enabled=False`` then disables validation."""
        super().__init__(*args, **kwargs)
        if not self._aitune_fp_options.enabled:
            self.enable_performance_validation(False)  # type: ignore[attr-defined]

    def tune(
        self,
        module: Any,
        name: Any,
        graph_spec: Any,
        samples: Any,
        device: Any,
        cache_dir: Any,
    ) -> Any:
        """AITune's ``tune`` with every candidate gated by aitune_fp (see the module doc)."""
        _check_state(self, self._aitune_fp_state)
        target = (module, name, graph_spec, samples, device, cache_dir)
        run = _Run(self, self._aitune_fp_options, target)
        if run.mode == "disabled":
            run.emit(events.disabled(run.run_id, run.name, strategy=type(self).__name__))
        token = _RUN.set(run)
        try:
            backend = super().tune(*target)  # type: ignore[misc]
        except BaseException as exc:
            run.failed(exc)
            raise
        else:
            run.conclude(backend)
            return backend
        finally:
            _RUN.reset(token)
            reports = _reports(self, create=True)
            assert reports is not None
            reports.store(run.report(), None)

    def _pre_tune(self, *target: Any) -> None:
        """AITune's ``_pre_tune`` (find max batch size, eager baseline), then the gate's baseline."""
        super()._pre_tune(*target)  # type: ignore[misc]
        run = _run_of(self)
        if run is not None and run.mode != "disabled":
            size, batching, folder = self._aitune_fp_operating_point(target[2])
            run.open(getattr(self, "_baseline_backend", None), size, batching, folder)

    def _aitune_fp_operating_point(self, graph_spec: Any) -> tuple[int, bool, str]:
        raise NotImplementedError

    def check_correctness(self, backend: Any, *args: Any) -> Any:
        """AITune's correctness check; a failure here is recorded at the correctness stage."""
        run = _run_of(self)
        if run is not None:
            run.stage = "correctness"
            run.phase(describe(backend), "correctness")
        return super().check_correctness(backend, *args)  # type: ignore[misc]

    def _aitune_fp_validation(self) -> AituneValidation:
        """aitune_fp's read-outs of this strategy (``validation_of`` returns this)."""
        return AituneValidation(self)

    def __reduce_ex__(self, protocol: Any) -> Any:
        """Copies and pickles rebuild the gated class from the AITune class and the options."""
        return (_rebuild, (_root(type(self)), self._aitune_fp_options), dict(vars(self)))


class _MixinGate(_AituneGate):
    """OneBackend / FirstWins: each candidate's ``_build_validate_and_check_perf`` is the gate."""

    _aitune_fp_state = _MIXIN_STATE

    def _aitune_fp_operating_point(self, graph_spec: Any) -> tuple[int, bool, str]:
        size = getattr(self, "_resolved_batch_size", None)
        if size is None:
            size = graph_spec.get_max_batch_size(normalized=True)
        return int(size), True, BASELINE_DIR

    def _build_validate_and_check_perf(
        self,
        backend: Any,
        module: Any,
        name: Any,
        graph_spec: Any,
        samples: Any,
        device: Any,
        cache_dir: Any,
        *,
        raise_on_failure: bool = False,
    ) -> Any:
        """Build and check with AITune, then gate with aitune_fp; AITune's return contract.

        Returns the built backend, or None when it failed (AITune re-raises a build or
        correctness failure when ``raise_on_failure``) or was not shown faster (enabled mode).
        """
        target = (module, name, graph_spec, samples, device, cache_dir)
        run = _run_of(self)
        if run is None:
            raise InvalidStateError(
                "a gated AITune strategy checks candidates only inside its own tune()"
            )
        if run.mode == "disabled":  # AITune's own method: with validation off it only builds
            return super()._build_validate_and_check_perf(  # type: ignore[misc]
                backend, *target, raise_on_failure=raise_on_failure
            )
        try:
            built = run.build(backend, target)
        except Exception:
            if raise_on_failure:
                raise
            return None
        description = describe(backend)
        try:
            result = run.vet(built, description, Path(cache_dir) / _key(backend))
        except _RejectedError as rejected:
            if rejected.stage == "correctness" and raise_on_failure:
                raise rejected.exc from None
            return None
        if result is None:
            return built
        _record(self, result, _aitune(_MIXIN_MODULE, "PerformanceValidationMixinResult"))
        _log(
            self,
            "📊 %s: batch size=%s, throughput=%.2f samples/s, speedup=%s",
            description,
            result.batch_size,
            result.throughput,
            _speedup_text(result),
        )
        if not result.passed and run.mode == "enabled":
            run.release(built)
            return None
        return built


class _ThroughputGate(_AituneGate):
    """MaxThroughput: ``_run_backends`` gates each candidate; the winner is the best passed one."""

    _aitune_fp_state = _PROFILING_STATE

    def _aitune_fp_operating_point(self, graph_spec: Any) -> tuple[int, bool, str]:
        size = int(graph_spec.get_max_batch_size())
        batching = bool(graph_spec.input_spec.has_batch_axis()) and size > 1
        return size, batching, "baseline"

    def _run_backends(
        self,
        module: Any,
        name: Any,
        graph_spec: Any,
        samples: Any,
        device: Any,
        cache_dir: Any,
        batching: bool,
        max_batch_size: int,
    ) -> Any:
        """Build, check and gate every backend; the best one shown faster (AITune's candidate)."""
        target = (module, name, graph_spec, samples, device, cache_dir)
        run = _run_of(self)
        if run is None:
            raise InvalidStateError(
                "a gated AITune strategy checks candidates only inside its own tune()"
            )
        if run.mode == "disabled" or (run.mode == "diagnostic" and run.baseline is None):
            # AITune's own: nothing to compare with, and nothing the comparison may change
            return super()._run_backends(*target, batching, max_batch_size)  # type: ignore[misc]
        tune_candidate = _aitune(_PROFILING_MODULE, "_TuneCandidate")
        perf_record = _aitune(_PROFILING_MODULE, "BackendPerfResult")
        this: Any = self
        best: Any = None
        best_rank = -math.inf
        for backend in this._backends:
            log_file = this._log_file(Path(cache_dir) / _key(backend), "build.log")
            try:
                built = run.build(backend, target)
            except Exception:
                continue
            description = describe(backend)
            try:
                result = run.vet(built, description, log_file.parent)
            except _RejectedError:
                _log(this, "❌ backend failed (log file: %s)", log_file, depth=2)
                continue
            if result is None or this._baseline_result is None:
                run.release(built)
                continue
            metric = dataclasses.replace(
                this._baseline_result,
                throughput=result.throughput,
                selected_batch_size=result.batch_size,
            )
            if this.backend_results:
                this.backend_results[-1].update(metric.to_json_dict(this._metric_label))
            _record(this, result, perf_record)
            speedup = _speedup_text(result)
            _log(
                this,
                "✅ backend profiled - %s: %s, speedup=%s, batch size: %s",
                this._metric_label,
                this._fmt(result.throughput),
                speedup,
                result.batch_size,
                depth=2,
            )
            if not result.passed and run.mode == "enabled":
                run.release(built)
                continue
            rank = result.estimate if result.estimate is not None else result.speedup
            if best is None or rank > best_rank:
                if best is not None:
                    run.release(best.backend)
                _log(
                    this,
                    "🎯 new best %s for %s is %s, speedup=%s, batch size: %s",
                    this._metric_label,
                    built.describe(),
                    this._fmt(result.throughput),
                    speedup,
                    result.batch_size,
                    depth=2,
                )
                best, best_rank = tune_candidate(backend=built, result=metric), rank
            else:
                run.release(built)
        return best

    def _resolve_winner(self, best: Any) -> Any:
        """A candidate the gate passed wins as it is; otherwise AITune's fallback rules."""
        run = _run_of(self)
        if run is not None and run.mode == "enabled" and best is not None:
            return best
        return super()._resolve_winner(best)  # type: ignore[misc]


def _root(cls: type) -> type:
    """The AITune class (or the user's subclass of it) that a gated class was made from."""
    while "__aitune_fp_base__" in vars(cls) and issubclass(cls, _AituneGate):
        base: type = vars(cls)["__aitune_fp_base__"]
        if not issubclass(base, _AituneGate):
            return base
        cls = base
    return cls


def _gated_class(base: type, options: AituneOptions) -> type:
    """A trivial subclass of ``base`` gated by aitune_fp with ``options`` (hooks checked)."""
    gate = _check_hooks(_root(base) if issubclass(base, _AituneGate) else base)
    namespace: dict[str, Any] = {
        "__module__": base.__module__,  # AITune's loggers are named after it
        "__qualname__": base.__qualname__,
        "__doc__": base.__doc__,
        "__wrapped__": base,
        "__aitune_fp_base__": base,
        "_aitune_fp_options": options,
    }
    bases = (base,) if issubclass(base, _AituneGate) else (gate, base)
    cls: type = type(base)(base.__name__, bases, namespace)
    return cls


def _rebuild(root: type, options: AituneOptions) -> Any:
    """An empty gated strategy of ``root`` (state set by pickle or copy)."""
    cls = _gated_class(root, options)
    return object.__new__(cls)


def with_performance_validation(
    target: Any,
    /,
    *,
    min_speedup_threshold_percent: float | None = None,
    profiling_config: ProfilingConfig | None = None,
    enabled: bool = True,
    timer: Timer | None = None,
    closeness_check: bool = True,
    tolerances: Tolerances | None = None,
) -> Any:
    """Gate an AITune strategy (class or instance) with aitune_fp's decision.

    A class gives a trivial subclass (same name, module and constructor). An instance gives a
    strategy of that subclass sharing the instance's state: settings and results read or written
    through either are the same. ``min_speedup_threshold_percent=None`` keeps AITune's own
    threshold; ``enabled=False`` switches AITune's validation off (its ``disabled`` mode).
    ``aitune_fp.with_performance_validation`` calls this for AITune strategies.
    """
    options = AituneOptions(
        min_speedup_threshold_percent=min_speedup_threshold_percent,
        profiling_config=profiling_config if profiling_config is not None else ProfilingConfig(),
        enabled=enabled,
        timer=timer,
        closeness_check=closeness_check,
        tolerances=tolerances if tolerances is not None else Tolerances(),
    )
    if isinstance(target, type):
        return _gated_class(target, options)
    if not is_aitune_strategy(target):
        raise InvalidTypeError(f"{target!r} is not an AITune strategy")
    base = type(target)
    cls = _gated_class(_root(base) if issubclass(base, _AituneGate) else base, options)
    gated: Any = object.__new__(cls)
    gated.__dict__ = target.__dict__  # one strategy: the same state seen through both
    if not enabled:
        gated.enable_performance_validation(False)
    return gated


# -- aitune_fp's read-outs beside AITune's -----------------------------------------------------


class AituneValidation:
    """aitune_fp's view of a gated AITune strategy: ``validation_of(strategy)`` returns one.

    AITune's own names on the strategy stay AITune's (``perf_validation_results`` is its list of
    AITune records); here the same names give aitune_fp's records of the last tune.
    """

    def __init__(self, strategy: Any) -> None:
        """View ``strategy`` (a gated AITune strategy)."""
        self.strategy = strategy

    def _report(self) -> TuneReport | None:
        entry = _current(self.strategy)
        return None if entry is None else entry[0]

    @property
    def _options(self) -> AituneOptions:
        options: AituneOptions = self.strategy._aitune_fp_options
        return options

    @property
    def min_speedup_threshold_percent(self) -> float:
        """The threshold the gate uses: the decorator's, else AITune's own, else 1 %."""
        given = self._options.min_speedup_threshold_percent
        if given is not None:
            return given
        own = getattr(self.strategy, "min_speedup_threshold_percent", None)
        return DEFAULT_THRESHOLD_PERCENT if own is None else float(own)

    @property
    def performance_validation_enabled(self) -> bool:
        """Whether AITune's mode lets the gate run (enabled or diagnostic)."""
        return _mode(self.strategy) != "disabled"

    @property
    def validation_options(self) -> ValidationOptions:
        """The gate's settings as aitune_fp's options value."""
        return ValidationOptions(
            min_speedup_threshold_percent=self.min_speedup_threshold_percent,
            profiling_config=self._options.profiling_config,
            enabled=self.performance_validation_enabled,
            timer=self._options.timer,
        )

    @property
    def perf_validation_results(self) -> tuple[PerformanceValidationResult, ...]:
        """aitune_fp's result per measured candidate of the last tune (intervals, verdicts)."""
        report = self._report()
        return () if report is None else report.results

    @property
    def candidate_failures(self) -> tuple[CandidateFailure, ...]:
        """Candidates (and the strategy) of the last tune that failed, with the stage and why."""
        report = self._report()
        return () if report is None else report.failures

    @property
    def baseline_throughput(self) -> float | None:
        """Eager throughput the gate measured up front in the last tune."""
        report = self._report()
        return None if report is None else report.baseline_throughput

    @property
    def baseline_backend(self) -> Any:
        """AITune's eager baseline backend of the last tune."""
        return getattr(self.strategy, "_baseline_backend", None)

    @property
    def resolved_batch_size(self) -> int | None:
        """The batch size the last tune was gated at."""
        report = self._report()
        return None if report is None else report.batch_size

    @property
    def run_id(self) -> str | None:
        """The run id of the last tune (shared by its events)."""
        report = self._report()
        return None if report is None else report.run_id

    @property
    def last_report(self) -> TuneReport | None:
        """The frozen report of the last tune."""
        return self._report()

    def tune(self, *args: Any) -> Any:
        """The strategy's (gated) ``tune``."""
        return self.strategy.tune(*args)

    def enable_performance_validation(self, enable: Any = True) -> Any:
        """AITune's own switch (True/False or a mode name); returns the strategy."""
        return self.strategy.enable_performance_validation(enable)
