"""Argument checks shared by the pure core: clear errors that name the argument and the bad value."""

from __future__ import annotations

import math

__all__ = ["check_finite", "check_int", "check_nonnegative", "check_positive", "check_threshold"]


def check_finite(name: str, value: object) -> float:
    """Return ``value`` as a float, or raise if it is not a finite real number (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return result


def check_nonnegative(name: str, value: object) -> float:
    """Return ``value`` as a float, or raise if it is not finite and >= 0."""
    result = check_finite(name, value)
    if result < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return result


def check_positive(name: str, value: object) -> float:
    """Return ``value`` as a float, or raise if it is not finite and > 0."""
    result = check_finite(name, value)
    if result <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return result


def check_int(name: str, value: object, *, minimum: int = 1) -> int:
    """Return ``value`` if it is an int (not a bool) >= ``minimum``, else raise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return value


def check_threshold(name: str, value: object) -> float:
    """Return a threshold percent as a float, or raise if it is not finite or is <= -100."""
    result = check_finite(name, value)
    if result <= -100.0:
        raise ValueError(f"{name} must be > -100 (percent), got {value!r}")
    return result
