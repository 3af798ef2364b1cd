"""Checks of the independence the paired decision assumes, on the log ratios, and their remedies."""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
from collections.abc import Sequence

from aitune_fp.core._checks import check_int, check_open_interval
from aitune_fp.core.hodges_lehmann import unpaired_bounds
from aitune_fp.core.timings import sorted_median
from aitune_fp.errors import InvalidValueError

#: Significance of the change-point test on the paired ratios (Pettitt). Strict, because every
#: look runs it and a false flag costs a decision made on fewer pairs.
SHIFT_ALPHA = 0.01
#: How far eager's own latency level may move (relative) before the machine counts as changed.
MACHINE_CHANGE = 0.15
#: Standard deviations of two window medians' difference a move must clear on top of
#: MACHINE_CHANGE: quiet blocks wandering as measured on this project's CPU (AR(1), sd 8 %,
#: phi 0.75) then trip the scan over every split in under 2 % of looks (tests/test_blocks.py).
MOVE_Z = 2.0
#: Largest move of eager's level (either way, median after it over median before) that the paired
#: ratio, steady across it, lets stand: above the 20-31 % steps of this project's shared CPU, below
#: the 1.4-2.6x its blocks read under the injected 2x change (benchmarks/RESULTS.md) and a busy
#: machine's 2-3x; past it the rule holds whatever the ratio does.
RATIO_HELD_MOVE = 1.35
#: Fewest pairs on each side of a move that tell whether the paired ratio held across it.
MIN_SIDE_PAIRS = 8
#: Pairs just before a found move that may already run at the new level: a clean step at ``s``
#: is found at ``s .. s + 2`` (:func:`machine_change_index`, ``window // 2``).
STEP_SLACK = 2
#: Fewest windows whose medians tell eager's wander from a step (fewer: independent noise only).
_WANDER_WINDOWS = 6
#: Largest lag-1 correlation the remedy corrects for; above, the widening is capped.
_MAX_PHI = 0.9


def _ranks(values: Sequence[float]) -> list[float]:
    """Mid-ranks (1-based; ties share the mean of their ranks)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def lag1_rank_autocorrelation(values: Sequence[float]) -> float:
    """Lag-1 autocorrelation of the ranks of ``values``, in [-1, 1]; 0.0 when undefined."""
    n = len(values)
    if n < 3:
        return 0.0
    ranks = _ranks(values)
    mean = (n + 1) / 2.0
    centred = [r - mean for r in ranks]
    denominator = math.fsum(c * c for c in centred)
    if denominator == 0.0:
        return 0.0
    numerator = math.fsum(a * b for a, b in itertools.pairwise(centred))
    return max(-1.0, min(1.0, numerator / denominator))


def autocorrelation_flag_level(n: int) -> float:
    """Lag-1 rank autocorrelation above which ``n`` ratios are flagged: ``1.645 / sqrt(n)``."""
    return 1.645 / math.sqrt(check_int("n", n, minimum=1))


def ar1_coefficient(rank_autocorrelation: float, n: int) -> float:
    """AR(1) coefficient from a lag-1 autocorrelation of ``n`` values, corrected for its bias."""
    size = check_int("n", n, minimum=1)
    phi = (
        (rank_autocorrelation + 1.0 / size) / (1.0 - 3.0 / size)
        if size > 6
        else rank_autocorrelation
    )
    return max(-0.99, min(0.99, phi))


def inflation_factor(phi: float) -> float:
    """How much wider an interval must be for AR(1) correlation ``phi``: ``sqrt((1+phi)/(1-phi))``."""
    if math.isnan(phi):
        raise InvalidValueError("phi is NaN")
    rho = min(max(phi, 0.0), _MAX_PHI)
    return math.sqrt((1.0 + rho) / (1.0 - rho))


def _pettitt(values: Sequence[float]) -> tuple[int, float]:
    """Pettitt's statistic: the split ``k`` maximising ``|U_k|`` and that maximum."""
    n = len(values)
    ranks = _ranks(values)
    best_k, best = 0, 0.0
    running = 0.0
    for k in range(1, n):
        running += ranks[k - 1]
        u = abs(2.0 * running - k * (n + 1))
        if u > best:
            best_k, best = k, u
    return best_k, best


def shift_p_value(values: Sequence[float]) -> float:
    """Approximate p-value of Pettitt's rank test that the level of ``values`` changes once."""
    n = len(values)
    if n < 4:
        return 1.0
    _, statistic = _pettitt(values)
    return min(1.0, 2.0 * math.exp(-6.0 * statistic * statistic / (n**3 + n**2)))


def ratio_shift_index(
    values: Sequence[float], *, alpha: float = SHIFT_ALPHA, min_segment: int = 10
) -> int | None:
    """Index where the paired ratios change level, when Pettitt's test rejects at ``alpha``."""
    level = check_open_interval("alpha", alpha, 0.0, 1.0)
    seg = check_int("min_segment", min_segment, minimum=1)
    n = len(values)
    if n < 2 * seg or shift_p_value(values) >= level:
        return None
    k, _ = _pettitt(values)
    return min(max(k, seg), n - seg)


def block_size(n: int) -> int:
    """Pairs per block for ``n`` pairs: ``floor(sqrt(n))``, so blocks and their count both grow."""
    return math.isqrt(check_int("n", n, minimum=1))


def block_means(values: Sequence[float], block: int) -> tuple[float, ...]:
    """Means of consecutive blocks of ``block`` values, the latest ``block * m`` values kept."""
    size = check_int("block", block, minimum=1)
    count = len(values) // size
    start = len(values) - count * size
    return tuple(
        math.fsum(values[start + k * size : start + (k + 1) * size]) / size for k in range(count)
    )


def _move_limit(times: Sequence[float], size: int, wander: bool) -> float:
    """How far (log) eager's level may move: MACHINE_CHANGE and MOVE_Z sds of its noise.

    Noise from successive differences; with ``wander``, from adjacent windows' medians too.
    """
    logs = [math.log(max(t, 1e-300)) for t in times]
    steps = sorted(abs(b - a) for a, b in itertools.pairwise(logs))
    # the median of ``size`` independent values has sd 1.2533 sigma / sqrt(size)
    noise = 1.2533 * 1.4826 * sorted_median(steps) / math.sqrt(size) if steps else 0.0
    if wander and len(logs) >= _WANDER_WINDOWS * size:
        medians = [sorted_median(sorted(logs[k : k + size])) for k in range(len(logs) - size + 1)]
        moves = sorted(abs(medians[k + size] - medians[k]) for k in range(len(medians) - size))
        noise = max(noise, moves[len(moves) // 4] / 0.3186)  # |N(0, 1)|'s lower quartile
    return math.log1p(MACHINE_CHANGE) + MOVE_Z * noise


def machine_change_index(
    times: Sequence[float], *, window: int = 5, wander: bool = False
) -> int | None:
    """Where the latest steady stretch starts, from eager's latencies (``wander``: noise too)."""
    size = check_int("window", window, minimum=1)
    logs = [math.log(max(t, 1e-300)) for t in times]
    n = len(logs)
    if n < 2 * size:
        return None
    limit = _move_limit(times, size, wander)
    suffix = sorted(logs[n - size :])
    for k in range(n - size, size - 1, -1):
        # the level before held for two windows where there are two: a burst of one is no move
        ends = (k, k - size) if k >= 2 * size else (k,)
        if all(
            abs(sorted_median(sorted(logs[j - size : j])) - sorted_median(suffix)) > limit
            for j in ends
        ):
            return k
        bisect.insort(suffix, logs[k - 1])
    return None


def machine_slowdown(times: Sequence[float], start: int, *, window: int = 5) -> float:
    """How much slower eager ran from ``start`` on than at its fastest steady level of the run."""
    size = check_int("window", window, minimum=1)
    items = list(times)
    check_int("start", start, minimum=0)
    if start >= len(items):
        raise InvalidValueError(f"start must be < len(times) ({len(items)}), got {start}")
    if len(items) <= size:
        best = sorted_median(sorted(items))
    else:
        best = min(sorted_median(sorted(items[k : k + size])) for k in range(len(items) - size + 1))
    return sorted_median(sorted(items[start:])) / best if best > 0 else 1.0


def slowdown_limit(times: Sequence[float], *, wander: bool = False) -> float:
    """The :func:`machine_slowdown` past which eager counts as slowed: a move's limit, of ``times``."""
    return math.exp(_move_limit(times, 5, wander))


def ratio_held(
    base: Sequence[float], cand: Sequence[float], cut: int, start: int, *, wander: bool = False
) -> bool:
    """Whether eager's moves, the last after pair ``cut`` and before ``start``, left the ratio alone.

    Each move back to the first (:func:`machine_change_index` on the pairs before the one found)
    is at most RATIO_HELD_MOVE, and the ratios' shift across it within its SHIFT_ALPHA bounds.
    """
    ratios = [b / c for b, c in zip(base, cand, strict=True)]
    while min(cut, len(base) - start) >= MIN_SIDE_PAIRS:
        jump = math.log(statistics.median(base[start:]) / statistics.median(base[:cut]))
        _, low, high = unpaired_bounds(tuple(ratios[:cut]), tuple(ratios[start:]), SHIFT_ALPHA / 2)
        if abs(jump) > math.log(RATIO_HELD_MOVE) or not low <= 0.0 <= high:
            return False
        found = machine_change_index(base[:cut], wander=wander)
        if found is None:
            return True
        cut, start = max(found - STEP_SLACK, 0), found
    return False
