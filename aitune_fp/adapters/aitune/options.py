"""How a decorated AITune strategy is gated: the decorator's options and the session's settings."""

from __future__ import annotations

from typing import Any

import attrs

from aitune_fp.adapters.aitune._names import mode
from aitune_fp.core._checks import check_threshold, of_type, one_of
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.results import ISOLATION_MODES, IsolationMode
from aitune_fp.core.speedup import DEFAULT_THRESHOLD_PERCENT
from aitune_fp.correctness.tolerances import Tolerances
from aitune_fp.pipeline.values import ValidationOptions
from aitune_fp.profiling.timers import Timer

__all__ = ["AituneOptions", "threshold_of", "validation_options"]


def _optional_threshold(value: object) -> float | None:
    return None if value is None else check_threshold("min_speedup_threshold_percent", value)


@attrs.frozen(kw_only=True)
class AituneOptions:
    """How a decorated AITune strategy is gated.

    ``min_speedup_threshold_percent``: None keeps the strategy's own
    (``min_speedup_threshold_percent`` given to AITune's constructor; the profiling strategies
    have none and get aitune_fp's default of 1 %). ``closeness_check``: also compare each
    candidate's output with eager's (``tolerances``; a backend that declares an autocast dtype
    gets the reduced precision tier); switch it off for quantized backends whose outputs differ
    by design.
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
    #: Where each candidate's build and check run: a worker ``process`` (what it teaches the
    #: strategy is replayed here) or ``in_process``; a distributed run is always in process.
    isolation: IsolationMode = attrs.field(default="process", validator=one_of(ISOLATION_MODES))


def threshold_of(strategy: Any, options: AituneOptions) -> float:
    """The threshold a gated strategy uses: the decorator's, else AITune's own, else 1 %."""
    if options.min_speedup_threshold_percent is not None:
        return options.min_speedup_threshold_percent
    own = getattr(strategy, "min_speedup_threshold_percent", None)
    return check_threshold(
        "min_speedup_threshold_percent", DEFAULT_THRESHOLD_PERCENT if own is None else own
    )


#: The attribute a decorated AITune strategy (class or instance) holds its options under: the
#: gate mixin's class default, the decorator's instance value (private to users' eyes).
OPTIONS_ATTRIBUTE = "_aitune_fp_options"


def options_of(strategy: Any) -> AituneOptions:
    """The aitune_fp options a decorated AITune strategy holds."""
    options: AituneOptions = getattr(strategy, OPTIONS_ATTRIBUTE)
    return options


def validation_options(strategy: Any) -> ValidationOptions:
    """The session's options for ``strategy`` now (its mode and threshold as they stand)."""
    options = options_of(strategy)
    return ValidationOptions(
        min_speedup_threshold_percent=threshold_of(strategy, options),
        profiling_config=options.profiling_config,
        enabled=mode(strategy) != "disabled",
        timer=options.timer,
        isolation="in_process" if _distributed() else options.isolation,
    )


def _distributed() -> bool:
    """Whether this is one rank of several: a worker could not join the build's collectives."""
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1)
