"""Host and device clocks: the latencies the decision uses, and the other clock's figures."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from aitune_fp.core.verdict import SpeedupDecision
from aitune_fp.measure.reasons import fmt_figure
from aitune_fp.profiling.interleaved import PairedTimings
from aitune_fp.profiling.timers import is_host_bound


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
