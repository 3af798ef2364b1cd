"""The statistical rule: eager and the candidate timed in pairs, decided at planned looks.

Warm up both arms, then time interleaved pairs up to each planned look (``config.looks``) and call
:func:`aitune_fp.core.sequential.decide_at_look` there; stop on a settled verdict, after the last
look, or when ``config.max_seconds`` is spent (the verdict is then the one of the last completed
look, ``inconclusive`` if it was open; the budget counts from the start of warm-up). The budget is
hard: no call starts after it; a candidate that cannot complete the first look within it ends
``inconclusive`` with no interval, and a look that the time spent so far predicts will not fit is
not started. Device telemetry (NVML) is read around each look's pairs. Also here: eager's
up-front figure after a warm-up until steady (:func:`measure_throughput_steady`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from aitune_fp.core._checks import check_int
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.core.results import Device
from aitune_fp.core.sequential import decide_at_look
from aitune_fp.core.timings import is_settled, throughput_from_latencies
from aitune_fp.core.verdict import SpeedupDecision
from aitune_fp.errors import InvalidValueError
from aitune_fp.inputs import Sample
from aitune_fp.measure import telemetry
from aitune_fp.measure.clocks import on_clock, two_clocks
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
    closeness_of,
    collecting,
    raw_latencies,
    run_context,
)
from aitune_fp.measure.results import statistical_result, undecided_result
from aitune_fp.profiling import cache as l2_cache
from aitune_fp.profiling import threads as host
from aitune_fp.profiling.calls import time_calls
from aitune_fp.profiling.interleaved import InterleavedRun
from aitune_fp.profiling.timers import Timer, has_device_clock

__all__ = ["MIN_ACCEPT_PAIRS", "measure_throughput_steady"]

#: No ``faster`` from fewer pairs (issue 36): strong serial correlation does not show in 10 or
#: 20 pairs, and a run that sits on one side there is accepted wrongly; futility still stops.
MIN_ACCEPT_PAIRS = 0


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
    """One arm's throughput after a warm-up until steady, then ``point_steps`` timed calls.

    The statistical mode's up-front eager check (and a lone candidate's figure): unlike the point
    rule's fixed 10 warm-up calls, it waits until the last ``warmup_window`` calls agree within
    ``warmup_tolerance`` (at most ``warmup_max_calls``), so a cold first measurement in a fresh
    process is not reported as eager's throughput. With ``batches`` the calls take them in turn;
    with ``fresh`` the ``k``-th timed call runs on ``fresh(k)``. Returns (samples/s, latencies in s).
    """
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


def _statistical(c: Comparison, on_look: OnLook | None = None) -> Measurement:
    baseline, candidate, batch, size = c.eager, c.candidate, c.batch, c.size
    config, gate, clock, description, inputs = c.config, c.gate, c.timer, c.description, c
    if config.clock == "device" and not has_device_clock(clock):
        raise InvalidValueError(
            f"clock='device' needs a timer with device time (CUDA events); "
            f"{type(clock).__name__} has none here: use clock='host'"
        )
    env = host.cpu_environment(config.threads)
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
            look=look_number,  # decision engine v3: error spent late, always widened,
            always_widen=config.guard_serial_correlation,  # faster only when the
            throughput_consistent=True,  # throughput ratio agrees; v3.1: and the medians of
            block_guard=config.guard_serial_correlation,  # blocks of sqrt(n) pairs clear it
            min_accept_pairs=MIN_ACCEPT_PAIRS,
            throughput_bound=config.throughput_gate == "bound",
            candidate_after_eager=after_eager,  # the carry-over from eager, measured
        )

    start = clock.now_ns()
    deadline = start + int(config.max_seconds * 1e9)
    decision: SpeedupDecision | None = None
    decided_look = 0
    decided_at = 0
    budget_spent = False
    sampling_ns = 0
    seen: list[Mismatch] = []  # how close each spot check came
    watch = MachineWatch(cpus=env.cpus, threads=env.threads, first_load=env.load_avg_1m)
    stretch: Stretch | None = None  # the steady pairs of the deciding look
    with (
        telemetry.watch(clock) as device,
        InterleavedRun(
            baseline,
            candidate,
            batch,
            timer=clock,
            threads=config.threads,
            spot_check=collecting(inputs.spot_check, seen),
            batches=inputs.batches,
            references=inputs.references,
            spot_rate=inputs.spot_rate,
            spot_seed=inputs.spot_seed,
            flush=flush,
            fresh=inputs.fresh,
        ) as run,
    ):
        warmup = run.warm_up(
            window=config.warmup_window,
            tolerance=config.warmup_tolerance,
            max_calls=config.warmup_max_calls,
            deadline_ns=deadline,
            reserve_pairs=config.looks[0],
        )
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
            warm = warmup.baseline_s if config.clock == "host" else ()  # host-timed only
            stretch = watch.stretch(timings.baseline_s, warm)
            steady = (
                from_pair(timings, stretch.start)
                if stretch.steady_enough(config.looks[0])
                else None
            )
            if steady is not None:  # nothing moved, or decide on the steady pairs after it
                decision = decide(
                    steady.baseline_s,
                    steady.candidate_s,
                    look_number,
                    steady.candidate_after_eager,
                )
                quiet = stretch.quiet_pairs  # the pairs (warm-up first) before eager moved
                if stretch.slowed and not borne_out(
                    decision.verdict,
                    gate.required_speedup,
                    [*warm, *timings.baseline_s][:quiet],
                    [*warmup.candidate_s[: len(warm)], *timings.candidate_s][:quiet],
                ):
                    decision = held(decision)
            else:  # no verdict from pairs taken across the change, unless each side gives it
                decision = held(
                    decide(
                        timings.baseline_s,
                        timings.candidate_s,
                        look_number,
                        timings.candidate_after_eager,
                    )
                )
                split = sides(stretch, timings)
                if split is not None:
                    earlier, later = (
                        decide(s.baseline_s, s.candidate_s, look_number, s.candidate_after_eager)
                        for s in split
                    )
                    if earlier.verdict == later.verdict != "inconclusive":
                        decision = later
                        stretch = stretch.borne_out_by(split[0].n_pairs)
            decided_look = look_number
            decided_at = run.n_pairs
            if on_look is not None:
                on_look(run.n_pairs, decision)
            if decision.verdict != "inconclusive":
                break
        timings = run.timings()
        gpu = device.verdict(decided_look if decision is not None else None)
    wall_s = (clock.now_ns() - start) / 1e9
    load_end = host.load_average()
    chosen = on_clock(timings, config.clock)
    closeness = closeness_of(c, seen)
    if decision is None:
        context = run_context(
            env,
            load_end,
            timings.threads,
            clock=config.clock,
            isolation=c.isolation,
            flags=gpu.flags,
            note=gpu.note(),
            device=Device(**gpu.result_fields()),
            raw=raw_latencies(chosen.baseline_s, chosen.candidate_s, 0),
        )
        return undecided_result(
            chosen,
            warmup.baseline_s,
            warmup.candidate_s,
            size,
            config,
            gate,
            description,
            wall_s,
            context,
            closeness,
        )
    start, machine_note = 0, None
    machine_flags: tuple[str, ...] = ()
    if stretch is not None and stretch.moved:
        machine_flags = stretch.flags()
        machine_note = stretch.note(decision.held_back != "machine")
        if decision.held_back != "machine":
            start = stretch.start
    fields, flags, note = two_clocks(
        from_pair(timings, start),
        decision,
        decided_at - start,
        config.clock,
        lambda base_s, cand_s: decide(base_s, cand_s, decided_look),
    )
    notes = "; ".join(n for n in (machine_note, note, gpu.note()) if n) or None
    context = run_context(
        env,
        load_end,
        timings.threads,
        clock=config.clock,
        isolation=c.isolation,
        flags=[*machine_flags, *flags, *gpu.flags],
        note=notes,
        device=Device(**fields, **gpu.result_fields()),
        raw=raw_latencies(
            chosen.baseline_s, chosen.candidate_s, start + (decision.shift_index or 0)
        ),
    )
    return statistical_result(
        decision,
        decided_at - start,
        from_pair(chosen, start),
        size,
        config,
        budget_spent,
        wall_s,
        description,
        context,
        closeness,
    )


def compare_statistical(c: Comparison, on_look: OnLook | None = None) -> Measurement:
    """Eager timed again, interleaved with the candidate (``eager_latencies`` must be None).

    Look ``k`` (from 0) draws its spot-checked pairs with seed ``spot_seed + k``.
    """
    if c.eager_latencies is not None:
        raise InvalidValueError(
            "baseline_latencies is for decision='point' only; the statistical mode times "
            "the baseline interleaved with the candidate"
        )
    return _statistical(c, on_look)
