"""The conditions a ``faster`` needs beside the widened interval: block, throughput, carry-over."""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Final

from aitune_fp.core.dependence import block_means, block_size
from aitune_fp.core.hodges_lehmann import log_ratio_bounds, unpaired_bounds

__all__ = ["CARRYOVER_ALPHA", "throughput_log_lower"]


def throughput_log_lower(
    base: tuple[float, ...], cand: tuple[float, ...], alpha: float, factor: float = 1.0
) -> float:
    """One-sided lower bound of ``ln(sum(base) / sum(cand))``, the mean-latency throughput ratio.

    Delta method on the pairs: ``ln R`` has variance about ``var(b_i / mean(b) - c_i /
    mean(c)) / n``; the bound is ``ln R - z(1 - alpha) * se * factor`` (``factor``: the serial
    correlation widening). A bound, not the point: a candidate whose throughput ratio is exactly
    the gate passes it with probability about ``alpha`` (issue 36: the point passed 58-68 %).
    """
    n = len(base)
    mean_b, mean_c = math.fsum(base) / n, math.fsum(cand) / n
    d = [b / mean_b - c / mean_c for b, c in zip(base, cand, strict=True)]
    centre = math.fsum(d) / n
    variance = math.fsum((x - centre) ** 2 for x in d) / max(n - 1, 1)
    se = math.sqrt(variance / n)
    return math.log(mean_b / mean_c) - NormalDist().inv_cdf(1.0 - alpha) * se * factor


#: One-sided level of the carry-over test: found, a ``faster`` needs the pairs after the
#: candidate's own call to clear the gate alone.
CARRYOVER_ALPHA: Final = 0.01


def carryover_bound(
    base: tuple[float, ...],
    cand: tuple[float, ...],
    after_eager: tuple[bool, ...],
    alpha: float,
    factor: float,
) -> tuple[float, bool, float] | None:
    """Carry-over from eager: (log shift, found, log lower bound of the pairs after itself).

    The shift is the Hodges-Lehmann difference of the log ratios of the pairs whose candidate
    call came right after an eager call and of those right after its own; found when its
    Mann-Whitney lower bound at :data:`CARRYOVER_ALPHA` is above 0 (the candidate gains from
    following eager: a position effect the quads do not cancel). The last value is the
    Wilcoxon lower bound, at ``alpha`` and widened by ``factor``, of the pairs after itself
    alone: what a user calling the candidate after itself gets. None: too few of either.
    """
    logs = [math.log(b / c) for b, c in zip(base, cand, strict=True)]
    after = [x for x, e in zip(logs, after_eager, strict=True) if e]
    own = [x for x, e in zip(logs, after_eager, strict=True) if not e]
    if len(after) < 2 or len(own) < 2:
        return None
    shift, low, _ = unpaired_bounds(
        tuple(math.exp(x) for x in after), tuple(math.exp(x) for x in own), CARRYOVER_ALPHA
    )
    estimate, lower, _ = log_ratio_bounds(own, alpha)
    return shift, low > 0.0, estimate - factor * (estimate - lower)


def block_lower(logs: list[float], alpha: float) -> float | None:
    """Log lower bound from the block means of the log ratios, at one-sided ``alpha``.

    Wilcoxon / Hodges-Lehmann on the means of blocks of :func:`block_size` pairs (batch means):
    valid when the blocks are nearly independent, whatever the dependence inside a block. Means,
    not medians (v3.1): a block's mean is the more precise, and the rank test over blocks keeps
    one wild block from weighing more than any other (issue 36: medians cost 1.03x 14 points of
    power through the real loop). None when blocks of at least 2 pairs are too few to bound
    anything at ``alpha``.
    """
    size = block_size(len(logs))
    if size < 2:
        return None
    lower = log_ratio_bounds(block_means(logs, size), alpha)[1]
    return None if lower == -math.inf else lower
