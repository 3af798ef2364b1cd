"""Speedup arithmetic and the gate: the ratio of throughputs, AITune's threshold rule, ``Gate``."""

from __future__ import annotations

import attrs

from aitune_fp.core._checks import check_nonnegative, check_positive, check_threshold
from aitune_fp.errors import InvalidValueError

#: AITune's default gate: a candidate must be at least 1 % faster than eager.
DEFAULT_THRESHOLD_PERCENT = 1.0
#: The default guarantee against a false accept: the tune's, ``check``'s and ``decide_speedup``'s.
DEFAULT_CONFIDENCE = 0.95
#: The largest required speedup the commands accept: a threshold above it is a typo (``1e308``).
MAX_REQUIRED_SPEEDUP = 1000.0
#: The threshold (percent) whose required speedup is :data:`MAX_REQUIRED_SPEEDUP`.
MAX_THRESHOLD_PERCENT = (MAX_REQUIRED_SPEEDUP - 1.0) * 100.0


def unreachable_threshold(name: str, threshold_percent: float) -> str | None:
    """Why ``threshold_percent`` is a gate no candidate could pass (named ``name``), or None."""
    if threshold_percent <= MAX_THRESHOLD_PERCENT:
        return None
    return (
        f"{name} {threshold_percent:.12g} asks for a speedup of "
        f"{required_speedup(threshold_percent):.6g}x, which no candidate could reach: at most "
        f"{MAX_THRESHOLD_PERCENT:.0f} (percent; a required speedup of {MAX_REQUIRED_SPEEDUP:.0f}x)"
    )


def compute_speedup(throughput: float, baseline_throughput: float) -> float:
    """Return ``throughput / baseline_throughput`` (higher is better)."""
    value = check_nonnegative("throughput", throughput)
    baseline = check_positive("baseline_throughput", baseline_throughput)
    speedup = value / baseline
    if speedup == float("inf"):
        raise InvalidValueError(
            f"speedup overflows: throughput={throughput!r} / baseline_throughput={baseline_throughput!r}"
        )
    return speedup


def required_speedup(min_speedup_threshold_percent: float) -> float:
    """Return the speedup a candidate must reach: ``1 + pct / 100`` (the :class:`Gate`'s)."""
    return Gate(min_speedup_threshold_percent).required_speedup


def meets_threshold(
    speedup: float, min_speedup_threshold_percent: float = DEFAULT_THRESHOLD_PERCENT
) -> bool:
    """Return whether ``speedup >= 1 + pct / 100`` (AITune's rule: exactly at the threshold passes)."""
    value = check_nonnegative("speedup", speedup)
    return value >= required_speedup(min_speedup_threshold_percent)


def _percent(value: object) -> float:
    return check_threshold("min_speedup_threshold_percent", value)


@attrs.frozen
class Gate:
    """``threshold_percent`` (> -100, finite) and ``required_speedup`` (``1 + pct / 100``)."""

    threshold_percent: float = attrs.field(default=DEFAULT_THRESHOLD_PERCENT, converter=_percent)
    required_speedup: float = attrs.field(init=False)

    @required_speedup.default
    def _required(self) -> float:
        return 1.0 + self.threshold_percent / 100.0

    def passes(self, speedup: float) -> bool:
        """AITune's point rule: ``speedup >= required_speedup`` (exactly at the gate passes)."""
        return speedup >= self.required_speedup
