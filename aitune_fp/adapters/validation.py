"""``with_performance_validation`` and ``validation_of``: the one decorator and its read-outs.

An instance goes in a proxy (``wrapt.ObjectProxy``), a class in a subclass; each holds its report.
"""

from __future__ import annotations

import copy
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, TypeVar, overload

import attrs
import wrapt

from aitune_fp.adapters import is_aitune_strategy
from aitune_fp.adapters.reports import (
    DecoratorOptions,
    LastReport,
    ReadOuts,
    Validation,
    last_report_of,
)
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.results import IsolationMode
from aitune_fp.correctness.closeness import Closeness
from aitune_fp.errors import InvalidTypeError
from aitune_fp.isolation.model import exclusive_module
from aitune_fp.pipeline.strategies import SessionStrategy
from aitune_fp.pipeline.tune import TuneSession
from aitune_fp.pipeline.values import TuneTarget, ValidationOptions
from aitune_fp.profiling.timers import Timer

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["Validation", "is_validating", "validation_of", "with_performance_validation"]


class Strategy(Protocol):
    """Anything with AITune's ``tune(module, name, graph_spec, data, device, cache_dir)``."""

    @property
    def tune(self) -> Callable[..., Any]:
        """Return a built, active backend for ``module``."""


S = TypeVar("S", bound=Strategy)


def _own_tune(obj: object) -> Callable[[TuneSession, tuple[Any, ...]], Any]:
    """How to call ``obj``'s own (unvalidated) ``tune`` in a session."""
    held = getattr(obj, "__dict__", {})
    own = held.get("_aitune_fp_own_tune", held.get("tune"))
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


def _tune(holder: _Wrapper, strategy: object, args: tuple[Any, ...]) -> Any:
    """Run ``strategy``'s own ``tune`` in a session; ``holder`` keeps the report."""
    call = _own_tune(strategy)
    target = TuneTarget.of(*args)
    options = holder._aitune_fp_session_options()
    holder._aitune_fp_settings().check_isolation(options, target)
    with exclusive_module(target.module):  # one tune per module object at a time
        session = TuneSession(target, options, strategy=type(strategy).__name__)
        try:
            return session.run(
                lambda: call(session, args),
                batch_size=getattr(strategy, "operating_batch_size", None),
            )
        finally:
            holder._aitune_fp_last().keep(session.report(), session.baseline)


class _Wrapper(ReadOuts):
    """What both forms share: the options as a value, the switch and the gate's setter."""

    _aitune_fp_settings: Callable[[], DecoratorOptions]
    _aitune_fp_configure: Callable[[DecoratorOptions], None]

    def _aitune_fp_session_options(self) -> ValidationOptions:
        return self._aitune_fp_settings().session_options()

    @property
    def min_speedup_threshold_percent(self) -> float:
        """The gate: a candidate must be this many percent faster than eager."""
        return self.validation_options.min_speedup_threshold_percent

    @min_speedup_threshold_percent.setter
    def min_speedup_threshold_percent(self, value: float) -> None:
        settings = self._aitune_fp_settings()
        self._aitune_fp_configure(attrs.evolve(settings, min_speedup_threshold_percent=value))

    def enable_performance_validation(self: _W, enable: bool = True) -> _W:
        """Switch validation on or off; returns the strategy, for chaining."""
        self._aitune_fp_configure(attrs.evolve(self._aitune_fp_settings(), enabled=enable))
        return self


_W = TypeVar("_W", bound=_Wrapper)


def _class_tune(self: _ValidatingClass, *args: Any) -> Any:
    """The strategy's own ``tune`` with every candidate gated against eager."""
    return _tune(self, self, args)


class _ValidatedTune:
    """The class form's ``tune``: a data descriptor, so a ``tune`` set in ``__init__`` is kept."""

    def __get__(self, obj: object | None, objtype: type | None = None) -> Any:
        return _class_tune if obj is None else types.MethodType(_class_tune, obj)

    def __set__(self, obj: object, value: Any) -> None:
        vars(obj)["_aitune_fp_own_tune"] = value


class _ValidatingClass(_Wrapper):
    """Placed before a strategy class by the class form; the report lives on each instance."""

    _aitune_fp_options: DecoratorOptions = DecoratorOptions()
    tune = _ValidatedTune()

    def _aitune_fp_settings(self) -> DecoratorOptions:
        return self._aitune_fp_options

    def _aitune_fp_configure(self, options: DecoratorOptions) -> None:
        vars(self)["_aitune_fp_options"] = options

    def _aitune_fp_last(self) -> LastReport:
        return last_report_of(self)


class Validated(_Wrapper, wrapt.ObjectProxy):  # type: ignore[type-arg]  # wrapt~=2.0 may not subscript
    """The instance form: a proxy of the strategy holding its options and last report."""

    def __init__(self, strategy: Any, options: DecoratorOptions) -> None:
        super().__init__(strategy)
        self._self_options = options
        self._self_last = LastReport()

    def _aitune_fp_settings(self) -> DecoratorOptions:
        options: DecoratorOptions = self._self_options
        return options

    def _aitune_fp_configure(self, options: DecoratorOptions) -> None:
        self._self_options = options

    def _aitune_fp_last(self) -> LastReport:
        last: LastReport = self._self_last
        return last

    def tune(self, *args: Any) -> Any:
        """The strategy's own ``tune`` with every candidate gated against eager."""
        return _tune(self, self.__wrapped__, args)

    def __repr__(self) -> str:
        return f"<validating {self.__wrapped__!r}>"

    def __copy__(self) -> Validated:
        return Validated(copy.copy(self.__wrapped__), self._self_options)

    def __deepcopy__(self, memo: dict[int, Any]) -> Validated:
        return Validated(copy.deepcopy(self.__wrapped__, memo), self._self_options)

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return (Validated, (self.__wrapped__, self._self_options))


def is_validating(target: object) -> bool:
    """Whether ``target`` (a class or instance) validates performance (any path)."""
    cls = target if isinstance(target, type) else type(target)
    return hasattr(cls, "_aitune_fp_session_options") and not issubclass(cls, Validation)


def validation_of(strategy: object) -> Validation:
    """aitune_fp's read-outs of a validated strategy instance (either path); TypeError if not one."""
    if not is_validating(strategy) or isinstance(strategy, type):
        raise InvalidTypeError(
            f"validation_of needs a strategy instance wrapped by with_performance_validation, "
            f"got {strategy!r}"
        )
    return Validation(strategy)


def _apply(target: Any, options: DecoratorOptions) -> Any:
    """``target`` (class or instance) validating with ``options``."""
    if is_aitune_strategy(target):
        from aitune_fp.adapters.aitune import gated  # AITune's own: through its hooks

        return gated(target, options)
    if isinstance(target, type):
        declared = any("tune" in vars(k).get("__annotations__", {}) for k in target.__mro__)
        if not (callable(getattr(target, "tune", None)) or declared):
            raise InvalidTypeError(
                f"with_performance_validation needs a strategy class with a tune method; "
                f"{target.__qualname__} has none (if __init__ sets self.tune, declare tune: Callable)"
            )
        bases = (target,) if issubclass(target, _ValidatingClass) else (_ValidatingClass, target)
        namespace = {"__module__": target.__module__, "__qualname__": target.__qualname__,
                     "__doc__": target.__doc__, "_aitune_fp_options": options}  # fmt: skip
        return type(target.__name__, bases, namespace)
    if not callable(getattr(target, "tune", None)):
        raise InvalidTypeError(
            "with_performance_validation needs a strategy with a tune(module, name, "
            f"graph_spec, data, device, cache_dir) method, got {target!r}"
        )
    return Validated(target.__wrapped__ if isinstance(target, Validated) else target, options)


class _Options(TypedDict, total=False):
    """``with_performance_validation``'s keyword arguments, for its overloads."""

    min_speedup_threshold_percent: float | None
    profiling_config: ProfilingConfig | None
    enabled: bool
    timer: Timer | None
    closeness: Closeness | None
    isolation: IsolationMode | None


class _Decorator(Protocol):
    @overload
    def __call__(self, target: type[S], /) -> type[S]: ...
    @overload
    def __call__(self, target: S, /) -> S: ...


@overload
def with_performance_validation(target: type[S], /, **options: Unpack[_Options]) -> type[S]: ...
@overload
def with_performance_validation(target: S, /, **options: Unpack[_Options]) -> S: ...
@overload
def with_performance_validation(
    target: None = None, /, **options: Unpack[_Options]
) -> _Decorator: ...
def with_performance_validation(target: Any = None, /, **given: Any) -> Any:
    """Make a strategy (class or instance; aitune_fp's, yours or AITune's) gate every candidate.

    Every argument holds on every path or is refused by name (``docs/api.md``).
    """
    options = DecoratorOptions(**given)
    options.session_options()  # what the session would refuse (an unregistered rule), now
    if target is None:
        return lambda t: _apply(t, options)
    return _apply(target, options)
