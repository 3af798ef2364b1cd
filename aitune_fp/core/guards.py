"""The conditions a ``faster`` needs beside the widened interval: block, throughput, carry-over."""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Final

from aitune_fp.core.dependence import block_means, block_size
from aitune_fp.core.hodges_lehmann import log_ratio_bounds, unpaired_bounds


def throughput_log_lower(
    base: tuple[float, ...], cand: tuple[float, ...], alpha: float, factor: float = 1.0
) -> float:
    """One-sided lower bound of ``ln(sum(base) / sum(cand))``, the mean-latency throughput ratio."""
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
    """Carry-over from eager: (log shift, found, log lower bound of the pairs after itself)."""
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
    """Log lower bound from the block means of the log ratios, at one-sided ``alpha``."""
    size = block_size(len(logs))
    if size < 2:
        return None
    lower = log_ratio_bounds(block_means(logs, size), alpha)[1]
    return None if lower == -math.inf else lower
