"""Spot checks while timing: which timed calls of a look are compared with eager's outputs."""

from __future__ import annotations

import math
import random

from aitune_fp.core._checks import check_finite, check_int, check_type

#: Share of the calls between a look's first and last that are compared with eager.
DEFAULT_SPOT_RATE = 0.10


def spot_positions(n_calls: int, rate: float, seed: int) -> tuple[int, ...]:
    """Which of a look's ``n_calls`` timed calls (numbered from 0) to compare with eager.

    Both ends, and ``round(rate * inner)`` of the inner calls (at least one), drawn by ``seed``.
    """
    n = check_int("n_calls", n_calls, minimum=1)
    share = check_finite("rate", rate, minimum=0, strict=True, maximum=1)
    check_type("seed", seed, int)
    if n <= 2:
        return tuple(range(n))
    extra = min(n - 2, max(1, math.floor(share * (n - 2) + 0.5)))
    return (0, *sorted(random.Random(seed).sample(range(1, n - 1), extra)), n - 1)
