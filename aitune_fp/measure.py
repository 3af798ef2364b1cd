"""The measuring loop: time eager and a candidate, ask the pure decision at each look, stop.

``statistical`` (default): warm up both arms, then time interleaved pairs up to each planned look
(``config.looks``) and call :func:`aitune_fp.core.stats.decide_at_look` there; stop on a settled
verdict, after the last look, or when ``config.max_seconds`` is spent (the verdict is then the
one of the last completed look, ``inconclusive`` if it was open; the budget counts from the start
of warm-up). The budget is hard: no call starts after it; a candidate that cannot complete the
first look within it ends ``inconclusive`` with no interval, and a look that the time spent so far
predicts will not fit is not started. While timing, the candidate's outputs of the first and last
pair of every look, of a seeded random ~``spot_rate`` of the pairs between, and of the first pair
on each batch go to ``spot_check`` (untimed; :func:`aitune_fp.profiling.spot_calls`).

Every rule's ``compare`` takes ``batches`` (several distinct batches, timed in turn: pair ``i``
runs both arms on ``batches[i % len(batches)]``) with ``references`` (eager's output on each, for
the spot checks: ``spot_check(output, reference)``), ``spot_rate`` and ``spot_seed``; without
``batches`` the one ``batch`` is timed and ``spot_check(output)`` is called, as before.

``point``: AITune's rule, reproduced: the baseline measured once up front (``point_warmup_calls``
untimed + ``point_steps`` timed calls), the candidate the same way later, throughputs from the
mean latency, ``passed = speedup >= 1 + pct/100``.

Throughputs are always samples/s from the mean latency (AITune's figure); the statistical verdict
is based on the Hodges-Lehmann interval of the paired log ratios (the typical call), which the
``decision`` carries.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from aitune_fp import profiling
from aitune_fp.core._checks import check_int, check_threshold
from aitune_fp.core.config import DecisionMode, ProfilingConfig
from aitune_fp.core.messages import fmt_apart
from aitune_fp.core.report import make_result
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.core.speedup import (
    DEFAULT_THRESHOLD_PERCENT,
    compute_speedup,
    meets_threshold,
    required_speedup,
)
from aitune_fp.core.spot import DEFAULT_SPOT_RATE
from aitune_fp.core.stats import (
    SpeedupDecision,
    decide_at_look,
    is_settled,
    throughput_from_latencies,
)
from aitune_fp.errors import InvalidValueError
from aitune_fp.inputs import Sample, as_sample
from aitune_fp.profiling import (
    CpuEnvironment,
    InterleavedRun,
    PairedTimings,
    ProfilingError,
    ReferenceSpotCheck,
    SpotCheck,
    Timer,
    as_batches,
    has_device_clock,
    is_host_bound,
    is_oversubscribed,
    time_calls,
    timer_for,
)

__all__ = [
    "DecisionRule",
    "Measurement",
    "measure_baseline_point",
    "measure_speedup",
    "measure_throughput_steady",
    "rule_for",
]


@attrs.frozen(kw_only=True)
class Measurement:
    """One candidate measured against eager: its result record plus how the loop ran.

    ``result`` is the one record of the verdict (built by :func:`aitune_fp.core.report.make_result`);
    ``decision`` is the statistical decision it was built from (None in point mode); ``wall_s`` is
    the loop's wall time, warm-up included; ``threads`` the intra-op threads both arms ran with.
    """

    result: PerformanceValidationResult
    decision: SpeedupDecision | None
    wall_s: float
    threads: int | None = None


def measure_baseline_point(
    baseline: Callable[..., Any],
    batch: Sample | tuple[Any, Any],
    batch_size: int,
    config: ProfilingConfig,
    *,
    timer: Timer | None = None,
    arm: str = "baseline",
    spot_check: SpotCheck | ReferenceSpotCheck | None = None,
    batches: Sequence[Sample | tuple[Any, Any]] | None = None,
    references: Sequence[Any] | None = None,
    spot_rate: float = DEFAULT_SPOT_RATE,
    spot_seed: int = 0,
) -> tuple[float, tuple[float, ...]]:
    """AITune's point-mode arm: ``point_warmup_calls`` untimed, ``point_steps`` timed calls.

    Returns (samples/s from mean latency, per-call latencies in seconds). ``spot_check`` sees
    the outputs of the first and last timed calls and a seeded ~``spot_rate`` of the others;
    ``batches``/``references`` as in :func:`aitune_fp.profiling.time_calls`.
    """
    size = check_int("batch_size", batch_size, minimum=1)
    latencies = time_calls(
        baseline,
        batch,
        config.point_steps,
        timer=timer,
        warmup=config.point_warmup_calls,
        threads=config.threads,
        arm=arm,
        spot_check=spot_check,
        batches=batches,
        references=references,
        spot_rate=spot_rate,
        spot_seed=spot_seed,
    )
    return throughput_from_latencies(latencies, size), latencies


def measure_throughput_steady(
    fn: Callable[..., Any],
    batch: Sample | tuple[Any, Any],
    batch_size: int,
    config: ProfilingConfig,
    *,
    timer: Timer | None = None,
    batches: Sequence[Sample | tuple[Any, Any]] | None = None,
) -> tuple[float, tuple[float, ...]]:
    """One arm's throughput after a warm-up until steady, then ``point_steps`` timed calls.

    The statistical mode's up-front eager check (and a lone candidate's figure): unlike the point
    rule's fixed 10 warm-up calls, it waits until the last ``warmup_window`` calls agree within
    ``warmup_tolerance`` (at most ``warmup_max_calls``), so a cold first measurement in a fresh
    process is not reported as eager's throughput. With ``batches`` the calls take them in turn.
    Returns (samples/s, latencies in seconds).
    """
    size = check_int("batch_size", batch_size, minimum=1)
    window = config.warmup_window
    turn = [0]  # calls made so far: the next call continues the rotation over ``batches``

    def timed(n: int, warmup: int = 0) -> tuple[float, ...]:
        rotated = None
        if batches is not None:
            k = turn[0] % max(len(batches), 1)
            rotated = [*batches[k:], *batches[:k]][:n]  # only those these n calls use
        turn[0] += n
        return time_calls(
            fn, batch, n, timer=timer, warmup=warmup, threads=config.threads, batches=rotated
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


def _fmt(x: float) -> str:
    return f"{x:.3f}x"


def _reason(
    decision: SpeedupDecision, n_pairs: int, *, budget_s: float | None, last_look: bool
) -> str:
    """One sentence saying why the statistical verdict is what it is, and what it rules out."""
    req = _fmt(decision.required_speedup)
    interval = f"[{_fmt(decision.ci_low)}, {_fmt(decision.ci_high)}]"
    if decision.verdict == "faster":
        low, need = fmt_apart(decision.ci_low, decision.required_speedup)
        text = f"lower bound {low}x clears required {need}x at {n_pairs} pairs"
    elif decision.verdict == "not_faster" and decision.ci_high < decision.required_speedup:
        high, need = fmt_apart(decision.ci_high, decision.required_speedup)
        text = f"upper bound {high}x is below required {need}x at {n_pairs} pairs"
    elif decision.verdict == "not_faster":
        limit = decision.required_speedup + decision.futility_margin
        high, edge = fmt_apart(decision.upper_for_futility, limit)
        text = (
            f"estimate {_fmt(decision.speedup)} is below required {req} and the upper bound "
            f"{high}x is below {edge}x (required + {decision.futility_margin * 100:g} pt futility "
            f"margin) at {n_pairs} pairs: not faster by a margin that matters"
        )
    elif "throughput_disagrees" in decision.flags:  # the interval clears it; throughput not
        low, need = fmt_apart(decision.ci_low, decision.required_speedup)
        where = f"budget of {budget_s:g} s spent" if budget_s is not None else "held back"
        text = (
            f"lower bound {low}x clears required {need}x but the mean-latency throughput ratio "
            f"of the same pairs does not ({where} at {n_pairs} pairs): not called faster; "
            f"{decision.ruled_out}"
        )
    elif budget_s is not None:
        text = (
            f"budget of {budget_s:g} s spent at {n_pairs} pairs, "
            f"interval {interval} straddles required {req}; {decision.ruled_out}"
        )
    else:
        where = "after the last look" if last_look else "when sampling stopped"
        text = (
            f"interval {interval} still straddles required {req} {where} ({n_pairs} pairs); "
            f"{decision.ruled_out}"
        )
    notes = []
    if decision.shift_index is not None:
        notes.append(
            f"the ratio shifted at pair {decision.shift_index}: the estimate and throughputs are "
            "from the pairs after it, and the verdict needed them and the whole run to agree"
        )
    if "serial_correlation" in decision.flags and decision.autocorrelation is not None:
        notes.append(
            f"interval widened for serial correlation (lag-1 {decision.autocorrelation:.2f})"
        )
    return text + (f" ({'; '.join(notes)})" if notes else "")


#: Called at each look of the statistical mode with the pairs timed so far and the decision.
OnLook = Callable[[int, SpeedupDecision], None]


@attrs.frozen(kw_only=True)
class _Inputs:
    """What the candidate is timed and spot-checked on (the keyword arguments every rule takes)."""

    spot_check: SpotCheck | ReferenceSpotCheck | None = None
    batches: Sequence[Sample | tuple[Any, Any]] | None = None
    references: Sequence[Any] | None = None
    spot_rate: float = DEFAULT_SPOT_RATE
    spot_seed: int = 0


def _statistical(
    baseline: Callable[..., Any],
    candidate: Callable[..., Any],
    batch: Sample,
    size: int,
    config: ProfilingConfig,
    pct: float,
    clock: Timer,
    description: str,
    inputs: _Inputs,
    on_look: OnLook | None = None,
) -> Measurement:
    if config.clock == "device" and not has_device_clock(clock):
        raise InvalidValueError(
            f"clock='device' needs a timer with device time (CUDA events); "
            f"{type(clock).__name__} has none here: use clock='host'"
        )
    env = profiling.cpu_environment(config.threads)

    def decide(
        base_s: Sequence[float], cand_s: Sequence[float], look_number: int
    ) -> SpeedupDecision:
        return decide_at_look(
            base_s,
            cand_s,
            pct,
            confidence=config.confidence,
            n_looks=len(config.looks),
            futility_margin_percent=config.futility_margin_percent,
            futility_error=config.futility_error,
            guard_serial_correlation=config.guard_serial_correlation,
            guard_shift=config.guard_shift,
            look=look_number,  # decision engine v3: error spent late, always widened,
            always_widen=config.guard_serial_correlation,  # faster only when the
            throughput_consistent=True,  # throughput ratio agrees
        )

    start = clock.now_ns()
    deadline = start + int(config.max_seconds * 1e9)
    decision: SpeedupDecision | None = None
    decided_look = 0
    decided_at = 0
    budget_spent = False
    sampling_ns = 0
    with InterleavedRun(
        baseline,
        candidate,
        batch,
        timer=clock,
        threads=config.threads,
        spot_check=inputs.spot_check,
        batches=inputs.batches,
        references=inputs.references,
        spot_rate=inputs.spot_rate,
        spot_seed=inputs.spot_seed,
    ) as run:
        warmup = run.warm_up(
            window=config.warmup_window,
            tolerance=config.warmup_tolerance,
            max_calls=config.warmup_max_calls,
            deadline_ns=deadline,
        )
        for look_number, look in enumerate(config.looks, start=1):
            need = look - run.n_pairs
            now = clock.now_ns()
            per_pair = sampling_ns / max(run.n_pairs, 1)
            if decision is not None and now + per_pair * need > deadline:
                budget_spent = True  # the look would not fit: keep the last verdict
                break
            got = run.extend(need, deadline_ns=deadline)
            sampling_ns += clock.now_ns() - now
            if got < need:
                budget_spent = True
                break
            timings = _on_clock(run.timings(), config.clock)
            decision = decide(timings.baseline_s, timings.candidate_s, look_number)
            decided_look = look_number
            decided_at = run.n_pairs
            if on_look is not None:
                on_look(run.n_pairs, decision)
            if decision.verdict != "inconclusive":
                break
        timings = run.timings()
    wall_s = (clock.now_ns() - start) / 1e9
    load_end = profiling.load_average()
    chosen = _on_clock(timings, config.clock)
    if decision is None:
        measured = _undecided(
            chosen, warmup.baseline_s, warmup.candidate_s, size, config, pct, description, wall_s
        )
        return _in_context(measured, env, load_end, clock=config.clock)
    measured = _statistical_result(
        decision, decided_at, chosen, size, config, budget_spent, wall_s, description
    )
    fields, flags, note = _two_clocks(
        timings,
        decision,
        decided_at,
        config.clock,
        lambda base_s, cand_s: decide(base_s, cand_s, decided_look),
    )
    return _in_context(
        measured, env, load_end, clock=config.clock, flags=flags, note=note, fields=fields
    )


def _on_clock(timings: PairedTimings, clock: str) -> PairedTimings:
    """``timings`` with the latencies of ``clock``: host wall times, or the device times."""
    if clock != "device" or timings.baseline_device_s is None:
        return timings
    assert timings.candidate_device_s is not None
    return attrs.evolve(
        timings, baseline_s=timings.baseline_device_s, candidate_s=timings.candidate_device_s
    )


def _two_clocks(
    timings: PairedTimings,
    decision: SpeedupDecision,
    n_pairs: int,
    clock: str,
    decide: Callable[[Sequence[float], Sequence[float]], SpeedupDecision],
) -> tuple[dict[str, Any], list[str], str | None]:
    """With device time: both clocks' figures, ``host_bound``, and the note for the reason.

    Medians over the pairs the decision used; the other clock's estimate is its own decision
    on the same pairs at the same look. Nothing without device time (CPU).
    """
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
    note = f"{clock} clock decided; {other_clock} clock estimate {_fmt(other)}"
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


def _in_context(
    measured: Measurement,
    env: CpuEnvironment,
    load_end: float | None,
    *,
    clock: str | None = None,
    flags: Sequence[str] = (),
    note: str | None = None,
    fields: dict[str, Any] | None = None,
) -> Measurement:
    """``measured`` with the CPU environment, the clock, extra flags and ``oversubscribed``.

    ``oversubscribed``: :func:`aitune_fp.profiling.is_oversubscribed` over the load average
    at the comparison's start (``env``) and end (``load_end``).
    """
    result = measured.result
    threads = measured.threads if measured.threads is not None else env.threads
    extra = list(flags)
    if is_oversubscribed((env.load_avg_1m, load_end), cpus=env.cpus, threads=threads):
        extra.append("oversubscribed")
    reason = result.reason
    if note is not None:
        reason = f"{reason} ({note})" if reason else note
    result = attrs.evolve(
        result,
        flags=(*result.flags, *extra),
        reason=reason,
        threads=threads,
        interop_threads=env.interop_threads,
        omp_num_threads=env.omp_num_threads,
        cpus=env.cpus,
        load_avg_start=env.load_avg_1m,
        load_avg_end=load_end,
        clock=clock,
        **(fields or {}),
    )
    return attrs.evolve(measured, result=result)


def _undecided(
    timings: PairedTimings,
    warmup_baseline_s: tuple[float, ...],
    warmup_candidate_s: tuple[float, ...],
    size: int,
    config: ProfilingConfig,
    pct: float,
    description: str,
    wall_s: float,
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
        required_speedup=required_speedup(pct),
        decision=None,
        reason=(
            f"budget of {config.max_seconds:g} s spent before the first look "
            f"({len(timings.baseline_s)} of {config.looks[0]} pairs timed): too few to decide"
        ),
        flags=(*timings.flags, "budget_spent"),
    )
    return Measurement(result=result, decision=None, wall_s=wall_s, threads=timings.threads)


def _statistical_result(
    decision: SpeedupDecision,
    n_pairs: int,
    timings: PairedTimings,
    size: int,
    config: ProfilingConfig,
    budget_spent: bool,
    wall_s: float,
    description: str,
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
    if "throughput_disagrees" in decision.flags:
        flags.append("throughput_disagrees")
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
        reason=_reason(
            decision,
            n_pairs,
            budget_s=config.max_seconds if budget_spent else None,
            last_look=n_pairs >= config.max_pairs,
        ),
        flags=flags,
    )
    result = attrs.evolve(result, **_futility_fields(decision, config))
    return Measurement(result=result, decision=decision, wall_s=wall_s, threads=timings.threads)


def _futility_fields(decision: SpeedupDecision, config: ProfilingConfig) -> dict[str, Any]:
    """The futility bound the rule compared and its one-sided level at one look.

    ``futility_error / len(looks)`` per look; when the bound is ``ci_high`` itself (no looser
    futility level), the interval's own one-sided level.
    """
    high = decision.upper_for_futility
    if decision.futility_high is None:
        level = 1.0 - (1.0 - decision.confidence) / 2.0
    else:
        level = 1.0 - config.futility_error / len(config.looks)
    return {"futility_high": high if math.isfinite(high) else None, "futility_level": level}


def _compare_statistical(
    eager: Callable[..., Any],
    candidate: Callable[..., Any],
    batch: Sample,
    size: int,
    config: ProfilingConfig,
    pct: float,
    timer: Timer,
    *,
    eager_latencies: Sequence[float] | None,
    description: str,
    spot_check: SpotCheck | ReferenceSpotCheck | None = None,
    on_look: OnLook | None = None,
    batches: Sequence[Sample | tuple[Any, Any]] | None = None,
    references: Sequence[Any] | None = None,
    spot_rate: float = DEFAULT_SPOT_RATE,
    spot_seed: int = 0,
) -> Measurement:
    """Eager timed again, interleaved with the candidate (``eager_latencies`` must be None).

    Look ``k`` (from 0) draws its spot-checked pairs with seed ``spot_seed + k``.
    """
    if eager_latencies is not None:
        raise InvalidValueError(
            "baseline_latencies is for decision='point' only; the statistical mode times "
            "the baseline interleaved with the candidate"
        )
    inputs = _Inputs(
        spot_check=spot_check,
        batches=batches,
        references=references,
        spot_rate=spot_rate,
        spot_seed=spot_seed,
    )
    return _statistical(
        eager, candidate, batch, size, config, pct, timer, description, inputs, on_look
    )


def _compare_point(
    eager: Callable[..., Any],
    candidate: Callable[..., Any],
    batch: Sample,
    size: int,
    config: ProfilingConfig,
    pct: float,
    timer: Timer,
    *,
    eager_latencies: Sequence[float] | None,
    description: str,
    spot_check: SpotCheck | ReferenceSpotCheck | None = None,
    on_look: OnLook | None = None,
    batches: Sequence[Sample | tuple[Any, Any]] | None = None,
    references: Sequence[Any] | None = None,
    spot_rate: float = DEFAULT_SPOT_RATE,
    spot_seed: int = 0,
) -> Measurement:
    """AITune's rule: ``eager_latencies`` (measured now when None), the candidate later.

    It has no looks: ``on_look`` is never called; the candidate's timed calls are one look
    (spot checks seeded ``spot_seed``).
    """
    env = profiling.cpu_environment(config.threads)
    start = timer.now_ns()
    if eager_latencies is None:
        _, base = measure_baseline_point(eager, batch, size, config, timer=timer, batches=batches)
    else:
        base = tuple(eager_latencies)
    baseline_throughput = throughput_from_latencies(base, size)
    _, cand = measure_baseline_point(
        candidate,
        batch,
        size,
        config,
        timer=timer,
        arm="candidate",
        spot_check=spot_check,
        batches=batches,
        references=references,
        spot_rate=spot_rate,
        spot_seed=spot_seed,
    )
    throughput = throughput_from_latencies(cand, size)
    speedup = compute_speedup(throughput, baseline_throughput)
    passed = meets_threshold(speedup, pct)
    required = required_speedup(pct)
    shown, need = fmt_apart(speedup, required)
    import torch

    threads = config.threads if config.threads is not None else torch.get_num_threads()
    result = make_result(
        description,
        baseline_throughput=baseline_throughput,
        throughput=throughput,
        speedup=speedup,
        batch_size=size,
        n_baseline=len(base),
        n_candidate=len(cand),
        required_speedup=required,
        decision=None,
        passed_point=passed,
        reason=(
            f"point speedup {shown}x {'>=' if passed else '<'} required {need}x "
            f"({len(cand)} timed calls, baseline measured once before the candidate)"
        ),
    )
    measured = Measurement(
        result=result, decision=None, wall_s=(timer.now_ns() - start) / 1e9, threads=threads
    )
    return _in_context(measured, env, profiling.load_average())


@attrs.frozen
class DecisionRule:
    """How one decision mode measures: eager's up-front figure, then each candidate against eager.

    Chosen once per config by :func:`rule_for`; callers never compare mode strings.
    ``measure_eager(eager, batch, size, config, timer=..., batches=None)`` gives eager's up-front
    throughput and latencies; ``compare(eager, candidate, batch, size, config, pct, timer, *,
    eager_latencies, description, spot_check=None, on_look=None, batches=None,
    references=None, spot_rate=DEFAULT_SPOT_RATE, spot_seed=0)`` measures and decides (see
    :func:`measure_speedup`). ``keeps_eager_latencies``: the comparison reuses the up-front
    latencies (AITune's baseline measured once).
    """

    name: DecisionMode
    measure_eager: Callable[..., tuple[float, tuple[float, ...]]]
    compare: Callable[..., Measurement]
    keeps_eager_latencies: bool


_RULES: dict[str, DecisionRule] = {
    "statistical": DecisionRule(
        "statistical", measure_throughput_steady, _compare_statistical, False
    ),
    "point": DecisionRule("point", measure_baseline_point, _compare_point, True),
}


def rule_for(config: ProfilingConfig) -> DecisionRule:
    """The decision rule ``config.decision`` names (the one place a mode name is looked up)."""
    return _RULES[config.decision]


def measure_speedup(
    baseline: Callable[..., Any],
    candidate: Callable[..., Any],
    batch: Sample | tuple[Any, Any],
    batch_size: int,
    config: ProfilingConfig,
    min_speedup_threshold_percent: float = DEFAULT_THRESHOLD_PERCENT,
    *,
    timer: Timer | None = None,
    baseline_latencies: Sequence[float] | None = None,
    description: str = "candidate",
    spot_check: SpotCheck | ReferenceSpotCheck | None = None,
    on_look: OnLook | None = None,
    batches: Sequence[Sample | tuple[Any, Any]] | None = None,
    references: Sequence[Any] | None = None,
    spot_rate: float = DEFAULT_SPOT_RATE,
    spot_seed: int = 0,
) -> Measurement:
    """Measure ``candidate`` against ``baseline`` on ``batch`` and decide "faster" per ``config``.

    ``baseline_latencies`` (point mode only): the baseline's latencies measured once up front,
    as AITune does; measured now when None. Call failures raise ``ProfilingError``.
    ``batches`` (replacing ``batch``): distinct batches timed in turn, pair ``i`` (both arms) on
    ``batches[i % len(batches)]``, so a candidate cannot pass by caching one batch's output.
    ``spot_check`` sees candidate outputs while timing (untimed): in every look the first and
    last timed call, a random ``spot_rate`` of the others (look ``k`` seeded ``spot_seed + k``)
    and the first call on each batch. It is called ``spot_check(output)``, or, when
    ``references`` (eager's output on each batch, required for a check over several batches)
    is given, ``spot_check(output, references[b])``; a mismatch raises ``SpotCheckError``
    naming the timed call. ``on_look(n_pairs, decision)`` is called at every look of the
    statistical mode (progress displays use it).
    """
    size = check_int("batch_size", batch_size, minimum=1)
    pct = check_threshold("min_speedup_threshold_percent", min_speedup_threshold_percent)
    sample = as_sample(batch)
    clock = timer if timer is not None else timer_for(as_batches(sample, batches)[0])
    return rule_for(config).compare(
        baseline,
        candidate,
        sample,
        size,
        config,
        pct,
        clock,
        eager_latencies=baseline_latencies,
        description=description,
        spot_check=spot_check,
        on_look=on_look,
        batches=batches,
        references=references,
        spot_rate=spot_rate,
        spot_seed=spot_seed,
    )
