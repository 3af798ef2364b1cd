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

Everything here is pure Python (no numpy, no torch, no clocks, no I/O). The bounds sort all
Walsh averages / pairwise differences: O(n^2 log n) time and O(n^2) memory, meant for up to a
few thousand timings per arm.
"""

from __future__ import annotations

import bisect
import functools
import math
import statistics
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Literal

import attrs

from aitune_fp.core._checks import (
    check_int,
    check_nonnegative,
    check_open_interval,
    check_positive,
    check_type,
    finite,
    integer,
    not_nan,
    one_of,
    open_interval,
)
from aitune_fp.core.speedup import DEFAULT_THRESHOLD_PERCENT, required_speedup
from aitune_fp.errors import InvalidTypeError, InvalidValueError

__all__ = [
    "METHODS",
    "VERDICTS",
    "SpeedupDecision",
    "Verdict",
    "coefficient_of_variation",
    "decide_at_look",
    "decide_speedup",
    "is_steady",
    "level_shift_index",
    "mann_whitney_critical_count",
    "paired_log_speedup_bounds",
    "signed_rank_critical_count",
    "throughput_from_latencies",
    "unpaired_log_speedup_bounds",
]

Verdict = Literal["faster", "not_faster", "inconclusive"]
VERDICTS: tuple[Verdict, ...] = ("faster", "not_faster", "inconclusive")

#: Names of the two interval methods, as written in :attr:`SpeedupDecision.method`.
METHODS: tuple[str, ...] = ("wilcoxon_signed_rank_hl", "mann_whitney_hl")

#: Largest n for which the signed-rank null distribution is computed exactly.
_SIGNED_RANK_EXACT_MAX_N = 200
#: Largest n*m for which the Mann-Whitney null distribution is computed exactly.
_MANN_WHITNEY_EXACT_MAX_NM = 10_000


# --------------------------------------------------------------------------------------------
# Argument checks
# --------------------------------------------------------------------------------------------


def _timings(name: str, values: object, *, minimum: int = 2) -> tuple[float, ...]:
    """Return ``values`` as a tuple of finite, positive floats, at least ``minimum`` of them."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise InvalidTypeError(f"{name} must be a sequence of numbers, got {values!r}")
    items = tuple(values)
    result = tuple(check_positive(f"{name}[{i}]", v) for i, v in enumerate(items))
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


def throughput_from_latencies(latencies_s: Sequence[float], batch_size: int) -> float:
    """Return samples per second from the MEAN latency (``batch_size / mean``), as AITune reports it.

    One latency is enough for a throughput; every latency must be finite and > 0.
    """
    values = _timings("latencies_s", latencies_s, minimum=1)
    batch = check_int("batch_size", batch_size, minimum=1)
    return batch / statistics.fmean(values)


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Sample standard deviation (n-1) over the mean of positive timings: their relative noise."""
    items = _timings("values", values)
    return statistics.stdev(items) / statistics.fmean(items)


def is_steady(times: Sequence[float], window: int, tolerance: float) -> bool:
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


def level_shift_index(
    times: Sequence[float], *, min_segment: int = 10, ratio: float = 0.15
) -> int | None:
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


def _normal_critical(mean: float, sd: float, alpha: float, cap: int) -> int:
    """Largest ``c`` with ``Phi((c + 0.5 - mean) / sd) <= alpha`` (continuity corrected), <= cap."""
    z = statistics.NormalDist().inv_cdf(alpha)
    c = math.floor(mean + z * sd - 0.5)
    return max(-1, min(c, cap))


def signed_rank_critical_count(n: int, alpha: float) -> int:
    """Largest ``c`` with ``P0(T+ <= c) <= alpha`` under the exact Wilcoxon signed-rank null.

    ``T+`` is the sum of the ranks of the positive differences among ``n`` untied, nonzero pairs;
    the ``(c+1)``-th smallest Walsh average is then a one-sided ``1 - alpha`` lower bound of the
    pseudo-median. Returns -1 when even ``P0(T+ <= 0) = 2**-n`` exceeds ``alpha`` (``n`` too small
    for that level). Exact for ``n <= 200``, normal approximation with continuity correction above.
    ``alpha`` must lie in (0, 0.5). Example: ``signed_rank_critical_count(10, 0.01) == 5``.
    """
    size = check_int("n", n, minimum=1)
    level = _alpha("alpha", alpha)
    if size <= _SIGNED_RANK_EXACT_MAX_N:
        return _exact_critical(_signed_rank_lower_cdf(size), 2**size, level)
    total = size * (size + 1) // 2
    sd = math.sqrt(size * (size + 1) * (2 * size + 1) / 24.0)
    return _normal_critical(total / 2.0, sd, level, (total - 1) // 2)


def mann_whitney_critical_count(n: int, m: int, alpha: float) -> int:
    """Largest ``c`` with ``P0(U <= c) <= alpha`` under the Mann-Whitney null for sizes ``n, m``.

    ``U`` counts the pairs ``(i, j)`` with ``x_i > y_j`` among two independent, untied samples; the
    ``(c+1)``-th smallest of the ``n*m`` differences is then a one-sided ``1 - alpha`` lower bound of
    the shift. Returns -1 when no ``c`` qualifies. Exact for ``n*m <= 10000``, normal approximation
    with continuity correction above. ``alpha`` must lie in (0, 0.5).
    """
    first = check_int("n", n, minimum=1)
    second = check_int("m", m, minimum=1)
    level = _alpha("alpha", alpha)
    product = first * second
    if product <= _MANN_WHITNEY_EXACT_MAX_NM:
        cumulative = _mann_whitney_lower_cdf(first, second)
        return _exact_critical(cumulative, math.comb(first + second, first), level)
    sd = math.sqrt(product * (first + second + 1) / 12.0)
    return _normal_critical(product / 2.0, sd, level, (product - 1) // 2)


# --------------------------------------------------------------------------------------------
# Estimates and bounds on the log scale
# --------------------------------------------------------------------------------------------


def _bounds_from_sorted(values: Sequence[float], critical: int) -> tuple[float, float, float]:
    """(median, (c+1)-th smallest, (c+1)-th largest) of sorted values; infinite bounds if c < 0."""
    estimate = _sorted_median(values)
    if critical < 0:
        return estimate, -math.inf, math.inf
    return estimate, values[critical], values[len(values) - 1 - critical]


def paired_log_speedup_bounds(
    baseline_times: Sequence[float], candidate_times: Sequence[float], alpha_one_sided: float
) -> tuple[float, float, float]:
    """Hodges-Lehmann log speedup of paired timings with its Wilcoxon signed-rank bounds.

    ``d_i = ln(b_i) - ln(c_i)``; the estimate is the median of the Walsh averages
    ``(d_i + d_j) / 2, i <= j``; with ``c = signed_rank_critical_count(n, alpha_one_sided)`` the
    lower bound is their ``(c+1)``-th smallest and the upper bound their ``(c+1)``-th largest
    (``-inf`` / ``+inf`` when ``c == -1``). Returns ``(estimate, lower, upper)`` on the LOG scale.
    """
    base = _timings("baseline_times", baseline_times)
    cand = _timings("candidate_times", candidate_times)
    if len(base) != len(cand):
        raise InvalidValueError(
            "paired timings need equal lengths: "
            f"baseline_times has {len(base)}, candidate_times has {len(cand)}"
        )
    alpha = _alpha("alpha_one_sided", alpha_one_sided)
    diffs = [math.log(b) - math.log(c) for b, c in zip(base, cand, strict=True)]
    walsh = sorted(
        (diffs[i] + diffs[j]) / 2.0 for i in range(len(diffs)) for j in range(i, len(diffs))
    )
    return _bounds_from_sorted(walsh, signed_rank_critical_count(len(diffs), alpha))


def unpaired_log_speedup_bounds(
    baseline_times: Sequence[float], candidate_times: Sequence[float], alpha_one_sided: float
) -> tuple[float, float, float]:
    """Hodges-Lehmann log shift of two independent samples with its Mann-Whitney bounds.

    The estimate is the median of all ``n*m`` differences ``ln(b_i) - ln(c_j)``; with
    ``c = mann_whitney_critical_count(n, m, alpha_one_sided)`` the bounds are their ``(c+1)``-th
    smallest and ``(c+1)``-th largest (infinite when ``c == -1``). Returns
    ``(estimate, lower, upper)`` on the LOG scale.
    """
    base = _timings("baseline_times", baseline_times)
    cand = _timings("candidate_times", candidate_times)
    alpha = _alpha("alpha_one_sided", alpha_one_sided)
    log_base = [math.log(b) for b in base]
    log_cand = [math.log(c) for c in cand]
    diffs = sorted(lb - lc for lb in log_base for lc in log_cand)
    return _bounds_from_sorted(diffs, mann_whitney_critical_count(len(base), len(cand), alpha))


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
    The verdict is ``faster`` iff ``ci_low > required_speedup``, ``not_faster`` iff
    ``ci_high < required_speedup``, else ``inconclusive``.
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

    def __attrs_post_init__(self) -> None:
        """Check that the interval holds the estimate and that the verdict follows the rule."""
        if not 0.0 <= self.ci_low <= self.speedup <= self.ci_high:
            raise InvalidValueError(
                "need 0 <= ci_low <= speedup <= ci_high, got "
                f"ci_low={self.ci_low!r}, speedup={self.speedup!r}, ci_high={self.ci_high!r}"
            )
        expected = _verdict(self.ci_low, self.ci_high, self.required_speedup)
        if self.verdict != expected:
            raise InvalidValueError(
                f"verdict {self.verdict!r} contradicts the bounds [{self.ci_low!r}, "
                f"{self.ci_high!r}] and required_speedup={self.required_speedup!r} "
                f"(expected {expected!r})"
            )

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
            "required_speedup": self.required_speedup,
            "method": self.method,
            "cv_baseline": self.cv_baseline,
            "cv_candidate": self.cv_candidate,
        }


def _verdict(ci_low: float, ci_high: float, required: float) -> Verdict:
    """Apply the three-outcome rule; equality with the threshold is ``inconclusive``."""
    if ci_low > required:
        return "faster"
    if ci_high < required:
        return "not_faster"
    return "inconclusive"


def _decide(
    base: tuple[float, ...],
    cand: tuple[float, ...],
    required: float,
    alpha: float,
    *,
    paired: bool,
) -> SpeedupDecision:
    if paired:
        estimate, lower, upper = paired_log_speedup_bounds(base, cand, alpha)
        method = "wilcoxon_signed_rank_hl"
    else:
        estimate, lower, upper = unpaired_log_speedup_bounds(base, cand, alpha)
        method = "mann_whitney_hl"
    ci_low, ci_high = _exp(lower), _exp(upper)
    return SpeedupDecision(
        verdict=_verdict(ci_low, ci_high, required),
        speedup=min(max(_exp(estimate), ci_low), ci_high),
        ci_low=ci_low,
        ci_high=ci_high,
        n_baseline=len(base),
        n_candidate=len(cand),
        confidence=1.0 - 2.0 * alpha,
        required_speedup=required,
        method=method,
        cv_baseline=coefficient_of_variation(base),
        cv_candidate=coefficient_of_variation(cand),
    )


def decide_speedup(
    baseline_times: Sequence[float],
    candidate_times: Sequence[float],
    min_speedup_threshold_percent: float = DEFAULT_THRESHOLD_PERCENT,
    *,
    confidence: float = 0.95,
    paired: bool = False,
) -> SpeedupDecision:
    """Decide, in one look, whether the candidate is faster than eager by the threshold.

    For tools that already hold per-call latencies (seconds, one batch size). The interval is
    two-sided at ``confidence`` (``(1 - confidence) / 2`` per side): Wilcoxon/HL on the paired
    log ratios when ``paired`` (timings ``i`` of both arms measured together), Mann-Whitney/HL on
    two independent samples otherwise. ``faster`` iff ``ci_low > 1 + pct/100``, ``not_faster``
    iff ``ci_high < 1 + pct/100``, else ``inconclusive`` (equality included).
    """
    check_type("paired", paired, bool)
    base = _timings("baseline_times", baseline_times)
    cand = _timings("candidate_times", candidate_times)
    if paired and len(base) != len(cand):
        raise InvalidValueError(
            "paired timings need equal lengths: "
            f"baseline_times has {len(base)}, candidate_times has {len(cand)}"
        )
    required = required_speedup(min_speedup_threshold_percent)
    level = _confidence("confidence", confidence)
    return _decide(base, cand, required, (1.0 - level) / 2.0, paired=paired)


def decide_at_look(
    baseline_times: Sequence[float],
    candidate_times: Sequence[float],
    min_speedup_threshold_percent: float,
    *,
    confidence: float,
    n_looks: int,
) -> SpeedupDecision:
    """Paired decision at one look of a group-sequential, interleaved measurement.

    The error ``1 - confidence`` is spent per side and split evenly over ``n_looks`` looks
    (Bonferroni): each look uses ``alpha_one_sided = (1 - confidence) / n_looks`` per side, so
    the false-accept and the false-reject rates over all looks each stay <= ``1 - confidence``
    (0.95 over 5 looks: 0.01 per side per look). ``inconclusive`` means "not settled at this look";
    the result's ``confidence`` is the two-sided level of this look, ``1 - 2 * alpha_one_sided``.
    ``(1 - confidence) / n_looks`` must be below 0.5.
    """
    base = _timings("baseline_times", baseline_times)
    cand = _timings("candidate_times", candidate_times)
    if len(base) != len(cand):
        raise InvalidValueError(
            "paired timings need equal lengths: "
            f"baseline_times has {len(base)}, candidate_times has {len(cand)}"
        )
    required = required_speedup(min_speedup_threshold_percent)
    level = _confidence("confidence", confidence)
    looks = check_int("n_looks", n_looks, minimum=1)
    alpha = (1.0 - level) / looks
    if alpha >= 0.5:
        raise InvalidValueError(
            "(1 - confidence) / n_looks must be < 0.5, got "
            f"confidence={confidence!r}, n_looks={n_looks!r}"
        )
    return _decide(base, cand, required, alpha, paired=True)
