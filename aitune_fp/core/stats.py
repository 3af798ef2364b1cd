"""Pure statistics of deciding "the candidate is faster than eager by the threshold".

Timings are per-call latencies in seconds at one batch size. The speedup of a candidate is
``eager_time / candidate_time``; it is estimated on the log scale with the Hodges-Lehmann
estimator and bounded by inverting the exact Wilcoxon signed-rank test (paired, interleaved
timings) or the Mann-Whitney test (two independent samples). See
``shared/reference/measurement-findings.md`` for the rule and the evidence behind it.

Verdict rule (one look): ``faster`` when ``ci_low > required_speedup``, ``not_faster`` when
``ci_high < required_speedup``, else ``inconclusive``. Both comparisons are strict and made on the
reported (ratio) scale, so a bound that lands exactly on the threshold never settles the question:
it gives ``inconclusive``, and the fields of :class:`SpeedupDecision` always reproduce its verdict.

No torch, no clocks, no I/O. Timings may be any 1-D sequence of real numbers: lists, tuples,
numpy arrays of any real dtype, 1-D tensors (read through ``.tolist()``, never imported here).
Up to ``_MATERIALISE_MAX_PAIRS`` Walsh averages / pairwise differences the bounds sort them all,
in pure Python, exactly as they always did. Above, they are never built: the few order statistics
needed are selected implicitly from the sorted samples (:class:`_PairSums`, numpy imported lazily),
O(n log n) time and O(n) memory, so a million timings per arm decide in seconds.
"""

from __future__ import annotations

import bisect
import decimal
import functools
import itertools
import math
import numbers
import operator
import statistics
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Final, Literal, SupportsFloat, TypeAlias

import attrs

from aitune_fp.core._checks import (
    as_tuple,
    check_finite,
    check_int,
    check_nonnegative,
    check_open_interval,
    check_positive,
    check_type,
    finite,
    integer,
    not_nan,
    of_type,
    one_of,
    open_interval,
    tuple_of,
)
from aitune_fp.core.dependence import (
    ar1_coefficient,
    autocorrelation_flag_level,
    inflation_factor,
    lag1_rank_autocorrelation,
    ratio_shift_index,
)
from aitune_fp.core.messages import fmt_level
from aitune_fp.core.speedup import DEFAULT_THRESHOLD_PERCENT, required_speedup
from aitune_fp.errors import InvalidTypeError, InvalidValueError

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = [
    "METHODS",
    "VERDICTS",
    "SpeedupDecision",
    "Verdict",
    "coefficient_of_variation",
    "decide_at_look",
    "decide_speedup",
    "is_settled",
    "is_steady",
    "level_shift_index",
    "look_alpha",
    "mann_whitney_critical_count",
    "paired_log_speedup_bounds",
    "ruled_out_statement",
    "signed_rank_critical_count",
    "throughput_from_latencies",
    "unpaired_log_speedup_bounds",
]

#: What the timing arguments accept: a 1-D sequence of real numbers (list, tuple, numpy array of
#: any real dtype, 1-D tensor); checked at run time by :func:`_timings`.
_Timings: TypeAlias = Iterable[SupportsFloat]

Verdict = Literal["faster", "not_faster", "inconclusive"]
VERDICTS: tuple[Verdict, ...] = ("faster", "not_faster", "inconclusive")

#: Names of the two interval methods, as written in :attr:`SpeedupDecision.method`.
METHODS: tuple[str, ...] = ("wilcoxon_signed_rank_hl", "mann_whitney_hl")

#: Largest n for which the signed-rank null distribution is computed exactly.
_SIGNED_RANK_EXACT_MAX_N = 200
#: Largest n*m for which the Mann-Whitney null distribution is computed exactly.
_MANN_WHITNEY_EXACT_MAX_NM = 10_000
#: Most Walsh averages / pairwise differences that are built and sorted (the exact, pure path);
#: above, the order statistics are selected implicitly (:class:`_PairSums`).
_MATERIALISE_MAX_PAIRS = 100_000
#: Most timings per arm whose standard deviation comes from the exact ``statistics.stdev``.
_EXACT_STDEV_MAX = 100_000


# --------------------------------------------------------------------------------------------
# Argument checks
# --------------------------------------------------------------------------------------------


def _got(value: object) -> str:
    """``value``'s repr and type name, for a type error's message."""
    return f"{value!r} ({type(value).__name__})"


def _items(name: str, values: object) -> list[Any]:
    """The items of a 1-D sequence, array or tensor (arrays and tensors via ``.tolist()``).

    Anything with an ``ndim`` other than 1 (a 2-D array, a 0-d tensor, a numpy scalar) is refused,
    so a matrix is never read as a list of rows. numpy and torch are duck-typed, not imported.
    """
    if isinstance(values, (str, bytes)):
        raise InvalidTypeError(f"{name} must be a sequence of numbers, got {values!r}")
    ndim = getattr(values, "ndim", None)
    if isinstance(ndim, int):
        if ndim != 1:
            shape = getattr(values, "shape", None)
            shown = "" if shape is None else f" of shape {tuple(shape)!r}"
            raise InvalidTypeError(
                f"{name} must be a 1-D sequence of numbers, "
                f"got a {ndim}-D {type(values).__name__}{shown}"
            )
        to_list = getattr(values, "tolist", None)
        if callable(to_list):
            items = to_list()
            if isinstance(items, list):
                return items
    if not isinstance(values, Iterable):
        raise InvalidTypeError(f"{name} must be a sequence of numbers, got {values!r}")
    return list(values)


def _real(name: str, value: object) -> float:
    """``value`` as a float if it is a real number (also a numpy scalar, 0-d array or tensor).

    int, float, Fraction, Decimal and numpy scalars convert with ``float()``. Bools (Python, numpy or tensor) are refused like any non-number: a flag is not a timing.
    """
    if isinstance(value, bool):
        raise InvalidTypeError(f"{name} must be a real number, got {_got(value)}")
    if isinstance(value, (numbers.Real, decimal.Decimal)):
        number: object = value  # int, float, numpy floating/integer scalars, Fraction, Decimal
    elif getattr(value, "ndim", None) == 0 and callable(getattr(value, "tolist", None)):
        number = value.tolist()  # type: ignore[attr-defined]  # a 0-d array or tensor
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise InvalidTypeError(f"{name} must be a real number, got {_got(value)}")
    else:
        raise InvalidTypeError(f"{name} must be a real number, got {_got(value)}")
    try:
        return float(number)  # type: ignore[arg-type]
    except (OverflowError, ValueError):  # beyond float range; a signalling Decimal NaN
        raise InvalidValueError(f"{name} must be finite, got {value!r}") from None


def _timings(name: str, values: object, *, minimum: int = 2) -> tuple[float, ...]:
    """Return ``values`` as a tuple of finite, positive floats, at least ``minimum`` of them.

    Accepts any 1-D sequence of real numbers (see :func:`_items`). Plain int/float items take a
    C-speed check; anything else, or a bad value, goes item by item so the error names its index.
    """
    items = _items(name, values)
    if all(issubclass(kind, (float, int)) and kind is not bool for kind in set(map(type, items))):
        try:
            floats = list(map(float, items))
        except OverflowError:
            floats = []  # an int beyond float range: the item-by-item pass names it
        ok = len(floats) == len(items) >= minimum and all(map(math.isfinite, floats))
        if ok and (not floats or min(floats) > 0):
            return tuple(floats)
    result = tuple(
        check_positive(f"{name}[{i}]", _real(f"{name}[{i}]", v)) for i, v in enumerate(items)
    )
    if len(result) < minimum:
        raise InvalidValueError(
            f"{name} needs at least {minimum} values, got {len(result)}: {items!r}"
        )
    return result


def _alpha(name: str, value: object) -> float:
    """Return a one-sided level in the open interval (0, 0.5), or raise."""
    return check_open_interval(name, value, 0.0, 0.5)


def _confidence(name: str, value: object) -> float:
    """Return a confidence level in the open interval (0, 1), or raise."""
    return check_open_interval(name, value, 0.0, 1.0)


def _exp(x: float) -> float:
    """``math.exp`` that saturates to ``inf`` instead of raising on overflow."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _sorted_median(values: Sequence[float]) -> float:
    """Median of an already sorted, non-empty sequence."""
    n = len(values)
    mid = n // 2
    if n % 2:
        return values[mid]
    return (values[mid - 1] + values[mid]) / 2.0


# --------------------------------------------------------------------------------------------
# Descriptive statistics
# --------------------------------------------------------------------------------------------


def throughput_from_latencies(latencies_s: _Timings, batch_size: int) -> float:
    """Return samples per second from the MEAN latency (``batch_size / mean``), as AITune reports it.

    One latency is enough for a throughput; every latency must be finite and > 0.
    """
    values = _timings("latencies_s", latencies_s, minimum=1)
    batch = check_int("batch_size", batch_size, minimum=1)
    return batch / statistics.fmean(values)


def coefficient_of_variation(values: _Timings) -> float:
    """Sample standard deviation (n-1) over the mean of positive timings: their relative noise."""
    return _cv(_timings("values", values))


def _cv(items: tuple[float, ...]) -> float:
    """:func:`coefficient_of_variation` of checked timings.

    ``statistics.stdev`` (exact, but ~1 s per million values) up to ``_EXACT_STDEV_MAX`` values;
    above, two passes of ``math.fsum`` (within a few ulps of it, ten times faster).
    """
    if len(items) <= _EXACT_STDEV_MAX:
        return statistics.stdev(items) / statistics.fmean(items)
    mean = math.fsum(items) / len(items)
    variance = math.fsum((x - mean) ** 2 for x in items) / (len(items) - 1)
    return math.sqrt(variance) / mean


def is_steady(times: _Timings, window: int, tolerance: float) -> bool:
    """Warm-up test: the last ``window`` times spread by at most ``tolerance`` of their median.

    True when ``len(times) >= window`` and ``(max - min) / median`` of the last ``window`` values is
    ``<= tolerance``. Fewer times than ``window`` (even none) is not an error: it is "not yet steady".
    """
    size = check_int("window", window, minimum=2)
    tol = check_nonnegative("tolerance", tolerance)
    items = _timings("times", times, minimum=0)
    if len(items) < size:
        return False
    last = items[-size:]
    return (max(last) - min(last)) / statistics.median(last) <= tol


def is_settled(times: _Timings, window: int, tolerance: float, *, z: float = 2.5) -> bool:
    """Warm-up test scaled to the machine's noise: no trend beyond what the noise explains.

    True when :func:`is_steady` holds, or when the last ``2 * window`` times show no monotone
    trend: Kendall's ``S`` (concordant minus discordant pairs of (call index, time)) within ``z``
    of its standard deviation under no trend, ``sqrt(m (m - 1) (2m + 5) / 18)``. Ranks, so one
    slow outlier weighs no more than any call. A fixed spread tolerance alone flags a steady arm
    on a noisy 2-CPU machine in 30-40 % of decisions (issue 14); a cold start that is still
    decaying, or an arm slowing down, is a trend and still fails.
    """
    size = check_int("window", window, minimum=2)
    level = check_positive("z", z)
    items = _timings("times", times, minimum=0)
    if is_steady(items, size, tolerance):
        return True
    if len(items) < 2 * size:
        return False
    recent = items[-2 * size :]
    m = len(recent)
    score = sum(
        (recent[j] > recent[i]) - (recent[j] < recent[i]) for i in range(m) for j in range(i + 1, m)
    )
    return abs(score) <= level * math.sqrt(m * (m - 1) * (2 * m + 5) / 18.0)


def level_shift_index(times: _Timings, *, min_segment: int = 10, ratio: float = 0.15) -> int | None:
    """First split index where the timing level shifts, to flag samples measured after it.

    Returns the smallest ``k`` with ``min_segment <= k <= len(times) - min_segment`` such that
    ``|median(times[k:]) - median(times[:k])| > ratio * median(times[:k])``, i.e. ``times[k:]`` run
    at a level that differs by more than ``ratio`` (relative) from the level before them; ``None``
    when no split qualifies (including when there are fewer than ``2 * min_segment`` times).
    Medians make it robust to single outliers but early: a clean step at index ``s`` is reported
    as soon as about half of ``times[k:]`` lies past it, so ``k <= s`` and the flagged tail is a
    superset of the shifted samples. O(n^2) for the ~hundreds of samples it is meant for.
    """
    seg = check_int("min_segment", min_segment, minimum=1)
    rel = check_positive("ratio", ratio)
    items = _timings("times", times, minimum=0)
    n = len(items)
    if n < 2 * seg:
        return None
    before = sorted(items[:seg])
    after = sorted(items[seg:])
    for k in range(seg, n - seg + 1):
        if k > seg:
            moved = items[k - 1]
            bisect.insort(before, moved)
            del after[bisect.bisect_left(after, moved)]
        level = _sorted_median(before)
        if abs(_sorted_median(after) - level) > rel * level:
            return k
    return None


# --------------------------------------------------------------------------------------------
# Null distributions and critical counts
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _signed_rank_lower_cdf(n: int) -> tuple[int, ...]:
    """Cumulative counts ``#{subsets S of {1..n}: sum(S) <= t}`` for ``t = 0..floor(M/2)``.

    ``M = n(n+1)/2``; dividing by ``2**n`` gives the exact null CDF of the signed-rank statistic.
    Only the lower half is needed because critical counts at levels < 0.5 lie below ``M/2``.
    """
    top = n * (n + 1) // 4
    counts = [1] + [0] * top
    for k in range(1, n + 1):
        if k > top:
            break
        counts = counts[:k] + [a + b for a, b in zip(counts[k:], counts, strict=False)]
    cumulative: list[int] = []
    total = 0
    for value in counts:
        total += value
        cumulative.append(total)
    return tuple(cumulative)


@functools.lru_cache(maxsize=64)
def _mann_whitney_lower_cdf(n: int, m: int) -> tuple[int, ...]:
    """Cumulative counts of the Mann-Whitney U null for sizes ``n, m``, ``t = 0..floor(nm/2)``.

    The counts are the coefficients of the Gaussian binomial ``[n+m choose n]_q``, built as
    ``prod_{i=1..k} (1 - q^(l+i)) / (1 - q^i)`` with ``k = min(n, m)``, ``l = max(n, m)``,
    as power series truncated at ``floor(nm/2)``; dividing by ``C(n+m, n)`` gives the CDF.
    """
    k, big = min(n, m), max(n, m)
    top = n * m // 2
    coeffs = [1] + [0] * top
    for i in range(1, k + 1):
        step = big + i
        for t in range(top, step - 1, -1):  # multiply by (1 - q^step)
            coeffs[t] -= coeffs[t - step]
        for t in range(i, top + 1):  # divide by (1 - q^i)
            coeffs[t] += coeffs[t - i]
    cumulative: list[int] = []
    total = 0
    for value in coeffs:
        total += value
        cumulative.append(total)
    return tuple(cumulative)


def _exact_critical(cumulative: tuple[int, ...], total: int, alpha: float) -> int:
    """Largest ``c`` with ``cumulative[c] / total <= alpha`` (exactly), or -1 when none."""
    limit = Fraction(alpha) * total
    return bisect.bisect_right(cumulative, limit) - 1


def _normal_critical(mean: float, variance: float, alpha: float, cap: int) -> int:
    """Largest ``c`` with ``Phi((c + 0.5 - mean) / sd) <= alpha`` (continuity corrected), <= cap."""
    z = statistics.NormalDist().inv_cdf(alpha)
    c = math.floor(mean + z * math.sqrt(variance) - 0.5)
    return max(-1, min(c, cap))


def _tie_term(sorted_values: Iterable[float]) -> int:
    """``sum(t**3 - t)`` over the runs of ``t`` equal values in sorted values (0 when untied)."""
    term = 0
    for _, run in itertools.groupby(sorted_values):
        t = sum(1 for _ in run)
        term += t**3 - t
    return term


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
    """Largest ``c`` with ``P0(T+ <= c) <= alpha`` under the exact Wilcoxon signed-rank null.

    ``T+`` is the sum of the ranks of the positive differences among ``n`` untied, nonzero pairs;
    the ``(c+1)``-th smallest Walsh average is then a one-sided ``1 - alpha`` lower bound of the
    pseudo-median. Returns -1 when even ``P0(T+ <= 0) = 2**-n`` exceeds ``alpha`` (``n`` too small
    for that level). Exact for ``n <= 200``, normal approximation with continuity correction above,
    where ``tie_term = sum(t**3 - t)`` over groups of ``t`` equal differences lowers the variance
    by ``tie_term / 48`` (the midrank null; ties within the differences survive every shift, so the
    inverted test sees them at every candidate value). The exact null ignores ``tie_term``.
    ``alpha`` must lie in (0, 0.5). Example: ``signed_rank_critical_count(10, 0.01) == 5``.
    """
    size = check_int("n", n, minimum=1)
    level = _alpha("alpha", alpha)
    ties = _check_tie_term(tie_term, size)
    if size <= _SIGNED_RANK_EXACT_MAX_N:
        return _exact_critical(_signed_rank_lower_cdf(size), 2**size, level)
    total = size * (size + 1) // 2
    variance = (size * (size + 1) * (2 * size + 1) - ties / 2) / 24.0
    return _normal_critical(total / 2.0, variance, level, (total - 1) // 2)


def mann_whitney_critical_count(n: int, m: int, alpha: float, *, tie_term: int = 0) -> int:
    """Largest ``c`` with ``P0(U <= c) <= alpha`` under the Mann-Whitney null for sizes ``n, m``.

    ``U`` counts the pairs ``(i, j)`` with ``x_i > y_j`` among two independent, untied samples; the
    ``(c+1)``-th smallest of the ``n*m`` differences is then a one-sided ``1 - alpha`` lower bound of
    the shift. Returns -1 when no ``c`` qualifies. Exact for ``n*m <= 10000``, normal approximation
    with continuity correction above, where ``tie_term = sum(t**3 - t)`` over groups of ``t`` equal
    values WITHIN each sample scales the variance by ``1 - tie_term / ((N + 1) N (N - 1))``,
    ``N = n + m`` (at a shift that the interval inverts, only within-sample ties remain). The
    exact null ignores ``tie_term``. ``alpha`` must lie in (0, 0.5).
    """
    first = check_int("n", n, minimum=1)
    second = check_int("m", m, minimum=1)
    level = _alpha("alpha", alpha)
    ties = _check_tie_term(tie_term, first, second)
    product = first * second
    if product <= _MANN_WHITNEY_EXACT_MAX_NM:
        cumulative = _mann_whitney_lower_cdf(first, second)
        return _exact_critical(cumulative, math.comb(first + second, first), level)
    pooled = first + second
    variance = (product * (pooled + 1) - product * ties / (pooled * (pooled - 1))) / 12.0
    return _normal_critical(product / 2.0, variance, level, (product - 1) // 2)


# --------------------------------------------------------------------------------------------
# Estimates and bounds on the log scale
# --------------------------------------------------------------------------------------------


def _bounds_from_sorted(values: Sequence[float], critical: int) -> tuple[float, float, float]:
    """(median, (c+1)-th smallest, (c+1)-th largest) of sorted values; infinite bounds if c < 0."""
    estimate = _sorted_median(values)
    if critical < 0:
        return estimate, -math.inf, math.inf
    return estimate, values[critical], values[len(values) - 1 - critical]


class _PairSums:
    """The sums ``rows[i] + cols[j]`` of two sorted arrays, selected from without building them.

    All ``len(rows) * len(cols)`` pairs, or only ``j >= i`` when ``triangle`` (``rows`` is
    ``cols``: the Walsh sums). Float addition is monotone in each operand, so every row is sorted
    and "how many sums of row i lie below v" is one binary search per row (:meth:`cuts`), exact in
    floating point. :meth:`select` keeps a band of columns per row around the wanted rank and cuts
    it at pivots drawn from a random sample of the band: each round keeps a few percent of it, so
    a few O(n log n) rounds leave a band small enough to sort. Sums are the very floats the
    materialised path computes, so the order statistics are identical; the seed only sets speed.
    """

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
        """The ``rank``-th smallest sum (0-based), as sorting all of them would give it.

        Each round either returns, or drops at least one sum (a pivot), so it always ends.
        """
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


def _tie_term_sorted(values: NDArray[np.float64]) -> int:
    """:func:`_tie_term` of a sorted array, vectorised."""
    import numpy as np

    if len(values) < 2:
        return 0
    edges = np.flatnonzero(values[1:] != values[:-1]) + 1
    runs = np.diff(edges, prepend=0, append=len(values))
    return sum(t**3 - t for t in runs[runs > 1].tolist())


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


def _paired_bounds(
    base: tuple[float, ...], cand: tuple[float, ...], alpha: float
) -> tuple[float, float, float]:
    """:func:`paired_log_speedup_bounds` of checked timings of equal length."""
    n = len(base)
    if n * (n + 1) // 2 <= _MATERIALISE_MAX_PAIRS:
        diffs = [math.log(b) - math.log(c) for b, c in zip(base, cand, strict=True)]
        walsh = sorted((diffs[i] + diffs[j]) / 2.0 for i in range(n) for j in range(i, n))
        critical = signed_rank_critical_count(n, alpha, tie_term=_tie_term(sorted(diffs)))
        return _bounds_from_sorted(walsh, critical)
    import numpy as np

    # the same floats as above, straight into an array (no million Python floats)
    logs = map(operator.sub, map(math.log, base), map(math.log, cand))
    ordered = np.sort(np.fromiter(logs, dtype=np.float64, count=n))
    critical = signed_rank_critical_count(n, alpha, tie_term=_tie_term_sorted(ordered))
    return _implicit_bounds(_PairSums(ordered, ordered, triangle=True), critical, half=True)


def _unpaired_bounds(
    base: tuple[float, ...], cand: tuple[float, ...], alpha: float
) -> tuple[float, float, float]:
    """:func:`unpaired_log_speedup_bounds` of checked timings."""
    n, m = len(base), len(cand)
    if n * m <= _MATERIALISE_MAX_PAIRS:
        log_base = [math.log(b) for b in base]
        log_cand = [math.log(c) for c in cand]
        diffs = sorted(lb - lc for lb in log_base for lc in log_cand)
        ties = _tie_term(sorted(log_base)) + _tie_term(sorted(log_cand))
        critical = mann_whitney_critical_count(n, m, alpha, tie_term=ties)
        return _bounds_from_sorted(diffs, critical)
    import numpy as np

    rows = np.sort(np.fromiter(map(math.log, base), dtype=np.float64, count=n))
    ordered_cand = np.sort(np.fromiter(map(math.log, cand), dtype=np.float64, count=m))
    ties = _tie_term_sorted(rows) + _tie_term_sorted(ordered_cand)
    critical = mann_whitney_critical_count(n, m, alpha, tie_term=ties)
    cols = np.ascontiguousarray(-ordered_cand[::-1])  # lb + (-lc) is exactly lb - lc
    return _implicit_bounds(_PairSums(rows, cols, triangle=False), critical, half=False)


def _paired_lengths(base: tuple[float, ...], cand: tuple[float, ...]) -> None:
    """Raise unless paired timings have equal lengths."""
    if len(base) != len(cand):
        raise InvalidValueError(
            "paired timings need equal lengths: "
            f"baseline_times has {len(base)}, candidate_times has {len(cand)}"
        )


def paired_log_speedup_bounds(
    baseline_times: _Timings, candidate_times: _Timings, alpha_one_sided: float
) -> tuple[float, float, float]:
    """Hodges-Lehmann log speedup of paired timings with its Wilcoxon signed-rank bounds.

    ``d_i = ln(b_i) - ln(c_i)``; the estimate is the median of the Walsh averages
    ``(d_i + d_j) / 2, i <= j``; with ``c = signed_rank_critical_count(n, alpha_one_sided,
    tie_term=...)`` (ties among the ``d_i``) the lower bound is their ``(c+1)``-th smallest and the
    upper bound their ``(c+1)``-th largest (``-inf`` / ``+inf`` when ``c == -1``). Returns
    ``(estimate, lower, upper)`` on the LOG scale. O(n log n) time and O(n) memory above
    ``_MATERIALISE_MAX_PAIRS`` Walsh averages (selected, never built), with the same values.
    """
    base = _timings("baseline_times", baseline_times)
    cand = _timings("candidate_times", candidate_times)
    _paired_lengths(base, cand)
    alpha = _alpha("alpha_one_sided", alpha_one_sided)
    return _paired_bounds(base, cand, alpha)


def unpaired_log_speedup_bounds(
    baseline_times: _Timings, candidate_times: _Timings, alpha_one_sided: float
) -> tuple[float, float, float]:
    """Hodges-Lehmann log shift of two independent samples with its Mann-Whitney bounds.

    The estimate is the median of all ``n*m`` differences ``ln(b_i) - ln(c_j)``; with
    ``c = mann_whitney_critical_count(n, m, alpha_one_sided, tie_term=...)`` (ties within each
    sample) the bounds are their ``(c+1)``-th smallest and ``(c+1)``-th largest (infinite when
    ``c == -1``). Returns ``(estimate, lower, upper)`` on the LOG scale. O((n + m) log(n + m))
    time and O(n + m) memory above ``_MATERIALISE_MAX_PAIRS`` differences, with the same values.
    """
    base = _timings("baseline_times", baseline_times)
    cand = _timings("candidate_times", candidate_times)
    alpha = _alpha("alpha_one_sided", alpha_one_sided)
    return _unpaired_bounds(base, cand, alpha)


# --------------------------------------------------------------------------------------------
# Decisions
# --------------------------------------------------------------------------------------------


def _json_float(value: float) -> float | None:
    return value if math.isfinite(value) else None


@attrs.frozen(kw_only=True)
class SpeedupDecision:
    """A three-outcome verdict on 'candidate is faster than eager by the threshold', with its basis.

    ``speedup`` is ``exp`` of the Hodges-Lehmann estimate of the log ratios ``ln(eager / candidate)``
    (the typical call, not the mean latency); ``[ci_low, ci_high]`` is its two-sided interval at
    ``confidence`` (``ci_low`` may be 0.0 and ``ci_high`` ``inf`` when too few timings bound it).
    ``faster`` iff ``ci_low > required_speedup``; ``not_faster`` iff ``ci_high < required_speedup``
    or (futility) ``speedup < required_speedup`` and ``futility_high < required_speedup +
    futility_margin``; else ``inconclusive``. ``guarantee`` is the one-sided level at which each
    wrong verdict is controlled over the whole measurement (all looks), which is what a user may
    rely on; ``confidence`` is one look's two-sided level.
    """

    verdict: Verdict = attrs.field(validator=one_of(VERDICTS))
    speedup: float = attrs.field(validator=finite(minimum=0, strict=True))
    ci_low: float = attrs.field(validator=not_nan())
    ci_high: float = attrs.field(validator=not_nan())
    n_baseline: int = attrs.field(validator=integer(minimum=2))
    n_candidate: int = attrs.field(validator=integer(minimum=2))
    confidence: float = attrs.field(validator=open_interval(0, 1))
    required_speedup: float = attrs.field(validator=finite(minimum=0, strict=True))
    method: str = attrs.field(validator=one_of(METHODS))
    cv_baseline: float = attrs.field(validator=finite(minimum=0))
    cv_candidate: float = attrs.field(validator=finite(minimum=0))
    #: Overall one-sided level of each error (None: this look alone, ``1 - (1 - confidence) / 2``).
    guarantee: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(open_interval(0, 1))
    )
    #: How far above the required speedup a candidate may be and still be called ``not_faster``
    #: (speedup units; 0.01 is one percentage point).
    futility_margin: float = attrs.field(default=0.0, validator=finite(minimum=0))
    #: Upper bound at the (looser) futility level; None when it is ``ci_high``.
    futility_high: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(not_nan())
    )
    #: Lag-1 rank autocorrelation of the paired log ratios (None: unpaired).
    autocorrelation: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(finite(minimum=-1, strict=True))
    )
    #: Pair index where the ratio shifted (None: none found); the interval then covers both the
    #: whole run's and the later pairs' intervals, and the estimate is the later pairs'.
    shift_index: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(integer(minimum=0))
    )
    #: What the dependence checks found: ``serial_correlation`` (interval widened),
    #: ``ratio_shift`` (a verdict needs the whole run and the pairs after the shift to agree).
    flags: tuple[str, ...] = attrs.field(
        default=(), converter=as_tuple, validator=tuple_of(of_type(str))
    )

    def __attrs_post_init__(self) -> None:
        """Check that the interval holds the estimate and that the verdict follows the rule."""
        if not 0.0 <= self.ci_low <= self.speedup <= self.ci_high:
            raise InvalidValueError(
                "need 0 <= ci_low <= speedup <= ci_high, got "
                f"ci_low={self.ci_low!r}, speedup={self.speedup!r}, ci_high={self.ci_high!r}"
            )
        if self.futility_high is not None and not self.futility_high >= self.speedup:
            raise InvalidValueError(
                f"futility_high must be >= speedup ({self.speedup!r}), got {self.futility_high!r}"
            )
        expected = _verdict(
            self.ci_low,
            self.ci_high,
            self.required_speedup,
            speedup=self.speedup,
            futility_high=self.upper_for_futility,
            margin=self.futility_margin,
        )
        if expected == "faster" and "throughput_disagrees" in self.flags:
            expected = "inconclusive"  # held back: the throughput ratio did not clear it
        if self.verdict != expected:
            raise InvalidValueError(
                f"verdict {self.verdict!r} contradicts the bounds [{self.ci_low!r}, "
                f"{self.ci_high!r}] and required_speedup={self.required_speedup!r} "
                f"(expected {expected!r})"
            )

    @property
    def upper_for_futility(self) -> float:
        """The upper bound the futility rule compares: ``futility_high``, else ``ci_high``."""
        return self.ci_high if self.futility_high is None else self.futility_high

    @property
    def overall(self) -> float:
        """One-sided level of each wrong verdict over the whole measurement."""
        return 1.0 - (1.0 - self.confidence) / 2.0 if self.guarantee is None else self.guarantee

    @property
    def ruled_out(self) -> str:
        """What the interval rules out, as one sentence (the honest content of any verdict)."""
        return ruled_out_statement(self.ci_low, self.ci_high, self.overall)

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready fields; an unbounded ``ci_high`` (``inf``) is written as ``None``."""
        return {
            "verdict": self.verdict,
            "speedup": self.speedup,
            "ci_low": self.ci_low,
            "ci_high": _json_float(self.ci_high),
            "n_baseline": self.n_baseline,
            "n_candidate": self.n_candidate,
            "confidence": self.confidence,
            "guarantee": self.overall,
            "required_speedup": self.required_speedup,
            "futility_margin": self.futility_margin,
            "futility_high": _json_float(self.upper_for_futility),
            "method": self.method,
            "cv_baseline": self.cv_baseline,
            "cv_candidate": self.cv_candidate,
            "autocorrelation": self.autocorrelation,
            "shift_index": self.shift_index,
            "flags": list(self.flags),
            "ruled_out": self.ruled_out,
        }


def _pct(ratio: float) -> str:
    """A speedup as a signed percentage change against eager (1.04 -> '+4%')."""
    change = (ratio - 1.0) * 100.0
    digits = 0 if abs(change) >= 10 or round(change, 1) == round(change) else 1
    return f"{change:+.{digits}f}%"


def ruled_out_statement(ci_low: float, ci_high: float, level: float) -> str:
    """Say which speedups an interval rules out and where it places the candidate.

    ``level`` is each side's one-sided level; the two sides together hold at ``2 level - 1``.
    ``(0.97, 1.04, 0.95)`` -> "faster than 1.040x and slower than 0.970x are ruled out at 95%
    (one-sided each); the candidate is within -3%/+4% of eager at 90% (both sides together)".
    Levels are printed with the precision they have (97.5 %, never "98%"). Unbounded sides rule
    nothing out.
    """
    parts = []
    if math.isfinite(ci_high):
        parts.append(f"faster than {ci_high:.3f}x")
    if ci_low > 0.0:
        parts.append(f"slower than {ci_low:.3f}x")
    if not parts:
        return "too few timings to rule anything out"
    both = 2.0 * level - 1.0  # Bonferroni over the two sides (exact for one look)
    where = (
        f"; the candidate is within {_pct(ci_low)}/{_pct(ci_high)} of eager at "
        f"{fmt_level(both)} (both sides together)"
        if math.isfinite(ci_high) and ci_low > 0.0 and both > 0.0
        else ""
    )
    each = " (one-sided each)" if len(parts) == 2 else ""
    verb = "are" if len(parts) == 2 else "is"
    return f"{' and '.join(parts)} {verb} ruled out at {fmt_level(level)}{each}{where}"


def _verdict(
    ci_low: float,
    ci_high: float,
    required: float,
    *,
    speedup: float | None = None,
    futility_high: float | None = None,
    margin: float = 0.0,
) -> Verdict:
    """Apply the three-outcome rule; equality with a threshold never settles the question."""
    if ci_low > required:
        return "faster"
    if ci_high < required:
        return "not_faster"
    if (
        speedup is not None
        and futility_high is not None
        and speedup < required
        and futility_high < required + margin
    ):
        return "not_faster"
    return "inconclusive"


def _bounds(
    base: tuple[float, ...], cand: tuple[float, ...], alpha: float, *, paired: bool
) -> tuple[float, float, float]:
    return (_paired_bounds if paired else _unpaired_bounds)(base, cand, alpha)


def _widen(bounds: tuple[float, float, float], factor: float) -> tuple[float, float, float]:
    """Stretch log bounds away from the estimate by ``factor`` (the serial-correlation remedy)."""
    estimate, lower, upper = bounds
    if factor == 1.0:
        return bounds
    return estimate, estimate - factor * (estimate - lower), estimate + factor * (upper - estimate)


def _segment_bounds(
    base: tuple[float, ...],
    cand: tuple[float, ...],
    alpha: float,
    alpha_futility: float | None,
    *,
    paired: bool,
    guard_serial: bool,
    always_widen: bool = False,
) -> tuple[float, float, float, float | None, float | None, bool]:
    """Log bounds of one stretch of pairs: (estimate, lower, upper, futility upper, rho, widened).

    With ``guard_serial``, a lag-1 rank autocorrelation above the flag level widens the bounds by
    the AR(1) factor of the bias-corrected coefficient (``widened``). ``always_widen`` widens by
    the estimated coefficient whenever it is positive, with no pre-test, and by at least
    :data:`EARLY_PHI` below :data:`EARLY_PAIRS` pairs, where correlation cannot be seen.
    """
    rho: float | None = None
    factor = 1.0
    if paired:
        rho = lag1_rank_autocorrelation([math.log(b / c) for b, c in zip(base, cand, strict=True)])
        flagged = rho > autocorrelation_flag_level(len(base))
        if guard_serial and flagged:
            factor = inflation_factor(ar1_coefficient(rho, len(base)))
        if always_widen:
            phi = max(ar1_coefficient(rho, len(base)), 0.0)
            if len(base) < EARLY_PAIRS:
                phi = max(phi, EARLY_PHI)
            factor = max(factor, inflation_factor(phi))
            if not flagged:  # widened as a precaution: not a finding to show
                estimate, lower, upper = _widen(_bounds(base, cand, alpha, paired=paired), factor)
                fut_upper = None
                if alpha_futility is not None and alpha_futility != alpha:
                    _, _, fut_upper = _widen(
                        _bounds(base, cand, alpha_futility, paired=paired), factor
                    )
                return estimate, lower, upper, fut_upper, rho, False
    estimate, lower, upper = _widen(_bounds(base, cand, alpha, paired=paired), factor)
    fut_upper = None
    if alpha_futility is not None and alpha_futility != alpha:
        _, _, fut_upper = _widen(_bounds(base, cand, alpha_futility, paired=paired), factor)
    return estimate, lower, upper, fut_upper, rho, factor > 1.0


def _decide(
    base: tuple[float, ...],
    cand: tuple[float, ...],
    required: float,
    alpha: float,
    *,
    paired: bool,
    guarantee: float | None = None,
    margin: float = 0.0,
    alpha_futility: float | None = None,
    guard_serial: bool = False,
    guard_shift: bool = False,
    always_widen: bool = False,
    throughput_consistent: bool = False,
) -> SpeedupDecision:
    """One look's decision from checked timings.

    A ratio shift found by the guard makes the verdict need the whole run and the pairs after the
    shift to agree: the interval is the union of both, the estimate the later pairs'. Deciding on
    the later pairs alone would pick, under serial correlation, the most extreme stretch.
    """
    flags: list[str] = []
    estimate, lower, upper, fut_upper, rho, widened = _segment_bounds(
        base,
        cand,
        alpha,
        alpha_futility,
        paired=paired,
        guard_serial=guard_serial,
        always_widen=always_widen,
    )
    shift = None
    if paired and guard_shift:
        shift = ratio_shift_index([math.log(b / c) for b, c in zip(base, cand, strict=True)])
    if shift is not None:
        flags.append("ratio_shift")
        tail = _segment_bounds(
            base[shift:],
            cand[shift:],
            alpha,
            alpha_futility,
            paired=True,
            guard_serial=guard_serial,
            always_widen=always_widen,
        )
        estimate, lower, upper = tail[0], min(lower, tail[1]), max(upper, tail[2])
        if fut_upper is not None and tail[3] is not None:
            fut_upper = max(fut_upper, tail[3])
        widened = widened or tail[5]
    if widened:
        flags.append("serial_correlation")
    ci_low, ci_high = _exp(lower), _exp(upper)
    speedup = min(max(_exp(estimate), ci_low), ci_high)
    futility_high = None if fut_upper is None else max(_exp(fut_upper), speedup)
    upper_for_futility = ci_high if futility_high is None else futility_high
    verdict = _verdict(
        ci_low, ci_high, required, speedup=speedup, futility_high=upper_for_futility, margin=margin
    )
    if throughput_consistent and verdict == "faster":
        first = shift or 0
        if not math.fsum(base[first:]) / math.fsum(cand[first:]) > required:
            verdict = "inconclusive"  # the typical call is faster, the throughput is not (yet)
            flags.append("throughput_disagrees")
    return SpeedupDecision(
        verdict=verdict,
        speedup=speedup,
        ci_low=ci_low,
        ci_high=ci_high,
        n_baseline=len(base),
        n_candidate=len(cand),
        confidence=1.0 - 2.0 * alpha,
        required_speedup=required,
        method="wilcoxon_signed_rank_hl" if paired else "mann_whitney_hl",
        cv_baseline=_cv(base),
        cv_candidate=_cv(cand),
        guarantee=guarantee,
        futility_margin=margin,
        futility_high=futility_high,
        autocorrelation=rho,
        shift_index=shift,
        flags=tuple(flags),
    )


def _margin(futility_margin_percent: object) -> float:
    """A futility margin in percentage points, as speedup units (1.0 -> 0.01)."""
    return check_finite("futility_margin_percent", futility_margin_percent, minimum=0.0) / 100.0


def decide_speedup(
    baseline_times: _Timings,
    candidate_times: _Timings,
    min_speedup_threshold_percent: float = DEFAULT_THRESHOLD_PERCENT,
    *,
    confidence: float = 0.95,
    paired: bool = False,
    futility_margin_percent: float = 0.0,
    guard_dependence: bool = False,
) -> SpeedupDecision:
    """Decide, in one look, whether the candidate is faster than eager by the threshold.

    For tools that already hold per-call latencies (seconds, one batch size). The interval is
    two-sided at ``confidence`` (``(1 - confidence) / 2`` per side): Wilcoxon/HL on the paired
    log ratios when ``paired`` (timings ``i`` of both arms measured together), Mann-Whitney/HL on
    two independent samples otherwise. ``faster`` iff ``ci_low > 1 + pct/100``, ``not_faster``
    iff ``ci_high < 1 + pct/100`` (or, with a futility margin, the estimate is below and
    ``ci_high`` below ``1 + (pct + margin)/100``), else ``inconclusive``; ``ruled_out`` says what
    the interval excludes. ``guard_dependence`` (paired only) runs the serial-correlation and
    ratio-shift checks of :mod:`aitune_fp.core.dependence` and applies their remedies. Timings may
    be lists, tuples, numpy arrays of any real dtype or 1-D tensors; O(n log n).
    """
    check_type("paired", paired, bool)
    check_type("guard_dependence", guard_dependence, bool)
    base = _timings("baseline_times", baseline_times)
    cand = _timings("candidate_times", candidate_times)
    if paired:
        _paired_lengths(base, cand)
    required = required_speedup(min_speedup_threshold_percent)
    level = _confidence("confidence", confidence)
    return _decide(
        base,
        cand,
        required,
        (1.0 - level) / 2.0,
        paired=paired,
        margin=_margin(futility_margin_percent),
        guard_serial=guard_dependence and paired,
        guard_shift=guard_dependence and paired,
    )


def decide_at_look(
    baseline_times: _Timings,
    candidate_times: _Timings,
    min_speedup_threshold_percent: float,
    *,
    confidence: float,
    n_looks: int,
    futility_margin_percent: float = 0.0,
    futility_error: float | None = None,
    guard_serial_correlation: bool = False,
    guard_shift: bool = False,
    look: int | None = None,
    always_widen: bool = False,
    throughput_consistent: bool = False,
) -> SpeedupDecision:
    """Paired decision at one look of a group-sequential, interleaved measurement.

    Decision engine v3 is three options (all off: v2): ``look`` (this look's number, from 1)
    spends the false-accept error by :func:`look_alpha` instead of evenly, little at the early
    looks where dependence cannot be seen; ``always_widen`` widens for any positive serial
    correlation (see ``_segment_bounds``); ``throughput_consistent`` lets ``faster`` stand only
    when the mean-latency throughput ratio of the same pairs also clears the required speedup
    (else ``inconclusive``, flag ``throughput_disagrees``), so the verdict never contradicts the
    throughput users read.

    The false-accept error ``1 - confidence`` is split evenly over ``n_looks`` looks (Bonferroni):
    each look's lower bound uses ``(1 - confidence) / n_looks``, so a slower-or-equal candidate is
    accepted with probability <= ``1 - confidence`` over all looks (``guarantee``); ``ci_high`` uses
    the same level, so what ``ruled_out`` says holds at ``confidence`` too. The futility stop says
    ``not_faster`` once the estimate is below the required speedup and the upper bound at the looser
    ``futility_error / n_looks`` lies below ``required + futility_margin_percent / 100``: a
    candidate faster than that by the margin is called ``not_faster`` with probability <=
    ``futility_error`` (None: the same level as accepting, the symmetric rule). The guards run the
    checks of :mod:`aitune_fp.core.dependence`: serial correlation widens the interval, a ratio
    shift restricts the decision to the pairs after it.
    """
    base = _timings("baseline_times", baseline_times)
    cand = _timings("candidate_times", candidate_times)
    _paired_lengths(base, cand)
    required = required_speedup(min_speedup_threshold_percent)
    level = _confidence("confidence", confidence)
    looks = check_int("n_looks", n_looks, minimum=1)
    check_type("guard_serial_correlation", guard_serial_correlation, bool)
    check_type("guard_shift", guard_shift, bool)
    alpha = (1.0 - level) / looks if look is None else look_alpha(1.0 - level, look, looks)
    if alpha >= 0.5:
        raise InvalidValueError(
            "(1 - confidence) / n_looks must be < 0.5, got "
            f"confidence={confidence!r}, n_looks={n_looks!r}"
        )
    alpha_futility = None
    if futility_error is not None:
        alpha_futility = check_open_interval("futility_error", futility_error, 0.0, 1.0) / looks
        if alpha_futility >= 0.5:
            raise InvalidValueError(
                "futility_error / n_looks must be < 0.5, got "
                f"futility_error={futility_error!r}, n_looks={n_looks!r}"
            )
    return _decide(
        base,
        cand,
        required,
        alpha,
        paired=True,
        guarantee=level,
        margin=_margin(futility_margin_percent),
        alpha_futility=alpha_futility,
        guard_serial=guard_serial_correlation,
        guard_shift=guard_shift,
        always_widen=always_widen,
        throughput_consistent=throughput_consistent,
    )


#: ``always_widen``: below this many pairs correlation cannot be seen, and at least
#: :data:`EARLY_PHI` is assumed.
EARLY_PAIRS: Final = 40
EARLY_PHI: Final = 0.2
#: The exponent of the error-spending function ``alpha * (k / K) ** SPENDING_POWER``.
SPENDING_POWER: Final = 2.0


def look_alpha(total_alpha: float, look: int, n_looks: int) -> float:
    """The false-accept error look ``look`` (1..``n_looks``) may spend: ``alpha (t_k^2 - t_{k-1}^2)``.

    ``t_k = look / n_looks`` (a power-family spending function, Kim and DeMets, with exponent
    :data:`SPENDING_POWER`). The parts add up to ``total_alpha``, so by the union bound a
    candidate no faster than required is accepted at some look with probability at most
    ``total_alpha``; the early looks, where serial correlation is invisible, spend the least.
    """
    k = check_int("look", look, minimum=1)
    n = check_int("n_looks", n_looks, minimum=1)
    if k > n:
        raise InvalidValueError(f"look must be <= n_looks ({n}), got {look!r}")
    total = check_open_interval("total_alpha", total_alpha, 0.0, 1.0)
    return float(total * ((k / n) ** SPENDING_POWER - ((k - 1) / n) ** SPENDING_POWER))
