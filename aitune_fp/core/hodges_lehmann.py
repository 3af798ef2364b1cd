"""Hodges-Lehmann log speedups and their rank-test bounds (signed-rank, Mann-Whitney counts)."""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import operator
import statistics
from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Literal

from aitune_fp.core._checks import check_int, check_open_interval
from aitune_fp.core.timings import TimingStats, sorted_median, timing_stats
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


#: Most Walsh averages / differences built and sorted; above, selected by :class:`_PairSums`.
_MATERIALISE_MAX_PAIRS = 100_000


def _bounds_from_sorted(values: NDArray[np.float64], critical: int) -> tuple[float, float, float]:
    """(median, (c+1)-th smallest, (c+1)-th largest) of sorted values; infinite bounds if c < 0."""
    estimate = float(sorted_median(values))  # type: ignore[arg-type]
    if critical < 0:
        return estimate, -math.inf, math.inf
    return estimate, float(values[critical]), float(values[len(values) - 1 - critical])


class _PairSums:
    """The sums ``rows[i] + cols[j]`` of two sorted arrays, selected from without building them."""

    def __init__(
        self, rows: NDArray[np.float64], cols: NDArray[np.float64], *, triangle: bool
    ) -> None:
        import numpy as np

        self.rows = rows
        self.cols = cols
        count = len(rows)
        self.start = (
            np.arange(count, dtype=np.int64) if triangle else np.zeros(count, dtype=np.int64)
        )
        self.stop = np.full(count, len(cols), dtype=np.int64)
        #: How many sums there are: ``len(rows) * len(cols)``, or ``n (n + 1) / 2`` for Walsh.
        self.size = int((self.stop - self.start).sum())
        self._rng = np.random.default_rng(_SELECTION_SEED)

    @staticmethod
    def _below(sums: NDArray[np.float64], value: float, strict: bool) -> NDArray[np.bool_]:
        return sums < value if strict else sums <= value

    def cuts(self, value: float, *, strict: bool) -> NDArray[np.int64]:
        """Per row, how many columns give a sum ``< value`` (``strict``) or ``<= value``."""
        import numpy as np

        rows, cols, width = self.rows, self.cols, len(self.cols)
        side: Literal["left", "right"] = "left" if strict else "right"
        # ascending rows give descending keys: search them reversed (numpy reuses the last hit)
        cut = np.searchsorted(cols, value - rows[::-1], side=side)[::-1].astype(np.int64)
        # ``value - row`` is rounded, so a search may land off the true boundary: check both sides
        short = (cut < width) & self._below(rows + cols[np.minimum(cut, width - 1)], value, strict)
        over = (cut > 0) & ~self._below(rows + cols[np.maximum(cut - 1, 0)], value, strict)
        bad = np.flatnonzero(short | over)
        if bad.size:  # bisect those rows on the exact predicate (columns < lo in, >= hi out)
            lo = np.where(short[bad], cut[bad] + 1, 0)
            hi = np.where(short[bad], width, cut[bad] - 1)
            bad_rows = rows[bad]
            while (open_ := lo < hi).any():
                mid = (lo + hi) // 2
                inside = self._below(bad_rows + cols[np.minimum(mid, width - 1)], value, strict)
                lo = np.where(open_ & inside, mid + 1, lo)
                hi = np.where(open_ & ~inside, mid, hi)
            cut[bad] = lo
        return cut

    def _band(
        self, start: NDArray[np.int64], widths: NDArray[np.int64], left: int
    ) -> NDArray[np.float64]:
        """All sums in the band (row i: columns ``start[i]`` .. ``start[i] + widths[i] - 1``)."""
        import numpy as np

        row = np.repeat(np.arange(len(widths)), widths)
        offset = np.cumsum(widths) - widths - start  # flat position of each row's column 0
        col = np.arange(left, dtype=np.int64) - offset[row]
        return self.rows[row] + self.cols[col]

    def _sample(
        self, start: NDArray[np.int64], widths: NDArray[np.int64], left: int, size: int
    ) -> NDArray[np.float64]:
        """``size`` sums drawn uniformly (with replacement) from the band, sorted."""
        import numpy as np

        ends = np.cumsum(widths)
        flat = np.sort(self._rng.integers(0, left, size=size, dtype=np.int64))  # fast search
        row = np.searchsorted(ends, flat, side="right")
        col = flat - (ends[row] - widths[row]) + start[row]
        return np.sort(self.rows[row] + self.cols[col])

    def select(
        self,
        rank: int,
        *,
        sample_size: int = 1 << 15,
        enumerate_max: int = 1 << 20,
    ) -> float:
        """The ``rank``-th smallest sum (0-based), as sorting all of them would give it."""
        import numpy as np

        if not 0 <= rank < self.size:
            raise InvalidValueError(f"rank must lie in [0, {self.size}), got {rank!r}")
        start, stop, below = self.start, self.stop, 0  # sums left of ``start``: ``below``
        while True:
            widths = stop - start
            left = int(widths.sum())
            wanted = rank - below
            if left <= enumerate_max:
                return float(np.partition(self._band(start, widths, left), wanted)[wanted])
            sample = self._sample(start, widths, left, sample_size)
            centre = (wanted + 0.5) / left * sample_size
            spread = 4.0 * math.sqrt(centre * (1.0 - centre / sample_size)) + 1.0
            last = sample_size - 1
            low = float(sample[min(max(math.floor(centre - spread), 0), last)])
            high = float(sample[min(max(math.ceil(centre + spread), 0), last)])
            lower = np.clip(self.cuts(low, strict=True), start, stop)
            n_lower = below + int((lower - start).sum())
            if n_lower > rank:  # the rank lies below ``low``: drop every sum >= low
                stop = lower
                continue
            upper = np.clip(self.cuts(high, strict=False), start, stop)
            n_upper = below + int((upper - start).sum())
            if n_upper <= rank:  # the rank lies above ``high``: drop every sum <= high
                start, below = upper, n_upper
                continue
            if low == high:
                return low
            if n_upper - n_lower < left:  # keep the band [low, high]
                start, stop, below = lower, upper, n_lower
                continue
            # every sum left lies in [low, high] (few distinct values): split at one pivot
            pivot = float(sample[min(max(math.floor(centre), 0), last)])
            lower = np.clip(self.cuts(pivot, strict=True), start, stop)
            upper = np.clip(self.cuts(pivot, strict=False), start, stop)
            n_lower = below + int((lower - start).sum())
            n_upper = below + int((upper - start).sum())
            if n_lower <= rank < n_upper:
                return pivot
            if rank < n_lower:
                stop = lower
            else:
                start, below = upper, n_upper

    def following(self, value: float, rank: int) -> float:
        """The ``(rank + 1)``-th smallest sum, given that ``value`` is the ``rank``-th."""
        import numpy as np

        cut = np.clip(self.cuts(value, strict=False), self.start, self.stop)
        if int((cut - self.start).sum()) >= rank + 2:
            return value  # a tie: the next sum equals this one
        more = cut < self.stop
        return float((self.rows[more] + self.cols[cut[more]]).min())


#: Seed of the pivot samples in :meth:`_PairSums.select` (results never depend on it).
_SELECTION_SEED = 20_240_601


def _implicit_bounds(sums: _PairSums, critical: int, *, half: bool) -> tuple[float, float, float]:
    """:func:`_bounds_from_sorted` of the sums (halved, for Walsh averages), selected implicitly."""

    def scaled(value: float) -> float:
        return value / 2.0 if half else value

    size = sums.size
    mid = size // 2
    if size % 2:
        estimate = scaled(sums.select(mid))
    else:
        first = sums.select(mid - 1)
        estimate = (scaled(first) + scaled(sums.following(first, mid - 1))) / 2.0
    if critical < 0:
        return estimate, -math.inf, math.inf
    return estimate, scaled(sums.select(critical)), scaled(sums.select(size - 1 - critical))


def paired_bounds(
    base: tuple[float, ...], cand: tuple[float, ...], alpha: float
) -> tuple[float, float, float]:
    """:func:`paired_log_speedup_bounds` of checked timings of equal length."""
    import numpy as np

    logs = map(operator.sub, map(math.log, base), map(math.log, cand))
    return _walsh_bounds(np.fromiter(logs, dtype=np.float64, count=len(base)), alpha)


def log_ratio_bounds(diffs: Sequence[float], alpha: float) -> tuple[float, float, float]:
    """Hodges-Lehmann estimate and Wilcoxon bounds of values already on the log scale."""
    import numpy as np

    return _walsh_bounds(np.asarray(diffs, dtype=np.float64), alpha)


def _walsh_bounds(diffs: NDArray[np.float64], alpha: float) -> tuple[float, float, float]:
    """The Walsh averages' median and Wilcoxon bounds: built and sorted, or selected when many."""
    import numpy as np

    n = len(diffs)
    ordered = np.sort(diffs)
    critical = signed_rank_critical_count(n, alpha, tie_term=tie_correction_sorted(ordered))
    if n * (n + 1) // 2 <= _MATERIALISE_MAX_PAIRS:
        rows, cols = np.triu_indices(n)
        return _bounds_from_sorted(np.sort((ordered[rows] + ordered[cols]) / 2.0), critical)
    return _implicit_bounds(_PairSums(ordered, ordered, triangle=True), critical, half=True)


def unpaired_bounds(
    base: tuple[float, ...], cand: tuple[float, ...], alpha: float
) -> tuple[float, float, float]:
    """:func:`unpaired_log_speedup_bounds` of checked timings."""
    import numpy as np

    n, m = len(base), len(cand)
    rows = np.sort(np.fromiter(map(math.log, base), dtype=np.float64, count=n))
    ordered_cand = np.sort(np.fromiter(map(math.log, cand), dtype=np.float64, count=m))
    ties = tie_correction_sorted(rows) + tie_correction_sorted(ordered_cand)
    critical = mann_whitney_critical_count(n, m, alpha, tie_term=ties)
    if n * m <= _MATERIALISE_MAX_PAIRS:
        return _bounds_from_sorted(
            np.sort(np.subtract.outer(rows, ordered_cand), axis=None), critical
        )
    cols = np.ascontiguousarray(-ordered_cand[::-1])  # lb + (-lc) is exactly lb - lc
    return _implicit_bounds(_PairSums(rows, cols, triangle=False), critical, half=False)


def paired_lengths(base: tuple[float, ...], cand: tuple[float, ...]) -> None:
    """Raise unless paired timings have equal lengths."""
    if len(base) != len(cand):
        raise InvalidValueError(
            "paired timings need equal lengths: "
            f"baseline_times has {len(base)}, candidate_times has {len(cand)}"
        )


def paired_log_speedup_bounds(
    baseline_times: TimingStats, candidate_times: TimingStats, alpha_one_sided: float
) -> tuple[float, float, float]:
    """Hodges-Lehmann log speedup of paired timings with its Wilcoxon signed-rank bounds."""
    base = timing_stats("baseline_times", baseline_times)
    cand = timing_stats("candidate_times", candidate_times)
    paired_lengths(base, cand)
    alpha = rank_alpha("alpha_one_sided", alpha_one_sided)
    return paired_bounds(base, cand, alpha)


def unpaired_log_speedup_bounds(
    baseline_times: TimingStats, candidate_times: TimingStats, alpha_one_sided: float
) -> tuple[float, float, float]:
    """Hodges-Lehmann log shift of two independent samples with its Mann-Whitney bounds."""
    base = timing_stats("baseline_times", baseline_times)
    cand = timing_stats("candidate_times", candidate_times)
    alpha = rank_alpha("alpha_one_sided", alpha_one_sided)
    return unpaired_bounds(base, cand, alpha)
