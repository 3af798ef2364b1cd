"""Gate NVIDIA AITune's own strategies with aitune_fp's interleaved statistical decision.

``aitune_fp.with_performance_validation(strategy_or_class)`` sends an AITune strategy here. What
comes back is a strategy of the same AITune class (a trivial subclass; for an instance, a
strategy of that subclass sharing the instance's state) whose every candidate is decided by
aitune_fp instead of AITune's point estimate:

* mixin strategies (``OneBackendStrategy``, ``FirstWinsStrategy`` and their subclasses): each
  candidate passes through ``_build_validate_and_check_perf``, which is replaced;
* ``MaxThroughputStrategy``: ``_run_backends`` is replaced and ``_resolve_winner`` no longer
  re-applies AITune's comparison to a candidate the gate already passed.

Each tune runs in a :class:`~aitune_fp.session.TuneSession`, the same one candidate pipeline
the built-in strategies use; this module only drives it from AITune's hooks. The session takes
the model (eval mode, guarded) before AITune's ``_pre_tune``, adopts AITune's eager baseline
there, and takes each candidate through ``try_candidate`` with AITune's own build and
correctness check as the build step: model guard, closeness to eager on every sample at both
batch ends, the timed comparison with spot checks, the record, the release of a loser. AITune
keeps its contract: its ``perf_validation_results`` list gets one AITune-shaped record per
measured candidate (so its log lines and ⚡ post-tune line print as before), its threshold and
``enable_performance_validation(mode)`` keep their meaning (enabled / diagnostic / disabled),
and its fallbacks stay. aitune_fp's results, failures and report are read through
``validation_of(strategy)`` from the session's report; the events are the built-in path's.

The hooks are private names of AITune 0.6: each is checked by name when a strategy is decorated,
and a missing one is a clear :class:`AituneVersionError` naming the AITune version and the name;
the decorated strategy never falls back to AITune's own gate. This module does not import AITune
at import time (it works on the strategy it is given and imports AITune's modules on first use).
"""

from __future__ import annotations

import contextvars
import dataclasses
import importlib
import importlib.metadata
import math
from pathlib import Path
from typing import Any, Final

import attrs

from aitune_fp.core._checks import check_threshold, of_type
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.core.speedup import DEFAULT_THRESHOLD_PERCENT
from aitune_fp.correctness import Closeness, Tolerances
from aitune_fp.errors import AitunefpError, InvalidStateError, InvalidTypeError
from aitune_fp.inputs import Sample, as_sample, copy_sample
from aitune_fp.integrations import is_aitune_strategy
from aitune_fp.profiling import Timer
from aitune_fp.reports import ReportReadOuts, keep_report
from aitune_fp.session import (
    StageError,
    TuneSession,
    TuneTarget,
    ValidationOptions,
    active_session,
    describe,
)

__all__ = [
    "SUPPORTED_AITUNE",
    "AituneOptions",
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
    tolerances: Tolerances | None = attrs.field(
        default=None, validator=attrs.validators.optional(of_type(Tolerances))
    )


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


# -- the one pipeline, driven from AITune's hooks ---------------------------------------------


def threshold_of(strategy: Any, options: AituneOptions) -> float:
    """The threshold a gated strategy uses: the decorator's, else AITune's own, else 1 %."""
    if options.min_speedup_threshold_percent is not None:
        return options.min_speedup_threshold_percent
    own = getattr(strategy, "min_speedup_threshold_percent", None)
    return check_threshold(
        "min_speedup_threshold_percent", DEFAULT_THRESHOLD_PERCENT if own is None else own
    )


def _validation_options(strategy: Any) -> ValidationOptions:
    """The session's options for ``strategy`` now (its mode and threshold as they stand)."""
    options: AituneOptions = strategy._aitune_fp_options
    return ValidationOptions(
        min_speedup_threshold_percent=threshold_of(strategy, options),
        profiling_config=options.profiling_config,
        enabled=_mode(strategy) != "disabled",
        timer=options.timer,
    )


class _AituneSpec:
    """aitune_fp's view of AITune's graph spec at the operating point AITune resolved.

    Set by ``_pre_tune`` (``at``): the batch size and whether inputs have a batch axis. Without
    one, a "batch" is the recorded sample itself.
    """

    def __init__(self, spec: Any) -> None:
        self.spec = spec
        self.name = str(getattr(spec, "name", "0"))
        self._size, self._batching = 1, False

    def at(self, size: int, batching: bool) -> None:
        """Validate at ``size`` (batched along AITune's batch axis when ``batching``)."""
        self._size, self._batching = int(size), bool(batching)

    @property
    def min_batch_size(self) -> int:
        """AITune's smallest recorded batch size (the operating point when it has none)."""
        low = self.spec.get_min_batch_size() if self._batching else None
        return self._size if low is None else min(int(low), self._size)

    def get_max_batch_size(self) -> int:
        """The operating point's batch size."""
        return self._size

    def make_batch(self, sample: Sample | tuple[Any, Any], batch_size: int) -> Sample:
        """AITune's batch of ``batch_size`` from ``sample`` (the sample itself when unbatched)."""
        sample = as_sample(sample)
        if not self._batching:
            return copy_sample(sample)
        args, kwargs = self.spec.make_batch(tuple(sample.args), dict(sample.kwargs), batch_size)
        return Sample(tuple(args), dict(kwargs))


#: Set while AITune builds a candidate for the session: its correctness check then says so.
_BUILDING: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "aitune_fp_aitune_build", default=False
)


def _builder(strategy: Any, target: tuple[Any, ...]) -> Any:
    """The session's build step for ``strategy``: AITune's own build and correctness check."""

    def build(backend: Any) -> Any:
        token = _BUILDING.set(True)
        try:
            return strategy._build_and_validate_backend(backend, *target, raise_on_failure=True)
        finally:
            _BUILDING.reset(token)

    return build


def _session_of(strategy: Any, module: Any) -> TuneSession:
    """The session of the tune ``strategy`` runs on ``module``; an error outside its tune."""
    session = active_session(module)
    if session is None or session.strategy != type(strategy).__name__:
        raise InvalidStateError(
            "a gated AITune strategy checks candidates only inside its own tune()"
        )
    return session


def _key(backend: Any) -> str:
    try:
        return str(backend.key())
    except Exception:
        return describe(backend)


def _mark_failed(strategy: Any, description: str) -> None:
    """AITune's ``backend_results`` entry of a candidate aitune_fp found wrong: failed."""
    entries = getattr(strategy, "backend_results", None)
    if entries and isinstance(entries[-1], dict) and entries[-1].get("backend") == description:
        entries[-1]["success"] = False


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
    """Placed before an AITune strategy class: ``tune`` runs AITune's inside a TuneSession."""

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
        options = self._aitune_fp_options
        target = TuneTarget.of(module, name, _AituneSpec(graph_spec), samples, device, cache_dir)
        session = TuneSession(
            target,
            _validation_options(self),
            strategy=type(self).__name__,
            closeness=Closeness(enabled=options.closeness_check, tolerances=options.tolerances),
            decides=_mode(self) != "diagnostic",
        )
        aitune_tune = super().tune  # type: ignore[misc]
        try:
            return session.run(
                lambda: aitune_tune(module, name, graph_spec, samples, device, cache_dir),
                open_first=False,
            )
        finally:
            keep_report(self, session.report())

    def _pre_tune(self, *target: Any) -> None:
        """AITune's ``_pre_tune`` (its eager baseline), then the session adopts that baseline."""
        super()._pre_tune(*target)  # type: ignore[misc]
        if _mode(self) == "disabled":
            return
        session = _session_of(self, target[0])
        size, batching = self._aitune_fp_operating_point(target[2])
        spec = session.target.graph_spec
        assert isinstance(spec, _AituneSpec)
        spec.at(size, batching)
        session.open(
            baseline=getattr(self, "_baseline_backend", None),
            batch_size=size if batching else 1,
        )

    def _aitune_fp_operating_point(self, graph_spec: Any) -> tuple[int, bool]:
        raise NotImplementedError

    def check_correctness(self, backend: Any, *args: Any) -> Any:
        """AITune's correctness check; while the session builds, a failure names its stage."""
        try:
            return super().check_correctness(backend, *args)  # type: ignore[misc]
        except Exception as exc:
            if _BUILDING.get():
                raise StageError("correctness", exc) from exc
            raise

    def _aitune_fp_validation(self) -> _GateView:
        """aitune_fp's read-outs of this strategy (``validation_of`` returns this)."""
        return _GateView(self)

    def __reduce_ex__(self, protocol: Any) -> Any:
        """Copies and pickles rebuild the gated class from the AITune class and the options."""
        return (_rebuild, (_root(type(self)), self._aitune_fp_options), dict(vars(self)))


class _MixinGate(_AituneGate):
    """OneBackend / FirstWins: each candidate's ``_build_validate_and_check_perf`` is the gate."""

    _aitune_fp_state = _MIXIN_STATE

    def _aitune_fp_operating_point(self, graph_spec: Any) -> tuple[int, bool]:
        size = getattr(self, "_resolved_batch_size", None)
        if size is None:
            size = graph_spec.get_max_batch_size(normalized=True)
        return int(size), True

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
        """The session's pipeline for one candidate AITune builds; AITune's return contract.

        Returns the built backend, or None when it failed (AITune re-raises a build or
        correctness failure when ``raise_on_failure``) or was not shown faster (enabled mode).
        """
        target = (module, name, graph_spec, samples, device, cache_dir)
        if _mode(self) == "disabled":  # AITune's own method: with validation off it only builds
            return super()._build_validate_and_check_perf(  # type: ignore[misc]
                backend, *target, raise_on_failure=raise_on_failure
            )
        session = _session_of(self, module)
        outcome = session.try_candidate(backend, build=_builder(self, target))
        if outcome.stage is not None:
            if outcome.stage == "correctness":
                _mark_failed(self, outcome.description)
            if raise_on_failure and outcome.stage != "profiling" and outcome.error is not None:
                raise outcome.error
            return None
        result = outcome.result
        if result is not None:
            _record(self, result, _aitune(_MIXIN_MODULE, "PerformanceValidationMixinResult"))
            _log(
                self,
                "📊 %s: batch size=%s, throughput=%.2f samples/s, speedup=%s",
                outcome.description,
                result.batch_size,
                result.throughput,
                _speedup_text(result),
            )
        return outcome.backend


class _ThroughputGate(_AituneGate):
    """MaxThroughput: ``_run_backends`` gates each candidate; the winner is the best passed one."""

    _aitune_fp_state = _PROFILING_STATE

    def _aitune_fp_operating_point(self, graph_spec: Any) -> tuple[int, bool]:
        size = int(graph_spec.get_max_batch_size())
        return size, bool(graph_spec.input_spec.has_batch_axis()) and size > 1

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
        """Every backend through the session's pipeline; the best one shown faster wins."""
        target = (module, name, graph_spec, samples, device, cache_dir)
        if _mode(self) == "disabled":
            return super()._run_backends(*target, batching, max_batch_size)  # type: ignore[misc]
        session = _session_of(self, module)
        if _mode(self) == "diagnostic" and session.baseline is None:
            # AITune's own: nothing to compare with, and nothing the comparison may change
            return super()._run_backends(*target, batching, max_batch_size)  # type: ignore[misc]
        tune_candidate = _aitune(_PROFILING_MODULE, "_TuneCandidate")
        perf_record = _aitune(_PROFILING_MODULE, "BackendPerfResult")
        this: Any = self
        best: Any = None
        best_rank = -math.inf
        for backend in this._backends:
            outcome = session.try_candidate(backend, build=_builder(self, target))
            if outcome.stage is not None:
                if outcome.stage != "build":  # AITune logged its own build failures
                    log_file = this._log_file(Path(cache_dir) / _key(backend), "build.log")
                    _log(this, "❌ backend failed (log file: %s)", log_file, depth=2)
                continue
            result = outcome.result
            if result is None or this._baseline_result is None:
                if outcome.backend is not None:
                    session.release(outcome.backend)
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
            rank = session.rank(outcome)
            if outcome.backend is None or rank is None:  # not shown faster: released already
                continue
            if best is None or rank > best_rank:
                if best is not None:
                    session.release(best.backend)
                _log(
                    this,
                    "🎯 new best %s for %s is %s, speedup=%s, batch size: %s",
                    this._metric_label,
                    outcome.description,
                    this._fmt(result.throughput),
                    speedup,
                    result.batch_size,
                    depth=2,
                )
                best, best_rank = tune_candidate(backend=outcome.backend, result=metric), rank
            else:
                session.release(outcome.backend)
        return best

    def _resolve_winner(self, best: Any) -> Any:
        """A candidate the gate passed wins as it is; otherwise AITune's fallback rules."""
        if _mode(self) == "enabled" and best is not None:
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
        tolerances=tolerances,
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


class _GateView(ReportReadOuts):
    """aitune_fp's view of a gated AITune strategy: ``validation_of(strategy)`` returns one.

    AITune's own names on the strategy stay AITune's (``perf_validation_results`` is its list of
    AITune records); here the same names read aitune_fp's report of the last tune.
    """

    def __init__(self, strategy: Any) -> None:
        """View ``strategy`` (a gated AITune strategy)."""
        self.strategy = strategy

    def _aitune_fp_report_owner(self) -> object:
        return self.strategy

    @property
    def min_speedup_threshold_percent(self) -> float:
        """The threshold the gate uses: the decorator's, else AITune's own, else 1 %."""
        return threshold_of(self.strategy, self.strategy._aitune_fp_options)

    @property
    def performance_validation_enabled(self) -> bool:
        """Whether AITune's mode lets the gate run (enabled or diagnostic)."""
        return _mode(self.strategy) != "disabled"

    @property
    def validation_options(self) -> ValidationOptions:
        """The gate's settings as aitune_fp's options value."""
        return _validation_options(self.strategy)

    @property
    def baseline_backend(self) -> Any:
        """AITune's eager baseline backend of the last tune."""
        return getattr(self.strategy, "_baseline_backend", None)

    def tune(self, *args: Any) -> Any:
        """The strategy's (gated) ``tune``."""
        return self.strategy.tune(*args)

    def enable_performance_validation(self, enable: Any = True) -> Any:
        """AITune's own switch (True/False or a mode name); returns the strategy."""
        return self.strategy.enable_performance_validation(enable)
