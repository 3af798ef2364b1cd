"""Spot checks while timing: which timed calls of a look are compared with eager's outputs."""

from __future__ import annotations

import math
import random

from aitune_fp.core._checks import check_finite, check_int, check_type
from aitune_fp.errors import InvalidValueError

#: Share of the calls between a look's first and last that are compared with eager.
DEFAULT_SPOT_RATE = 0.10


def _check_rate(rate: object) -> float:
    """Return ``rate`` as a float if it lies in ``(0, 1]``, else raise naming it."""
    value = check_finite("rate", rate, minimum=0, strict=True)
    if value > 1.0:
        raise InvalidValueError(f"rate must be <= 1, got {rate!r}")
    return value


def _extra_count(n_calls: int, rate: float) -> int:
    """How many of the ``n_calls - 2`` inner calls are checked (already-validated arguments)."""
    inner = n_calls - 2
    if inner <= 0:
        return 0
    return min(inner, max(1, math.floor(rate * inner + 0.5)))


def spot_count(n_calls: int, rate: float = DEFAULT_SPOT_RATE) -> int:
    """How many calls :func:`spot_positions` picks for a look of ``n_calls`` timed calls."""
    n = check_int("n_calls", n_calls, minimum=1)
    return min(n, 2) + _extra_count(n, _check_rate(rate))


def spot_positions(n_calls: int, rate: float, seed: int) -> tuple[int, ...]:
    """Which of a look's ``n_calls`` timed calls (numbered from 0) to compare with eager."""
    n = check_int("n_calls", n_calls, minimum=1)
    extra = _extra_count(n, _check_rate(rate))
    check_type("seed", seed, int)
    if n <= 2:
        return tuple(range(n))
    inner = random.Random(seed).sample(range(1, n - 1), extra)
    return (0, *sorted(inner), n - 1)


def _miss_probability(inner: int, faulty: int, picked: int) -> float:
    """Chance that ``picked`` of ``inner`` positions drawn without replacement avoid all ``faulty``."""
    if faulty + picked > inner:
        return 0.0
    miss = 1.0
    for j in range(picked):
        miss *= (inner - faulty - j) / (inner - j)
    return miss


def detection_probability(n_calls: int, rate: float, period: int) -> float:
    """Probability that :func:`spot_positions` compares at least one faulty call."""
    n = check_int("n_calls", n_calls, minimum=1)
    picked = _extra_count(n, _check_rate(rate))
    k = check_int("period", period, minimum=1)
    inner = max(n - 2, 0)
    missed = float(max(k - n, 0))  # phases whose first faulty call comes after the look
    cache: dict[int, float] = {}
    for phi in range(min(k, n)):
        if phi == 0 or (n - 1) % k == phi:
            continue  # an end is faulty: always caught
        faulty = len(range(phi, n - 1, k))  # faulty calls among 1 .. n - 2
        if faulty not in cache:
            cache[faulty] = _miss_probability(inner, faulty, picked)
        missed += cache[faulty]
    return 1.0 - missed / k
