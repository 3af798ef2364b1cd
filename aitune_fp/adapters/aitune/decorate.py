"""``with_performance_validation`` for AITune: the gated class of a strategy class or instance.

The gated class is a trivial subclass of AITune's (its name, module and constructor) with the
gate of its kind placed before it; every hook the gate uses is checked by name first. Copies
and pickles rebuild it from AITune's class and the options.
"""

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
from aitune_fp.adapters.aitune.options import OPTIONS_ATTRIBUTE, AituneOptions
from aitune_fp.adapters.aitune.profiling_gate import ProfilingGate, kind_of
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.results import IsolationMode
from aitune_fp.correctness.closeness import Closeness
from aitune_fp.correctness.tolerances import Tolerances
from aitune_fp.errors import InvalidTypeError, InvalidValueError
from aitune_fp.profiling.timers import Timer


def check_hooks(base: type) -> type[AituneGate]:
    """The gate class for ``base`` after checking every hook it needs exists."""
    what = base.__name__
    for name in COMMON_HOOKS:
        if not callable(getattr(base, name, None)):
            raise missing(what, name)
    for module, names in MODULE_NAMES.items():
        for name in names:
            aitune(module, name)
    if callable(getattr(base, "_build_validate_and_check_perf", None)):
        return MixinGate
    if not callable(getattr(base, "_run_backends", None)):
        raise missing(what, "_build_validate_and_check_perf")
    for name in PROFILING_HOOKS:
        if not callable(getattr(base, name, None)):
            raise missing(what, name)
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
    """Copies and pickles rebuild the gated class from the AITune class and the options."""
    return (_rebuild, (_root(type(self)), self._aitune_fp_options), dict(vars(self)))


def _gated_class(base: type, options: AituneOptions) -> type:
    """A trivial subclass of ``base`` gated by aitune_fp with ``options`` (hooks checked)."""
    gate = check_hooks(_root(base) if issubclass(base, AituneGate) else base)
    namespace: dict[str, Any] = {
        "__module__": base.__module__,  # AITune's loggers are named after it
        "__qualname__": base.__qualname__,
        "__doc__": base.__doc__,
        "__wrapped__": base,
        "__aitune_fp_base__": base,
        "__reduce_ex__": _reduce_ex,
        OPTIONS_ATTRIBUTE: options,
    }
    bases = (base,) if issubclass(base, AituneGate) else (gate, base)
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
    isolation: IsolationMode = "process",
) -> Any:
    """Gate an AITune strategy (class or instance) with aitune_fp's decision.

    A class gives a trivial subclass (same name, module and constructor). An instance gives a
    strategy of that subclass sharing the instance's state: settings and results read or written
    through either are the same. ``min_speedup_threshold_percent=None`` keeps AITune's own
    threshold; ``enabled=False`` switches AITune's validation off (its ``disabled`` mode).
    ``isolation``: each candidate's build and check (AITune's) in a worker ``process`` of its
    own, what it taught the strategy replayed here, or ``in_process``.
    ``aitune_fp.with_performance_validation`` calls this for AITune strategies.
    """
    options = AituneOptions(
        min_speedup_threshold_percent=min_speedup_threshold_percent,
        profiling_config=profiling_config if profiling_config is not None else ProfilingConfig(),
        enabled=enabled,
        timer=timer,
        closeness_check=closeness_check,
        tolerances=tolerances,
        isolation=isolation,
    )
    if isinstance(target, type):
        return _gated_class(target, options)
    if not is_aitune_strategy(target):
        raise InvalidTypeError(f"{target!r} is not an AITune strategy")
    base = type(target)
    cls = _gated_class(_root(base) if issubclass(base, AituneGate) else base, options)
    gated: Any = object.__new__(cls)
    gated.__dict__ = target.__dict__  # one strategy: the same state seen through both
    if not enabled:
        gated.enable_performance_validation(False)
    return gated


def closeness_options(closeness: Closeness | None) -> dict[str, Any]:
    """``closeness`` as the AITune driver's options (tolerances only: no noise floor or metric yet)."""
    if closeness is None:
        return {}
    if closeness != Closeness(enabled=closeness.enabled, tolerances=closeness.tolerances):
        raise InvalidValueError(
            "an AITune strategy's closeness check takes tolerances only: noise_floor, "
            "accuracy, criteria, rel_l2, outlier_share, noise_factor and calibrate are not "
            "supported for it yet"
        )
    return {"closeness_check": closeness.enabled, "tolerances": closeness.tolerances}
