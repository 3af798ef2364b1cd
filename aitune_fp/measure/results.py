"""A statistical measurement's result record: decided at a look, or undecided."""

from __future__ import annotations

import math
from typing import Any

from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.gate import Gate
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.core.report import make_result
from aitune_fp.core.speedup import compute_speedup
from aitune_fp.core.timings import throughput_from_latencies
from aitune_fp.core.verdict import SpeedupDecision
from aitune_fp.measure.measurement import Measurement, RunContext
from aitune_fp.measure.reasons import reason_text
from aitune_fp.profiling import PairedTimings, ProfilingError


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
    baseline_throughput = throughput_from_latencies(base, size)
    throughput = throughput_from_latencies(cand, size)
    result = make_result(
        description,
        baseline_throughput=baseline_throughput,
        throughput=throughput,
        speedup=compute_speedup(throughput, baseline_throughput),
        batch_size=size,
        n_baseline=len(timings.baseline_s),
        n_candidate=len(timings.candidate_s),
        required_speedup=gate.required_speedup,
        decision=None,
        reason=(
            f"budget of {config.max_seconds:g} s spent before the first look "
            f"({len(timings.baseline_s)} of {config.looks[0]} pairs timed): too few to decide; "
            "--max-seconds (ProfilingConfig.max_seconds) sets it"
        ),
        flags=(*timings.flags, "budget_spent", *context.flags),
        rule="statistical",
        note=context.note,
        mismatch=mismatch,
        context=context.fields,
    )
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
    baseline_throughput = throughput_from_latencies(base, size)
    throughput = throughput_from_latencies(cand, size)
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
    result = make_result(
        description,
        baseline_throughput=baseline_throughput,
        throughput=throughput,
        speedup=compute_speedup(throughput, baseline_throughput),
        batch_size=size,
        n_baseline=decision.n_baseline,
        n_candidate=decision.n_candidate,
        required_speedup=decision.required_speedup,
        decision=decision,
        reason=reason_text(
            decision,
            n_pairs,
            budget_s=config.max_seconds if budget_spent else None,
            last_look=n_pairs >= config.max_pairs,
        ),
        flags=(*flags, *context.flags),
        rule="statistical",
        note=context.note,
        mismatch=mismatch,
        context={**_futility_fields(decision, config), **context.fields},
    )
    return Measurement(result=result, decision=decision, wall_s=wall_s, threads=timings.threads)


def _futility_fields(decision: SpeedupDecision, config: ProfilingConfig) -> dict[str, Any]:
    """The futility bound the rule compared, and its one-sided level at one look."""
    high = decision.upper_for_futility
    if decision.futility_high is None:
        level = 1.0 - (1.0 - decision.confidence) / 2.0
    else:
        level = 1.0 - config.futility_error / len(config.looks)
    return {"futility_high": high if math.isfinite(high) else None, "futility_level": level}
