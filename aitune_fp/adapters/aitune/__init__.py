"""Gate AITune's own strategies: a trivial subclass of the AITune class, its kind's gate first."""

from __future__ import annotations

from typing import Any

from aitune_fp.adapters import is_aitune_strategy
from aitune_fp.adapters.aitune._names import (
    COMMON_HOOKS,
    MODULE_NAMES,
    PROFILING_HOOKS,
    aitune,
    missing,
)
from aitune_fp.adapters.aitune.gate import AituneGate, MixinGate
from aitune_fp.adapters.aitune.profiling_gate import ProfilingGate, kind_of
from aitune_fp.adapters.reports import DecoratorOptions
from aitune_fp.correctness.closeness import Closeness
from aitune_fp.errors import InvalidTypeError, InvalidValueError


def check_hooks(base: type) -> type[AituneGate]:
    """The gate class for ``base`` after checking every hook it needs exists."""
    absent = [n for n in COMMON_HOOKS if not callable(getattr(base, n, None))]
    for module, names in MODULE_NAMES.items():
        for name in names:
            aitune(module, name)
    if not absent and callable(getattr(base, "_build_validate_and_check_perf", None)):
        return MixinGate
    if not callable(getattr(base, "_run_backends", None)):
        absent.append("_build_validate_and_check_perf")
    absent += [n for n in PROFILING_HOOKS if not callable(getattr(base, n, None))]
    if absent:
        raise missing(base.__name__, absent[0])
    kind_of(base)  # one of AITune's three, measuring as AITune's does
    return ProfilingGate


def _root(cls: type) -> type:
    """The AITune class (or the user's subclass of it) that a gated class was made from."""
    while "__aitune_fp_base__" in vars(cls) and issubclass(cls, AituneGate):
        base: type = vars(cls)["__aitune_fp_base__"]
        if not issubclass(base, AituneGate):
            return base
        cls = base
    return cls


def _reduce_ex(self: Any, protocol: Any) -> Any:
    """Pickles (a worker's build step holds the strategy) rebuild the class: it has AITune's name."""
    return (_rebuild, (_root(type(self)), self._aitune_fp_options), dict(vars(self)))


def _gated_class(base: type, options: DecoratorOptions) -> type:
    """A trivial subclass of ``base`` gated by aitune_fp with ``options`` (hooks checked)."""
    gate = check_hooks(_root(base))
    namespace: dict[str, Any] = {
        "__module__": base.__module__,  # AITune's loggers are named after it
        "__qualname__": base.__qualname__,
        "__doc__": base.__doc__,
        "__aitune_fp_base__": base,
        "__reduce_ex__": _reduce_ex,
        "_aitune_fp_options": options,
    }
    bases = (base,) if issubclass(base, AituneGate) else (gate, base)
    cls: type = type(base)(base.__name__, bases, namespace)
    return cls


def _rebuild(root: type, options: DecoratorOptions) -> Any:
    """An empty gated strategy of ``root`` (state set by pickle or copy)."""
    return object.__new__(_gated_class(root, options))


def gated(target: Any, options: DecoratorOptions) -> Any:
    """An AITune strategy class or instance gated with ``options`` (an instance shares its state)."""
    closeness = options.closeness
    if closeness is not None and closeness != Closeness(
        enabled=closeness.enabled, tolerances=closeness.tolerances
    ):
        raise InvalidValueError(
            "closeness of an AITune strategy takes enabled and tolerances only: noise_floor, "
            "accuracy, criteria, rel_l2, outlier_share, noise_factor and calibrate are not "
            "supported for it yet"
        )
    if isinstance(target, type):
        return _gated_class(target, options)
    if not is_aitune_strategy(target):
        raise InvalidTypeError(f"{target!r} is not an AITune strategy")
    cls = _gated_class(_root(type(target)), options)
    strategy: Any = object.__new__(cls)
    strategy.__dict__ = target.__dict__  # one strategy: the same state seen through both
    if not options.enabled:
        strategy.enable_performance_validation(False)
    return strategy
