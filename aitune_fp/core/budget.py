"""The timing budget stated up front, from eager's measured call time: which looks it reaches."""

from __future__ import annotations

import math

import attrs

from aitune_fp.core._checks import finite, of_type, tuple_of
from aitune_fp.errors import InvalidValueError

#: Fewest warm-up pairs a comparison makes (one untimed call of each arm, one timed).
WARMUP_PAIRS = 2
_FLAG = "--max-seconds (ProfilingConfig.max_seconds)"


def _fmt_s(seconds: float) -> str:
    """``2.1 s``, ``240 s``, ``35 ms``, ``80 µs``: two significant figures, whole above 10."""
    scale, unit = next(
        ((s, u) for s, u in ((1.0, "s"), (1e-3, "ms")) if seconds >= s), (1e-6, "µs")
    )
    value = seconds / scale
    return f"{value:.0f} {unit}" if value >= 10 else f"{value:.2g} {unit}"


@attrs.frozen(kw_only=True)
class BudgetPlan:
    """What ``max_seconds`` buys at eager's call time: pairs, looks reached, what more costs."""

    eager_call_s: float = attrs.field(validator=finite(minimum=0, strict=True))
    max_seconds: float = attrs.field(validator=finite(minimum=0, strict=True))
    looks: tuple[int, ...] = attrs.field(validator=tuple_of(of_type(int)))
    #: Timed pairs the budget allows (capped at the last look).
    pairs: int
    #: Planned looks whose pairs fit.
    looks_reached: int
    #: Calls of each arm a pair makes: 1, or a block's (its lead included).
    calls: int = 1

    @property
    def first_look_fits(self) -> bool:
        """Whether the budget reaches the first look."""
        return self.looks_reached >= 1

    def seconds_for(self, pairs: int) -> float:
        """About how long ``pairs`` timed pairs take, the least warm-up included."""
        return (pairs + WARMUP_PAIRS) * 2 * self.eager_call_s * self.calls

    def text(self) -> str:
        """The plan in one line, naming the flag when the budget falls short."""
        blocks = f" in blocks of {self.calls} calls" if self.calls > 1 else ""
        head = (
            f"eager {_fmt_s(self.eager_call_s)} a call{blocks}: the {self.max_seconds:g} s "
            "budget per candidate"
        )
        if not self.first_look_fits:
            need = self.seconds_for(self.looks[0])
            return (
                f"{head} is too short for the first look: its {self.looks[0]} pairs take about "
                f"{_fmt_s(need)} with the warm-up; raise it with --max-seconds "
                f"{math.ceil(need)} (ProfilingConfig.max_seconds)"
            )
        if self.looks_reached == len(self.looks):
            return (
                f"{head} reaches all {len(self.looks)} looks (up to {self.looks[-1]} pairs, "
                f"about {_fmt_s(self.seconds_for(self.looks[-1]))})"
            )
        following = self.looks[self.looks_reached]
        return (
            f"{head} allows about {self.pairs} pairs ({self.looks_reached} of "
            f"{len(self.looks)} looks); the next look ({following} pairs) needs about "
            f"{_fmt_s(self.seconds_for(following))}: {_FLAG}"
        )


def plan_budget(
    eager_call_s: float, *, max_seconds: float, looks: tuple[int, ...], calls: int = 1
) -> BudgetPlan:
    """The plan for ``max_seconds`` at ``looks``, eager taking ``eager_call_s`` a call."""
    if not (math.isfinite(eager_call_s) and eager_call_s > 0):
        raise InvalidValueError(f"eager_call_s must be a finite time > 0, got {eager_call_s!r}")
    if not looks:
        raise InvalidValueError("looks must hold at least one look, got none")
    fit = math.floor(max_seconds / (2 * eager_call_s * calls)) - WARMUP_PAIRS
    pairs = max(0, min(fit, looks[-1]))
    reached = sum(1 for look in looks if look <= pairs)
    return BudgetPlan(
        eager_call_s=eager_call_s,
        max_seconds=max_seconds,
        looks=tuple(looks),
        pairs=pairs,
        looks_reached=reached,
        calls=calls,
    )
