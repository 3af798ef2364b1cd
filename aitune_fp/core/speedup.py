"""Speedup arithmetic: the ratio of throughputs and AITune's threshold rule, with checked inputs."""

from __future__ import annotations

from aitune_fp.core._checks import check_nonnegative, check_positive, check_threshold
from aitune_fp.errors import InvalidValueError

__all__ = ["DEFAULT_THRESHOLD_PERCENT", "compute_speedup", "meets_threshold", "required_speedup"]

#: AITune's default gate: a candidate must be at least 1 % faster than eager.
DEFAULT_THRESHOLD_PERCENT = 1.0


def compute_speedup(throughput: float, baseline_throughput: float) -> float:
    """Return ``throughput / baseline_throughput`` (higher is better).

    Raises ``ValueError`` for a zero, negative or non-finite baseline and for a negative or
    non-finite throughput, so a broken measurement never becomes a silent NaN or infinity.
    """
    value = check_nonnegative("throughput", throughput)
    baseline = check_positive("baseline_throughput", baseline_throughput)
    speedup = value / baseline
    if speedup == float("inf"):
        raise InvalidValueError(
            f"speedup overflows: throughput={throughput!r} / baseline_throughput={baseline_throughput!r}"
        )
    return speedup


def required_speedup(min_speedup_threshold_percent: float) -> float:
    """Return the speedup a candidate must reach: ``1 + pct / 100``."""
    pct = check_threshold("min_speedup_threshold_percent", min_speedup_threshold_percent)
    return 1.0 + pct / 100.0


def meets_threshold(
    speedup: float, min_speedup_threshold_percent: float = DEFAULT_THRESHOLD_PERCENT
) -> bool:
    """Return whether ``speedup >= 1 + pct / 100`` (AITune's rule: exactly at the threshold passes)."""
    value = check_nonnegative("speedup", speedup)
    return value >= required_speedup(min_speedup_threshold_percent)
