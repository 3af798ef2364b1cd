"""The statistical rule's result: the reason sentence, both clocks' figures, decided or not."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.messages import fmt_apart, ruled_out
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.core.results import Decision
from aitune_fp.core.speedup import Gate
from aitune_fp.core.verdict import SpeedupDecision
from aitune_fp.measure.measurement import Measurement, RunContext, assemble
from aitune_fp.profiling.calls import ProfilingError
from aitune_fp.profiling.interleaved import PairedTimings
from aitune_fp.profiling.timers import is_host_bound


def fmt_figure(x: float) -> str:
    return f"{x:.3f}x"


def reason_text(
    decision: SpeedupDecision, n_pairs: int, *, budget_s: float | None, last_look: bool
) -> str:
    """One sentence saying why the statistical verdict is what it is, and what it rules out."""
    req = fmt_figure(decision.required_speedup)
    interval = f"[{fmt_figure(decision.ci_low)}, {fmt_figure(decision.ci_high)}]"
    if decision.verdict == "faster":
        low, need = fmt_apart(decision.ci_low, decision.required_speedup)
        what = "" if "throughput_bound" in decision.flags else " (typical call)"
        text = f"lower bound {low}x{what} clears required {need}x at {n_pairs} pairs"
    elif decision.verdict == "not_faster" and decision.ci_high < decision.required_speedup:
        high, need = fmt_apart(decision.ci_high, decision.required_speedup)
        text = f"upper bound {high}x is below required {need}x at {n_pairs} pairs"
    elif decision.verdict == "not_faster":
        limit = decision.required_speedup + decision.futility_margin
        high, edge = fmt_apart(decision.upper_for_futility, limit)
        text = (
            f"estimate {fmt_figure(decision.speedup)} is below required {req} and the upper bound "
            f"{high}x is below {edge}x (required + {decision.futility_margin * 100:g} pt futility "
            f"margin) at {n_pairs} pairs: not faster by a margin that matters"
        )
    elif decision.held_back == "carryover":  # the note says by how much
        low, need = fmt_apart(decision.ci_low, decision.required_speedup)
        text = (
            f"lower bound {low}x clears required {need}x but not on the pairs where the "
            f"candidate ran after itself ({n_pairs} pairs): not called faster; {ruled_out(decision)}"
        )
    elif decision.held_back == "machine":  # the note says what moved
        text = (
            f"no verdict from pairs taken across a change of the machine ({n_pairs} pairs); "
            f"{ruled_out(decision)}"
        )
    elif "throughput_disagrees" in decision.flags:  # the interval clears it; throughput not
        low, need = fmt_apart(decision.ci_low, decision.required_speedup)
        where = f"budget of {budget_s:g} s spent" if budget_s is not None else "held back"
        text = (
            f"lower bound {low}x clears required {need}x but the mean-latency throughput ratio "
            f"of the same pairs does not ({where} at {n_pairs} pairs): not called faster; "
            f"{ruled_out(decision)}"
        )
    elif budget_s is not None:
        text = (
            f"budget of {budget_s:g} s spent at {n_pairs} pairs, "
            f"interval {interval} straddles required {req}; {ruled_out(decision)}"
        )
    else:
        where = "after the last look" if last_look else "when sampling stopped"
        text = (
            f"interval {interval} still straddles required {req} {where} ({n_pairs} pairs); "
            f"{ruled_out(decision)}"
        )
    notes = []
    if decision.shift_index is not None:
        notes.append(
            f"the ratio shifted at pair {decision.shift_index}: the estimate and throughputs are "
            "from the pairs after it, and the verdict needed them and the whole run to agree"
        )
    if "carryover" in decision.flags and decision.carryover is not None:
        notes.append(
            f"carry-over: the candidate ran {(decision.carryover - 1.0) * 100:+.1f}% right after "
            "an eager call against after itself; a faster needs the pairs after itself to clear "
            "the gate alone"
        )
    if "serial_correlation" in decision.flags and decision.autocorrelation is not None:
        notes.append(
            f"interval widened for serial correlation (lag-1 {decision.autocorrelation:.2f})"
        )
    return text + (f" ({'; '.join(notes)})" if notes else "")


def on_clock(timings: PairedTimings, clock: str) -> PairedTimings:
    """``timings`` with the latencies of ``clock``: host wall times, or the device times."""
    if clock != "device" or timings.baseline_device_s is None:
        return timings
    assert timings.candidate_device_s is not None
    return attrs.evolve(
        timings, baseline_s=timings.baseline_device_s, candidate_s=timings.candidate_device_s
    )


def two_clocks(
    timings: PairedTimings,
    decision: SpeedupDecision,
    n_pairs: int,
    clock: str,
    decide: Callable[[Sequence[float], Sequence[float]], SpeedupDecision],
) -> tuple[dict[str, Any], list[str], str | None]:
    """With device time: both clocks' figures over the pairs used, ``host_bound``, a note."""
    if timings.baseline_device_s is None or timings.candidate_device_s is None:
        return {}, [], None
    used = slice(decision.shift_index or 0, n_pairs)
    other_clock = "host" if clock == "device" else "device"
    if other_clock == "device":
        other_times = (timings.baseline_device_s, timings.candidate_device_s)
    else:
        other_times = (timings.baseline_s, timings.candidate_s)
    other = decide(other_times[0][:n_pairs], other_times[1][:n_pairs]).speedup
    fields = {
        "host_estimate": decision.speedup if clock == "host" else other,
        "device_estimate": decision.speedup if clock == "device" else other,
        "baseline_host_latency_s": statistics.median(timings.baseline_s[used]),
        "candidate_host_latency_s": statistics.median(timings.candidate_s[used]),
        "baseline_device_latency_s": statistics.median(timings.baseline_device_s[used]),
        "candidate_device_latency_s": statistics.median(timings.candidate_device_s[used]),
    }
    note = f"{clock} clock decided; {other_clock} clock estimate {fmt_figure(other)}"
    arms = (
        ("eager", fields["baseline_host_latency_s"], fields["baseline_device_latency_s"]),
        ("the candidate", fields["candidate_host_latency_s"], fields["candidate_device_latency_s"]),
    )
    bound = [
        f"{arm}'s host time is {host / device:.1f}x its device time"
        for arm, host, device in arms
        if is_host_bound(host, device)
    ]
    if bound:
        note += f"; host-bound: {' and '.join(bound)}"
    return fields, (["host_bound"] if bound else []), note


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
    shift = () if decision.shift_index is None else (f"ratio_shift_at_pair_{first}",)
    kept = ("serial_correlation", "throughput_disagrees", "block_bound", "carryover")
    found = tuple(flag for flag in kept if flag in decision.flags)
    flags = (*timings.flags, *shift, *found, *(("budget_spent",) if budget_spent else ()))
    high = decision.upper_for_futility  # the futility bound compared, at its one-sided level
    if decision.futility_high is None:
        level = 1.0 - (1.0 - decision.confidence) / 2.0
    else:
        level = 1.0 - config.futility_error / len(config.looks)
    decided = Decision(
        rule="statistical",
        verdict=decision.verdict,
        estimate=decision.speedup,
        ci_low=decision.ci_low,
        ci_high=decision.ci_high if math.isfinite(decision.ci_high) else None,
        confidence=decision.confidence,
        guarantee=decision.overall,
        futility_high=high if math.isfinite(high) else None,
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
