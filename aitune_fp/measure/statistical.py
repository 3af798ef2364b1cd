"""The statistical rule: eager and the candidate timed in block pairs, decided at planned looks.

The budget is hard: no call starts after ``max_seconds``; the last completed look's verdict stands.
The result carries the reason sentence and both clocks' figures, decided or not.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from aitune_fp.core._checks import check_int
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.messages import counted, fmt_apart, ruled_out
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.core.results import Decision, Device
from aitune_fp.core.sequential import decide_at_look
from aitune_fp.core.timings import is_settled, throughput_from_latencies
from aitune_fp.core.verdict import SpeedupDecision
from aitune_fp.errors import InvalidValueError
from aitune_fp.inputs import Sample
from aitune_fp.measure import telemetry
from aitune_fp.measure.machine import (
    MachineWatch,
    Stretch,
    borne_out,
    from_pair,
    held,
    sides,
)
from aitune_fp.measure.measurement import (
    Comparison,
    Measurement,
    OnLook,
    RunContext,
    assemble,
    closeness_of,
    collecting,
    raw_latencies,
    run_context,
)
from aitune_fp.profiling import cache as l2_cache
from aitune_fp.profiling import threads as host
from aitune_fp.profiling.calls import ProfilingError, time_calls
from aitune_fp.profiling.interleaved import InterleavedRun, PairedTimings
from aitune_fp.profiling.timers import (
    Timer,
    has_device_clock,
    is_host_bound,
    machine_load,
    reads_waits,
)


def fmt_figure(x: float) -> str:
    return f"{x:.3f}x"


def reason_text(
    decision: SpeedupDecision, n_pairs: int, *, stopped: str | None, last_look: bool
) -> str:
    """One sentence saying why the statistical verdict is what it is, and what it rules out.

    ``stopped``: what ended the sampling before the last look (:func:`stopped_by`), if anything.
    """
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
        where = stopped or "held back"
        text = (
            f"lower bound {low}x clears required {need}x but the mean-latency throughput ratio "
            f"of the same pairs does not ({where} at {n_pairs} pairs): not called faster; "
            f"{ruled_out(decision)}"
        )
    elif stopped is not None:
        text = (
            f"{stopped} at {n_pairs} pairs, "
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
    others = on_clock(timings, other_clock)
    other = decide(others.baseline_s[:n_pairs], others.candidate_s[:n_pairs]).speedup
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


def stopped_by(timings: PairedTimings, config: ProfilingConfig) -> tuple[str, str]:
    """What ended the sampling early, as a flag to add ("" if timed) and a phrase for the reason.

    The budget, or a machine too busy to time a pair that no other process stalled.
    """
    retimed = next((int(f[8:]) for f in timings.flags if f.startswith("retimed_")), 0)
    if "machine_too_busy" in timings.flags:
        cpus = host.usable_cpus()
        team = (
            f" (a team of {counted(timings.threads, 'thread')} on {counted(cpus, 'core')} stalls "
            f"whenever anything else runs: --threads {max(cpus - 1, 1)} leaves a core to it)"
            if timings.threads >= cpus
            else ""
        )
        return "", (
            f"the machine was too busy to go on: {counted(retimed, 'pair')} timed again, another "
            f"process having an arm's core{team}"
        )
    again = (
        f", {counted(retimed, 'pair')} timed again (another process had an arm's core)"
        if retimed
        else ""
    )
    return "budget_spent", f"budget of {config.max_seconds:g} s spent{again}"


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
    flag, stopped = stopped_by(timings, config)
    flags = (*timings.flags, *shift, *found, *((flag,) if budget_spent and flag else ()))
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
        quantity=config.quantity,
        autocorrelation=decision.autocorrelation,
        n_baseline=decision.n_baseline,
        n_candidate=decision.n_candidate,
        batch_size=size,
        required_speedup=decision.required_speedup,
        reason=reason_text(
            decision,
            n_pairs,
            stopped=stopped if budget_spent else None,
            last_look=n_pairs >= config.max_pairs,
        ),
        flags=flags,
    )
    result = assemble(description, base, cand, size, decided, context, mismatch)
    return Measurement(result=result, decision=decision, wall_s=wall_s, threads=timings.threads)


def measure_throughput_steady(
    fn: Callable[..., Any],
    batch: Sample | tuple[Any, Any],
    batch_size: int,
    config: ProfilingConfig,
    *,
    timer: Timer | None = None,
    batches: Sequence[Sample | tuple[Any, Any]] | None = None,
    fresh: Callable[[int], Sample] | None = None,
) -> tuple[float, tuple[float, ...]]:
    """One arm's (samples/s, latencies in s): a warm-up until steady, then ``point_steps`` calls."""
    size = check_int("batch_size", batch_size, minimum=1)
    window = config.warmup_window
    turn = [0]  # calls made so far: the next call continues the rotation (or the draws)

    def timed(n: int, warmup: int = 0) -> tuple[float, ...]:
        rotated = None
        if batches is not None:
            k = turn[0] % max(len(batches), 1)
            rotated = [*batches[k:], *batches[:k]][:n]  # only those these n calls use
        first = turn[0]
        turn[0] += n
        drawn = None if fresh is None else (lambda i: fresh(first + i))
        return time_calls(
            fn,
            batch,
            n,
            timer=timer,
            warmup=warmup,
            threads=config.threads,
            batches=rotated,
            fresh=drawn,
        )

    warmup: list[float] = list(timed(window, warmup=1))
    # at most warmup_max_calls calls in all, the untimed first one included (as in warm_up)
    while (
        not is_settled(warmup, window, config.warmup_tolerance)
        and len(warmup) + 1 < config.warmup_max_calls
    ):
        warmup += timed(1)
    latencies = timed(config.point_steps)
    return throughput_from_latencies(latencies, size), latencies


def decide_look(
    timings: PairedTimings,
    warm: tuple[Sequence[float], Sequence[float]],
    stretch: Stretch,
    first_look: int,
    required: float,
    rule: Callable[[Sequence[float], Sequence[float], int, Sequence[bool]], SpeedupDecision],
    look: int,
) -> tuple[SpeedupDecision, Stretch]:
    """Look ``look``'s decision on the blocks the machine allows (``warm``: the warm-up's)."""

    def decide(t: PairedTimings) -> SpeedupDecision:
        return rule(t.baseline_s, t.candidate_s, look, t.candidate_after_eager)

    base, cand = [*warm[0], *timings.baseline_s], [*warm[1], *timings.candidate_s]
    # the ratio held across eager's moves: every pair
    stretch = stretch.steady_across(base, cand, len(warm[0]), wander=timings.block > 1)
    if stretch.steady_enough(first_look):  # nothing moved, or decide on the steady blocks after
        decision = decide(from_pair(timings, stretch.start))
        quiet = stretch.quiet_pairs  # the blocks (warm-up first) before eager moved
        if stretch.slowed and not borne_out(decision.verdict, required, base[:quiet], cand[:quiet]):
            decision = held(decision)
        return decision, stretch
    split = sides(stretch, timings)  # no verdict across the change, unless each side gives it
    if split is not None:
        earlier, later = (decide(side) for side in split)
        if earlier.verdict == later.verdict != "inconclusive":
            return later, attrs.evolve(stretch, before_pairs=split[0].n_pairs)  # borne out by both
    return held(decide(timings)), stretch


def compare_statistical(c: Comparison, on_look: OnLook | None = None) -> Measurement:
    """Eager timed again, interleaved with the candidate (``eager_latencies`` must be None)."""
    if c.eager_latencies is not None:
        raise InvalidValueError(
            "baseline_latencies is for decision='point' only; the statistical mode times "
            "the baseline interleaved with the candidate"
        )
    config, gate, clock = c.config, c.gate, c.timer
    if config.clock == "device" and not has_device_clock(clock):
        raise InvalidValueError(
            f"clock='device' needs a timer with device time (CUDA events); "
            f"{type(clock).__name__} has none here: use clock='host'"
        )
    load = functools.partial(machine_load, clock)  # the host's, on the real clock only
    env = host.cpu_environment(config.threads, load)
    flush = l2_cache.l2_flusher(clock) if config.cache == "cold" else None

    def decide(
        base_s: Sequence[float],
        cand_s: Sequence[float],
        look_number: int,
        after_eager: Sequence[bool] = (),
    ) -> SpeedupDecision:
        return decide_at_look(
            base_s,
            cand_s,
            gate,
            confidence=config.confidence,
            n_looks=len(config.looks),
            futility_margin_percent=config.futility_margin_percent,
            futility_error=config.futility_error,
            guard_serial_correlation=config.guard_serial_correlation,
            guard_shift=config.guard_shift,
            look=look_number,
            # the verdict about throughput needs its lower bound to clear the gate, not the point
            throughput_bound=config.throughput_gate == "bound" or config.quantity == "throughput",
            candidate_after_eager=after_eager,
        )

    start = clock.now_ns()
    deadline = start + int(config.max_seconds * 1e9)
    decision: SpeedupDecision | None = None
    decided_look = decided_at = sampling_ns = 0
    budget_spent = False
    seen: list[Mismatch] = []  # how close each spot check came
    watch = MachineWatch(
        cpus=env.cpus,
        threads=env.threads,
        first_load=env.load_avg_1m,
        load=load,
        by_load=not reads_waits(clock),  # else a block that waited is timed again instead
    )
    stretch: Stretch | None = None  # the steady pairs of the deciding look
    with (
        telemetry.watch(clock) as device,
        InterleavedRun(
            c.eager,
            c.candidate,
            c.batch,
            timer=clock,
            threads=config.threads,
            spot_check=collecting(c.spot_check, seen),
            batches=c.batches,
            references=c.references,
            spot_rate=c.spot_rate,
            spot_seed=c.spot_seed,
            flush=flush,
            fresh=c.fresh,
            # cold: every timed call starts from a flushed L2, so one call a sample
            block=None if config.quantity == "throughput" and flush is None else 1,
        ) as run,
    ):
        warmup = run.warm_up(
            window=config.warmup_window,
            tolerance=config.warmup_tolerance,
            max_calls=config.warmup_max_calls,
            deadline_ns=deadline,
            reserve_pairs=config.looks[0],
        )
        watch.wander = warmup.block > 1  # single calls: their own noise is the rule's
        on_host = config.clock == "host"  # the warm-up's blocks are host-timed only
        warm = (warmup.baseline_blocks_s, warmup.candidate_blocks_s) if on_host else ((), ())
        for look_number, look in enumerate(config.looks, start=1):
            if config.wait_quiet_s > 0 and watch.busy_now:
                watch.wait(config.wait_quiet_s, clock=clock, deadline_ns=deadline)
            before = watch.read()
            need = look - run.n_pairs
            now = clock.now_ns()
            per_pair = sampling_ns / max(run.n_pairs, 1)
            if decision is not None and now + per_pair * need > deadline:
                budget_spent = True  # the look would not fit: keep the last verdict
                break
            device.before()  # NVML readings around the look's pairs, untimed
            got = run.extend(need, deadline_ns=deadline)
            sampling_ns += clock.now_ns() - now
            device.after(look_number)
            watch.after_look(before, run.n_pairs)
            if got < need:
                budget_spent = True
                break
            timings = on_clock(run.timings(), config.clock)
            decision, stretch = decide_look(
                timings,
                warm,
                watch.stretch(timings.baseline_s, warm[0]),
                config.looks[0],
                gate.required_speedup,
                decide,
                look_number,
            )
            decided_look, decided_at = look_number, run.n_pairs
            if on_look is not None:
                on_look(run.n_pairs, decision)
            if decision.verdict != "inconclusive":
                break
        timings = run.timings()
        gpu = device.verdict(decided_look if decision is not None else None)
    wall_s = (clock.now_ns() - start) / 1e9
    load_end = load()
    chosen = on_clock(timings, config.clock)
    closeness = closeness_of(c, seen)

    def context(flags: Sequence[str], note: str | None, start: int, **fields: Any) -> RunContext:
        return run_context(
            env,
            load_end,
            timings.threads,
            clock=config.clock,
            isolation=c.isolation,
            flags=flags,
            note=note,
            device=Device(**fields, **gpu.result_fields()),
            raw=raw_latencies(
                chosen.baseline_s, chosen.candidate_s, start, timings.block, timings.candidate_block
            ),
        )

    if decision is None:  # the budget ran out before the first look: figures from what was timed
        base, cand = chosen.baseline_s, chosen.candidate_s
        if not base:  # not one pair: the warm-up's timed calls are all there is
            base, cand = warmup.baseline_s, warmup.candidate_s
        if not base or not cand:
            raise ProfilingError(
                f"the budget of {config.max_seconds:g} s (max_seconds) was spent before one call "
                "of each arm could be timed",
                reason="budget_spent",
            )
        flag, stopped = stopped_by(chosen, config)
        decided = Decision(
            rule="statistical",
            verdict="inconclusive",
            quantity=config.quantity,
            n_baseline=chosen.n_pairs,
            n_candidate=chosen.n_pairs,
            batch_size=c.size,
            required_speedup=gate.required_speedup,
            reason=(
                f"{stopped} before the first look ({chosen.n_pairs} of "
                f"{config.looks[0]} pairs kept): too few to decide; "
                + (
                    "--wait-quiet SECONDS waits for the load to fall"
                    if not flag
                    else "--max-seconds (ProfilingConfig.max_seconds) sets it"
                )
            ),
            flags=(*chosen.flags, *((flag,) if flag else ())),
        )
        unsettled = context(gpu.flags, gpu.note(), 0)
        result = assemble(c.description, base, cand, c.size, decided, unsettled, closeness)
        return Measurement(result=result, decision=None, wall_s=wall_s, threads=timings.threads)
    first, machine_note = 0, None
    machine_flags: tuple[str, ...] = ()
    if stretch is not None and stretch.moved:
        machine_flags = stretch.flags()
        machine_note = stretch.note(decision.held_back != "machine")
        if decision.held_back != "machine":
            first = stretch.start
    fields, flags, note = two_clocks(
        from_pair(timings, first),
        decision,
        decided_at - first,
        config.clock,
        lambda base_s, cand_s: decide(base_s, cand_s, decided_look),
    )
    notes = "; ".join(n for n in (machine_note, note, gpu.note()) if n) or None
    return statistical_result(
        decision,
        decided_at - first,
        from_pair(chosen, first),
        c.size,
        config,
        budget_spent,
        wall_s,
        c.description,
        context(
            [*machine_flags, *flags, *gpu.flags],
            notes,
            first + (decision.shift_index or 0),
            **fields,
        ),
        closeness,
    )
