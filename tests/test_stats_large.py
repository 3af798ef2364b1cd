"""decide_speedup at 20,000 timings per arm: the implicit selection, checked by brute counting.

200 million Walsh averages / 400 million differences are never built by the library; the test
counts them exactly (a bisection per row, in the same float arithmetic as evaluating each one)
to check that each reported value is the order statistic it claims to be. No timing
assertions: the machines are noisy.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import numpy as np
import pytest

from aitune_fp.core.hodges_lehmann import (
    mann_whitney_critical_count,
    paired_log_speedup_bounds,
    signed_rank_critical_count,
    unpaired_log_speedup_bounds,
)
from aitune_fp.core.sequential import decide_speedup

N = 20_000


def _prefix_lengths(row: np.ndarray, column: np.ndarray, below: Callable[..., np.ndarray]) -> int:
    """Sum over ``i`` of the length of the prefix of ``column`` where ``below(row[i], column[j])``.

    ``below`` must hold on a prefix of ``column`` for every ``i`` (it does for a sorted column
    and a comparison monotone in it: float addition and subtraction are monotone in each
    argument), so a vectorised bisection finds each prefix, in the same float arithmetic as
    evaluating every pair.
    """
    lo = np.zeros(len(row), dtype=np.int64)
    hi = np.full(len(row), len(column), dtype=np.int64)
    while bool((lo < hi).any()):
        open_ = lo < hi
        mid = (lo + hi) // 2
        holds = below(row, column[np.minimum(mid, len(column) - 1)]) & open_
        lo = np.where(holds, mid + 1, lo)
        hi = np.where(open_ & ~holds, mid, hi)
    return int(lo.sum())


def _walsh_counts(diffs: np.ndarray) -> Callable[[float], tuple[int, int]]:
    """Counts over the Walsh averages ``(d_i + d_j) / 2, i <= j``, from the full square.

    The square is symmetric (float addition commutes), so a triangle count is (square + diagonal) / 2.
    """
    ordered = np.sort(diffs)
    diagonal = (diffs + diffs) / 2.0

    def count(value: float) -> tuple[int, int]:
        below = _prefix_lengths(ordered, ordered, lambda a, b: (a + b) / 2.0 < value)
        at_most = _prefix_lengths(ordered, ordered, lambda a, b: (a + b) / 2.0 <= value)
        below += int(np.count_nonzero(diagonal < value))
        at_most += int(np.count_nonzero(diagonal <= value))
        return below // 2, at_most // 2

    return count


def _difference_counts(
    log_base: np.ndarray, log_cand: np.ndarray
) -> Callable[[float], tuple[int, int]]:
    """Counts over all differences ``ln b_i - ln c_j`` (``c`` descending: a prefix holds)."""
    descending = np.sort(log_cand)[::-1]

    def count(value: float) -> tuple[int, int]:
        below = _prefix_lengths(log_base, descending, lambda b, c: b - c < value)
        at_most = _prefix_lengths(log_base, descending, lambda b, c: b - c <= value)
        return below, at_most

    return count


def _check_order_statistics(
    count: Callable[[float], tuple[int, int]],
    size: int,
    critical: int,
    bounds: tuple[float, float, float],
) -> None:
    """The lower bound is the (c+1)-th smallest value, the upper the (c+1)-th largest, and the
    estimate a median (at least half the values on each side)."""
    estimate, lower, upper = bounds
    below, at_most = count(lower)
    assert below <= critical < at_most
    below, at_most = count(upper)
    assert below <= size - 1 - critical < at_most
    below, at_most = count(estimate)
    assert at_most >= size / 2 and size - below >= size / 2


def test_paired_twenty_thousand() -> None:
    """20,000 interleaved pairs, a 2 % faster candidate: decided, with exact order statistics."""
    rng = random.Random(20_000)
    drift = [rng.lognormvariate(0.0, 0.2) for _ in range(N)]
    base = [0.01 * s * rng.lognormvariate(0.0, 0.05) for s in drift]
    cand = [0.01 / 1.02 * s * rng.lognormvariate(0.0, 0.05) for s in drift]
    decision = decide_speedup(base, cand, 1.0, paired=True)
    assert decision.verdict == "faster"
    assert decision.ci_low <= 1.02 <= decision.ci_high
    alpha = 0.025
    bounds = paired_log_speedup_bounds(base, cand, alpha)
    assert bounds[1] <= bounds[0] <= bounds[2]
    assert math.exp(bounds[1]) == decision.ci_low
    diffs = np.array([math.log(b) - math.log(c) for b, c in zip(base, cand, strict=True)])
    size = N * (N + 1) // 2
    _check_order_statistics(
        _walsh_counts(diffs), size, signed_rank_critical_count(N, alpha), bounds
    )


def test_unpaired_twenty_thousand_with_a_coarse_timer() -> None:
    """20,000 + 20,000 timings on a 10 µs grid (heavy ties): tie-corrected, exact statistics."""
    rng = random.Random(7)
    grid = 1e-5
    base = [round(0.001 * rng.lognormvariate(0.0, 0.1) / grid) * grid for _ in range(N)]
    cand = [round(0.001 / 1.05 * rng.lognormvariate(0.0, 0.1) / grid) * grid for _ in range(N)]
    decision = decide_speedup(base, cand, 1.0)
    assert decision.verdict == "faster"
    log_base = np.array([math.log(b) for b in base])
    log_cand = np.array([math.log(c) for c in cand])
    ties = sum(int(t) ** 3 - int(t) for t in np.unique(log_base, return_counts=True)[1]) + sum(
        int(t) ** 3 - int(t) for t in np.unique(log_cand, return_counts=True)[1]
    )
    assert ties > 0
    alpha = 0.025
    critical = mann_whitney_critical_count(N, N, alpha, tie_term=ties)
    assert critical > mann_whitney_critical_count(N, N, alpha)  # the correction is in effect
    bounds = unpaired_log_speedup_bounds(base, cand, alpha)
    _check_order_statistics(_difference_counts(log_base, log_cand), N * N, critical, bounds)


@pytest.mark.parametrize("paired", [True, False])
def test_arrays_of_twenty_thousand(paired: bool) -> None:
    """A float32 array decides as the list of its values does, at the implicit-path size."""
    rng = np.random.default_rng(3)
    base = (0.01 * rng.lognormal(0.0, 0.1, N)).astype(np.float32)
    cand = (0.01 / 0.97 * rng.lognormal(0.0, 0.1, N)).astype(np.float32)
    decision = decide_speedup(base, cand, 1.0, paired=paired)
    assert decision.verdict == "not_faster"
    assert decision == decide_speedup(base.tolist(), cand.tolist(), 1.0, paired=paired)
