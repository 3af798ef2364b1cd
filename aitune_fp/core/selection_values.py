"""The values of a head-to-head selection (the algorithm is :mod:`aitune_fp.core.selection`)."""

from __future__ import annotations

import math
from typing import Any, Final, Literal

import attrs

from aitune_fp.core._checks import (
    as_tuple,
    check_int,
    finite,
    increasing,
    integer,
    not_nan,
    of_type,
    one_of,
    open_interval,
    tuple_of,
)
from aitune_fp.core.sequential import look_alpha
from aitune_fp.errors import InvalidTypeError, InvalidValueError

#: Round counts at which the default rule looks.
DEFAULT_SELECTION_LOOKS: Final = (10, 20, 40, 80, 160, 320)
Outcome = Literal["open", "one_left", "settled", "looks_spent", "budget", "unopposed", "none_ran"]
#: How a head-to-head stands or ended (docs/architecture.md says what each means).
OUTCOMES: Final = ("open", "one_left", "settled", "looks_spent", "budget", "unopposed", "none_ran")


def _name(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str):
        raise InvalidTypeError(f"{attribute.name} must be a str, got {value!r}")
    if not value.strip():
        raise InvalidValueError(f"{attribute.name} must not be empty, got {value!r}")


@attrs.frozen(kw_only=True)
class SelectionRule:
    """How contenders are compared."""

    delta: float = attrs.field(default=0.02, validator=open_interval(0.0, 1.0))
    confidence: float = attrs.field(default=0.95, validator=open_interval(0.5, 1.0))
    looks: tuple[int, ...] = attrs.field(
        default=DEFAULT_SELECTION_LOOKS,
        converter=as_tuple,
        validator=[tuple_of(integer(minimum=2)), increasing],
    )
    guard_serial_correlation: bool = attrs.field(default=True, validator=of_type(bool))

    def pair_alpha(self, n_contenders: int, look: int) -> float:
        """One-sided error of each pair's bounds at ``look`` (1-based) among ``n_contenders``."""
        k = check_int("n_contenders", n_contenders, minimum=2)
        return look_alpha((1.0 - self.confidence) / (k - 1), look, len(self.looks))


@attrs.frozen
class Contender:
    """One candidate in a head-to-head: its name, its place in the user's order, its build time."""

    name: str = attrs.field(validator=_name)
    order: int = attrs.field(validator=integer(minimum=0))
    build_s: float | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(finite(minimum=0.0)),
    )


@attrs.frozen(kw_only=True)
class PairBound:
    """How much faster ``first`` is than ``second``, with its two-sided interval at ``level``."""

    first: str = attrs.field(validator=_name)
    second: str = attrs.field(validator=_name)
    ratio: float = attrs.field(validator=finite(minimum=0.0, strict=True))
    low: float = attrs.field(validator=[not_nan(), finite(minimum=0.0)])
    high: float = attrs.field(validator=not_nan())
    level: float = attrs.field(validator=open_interval(0.0, 1.0))
    rounds: int = attrs.field(validator=integer(minimum=2))
    inflation: float = attrs.field(default=1.0, validator=finite(minimum=1.0))

    def flipped(self) -> PairBound:
        """The same bound seen from ``second``: how much faster it is than ``first``."""
        return attrs.evolve(
            self,
            first=self.second,
            second=self.first,
            ratio=1.0 / self.ratio,
            low=0.0 if math.isinf(self.high) else 1.0 / self.high,
            high=math.inf if self.low == 0.0 else 1.0 / self.low,
        )

    def within(self, delta: float) -> bool:
        """Whether the interval lies inside ``[1 / (1 + delta), 1 + delta]``."""
        return 1.0 / (1.0 + delta) <= self.low and self.high <= 1.0 + delta


@attrs.frozen(kw_only=True)
class Elimination:
    """``name`` was shown slower than ``lost_to`` at ``at_rounds`` rounds."""

    name: str = attrs.field(validator=_name)
    lost_to: str = attrs.field(validator=_name)
    ratio: float = attrs.field(validator=finite(minimum=0.0, strict=True))
    low: float = attrs.field(validator=finite(minimum=1.0, strict=True))
    high: float = attrs.field(validator=not_nan())
    at_rounds: int = attrs.field(validator=integer(minimum=2))


@attrs.frozen(kw_only=True)
class Failure:
    """``name`` raised ``error`` (type and message) after ``at_rounds`` complete rounds."""

    name: str = attrs.field(validator=_name)
    error: str = attrs.field(validator=of_type(str))
    at_rounds: int = attrs.field(validator=integer(minimum=0))


@attrs.frozen(kw_only=True)
class SelectionState:
    """Where a head-to-head stands: who is in, who lost to whom, and the choice."""

    contenders: tuple[Contender, ...] = attrs.field(validator=tuple_of(of_type(Contender)))
    remaining: tuple[str, ...] = attrs.field(validator=tuple_of(of_type(str)))
    eliminated: tuple[Elimination, ...] = attrs.field(
        default=(), validator=tuple_of(of_type(Elimination))
    )
    failed: tuple[Failure, ...] = attrs.field(default=(), validator=tuple_of(of_type(Failure)))
    pairs: tuple[PairBound, ...] = attrs.field(default=(), validator=tuple_of(of_type(PairBound)))
    rounds: int = attrs.field(default=0, validator=integer(minimum=0))
    look: int = attrs.field(default=0, validator=integer(minimum=0))
    settled: bool = attrs.field(default=False, validator=of_type(bool))
    chosen: str | None = attrs.field(default=None)
    outcome: Outcome = attrs.field(default="open", validator=one_of(OUTCOMES))
    reason: str = attrs.field(default="", validator=of_type(str))
    #: The fastest is at most this many times faster than ``chosen`` (inf: unknown).
    gap_bound: float = attrs.field(default=math.inf, validator=not_nan())
    confidence: float = attrs.field(default=0.95, validator=open_interval(0.5, 1.0))

    @property
    def done(self) -> bool:
        """Whether the selection is over (a choice, or every contender failed)."""
        return self.outcome != "open"

    def bound(self, first: str, second: str) -> PairBound | None:
        """The latest bound of how much faster ``first`` is than ``second`` (None if not compared)."""
        for pair in self.pairs:
            if (pair.first, pair.second) == (first, second):
                return pair
            if (pair.first, pair.second) == (second, first):
                return pair.flipped()
        return None
