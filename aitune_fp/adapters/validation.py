"""``with_performance_validation``: wrap any tuning strategy so no candidate ships unless faster.

A class gives a subclass whose ``tune`` validates; an instance a wrapper delegating every other
attribute to the strategy. Each ``tune`` runs in its own ``TuneSession`` and leaves a frozen
``TuneReport`` (the read-outs' source), kept per strategy object and thread, outside the object.
"""

from __future__ import annotations

import copy
import copyreg
import sys
import threading
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast, overload

import attrs
import torch

from aitune_fp.adapters import is_aitune_strategy
from aitune_fp.adapters.reports import ReportReadOuts, keep_report
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.report import CandidateFailure, TuneReport
from aitune_fp.core.results import IsolationMode, PerformanceValidationResult
from aitune_fp.core.speedup import DEFAULT_THRESHOLD_PERCENT
from aitune_fp.correctness.closeness import Closeness
from aitune_fp.errors import InvalidTypeError
from aitune_fp.inputs import GraphSpec, Sample
from aitune_fp.isolation.exclusive import exclusive_module
from aitune_fp.pipeline.strategies import SessionStrategy
from aitune_fp.pipeline.tune import TuneSession
from aitune_fp.pipeline.values import TuneTarget, ValidationOptions
from aitune_fp.profiling.timers import Timer

__all__ = ["ValidatingStrategy", "is_validating", "validation_of", "with_performance_validation"]


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
_LOCK = threading.Lock()  # the class caches below


class _ValidatedTune:
    """``tune`` of a validating strategy, as a data descriptor.

    An instance attribute named ``tune`` (set in ``__init__``) becomes the strategy's own
    ``tune`` instead of hiding the validating one.
    """

    def __get__(self, obj: object | None, objtype: type | None = None) -> Any:
        if obj is None:
            return _Validating._validated_tune
        return types.MethodType(_Validating._validated_tune, obj)

    def __set__(self, obj: object, value: Any) -> None:
        vars(obj)["_aitune_fp_own_tune"] = value

    def __delete__(self, obj: object) -> None:
        vars(obj).pop("_aitune_fp_own_tune", None)


def _strategy_call(obj: object) -> Callable[[TuneSession, tuple[Any, ...]], Any]:
    """How to run ``obj``'s own (unvalidated) ``tune`` within a session.

    A built-in strategy whose ``tune`` is not overridden gets the session explicitly; any other
    ``tune`` (a method, an instance attribute) is called with AITune's arguments.
    """
    own = vars(obj).get("_aitune_fp_own_tune", vars(obj).get("tune")) if _has_dict(obj) else None
    if own is not None:
        return lambda session, args: own(*args)
    for klass in type(obj).__mro__:
        func = klass.__dict__.get("tune")
        if func is None or isinstance(func, _ValidatedTune):
            continue
        if func is SessionStrategy.tune and isinstance(obj, SessionStrategy):
            return lambda session, args: obj.tune_session(session)
        bound = func.__get__(obj, type(obj))
        return lambda session, args: bound(*args)
    raise InvalidTypeError(
        f"{type(obj).__name__} has no tune(module, name, graph_spec, data, device, cache_dir) "
        "method to validate"
    )


def _has_dict(obj: object) -> bool:
    try:
        object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return False
    return True


class _Validating(ReportReadOuts):
    """Placed before a strategy class: validated ``tune`` plus AITune's read-outs."""

    _aitune_fp_options: ValidationOptions = ValidationOptions()
    __aitune_fp_base__: type

    tune = _ValidatedTune()

    @property
    def validation_options(self) -> ValidationOptions:
        """The options this strategy validates with."""
        return self._aitune_fp_options

    def _set_options(self, **changes: Any) -> None:
        object.__setattr__(
            self, "_aitune_fp_options", attrs.evolve(self._aitune_fp_options, **changes)
        )

    @property
    def min_speedup_threshold_percent(self) -> float:
        """The gate: a candidate must be this many percent faster than eager."""
        return self._aitune_fp_options.min_speedup_threshold_percent

    @min_speedup_threshold_percent.setter
    def min_speedup_threshold_percent(self, value: float) -> None:
        self._set_options(min_speedup_threshold_percent=value)

    @property
    def performance_validation_enabled(self) -> bool:
        """Whether ``tune`` validates (False: no eager build, no profiling)."""
        return self._aitune_fp_options.enabled

    def enable_performance_validation(self: _V, enable: bool = True) -> _V:
        """Switch validation on or off for this strategy; returns the strategy for chaining."""
        self._set_options(enabled=enable)
        return self

    # -- tune ------------------------------------------------------------------------------------
    def _aitune_fp_strategy(self) -> object:
        """The object whose own ``tune`` runs inside the validating one."""
        return self

    def _validated_tune(
        self,
        module: torch.nn.Module,
        name: str,
        graph_spec: GraphSpec,
        data: Sequence[Sample],
        device: torch.device | str,
        cache_dir: Path | str,
    ) -> Any:
        """Run the strategy's own ``tune`` with every candidate gated against eager."""
        strategy = self._aitune_fp_strategy()
        call = _strategy_call(strategy)
        args = (module, name, graph_spec, data, device, cache_dir)
        target = TuneTarget.of(*args)
        with exclusive_module(module):  # one tune per module object at a time
            session = TuneSession(target, self._aitune_fp_options, strategy=type(strategy).__name__)
            try:
                return session.run(
                    lambda: call(session, args),
                    batch_size=getattr(strategy, "operating_batch_size", None),
                )
            finally:
                keep_report(self, session.report(), session.baseline)

    def __reduce_ex__(self, protocol: Any) -> Any:
        """Pickle through an importable class when this one cannot be found by its name."""
        rv = super().__reduce_ex__(protocol)
        cls = type(self)
        if _importable(cls) or not isinstance(rv, tuple):
            return rv
        root, options = _importable_root(cls), self._aitune_fp_options
        func, args, *rest = rv
        if func is copyreg.__newobj__ and args and args[0] is cls:  # type: ignore[attr-defined]
            return (_new_validating, (root, options, *args[1:]), *rest)
        if func is copyreg._reconstructor and args and args[0] is cls:  # type: ignore[attr-defined]
            return (_new_validating, (root, options), *rest)
        return rv


_V = TypeVar("_V", bound=_Validating)


def _importable(cls: type) -> bool:
    obj: Any = sys.modules.get(cls.__module__)
    for part in cls.__qualname__.split("."):
        obj = getattr(obj, part, None)
    return obj is cls


def _importable_root(cls: type) -> type:
    """The nearest class up the wrapping chain that pickle can find by name."""
    while not _importable(cls) and "__aitune_fp_base__" in cls.__dict__:
        cls = cls.__dict__["__aitune_fp_base__"]
    return cls


def _new_validating(root: type, options: ValidationOptions, *args: Any) -> Any:
    """An empty validating instance of ``root`` (made validating if needed) with ``options``."""
    cls: Any = root if is_validating(root) else _validating_class(root, None)
    obj = cls.__new__(cls, *args)
    if options != cls._aitune_fp_options:
        object.__setattr__(obj, "_aitune_fp_options", options)
    return obj


_CLASS_CACHE: dict[type, type] = {}


def _declares_tune(cls: type) -> bool:
    """Whether ``cls`` (or a base) annotates ``tune``: its instances set it in ``__init__``."""
    return any("tune" in vars(k).get("__annotations__", {}) for k in cls.__mro__)


def _validating_class(base: type, options: ValidationOptions | None) -> type:
    """A trivial subclass of ``base`` whose ``tune`` validates (cached per base when no options).

    ``base`` may validate already (a user's subclass of a decorated class): the new class derives
    from it, so nothing the user added is lost, and only the options change.
    """
    if options is None:
        with _LOCK:
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
        with _LOCK:
            cls = _CLASS_CACHE.setdefault(base, cls)
    return cls


# -- the instance form: a thin delegating wrapper ------------------------------------------------

#: Names the wrapper answers itself; every other attribute is the wrapped strategy's.
_OWN_NAMES = frozenset(
    name
    for klass in (_Validating, ReportReadOuts)
    for name in vars(klass)
    if not name.startswith("__")
) | {"__wrapped__"}


class _Delegating(_Validating):
    """Instance form: validated ``tune`` and read-outs here, everything else the strategy's."""

    def __getattribute__(self, name: str) -> Any:
        if name in _OWN_NAMES or name.startswith(("__", "_aitune_fp")):
            return object.__getattribute__(self, name)
        return getattr(object.__getattribute__(self, "__dict__")["__wrapped__"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _OWN_NAMES or name.startswith("_aitune_fp"):
            object.__setattr__(self, name, value)
        else:
            setattr(self.__wrapped__, name, value)

    def __delattr__(self, name: str) -> None:
        if name in _OWN_NAMES or name.startswith("_aitune_fp"):
            object.__delattr__(self, name)
        else:
            delattr(self.__wrapped__, name)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self.__wrapped__)) | _OWN_NAMES)

    def __repr__(self) -> str:
        return f"<validating {self.__wrapped__!r}>"

    def _aitune_fp_strategy(self) -> object:
        return self.__wrapped__

    def __copy__(self) -> Any:
        return _wrap_instance(copy.copy(self.__wrapped__), self._aitune_fp_options)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return _wrap_instance(copy.deepcopy(self.__wrapped__, memo), self._aitune_fp_options)

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (_wrap_instance, (self.__wrapped__, self._aitune_fp_options))


_PROXY_CACHE: dict[type, type] = {}


def _proxy_class(cls: type) -> type:
    """The wrapper class for strategies of type ``cls``: an ``isinstance`` of it, delegating."""
    with _LOCK:
        cached = _PROXY_CACHE.get(cls)
    if cached is not None:
        return cached
    try:
        proxy = type(cls.__name__, (_Delegating, cls), {"__module__": cls.__module__})
        object.__new__(proxy)
    except TypeError:  # a type that cannot be subclassed or made empty: delegate without it
        proxy = type(cls.__name__, (_Delegating,), {"__module__": cls.__module__})
    with _LOCK:
        return _PROXY_CACHE.setdefault(cls, proxy)


def _wrap_instance(obj: Any, options: ValidationOptions) -> Any:
    """A validating wrapper around ``obj`` (around what it wraps, when it is a wrapper)."""
    if isinstance(obj, _Delegating):
        obj = obj.__wrapped__
    new: Any = object.__new__(_proxy_class(type(obj)))
    object.__setattr__(new, "__wrapped__", obj)
    object.__setattr__(new, "_aitune_fp_options", options)
    return new


def is_validating(target: object) -> bool:
    """Whether ``target`` (a class or instance) already validates performance."""
    cls = target if isinstance(target, type) else type(target)
    return issubclass(cls, _Validating) or hasattr(cls, "_aitune_fp_validation")


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
        """The eager baseline backend of the last tune, while something else holds it."""

    @property
    def resolved_batch_size(self) -> int | None:
        """The batch size the last tune validated at."""

    @property
    def run_id(self) -> str | None:
        """The run id of the last tune."""

    @property
    def last_report(self) -> TuneReport | None:
        """The frozen report of the last tune."""

    def enable_performance_validation(self, enable: bool = True) -> Any:
        """Switch validation on or off; returns the strategy."""


def validation_of(strategy: object) -> ValidatingStrategy:
    """``strategy`` typed as validating, so its read-outs type-check; TypeError if it is not.

    ``with_performance_validation`` keeps the strategy's own type for mypy; use this to reach
    ``perf_validation_results`` and friends without a cast.
    """
    if not is_validating(strategy) or isinstance(strategy, type):
        raise InvalidTypeError(
            f"validation_of needs a strategy instance wrapped by with_performance_validation, "
            f"got {strategy!r}"
        )
    view = getattr(strategy, "_aitune_fp_validation", None)  # a gated AITune strategy's read-outs
    return cast(ValidatingStrategy, strategy if view is None else view())


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
    timer: Timer | None = ...,
    closeness: Closeness | None = ...,
    isolation: IsolationMode = ...,
) -> type[S]: ...
@overload
def with_performance_validation(
    target: S,
    /,
    *,
    min_speedup_threshold_percent: float = ...,
    profiling_config: ProfilingConfig | None = ...,
    enabled: bool = ...,
    timer: Timer | None = ...,
    closeness: Closeness | None = ...,
    isolation: IsolationMode = ...,
) -> S: ...
@overload
def with_performance_validation(
    target: None = None,
    /,
    *,
    min_speedup_threshold_percent: float = ...,
    profiling_config: ProfilingConfig | None = ...,
    enabled: bool = ...,
    timer: Timer | None = ...,
    closeness: Closeness | None = ...,
    isolation: IsolationMode = ...,
) -> _Decorator: ...
def with_performance_validation(
    target: Any = None,
    /,
    *,
    min_speedup_threshold_percent: float | None = None,
    profiling_config: ProfilingConfig | None = None,
    enabled: bool = True,
    timer: Timer | None = None,
    closeness: Closeness | None = None,
    isolation: IsolationMode = "process",
) -> Any:
    """Make a strategy (class or instance) gate every candidate against eager PyTorch.

    A class gives a subclass, an instance a delegating wrapper (``__wrapped__``); wrapping again
    re-configures. ``timer``: the clock of every timed call (a fake one in tests);
    ``closeness``: how outputs are held against eager's (``docs/accuracy.md``); ``isolation``:
    each candidate in a worker ``process`` of its own until chosen, or ``in_process``
    (``docs/guarantees.md``). AITune's own strategies are gated through their hooks
    (``docs/aitune.md``).
    """
    given = min_speedup_threshold_percent  # None: the default, or an AITune strategy's own
    options = ValidationOptions(
        min_speedup_threshold_percent=DEFAULT_THRESHOLD_PERCENT if given is None else given,
        profiling_config=profiling_config if profiling_config is not None else ProfilingConfig(),
        enabled=enabled,
        timer=timer,
        closeness=closeness,
        isolation=isolation,
    )

    def apply(t: Any) -> Any:
        if is_aitune_strategy(t):
            from aitune_fp.adapters.aitune.decorate import closeness_options
            from aitune_fp.adapters.aitune.decorate import (
                with_performance_validation as aitune_validation,
            )

            return aitune_validation(
                t, min_speedup_threshold_percent=given, profiling_config=profiling_config,
                enabled=enabled, timer=timer, isolation=isolation, **closeness_options(closeness),
            )  # fmt: skip
        if isinstance(t, type):
            if not (callable(getattr(t, "tune", None)) or _declares_tune(t)):
                raise InvalidTypeError(
                    f"with_performance_validation needs a strategy class with a tune method; "
                    f"{t.__qualname__} has none (if __init__ sets self.tune, declare tune: Callable)"
                )
            return _validating_class(t, options)
        if not callable(getattr(t, "tune", None)):
            raise InvalidTypeError(
                "with_performance_validation needs a strategy with a tune(module, name, "
                f"graph_spec, data, device, cache_dir) method, got {t!r}"
            )
        return _wrap_instance(t, options)

    return apply if target is None else apply(target)
