"""Critical counts of the rank tests the bounds invert: Wilcoxon signed-rank and Mann-Whitney."""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import statistics
from fractions import Fraction
from typing import TYPE_CHECKING

from aitune_fp.core._checks import check_int, check_open_interval
from aitune_fp.errors import InvalidValueError

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

#: Largest n for which the signed-rank null distribution is computed exactly.
_SIGNED_RANK_EXACT_MAX_N = 200
#: Largest n*m for which the Mann-Whitney null distribution is computed exactly.
_MANN_WHITNEY_EXACT_MAX_NM = 10_000


def rank_alpha(name: str, value: object) -> float:
    """Return a one-sided level in the open interval (0, 0.5), or raise."""
    return check_open_interval(name, value, 0.0, 0.5)


@functools.lru_cache(maxsize=64)
def _signed_rank_lower_cdf(n: int) -> tuple[int, ...]:
    """Cumulative counts ``#{subsets S of {1..n}: sum(S) <= t}`` for ``t = 0..floor(M/2)``."""
    top = n * (n + 1) // 4
    counts = [1] + [0] * top
    for k in range(1, n + 1):
        if k > top:
            break
        counts = counts[:k] + [a + b for a, b in zip(counts[k:], counts, strict=False)]
    return tuple(itertools.accumulate(counts))


@functools.lru_cache(maxsize=64)
def _mann_whitney_lower_cdf(n: int, m: int) -> tuple[int, ...]:
    """Cumulative counts of the Mann-Whitney U null for sizes ``n, m``, ``t = 0..floor(nm/2)``."""
    k, big = min(n, m), max(n, m)
    top = n * m // 2
    coeffs = [1] + [0] * top
    for i in range(1, k + 1):
        step = big + i
        for t in range(top, step - 1, -1):  # multiply by (1 - q^step)
            coeffs[t] -= coeffs[t - step]
        for t in range(i, top + 1):  # divide by (1 - q^i)
            coeffs[t] += coeffs[t - i]
    return tuple(itertools.accumulate(coeffs))


def _exact_critical(cumulative: tuple[int, ...], total: int, alpha: float) -> int:
    """Largest ``c`` with ``cumulative[c] / total <= alpha`` (exactly), or -1 when none."""
    limit = Fraction(alpha) * total
    return bisect.bisect_right(cumulative, limit) - 1


def _normal_critical(mean: float, variance: float, alpha: float, cap: int) -> int:
    """Largest ``c`` with ``Phi((c + 0.5 - mean) / sd) <= alpha`` (continuity corrected), <= cap."""
    z = statistics.NormalDist().inv_cdf(alpha)
    c = math.floor(mean + z * math.sqrt(variance) - 0.5)
    return max(-1, min(c, cap))


def _check_tie_term(tie_term: object, *sizes: int) -> int:
    """Return ``tie_term`` if it is an int in ``[0, sum(s**3 - s)]`` (all of each sample tied)."""
    term = check_int("tie_term", tie_term, minimum=0)
    most = sum(size**3 - size for size in sizes)
    if term > most:
        raise InvalidValueError(
            f"tie_term must be <= {most} (every value of each sample tied), got {tie_term!r}"
        )
    return term


def signed_rank_critical_count(n: int, alpha: float, *, tie_term: int = 0) -> int:
    """Largest ``c`` with ``P0(T+ <= c) <= alpha`` under the exact Wilcoxon signed-rank null."""
    size = check_int("n", n, minimum=1)
    level = rank_alpha("alpha", alpha)
    ties = _check_tie_term(tie_term, size)
    if size <= _SIGNED_RANK_EXACT_MAX_N:
        return _exact_critical(_signed_rank_lower_cdf(size), 2**size, level)
    total = size * (size + 1) // 2
    variance = (size * (size + 1) * (2 * size + 1) - ties / 2) / 24.0
    return _normal_critical(total / 2.0, variance, level, (total - 1) // 2)


def mann_whitney_critical_count(n: int, m: int, alpha: float, *, tie_term: int = 0) -> int:
    """Largest ``c`` with ``P0(U <= c) <= alpha`` under the Mann-Whitney null for sizes ``n, m``."""
    first = check_int("n", n, minimum=1)
    second = check_int("m", m, minimum=1)
    level = rank_alpha("alpha", alpha)
    ties = _check_tie_term(tie_term, first, second)
    product = first * second
    if product <= _MANN_WHITNEY_EXACT_MAX_NM:
        cumulative = _mann_whitney_lower_cdf(first, second)
        return _exact_critical(cumulative, math.comb(first + second, first), level)
    pooled = first + second
    variance = (product * (pooled + 1) - product * ties / (pooled * (pooled - 1))) / 12.0
    return _normal_critical(product / 2.0, variance, level, (product - 1) // 2)


def tie_correction_sorted(values: NDArray[np.float64]) -> int:
    """``sum(t**3 - t)`` over the runs of ``t`` equal values in a sorted array (0 when untied)."""
    import numpy as np

    if len(values) < 2:
        return 0
    edges = np.flatnonzero(values[1:] != values[:-1]) + 1
    runs = np.diff(edges, prepend=0, append=len(values))
    return sum(t**3 - t for t in runs[runs > 1].tolist())
