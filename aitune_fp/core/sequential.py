"""Deciding from timings: in one look, or at one look of a group-sequential measurement."""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import Final, NamedTuple

from aitune_fp.core._checks import check_finite, check_int, check_open_interval, check_type
from aitune_fp.core.dependence import (
    ar1_coefficient,
    autocorrelation_flag_level,
    block_means,
    block_size,
    inflation_factor,
    lag1_rank_autocorrelation,
    ratio_shift_index,
)
from aitune_fp.core.hodges_lehmann import (
    log_ratio_bounds,
    paired_bounds,
    paired_lengths,
    unpaired_bounds,
)
from aitune_fp.core.speedup import DEFAULT_CONFIDENCE, DEFAULT_THRESHOLD_PERCENT, Gate
from aitune_fp.core.timings import TimingStats, cv, timing_stats
from aitune_fp.core.verdict import SpeedupDecision, rule_verdict
from aitune_fp.errors import InvalidValueError

#: Below this many pairs correlation cannot be seen, and at least :data:`EARLY_PHI` is assumed.
EARLY_PAIRS: Final = 40
EARLY_PHI: Final = 0.2
#: The exponent of the error-spending function ``alpha * (k / K) ** SPENDING_POWER``.
SPENDING_POWER: Final = 2.0
#: One-sided level of the carry-over test: found, a ``faster`` needs the pairs after the
#: candidate's own call to clear the gate alone.
CARRYOVER_ALPHA: Final = 0.01


def saturating_exp(x: float) -> float:
    """``math.exp`` that saturates to ``inf`` instead of raising on overflow."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def log_ratios(base: Sequence[float], cand: Sequence[float]) -> list[float]:
    """``ln(base[i] / cand[i])`` of paired timings: each pair's log speedup."""
    return [math.log(b / c) for b, c in zip(base, cand, strict=True)]


def precaution_factor(rho: float, n: int) -> float:
    """The widening a tune always applies: AR(1)'s, at least :data:`EARLY_PHI`'s when few pairs."""
    phi = ar1_coefficient(rho, n)
    return inflation_factor(max(phi, EARLY_PHI) if n < EARLY_PAIRS else phi)


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


def _carryover(
    logs: list[float], after_eager: tuple[bool, ...], alpha: float, factor: float
) -> tuple[float, bool, float] | None:
    """Carry-over from eager: (log shift, found, log lower bound of the pairs after itself)."""
    after = [x for x, e in zip(logs, after_eager, strict=True) if e]
    own = [x for x, e in zip(logs, after_eager, strict=True) if not e]
    if len(after) < 2 or len(own) < 2:
        return None
    shift, low, _ = unpaired_bounds(
        tuple(map(math.exp, after)), tuple(map(math.exp, own)), CARRYOVER_ALPHA
    )
    estimate, lower, _ = log_ratio_bounds(own, alpha)
    return shift, low > 0.0, estimate - factor * (estimate - lower)


def _block_lower(logs: list[float], alpha: float) -> float | None:
    """Log lower bound from the block means of the log ratios, at one-sided ``alpha``."""
    size = block_size(len(logs))
    if size < 2:
        return None
    lower = log_ratio_bounds(block_means(logs, size), alpha)[1]
    return None if lower == -math.inf else lower


def _widen(bounds: tuple[float, float, float], factor: float) -> tuple[float, float, float]:
    """Stretch log bounds away from the estimate by ``factor`` (the serial-correlation remedy)."""
    estimate, lower, upper = bounds
    if factor == 1.0:
        return bounds
    return estimate, estimate - factor * (estimate - lower), estimate + factor * (upper - estimate)


class _Segment(NamedTuple):
    """Log bounds of one stretch of pairs, widened, and the factor they were widened by."""

    estimate: float
    lower: float
    upper: float
    fut_upper: float | None
    rho: float | None
    widened: bool  # widened for a correlation found (flagged), not only as a precaution
    factor: float


def _segment(
    base: tuple[float, ...],
    cand: tuple[float, ...],
    alpha: float,
    alpha_futility: float | None,
    *,
    paired: bool,
    guard_serial: bool,
    precaution: bool,
) -> _Segment:
    """Log bounds of one stretch of pairs, widened when correlated (``precaution``: always)."""
    rho: float | None = None
    factor, flagged = 1.0, False
    if paired:
        n = len(base)
        rho = lag1_rank_autocorrelation(log_ratios(base, cand))
        flagged = guard_serial and rho > autocorrelation_flag_level(n)
        if precaution:
            factor = precaution_factor(rho, n)
        elif flagged:
            factor = inflation_factor(ar1_coefficient(rho, n))
    bounds = paired_bounds if paired else unpaired_bounds
    estimate, lower, upper = _widen(bounds(base, cand, alpha), factor)
    fut_upper = None
    if alpha_futility is not None and alpha_futility != alpha:
        fut_upper = _widen(bounds(base, cand, alpha_futility), factor)[2]
    return _Segment(estimate, lower, upper, fut_upper, rho, flagged and factor > 1.0, factor)


def _unwidened(segment: _Segment) -> tuple[float, float, float | None]:
    """The segment's (lower, upper, futility upper) before widening: what the data alone say."""
    est, f = segment.estimate, segment.factor
    fut = None if segment.fut_upper is None else est + (segment.fut_upper - est) / f
    return est - (est - segment.lower) / f, est + (segment.upper - est) / f, fut


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
    sequential: bool = False,
    min_accept_pairs: int = 0,
    throughput_bound: bool = False,
    after_eager: tuple[bool, ...] | None = None,
) -> SpeedupDecision:
    """One look's decision, and the first condition that held it back (``sequential``: a tune's)."""
    precaution = sequential and guard_serial  # a tune always widens, and checks the blocks
    flags: list[str] = []
    whole = _segment(
        base, cand, alpha, alpha_futility, paired=paired, guard_serial=guard_serial,
        precaution=precaution,
    )  # fmt: skip
    estimate, lower, upper, fut_upper, rho, widened = whole[:6]

    def verdict_of(low: float, high: float, fut: float | None, est: float) -> str:
        lo, hi = saturating_exp(low), saturating_exp(high)
        point = min(max(saturating_exp(est), lo), hi)
        f_high = hi if fut is None else max(saturating_exp(fut), point)
        return rule_verdict(lo, hi, required, speedup=point, futility_high=f_high, margin=margin)

    stages = [("interval", verdict_of(*_unwidened(whole), estimate))]
    stages.append(("widening", verdict_of(lower, upper, fut_upper, estimate)))
    shift = ratio_shift_index(log_ratios(base, cand)) if paired and guard_shift else None
    if shift is not None:
        flags.append("ratio_shift")
        tail = _segment(
            base[shift:], cand[shift:], alpha, alpha_futility, paired=True,
            guard_serial=guard_serial, precaution=precaution,
        )  # fmt: skip
        estimate, lower, upper = tail.estimate, min(lower, tail.lower), max(upper, tail.upper)
        if fut_upper is not None and tail.fut_upper is not None:
            fut_upper = max(fut_upper, tail.fut_upper)
        widened = widened or tail.widened
        stages.append(("shift", verdict_of(lower, upper, fut_upper, estimate)))
    if widened:
        flags.append("serial_correlation")
    ci_low, ci_high = saturating_exp(lower), saturating_exp(upper)
    speedup = min(max(saturating_exp(estimate), ci_low), ci_high)
    futility_high = None if fut_upper is None else max(saturating_exp(fut_upper), speedup)
    upper_for_futility = ci_high if futility_high is None else futility_high
    verdict = rule_verdict(
        ci_low, ci_high, required, speedup=speedup, futility_high=upper_for_futility, margin=margin
    )
    first = shift or 0  # after a shift, the pairs of the regime the estimate speaks for
    b, c = base[first:], cand[first:]
    # the throughput and carry-over checks hold on the whole run and on the later pairs (a
    # shift must not make accepting easier); the block guard on the later pairs (a shift breaks
    # the whole run's block means by itself)
    runs = [(base, cand, 0), *(((b, c, first),) if first else ())]
    if precaution and verdict == "faster":
        block_low = _block_lower(log_ratios(b, c), alpha)
        if block_low is not None and not saturating_exp(block_low) > required:
            ci_low = min(ci_low, saturating_exp(block_low))  # the blocks do not clear it
            flags.append("block_bound")
            verdict = rule_verdict(
                ci_low, ci_high, required, speedup=speedup, futility_high=upper_for_futility,
                margin=margin,
            )  # fmt: skip
            stages.append(("block", verdict))
    if sequential and verdict == "faster":
        if throughput_bound:  # a bound on the throughput ratio at the look's level
            low = min(throughput_log_lower(rb, rc, alpha, whole.factor) for rb, rc, _ in runs)
            flags.append("throughput_bound")
        else:  # the point: the verdict is about the typical call
            low = min(math.log(math.fsum(rb) / math.fsum(rc)) for rb, rc, _ in runs)
        if not saturating_exp(low) > required:
            verdict = "inconclusive"  # the typical call is faster, the throughput is not (yet)
            flags.append("throughput_disagrees")
            stages.append(("throughput", verdict))
    carryover = None
    for rb, rc, at in runs if after_eager is not None else ():
        assert after_eager is not None
        found = _carryover(log_ratios(rb, rc), after_eager[at:], alpha, whole.factor)
        if found is None:
            continue
        carryover = saturating_exp(found[0])  # the later pairs' when there was a shift
        if found[1]:
            if "carryover" not in flags:
                flags.append("carryover")
            if verdict == "faster" and not saturating_exp(found[2]) > required:
                verdict = "inconclusive"  # the pairs a user gets do not clear it alone
                stages.append(("carryover", verdict))
    if verdict == "faster" and len(base) < min_accept_pairs:
        verdict = "inconclusive"  # too few pairs for strong correlation to show: not yet
        flags.append("too_early")
        stages.append(("early", verdict))
    held_back = None
    if verdict == "inconclusive":
        held_back = next(name for name, v in stages if v == "inconclusive")
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
        cv_baseline=cv(base),
        cv_candidate=cv(cand),
        guarantee=guarantee,
        futility_margin=margin,
        futility_high=futility_high,
        autocorrelation=rho,
        shift_index=shift,
        flags=tuple(flags),
        held_back=held_back,
        carryover=carryover,
    )


def _after_eager(flags: Sequence[bool] | None, n: int) -> tuple[bool, ...] | None:
    """``candidate_after_eager`` checked: one bool a pair, or None (not measured)."""
    if flags is None or len(flags) == 0:
        return None
    items = tuple(check_type("candidate_after_eager[i]", f, bool) for f in flags)
    if len(items) != n:
        raise InvalidValueError(
            f"candidate_after_eager needs one flag a pair ({n}), got {len(items)}"
        )
    return items


def _margin(futility_margin_percent: object) -> float:
    """A futility margin in percentage points, as speedup units (1.0 -> 0.01)."""
    return check_finite("futility_margin_percent", futility_margin_percent, minimum=0.0) / 100.0


def decide_speedup(
    baseline_times: TimingStats,
    candidate_times: TimingStats,
    min_speedup_threshold_percent: float = DEFAULT_THRESHOLD_PERCENT,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    paired: bool = True,
    futility_margin_percent: float = 0.0,
    guard_dependence: bool = True,
) -> SpeedupDecision:
    """Decide, in one look, whether the candidate is faster than eager by the threshold.

    Latencies in s; a two-sided HL interval (Wilcoxon paired, Mann-Whitney not); ``faster`` iff
    ``ci_low > 1 + pct/100``, ``not_faster`` iff ``ci_high`` is below it; defaults: docs/api.md.
    """
    check_type("paired", paired, bool)
    check_type("guard_dependence", guard_dependence, bool)
    base = timing_stats("baseline_times", baseline_times)
    cand = timing_stats("candidate_times", candidate_times)
    if paired and len(base) != len(cand):
        raise InvalidValueError(
            f"paired=True (the default) needs equal lengths: baseline_times has {len(base)}, "
            f"candidate_times has {len(cand)}; pass paired=False for two independent recordings"
        )
    required = Gate(min_speedup_threshold_percent).required_speedup  # the edge of this function
    level = check_open_interval("confidence", confidence, 0.0, 1.0)
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
    baseline_times: TimingStats,
    candidate_times: TimingStats,
    gate: Gate,
    *,
    confidence: float,
    n_looks: int,
    futility_margin_percent: float = 0.0,
    futility_error: float | None = None,
    guard_serial_correlation: bool = False,
    guard_shift: bool = False,
    look: int | None = None,
    min_accept_pairs: int = 0,
    throughput_bound: bool = False,
    candidate_after_eager: Sequence[bool] | None = None,
) -> SpeedupDecision:
    """Paired decision at one look of a group-sequential, interleaved measurement."""
    base = timing_stats("baseline_times", baseline_times)
    cand = timing_stats("candidate_times", candidate_times)
    paired_lengths(base, cand)
    required = check_type("gate", gate, Gate).required_speedup
    level = check_open_interval("confidence", confidence, 0.0, 1.0)
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
        sequential=True,
        min_accept_pairs=check_int("min_accept_pairs", min_accept_pairs, minimum=0),
        throughput_bound=check_type("throughput_bound", throughput_bound, bool),
        after_eager=_after_eager(candidate_after_eager, len(base)),
    )


def look_alpha(total_alpha: float, look: int, n_looks: int) -> float:
    """The false-accept error look ``look`` (1..``n_looks``) may spend: ``alpha (t_k^2 - t_{k-1}^2)``."""
    k = check_int("look", look, minimum=1)
    n = check_int("n_looks", n_looks, minimum=1)
    if k > n:
        raise InvalidValueError(f"look must be <= n_looks ({n}), got {look!r}")
    total = check_open_interval("total_alpha", total_alpha, 0.0, 1.0)
    return float(total * ((k / n) ** SPENDING_POWER - ((k - 1) / n) ** SPENDING_POWER))
