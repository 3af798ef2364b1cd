"""Profiling configuration: how to warm up, time and decide, as one frozen value."""

from __future__ import annotations

import itertools
import math
from typing import Any, Literal

import attrs

from aitune_fp.core._checks import check_int

__all__ = ["DECISION_MODES", "DecisionMode", "ProfilingConfig", "for_batch_size"]

DecisionMode = Literal["statistical", "point"]
DECISION_MODES: tuple[DecisionMode, ...] = ("statistical", "point")


def _positive_int(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_int(attribute.name, value, minimum=1)


def _window(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_int(attribute.name, value, minimum=2)


def _optional_positive_int(
    instance: object, attribute: attrs.Attribute[Any], value: object
) -> None:
    if value is not None:
        check_int(attribute.name, value, minimum=1)


def _positive_finite(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{attribute.name} must be a real number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{attribute.name} must be a finite number > 0, got {value!r}")


def _open_unit(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{attribute.name} must be a real number, got {value!r}")
    if not 0.0 < value < 1.0:
        raise ValueError(f"{attribute.name} must lie strictly between 0 and 1, got {value!r}")


def _decision(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in DECISION_MODES:
        raise ValueError(f"{attribute.name} must be one of {DECISION_MODES}, got {value!r}")


def _bool(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{attribute.name} must be a bool, got {value!r}")


def _int_tuple(value: object) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"expected a sequence of integers, got {value!r}")
    return tuple(value)


def _batch_sizes(instance: object, attribute: attrs.Attribute[Any], value: tuple[int, ...]) -> None:
    for item in value:
        check_int(f"{attribute.name} item", item, minimum=1)


def _looks(instance: object, attribute: attrs.Attribute[Any], value: tuple[int, ...]) -> None:
    if not value:
        raise ValueError(f"{attribute.name} must name at least one look, got {value!r}")
    for item in value:
        check_int(f"{attribute.name} item", item, minimum=2)
    if any(b <= a for a, b in itertools.pairwise(value)):
        raise ValueError(f"{attribute.name} must be strictly increasing, got {value!r}")


@attrs.frozen(kw_only=True)
class ProfilingConfig:
    """How a candidate is warmed up, timed and decided; one value shared by baseline and candidates.

    ``statistical`` (default) times eager and candidate interleaved and decides on a confidence
    interval at planned ``looks`` (pairs); ``point`` reproduces AITune's rule
    (``point_warmup_calls`` + ``point_steps`` calls, mean-latency throughput, baseline once).
    """

    decision: DecisionMode = attrs.field(default="statistical", validator=_decision)
    #: Batch sizes to profile; empty means "the graph spec's max batch size". Narrow with
    #: :func:`for_batch_size`.
    batch_sizes: tuple[int, ...] = attrs.field(
        default=(), converter=_int_tuple, validator=_batch_sizes
    )
    #: Whether inputs are batched along their batch axis (False: the raw sample, batch size 1).
    batching: bool = attrs.field(default=True, validator=_bool)
    #: Warm-up is steady when the last ``warmup_window`` calls of each arm lie within
    #: ``warmup_tolerance`` of their median ((max - min) / median).
    warmup_window: int = attrs.field(default=5, validator=_window)
    warmup_tolerance: float = attrs.field(default=0.10, validator=_positive_finite)
    #: Warm-up gives up waiting for steadiness after this many calls per arm, the untimed first
    #: call included (and flags it); 20 as in the rule measured on this kind of machine.
    warmup_max_calls: int = attrs.field(default=20, validator=_positive_int)
    #: Planned looks, in timed pairs per arm; the last one is the sample budget.
    looks: tuple[int, ...] = attrs.field(
        default=(10, 20, 40, 80, 160), converter=_int_tuple, validator=_looks
    )
    #: Confidence of the sequential decision: ``1 - confidence`` is the false-accept rate
    #: allowed over all looks (and, separately, the false-reject rate); each look uses
    #: ``(1 - confidence) / len(looks)`` per side, so its interval is two-sided at
    #: ``1 - 2 * (1 - confidence) / len(looks)`` (0.98 with the defaults).
    confidence: float = attrs.field(default=0.95, validator=_open_unit)
    #: Wall-clock budget in seconds for one comparison; when spent, the verdict is taken at
    #: the last completed look and is ``inconclusive`` if still open.
    max_seconds: float = attrs.field(default=60.0, validator=_positive_finite)
    #: AITune point rule: warm-up calls and timed calls per arm.
    point_warmup_calls: int = attrs.field(default=10, validator=_positive_int)
    point_steps: int = attrs.field(default=20, validator=_positive_int)
    #: CPU intra-op threads for both arms (None: leave torch's setting as it is).
    threads: int | None = attrs.field(default=None, validator=_optional_positive_int)

    def __attrs_post_init__(self) -> None:
        """Cross-field check: the steadiness window must fit in the warm-up budget."""
        if self.warmup_window >= self.warmup_max_calls:
            raise ValueError(
                f"warmup_window ({self.warmup_window}) must be < warmup_max_calls "
                f"({self.warmup_max_calls}): the first call of each arm is never timed"
            )
        if (1.0 - self.confidence) / len(self.looks) >= 0.5:
            raise ValueError(
                f"confidence ({self.confidence!r}) is too low for {len(self.looks)} look(s): "
                "each look's one-sided error (1 - confidence) / len(looks) must be < 0.5"
            )

    @property
    def max_pairs(self) -> int:
        """The sample budget: timed pairs at the last planned look."""
        return self.looks[-1]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field (tuples become lists)."""
        return {
            k: list(v) if isinstance(v, tuple) else v
            for k, v in attrs.asdict(self, recurse=False).items()
        }


def for_batch_size(
    config: ProfilingConfig, batch_size: int, *, batching: bool | None = None
) -> ProfilingConfig:
    """Return ``config`` narrowed to one batch size; every other field stays as it was.

    ``batching=None`` keeps the config's own value (as AITune's narrowing does).
    """
    check_int("batch_size", batch_size, minimum=1)
    return attrs.evolve(
        config,
        batch_sizes=(batch_size,),
        batching=config.batching if batching is None else batching,
    )
