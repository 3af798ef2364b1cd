"""Timings in, one arm's figures out: the input check every statistic shares, and steadiness."""

from __future__ import annotations

import bisect
import decimal
import math
import numbers
import statistics
from collections.abc import Iterable, Sequence
from typing import Any, SupportsFloat, TypeAlias

from aitune_fp.core._checks import check_int, check_nonnegative, check_positive, got
from aitune_fp.errors import InvalidTypeError, InvalidValueError

#: What the timing arguments accept: a 1-D sequence of real numbers (list, tuple, numpy array of
#: any real dtype, 1-D tensor); checked at run time by :func:`timing_stats`.
TimingStats: TypeAlias = Iterable[SupportsFloat]

#: Most timings per arm whose standard deviation comes from the exact ``statistics.stdev``.
_EXACT_STDEV_MAX = 100_000


def sequence_items(name: str, values: object) -> list[Any]:
    """The items of a 1-D sequence, array or tensor (arrays and tensors via ``.tolist()``)."""
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


def real_number(name: str, value: object) -> float:
    """``value`` as a float if it is a real number (also a numpy scalar, 0-d array or tensor)."""
    if isinstance(value, bool):
        raise InvalidTypeError(f"{name} must be a real number, got {got(value)}")
    if isinstance(value, (numbers.Real, decimal.Decimal)):
        number: object = value  # int, float, numpy floating/integer scalars, Fraction, Decimal
    elif getattr(value, "ndim", None) == 0 and callable(getattr(value, "tolist", None)):
        number = value.tolist()  # type: ignore[attr-defined]  # a 0-d array or tensor
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise InvalidTypeError(f"{name} must be a real number, got {got(value)}")
    else:
        raise InvalidTypeError(f"{name} must be a real number, got {got(value)}")
    try:
        return float(number)  # type: ignore[arg-type]
    except (OverflowError, ValueError):  # beyond float range; a signalling Decimal NaN
        raise InvalidValueError(f"{name} must be finite, got {value!r}") from None


def timing_stats(name: str, values: object, *, minimum: int = 2) -> tuple[float, ...]:
    """Return ``values`` as a tuple of finite, positive floats, at least ``minimum`` of them."""
    items = sequence_items(name, values)
    if all(issubclass(kind, (float, int)) and kind is not bool for kind in set(map(type, items))):
        try:
            floats = list(map(float, items))
        except OverflowError:
            floats = []  # an int beyond float range: the item-by-item pass names it
        ok = len(floats) == len(items) >= minimum and all(map(math.isfinite, floats))
        if ok and (not floats or min(floats) > 0):
            return tuple(floats)
    result = tuple(
        check_positive(f"{name}[{i}]", real_number(f"{name}[{i}]", v)) for i, v in enumerate(items)
    )
    if len(result) < minimum:
        raise InvalidValueError(
            f"{name} needs at least {minimum} values, got {len(result)}: {items!r}"
        )
    return result


def sorted_median(values: Sequence[float]) -> float:
    """Median of an already sorted, non-empty sequence."""
    n = len(values)
    mid = n // 2
    if n % 2:
        return values[mid]
    return (values[mid - 1] + values[mid]) / 2.0


def throughput_from_latencies(latencies_s: TimingStats, batch_size: int) -> float:
    """Return samples per second from the MEAN latency (``batch_size / mean``), as AITune reports it."""
    values = timing_stats("latencies_s", latencies_s, minimum=1)
    batch = check_int("batch_size", batch_size, minimum=1)
    return batch / statistics.fmean(values)


def coefficient_of_variation(values: TimingStats) -> float:
    """Sample standard deviation (n-1) over the mean of positive timings: their relative noise."""
    return cv(timing_stats("values", values))


def cv(items: tuple[float, ...]) -> float:
    """:func:`coefficient_of_variation` of checked timings."""
    if len(items) <= _EXACT_STDEV_MAX:
        return statistics.stdev(items) / statistics.fmean(items)
    mean = math.fsum(items) / len(items)
    variance = math.fsum((x - mean) ** 2 for x in items) / (len(items) - 1)
    return math.sqrt(variance) / mean


def is_steady(times: TimingStats, window: int, tolerance: float) -> bool:
    """Warm-up test: the last ``window`` times spread by at most ``tolerance`` of their median."""
    size = check_int("window", window, minimum=2)
    tol = check_nonnegative("tolerance", tolerance)
    items = timing_stats("times", times, minimum=0)
    if len(items) < size:
        return False
    last = items[-size:]
    return (max(last) - min(last)) / statistics.median(last) <= tol


def is_settled(times: TimingStats, window: int, tolerance: float, *, z: float = 2.5) -> bool:
    """Warm-up test scaled to the machine's noise: no trend beyond what the noise explains."""
    size = check_int("window", window, minimum=2)
    level = check_positive("z", z)
    items = timing_stats("times", times, minimum=0)
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


def level_shift_index(
    times: TimingStats, *, min_segment: int = 10, ratio: float = 0.15
) -> int | None:
    """First split index where the timing level shifts, to flag samples measured after it."""
    seg = check_int("min_segment", min_segment, minimum=1)
    rel = check_positive("ratio", ratio)
    items = timing_stats("times", times, minimum=0)
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
        level = sorted_median(before)
        if abs(sorted_median(after) - level) > rel * level:
            return k
    return None
