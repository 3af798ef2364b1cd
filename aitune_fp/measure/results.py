"""A measured candidate's result, assembled once from its parts; the statistical rule's two outcomes."""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs

from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.gate import Gate
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.core.results import Accuracy, Decision, PerformanceValidationResult
from aitune_fp.core.speedup import compute_speedup
from aitune_fp.core.timings import throughput_from_latencies
from aitune_fp.core.verdict import SpeedupDecision
from aitune_fp.measure.measurement import Measurement, RunContext
from aitune_fp.measure.reasons import reason_text
from aitune_fp.profiling.calls import ProfilingError
from aitune_fp.profiling.interleaved import PairedTimings


def assemble(
    description: str,
    base_s: Sequence[float],
    cand_s: Sequence[float],
    size: int,
    decided: Decision,
    context: RunContext,
    mismatch: Mismatch | None,
) -> PerformanceValidationResult:
    """The one result of a comparison from its parts; the context's flags and note join the decision's."""
    baseline_throughput = throughput_from_latencies(base_s, size)
    throughput = throughput_from_latencies(cand_s, size)
    note, reason = context.note, decided.reason
    if note is not None:
        reason = f"{reason} ({note})" if reason else note
    return PerformanceValidationResult(
        description,
        throughput,
        baseline_throughput,
        compute_speedup(throughput, baseline_throughput),
        decided.verdict == "faster",
        decided=attrs.evolve(decided, reason=reason, flags=(*decided.flags, *context.flags)),
        environment=context.environment,
        device=context.device,
        accuracy=Accuracy() if mismatch is None else mismatch.accuracy(),
        raw=context.raw,
    )


def undecided_result(
    timings: PairedTimings,
    warmup_baseline_s: tuple[float, ...],
    warmup_candidate_s: tuple[float, ...],
    size: int,
    config: ProfilingConfig,
    gate: Gate,
    description: str,
    wall_s: float,
    context: RunContext,
    mismatch: Mismatch | None,
) -> Measurement:
    """The budget ran out before the first look: inconclusive, figures from what was timed."""
    base, cand = timings.baseline_s, timings.candidate_s
    if not base:  # not one pair: the warm-up's timed calls are all there is
        base, cand = warmup_baseline_s, warmup_candidate_s
    if not base or not cand:
        raise ProfilingError(
            f"the budget of {config.max_seconds:g} s (max_seconds) was spent before one call "
            "of each arm could be timed",
            reason="budget_spent",
        )
    retimed = next((f[8:] for f in timings.flags if f.startswith("retimed_")), None)
    why = (
        f"; {retimed} pairs were timed again, another process having an arm's core"
        if retimed
        else ""
    )
    decided = Decision(
        rule="statistical",
        verdict="inconclusive",
        n_baseline=len(timings.baseline_s),
        n_candidate=len(timings.candidate_s),
        batch_size=size,
        required_speedup=gate.required_speedup,
        reason=(
            f"budget of {config.max_seconds:g} s spent before the first look "
            f"({len(timings.baseline_s)} of {config.looks[0]} pairs timed{why}): too few to "
            "decide; --max-seconds (ProfilingConfig.max_seconds) sets it"
        ),
        flags=(*timings.flags, "budget_spent"),
    )
    result = assemble(description, base, cand, size, decided, context, mismatch)
    return Measurement(result=result, decision=None, wall_s=wall_s, threads=timings.threads)


def statistical_result(
    decision: SpeedupDecision,
    n_pairs: int,
    timings: PairedTimings,
    size: int,
    config: ProfilingConfig,
    budget_spent: bool,
    wall_s: float,
    description: str,
    context: RunContext,
    mismatch: Mismatch | None,
) -> Measurement:
    """The result of a decided look: throughputs from the pairs the decision used."""
    first = decision.shift_index or 0
    base, cand = timings.baseline_s[first:n_pairs], timings.candidate_s[first:n_pairs]
    flags = list(timings.flags)
    if decision.shift_index is not None:
        flags.append(f"ratio_shift_at_pair_{decision.shift_index}")
    if "serial_correlation" in decision.flags:
        flags.append("serial_correlation")
    for flag in ("throughput_disagrees", "block_bound", "carryover"):
        if flag in decision.flags:
            flags.append(flag)
    if budget_spent:
        flags.append("budget_spent")
    high, level = _futility(decision, config)
    decided = Decision(
        rule="statistical",
        verdict=decision.verdict,
        estimate=decision.speedup,
        ci_low=decision.ci_low,
        ci_high=decision.ci_high if math.isfinite(decision.ci_high) else None,
        confidence=decision.confidence,
        guarantee=decision.overall,
        futility_high=high,
        futility_level=level,
        futility_margin_percent=decision.futility_margin * 100.0,
        method=decision.method,
        autocorrelation=decision.autocorrelation,
        n_baseline=decision.n_baseline,
        n_candidate=decision.n_candidate,
        batch_size=size,
        required_speedup=decision.required_speedup,
        reason=reason_text(
            decision,
            n_pairs,
            budget_s=config.max_seconds if budget_spent else None,
            last_look=n_pairs >= config.max_pairs,
        ),
        flags=flags,
    )
    result = assemble(description, base, cand, size, decided, context, mismatch)
    return Measurement(result=result, decision=decision, wall_s=wall_s, threads=timings.threads)


def _futility(decision: SpeedupDecision, config: ProfilingConfig) -> tuple[float | None, float]:
    """The futility bound the rule compared and its one-sided level at one look."""
    high = decision.upper_for_futility
    if decision.futility_high is None:
        level = 1.0 - (1.0 - decision.confidence) / 2.0
    else:
        level = 1.0 - config.futility_error / len(config.looks)
    return (high if math.isfinite(high) else None), level
