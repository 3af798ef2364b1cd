"""The three-outcome verdict on "faster than eager by the threshold", as a record (no text)."""

from __future__ import annotations

import math
from typing import Literal

import attrs

from aitune_fp.core._checks import (
    as_tuple,
    finite,
    integer,
    not_nan,
    of_type,
    one_of,
    open_interval,
    optional,
    tuple_of,
)
from aitune_fp.errors import InvalidValueError

Verdict = Literal["faster", "not_faster", "inconclusive"]
VERDICTS: tuple[Verdict, ...] = ("faster", "not_faster", "inconclusive")

#: Why a look stayed open: the first condition that held it back, in the order they apply.
HELD_BACK: tuple[str, ...] = (
    "interval",
    "widening",
    "shift",
    "block",
    "throughput",
    "carryover",
    "early",
    "machine",
)
#: The conditions that overrule the interval: ``inconclusive`` may stand where the bounds settle.
_OVERRULING = ("throughput", "carryover", "early", "machine")

#: Names of the two interval methods, as written in :attr:`SpeedupDecision.method`.
METHODS: tuple[str, ...] = ("wilcoxon_signed_rank_hl", "mann_whitney_hl")


def _json_float(value: float) -> float | None:
    return value if math.isfinite(value) else None


@attrs.frozen(kw_only=True)
class SpeedupDecision:
    """A three-outcome verdict on 'candidate is faster than eager by the threshold', with its basis."""

    verdict: Verdict = attrs.field(validator=one_of(VERDICTS))
    speedup: float = attrs.field(validator=finite(minimum=0, strict=True))
    ci_low: float = attrs.field(validator=not_nan())
    ci_high: float = attrs.field(validator=not_nan())
    n_baseline: int = attrs.field(validator=integer(minimum=2))
    n_candidate: int = attrs.field(validator=integer(minimum=2))
    confidence: float = attrs.field(validator=open_interval(0, 1))
    #: Overall one-sided level of each error (None: this look alone, ``1 - (1 - confidence) / 2``).
    guarantee: float | None = optional(open_interval(0, 1))
    required_speedup: float = attrs.field(validator=finite(minimum=0, strict=True))
    #: How far above the required speedup a ``not_faster`` may be (speedup units: 0.01 = 1 pt).
    futility_margin: float = attrs.field(default=0.0, validator=finite(minimum=0))
    #: Upper bound at the (looser) futility level; None when it is ``ci_high``.
    futility_high: float | None = optional(not_nan())
    method: str = attrs.field(validator=one_of(METHODS))
    cv_baseline: float = attrs.field(validator=finite(minimum=0))
    cv_candidate: float = attrs.field(validator=finite(minimum=0))
    #: Lag-1 rank autocorrelation of the paired log ratios (None: unpaired).
    autocorrelation: float | None = optional(finite(minimum=-1, strict=True))
    #: Pair index where the ratio shifted (None: none found); the estimate is the later pairs'.
    shift_index: int | None = optional(integer(minimum=0))
    #: What the checks found: ``serial_correlation``, ``ratio_shift``, ``block_bound``, ...
    flags: tuple[str, ...] = attrs.field(
        default=(), converter=as_tuple, validator=tuple_of(of_type(str))
    )
    #: The first condition of :data:`HELD_BACK` that held an ``inconclusive`` look open.
    held_back: str | None = optional(one_of(HELD_BACK))
    #: How much faster the candidate ran right after an eager call than after its own (ratio).
    carryover: float | None = optional(finite(minimum=0, strict=True))

    def __attrs_post_init__(self) -> None:
        """Check that the interval holds the estimate and that the verdict follows the rule."""
        if not 0.0 <= self.ci_low <= self.speedup <= self.ci_high:
            raise InvalidValueError(
                "need 0 <= ci_low <= speedup <= ci_high, got "
                f"ci_low={self.ci_low!r}, speedup={self.speedup!r}, ci_high={self.ci_high!r}"
            )
        if self.futility_high is not None and not self.futility_high >= self.speedup:
            raise InvalidValueError(
                f"futility_high must be >= speedup ({self.speedup!r}), got {self.futility_high!r}"
            )
        expected = rule_verdict(
            self.ci_low,
            self.ci_high,
            self.required_speedup,
            speedup=self.speedup,
            futility_high=self.upper_for_futility,
            margin=self.futility_margin,
        )
        if self.held_back is not None and self.verdict != "inconclusive":
            raise InvalidValueError(
                f"held_back ({self.held_back!r}) is for an inconclusive look, got "
                f"verdict {self.verdict!r}"
            )
        if self.held_back in _OVERRULING:
            expected = "inconclusive"  # held back by a condition beside the interval
        if self.verdict != expected:
            raise InvalidValueError(
                f"verdict {self.verdict!r} contradicts the bounds [{self.ci_low!r}, "
                f"{self.ci_high!r}] and required_speedup={self.required_speedup!r} "
                f"(expected {expected!r})"
            )

    @property
    def upper_for_futility(self) -> float:
        """The upper bound the futility rule compares: ``futility_high``, else ``ci_high``."""
        return self.ci_high if self.futility_high is None else self.futility_high

    @property
    def overall(self) -> float:
        """One-sided level of each wrong verdict over the whole measurement."""
        return 1.0 - (1.0 - self.confidence) / 2.0 if self.guarantee is None else self.guarantee

    def to_dict(self) -> dict[str, object]:
        """The fields, JSON-ready (``guarantee`` resolved); an unbounded bound is written as None."""
        return {
            **attrs.asdict(self),
            "ci_high": _json_float(self.ci_high),
            "guarantee": self.overall,
            "futility_high": _json_float(self.upper_for_futility),
            "flags": list(self.flags),
        }


def rule_verdict(
    ci_low: float,
    ci_high: float,
    required: float,
    *,
    speedup: float | None = None,
    futility_high: float | None = None,
    margin: float = 0.0,
) -> Verdict:
    """Apply the three-outcome rule; equality with a threshold never settles the question."""
    if ci_low > required:
        return "faster"
    if ci_high < required:
        return "not_faster"
    if (
        speedup is not None
        and futility_high is not None
        and speedup < required
        and futility_high < required + margin
    ):
        return "not_faster"
    return "inconclusive"
