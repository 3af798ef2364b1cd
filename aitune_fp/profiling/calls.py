"""Timed calls and blocks of one callable, each on a copy made before the clock; spot checks."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, TypeAlias, cast

from aitune_fp.core._checks import check_int
from aitune_fp.core.spot import DEFAULT_SPOT_RATE, spot_positions
from aitune_fp.errors import AitunefpError, InvalidTypeError, InvalidValueError
from aitune_fp.inputs import CopyRing, Sample, as_sample, copy_sample
from aitune_fp.profiling import stops
from aitune_fp.profiling.interference import CLAIM_SLACK_NS, InterferenceError
from aitune_fp.profiling.placement import before_sample
from aitune_fp.profiling.threads import intra_op_threads
from aitune_fp.profiling.timers import (
    Timer,
    gc_paused,
    on_real_clock,
    run_clocks,
    timer_for,
    waited_on_others_s,
)
from aitune_fp.profiling.watchdog import progress
from aitune_fp.profiling.workers import Worker, WorkerError

#: Smallest recorded wall time (1 ns): a clock that did not move still yields a positive time.
_MIN_NS = 1


class ProfilingError(AitunefpError, RuntimeError):
    """A timed call failed; ``reason`` is a short code ("out_of_memory", "call_failed")."""

    def __init__(self, message: str, *, reason: str, arm: str | None = None) -> None:
        """Record ``reason`` and the arm ("baseline", "candidate" or None) whose call failed."""
        super().__init__(message)
        self.reason = reason
        self.arm = arm


class SpotCheckError(AitunefpError, RuntimeError):
    """A candidate's output checked while it was timed did not match eager's.

    ``call``: the 1-based timed call; ``batch``: the 0-based batch (None with one batch).
    """

    def __init__(self, message: str, *, call: int, batch: int | None = None) -> None:
        """Keep the call (and batch) number; the message says what differed."""
        where = f"timed call {call}" + ("" if batch is None else f" (batch {batch})")
        super().__init__(f"{where}: {message}")
        self.call = call
        self.batch = batch


#: Checks one candidate output against eager's reference; raises when it differs. What it returns
#: (the decision rules keep a returned ``Mismatch``: how close the call came) is ignored here.
SpotCheck: TypeAlias = Callable[[Any], object]
#: Checks one candidate output against ``reference``, eager's output on the same batch.
ReferenceSpotCheck: TypeAlias = Callable[[Any, Any], object]


def spot_inspector(
    check: SpotCheck | None, call: int, batch: int | None = None
) -> Callable[[Any], None] | None:
    """``check`` for the candidate's timed call number ``call``, raising SpotCheckError."""
    if check is None:
        return None

    def inspect(output: Any) -> None:
        try:
            check(output)
        except Exception as exc:
            raise SpotCheckError(str(exc), call=call, batch=batch) from exc

    return inspect


def as_batches(
    batch: Sample | tuple[Any, Any], batches: Sequence[Any] | None
) -> tuple[Sample, ...]:
    """The batches timed in turn: ``batches`` when given (not empty), else the one ``batch``."""
    if batches is None:
        return (as_sample(batch),)
    if isinstance(batches, (str, bytes, Sample)) or not isinstance(batches, Sequence):
        raise InvalidTypeError(
            f"batches must be a sequence of samples, got {type(batches).__name__}"
        )
    if not batches:
        raise InvalidValueError("batches must hold at least one sample")
    return tuple(as_sample(b) for b in batches)


def checks_per_batch(
    spot_check: SpotCheck | ReferenceSpotCheck | None,
    references: Sequence[Any] | None,
    n_batches: int,
) -> tuple[SpotCheck | None, ...]:
    """One check per batch: ``spot_check(output, references[b])``, or ``spot_check(output)``."""
    if references is not None and len(references) != n_batches:
        raise InvalidValueError(
            f"references must hold eager's output on each batch: {n_batches} expected, "
            f"got {len(references)}"
        )
    if spot_check is None:
        return (None,) * n_batches
    if references is None:
        if n_batches > 1:
            raise InvalidValueError(
                "spot_check over several batches needs references (eager's output on each "
                "batch), to compare each output with the right one"
            )
        return (cast(SpotCheck, spot_check),)
    check = cast(ReferenceSpotCheck, spot_check)

    def bound(reference: Any) -> SpotCheck:
        return lambda output: check(output, reference)

    return tuple(bound(ref) for ref in references)


def spot_calls(
    n_calls: int, rate: float, seed: int, *, first_pair: int = 0, n_batches: int = 1
) -> frozenset[int]:
    """Which of a look's ``n_calls`` timed calls (from 0) are spot-checked.

    ``spot_positions``, plus the first call on each batch (rotating) none of those lands on.
    """
    picked = set(spot_positions(n_calls, rate, seed))
    n_batches = check_int("n_batches", n_batches, minimum=1)
    covered = {(first_pair + j) % n_batches for j in picked}
    for j in range(min(n_calls, n_batches)):
        if (first_pair + j) % n_batches not in covered:
            picked.add(j)
            covered.add((first_pair + j) % n_batches)
    return frozenset(picked)


def _worker_failure(exc: WorkerError, arm: str | None) -> ProfilingError:
    """A call that failed in its worker, as the :class:`ProfilingError` an in-process one gives."""
    memory = exc.error_type == "OutOfMemoryError"
    return ProfilingError(
        f"{arm or 'callable'} " + ("ran out of device memory" if memory else f"call failed: {exc}"),
        reason="out_of_memory" if memory else "call_failed",
        arm=arm,
    )


def call_arm(fn: Callable[..., Any], batch: Sample, arm: str | None, *, fresh: bool = True) -> Any:
    """Call ``fn`` on a fresh copy of ``batch`` (unless ``fresh=False``); raises ProfilingError."""
    import torch

    if isinstance(fn, Worker):
        try:
            fn.prepare_block((batch,), lead=False)
            fn.run_block(1)
        except WorkerError as exc:
            raise _worker_failure(exc, arm) from exc
        return None
    try:
        if not fresh:
            return batch.call(fn)
        output = copy_sample(batch).call(fn)
        progress()
        return output
    except torch.OutOfMemoryError:
        pass  # handled below, once the exception and the call's frames it holds are released
    except Exception as exc:
        raise ProfilingError(
            f"{arm or 'callable'} call failed: {type(exc).__name__}: {exc}",
            reason="call_failed",
            arm=arm,
        ) from exc
    empty_device_cache()
    raise ProfilingError(
        f"{arm or 'callable'} ran out of device memory", reason="out_of_memory", arm=arm
    )


def empty_device_cache() -> None:
    """After a failed call (an out-of-memory one above all), give cached device memory back."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class Timed(NamedTuple):
    """A timed block: wall (and device) seconds a call, and what its threads waited for a CPU.

    ``waited_s``: seconds of the whole block the arm's threads were runnable but another
    process had the core (:func:`waited_on_others_s`); None where not measured (a fake clock).
    """

    wall_s: float
    device_s: float | None
    waited_s: float | None = None


def timed_block(
    fn: Callable[..., Any],
    batches: Sequence[Sample],
    timer: Timer,
    arm: str | None,
    checks: Mapping[int, Callable[[Any], None]],
    *,
    ring: CopyRing,
    lead: bool,
) -> Timed:
    """Mean wall (and device) seconds a call of a block of one arm's consecutive calls.

    ``lead``: the first call untimed (the carry-over falls on it); ``checks[j]`` run after.
    """
    calls = len(batches) - lead
    if calls < 1:
        raise InvalidValueError(f"a block needs at least one timed call, got {len(batches)}")
    if isinstance(fn, Worker):
        return _block_in_worker(fn, batches, timer, arm, checks, lead)
    before_sample(fn, lambda: call_arm(fn, batches[0], arm))  # eager's weights moved, when due
    own = ring.fill_block(batches)  # every call's own copy, made before the clock starts
    if lead:
        call_arm(fn, own.pop(0), arm, fresh=False)
        progress()
    span = timer.device_span()
    clocks = run_clocks() if on_real_clock(timer) else None  # the arm's threads are ours
    timer.sync()
    start = timer.now_ns()
    if span is not None:
        span.start()
    kept: dict[int, Any] = {}
    for j, sample in enumerate(own):
        output = call_arm(fn, sample, arm, fresh=False)
        if j in checks:
            kept[j] = output
        del output
        progress()
    if span is not None:
        span.stop()
    timer.sync()
    stop = timer.now_ns()
    waited = waited_on_others_s(clocks)
    for j, inspect in sorted(checks.items()):
        inspect(kept.pop(j))
    wall = max(stop - start, _MIN_NS) / 1e9 / calls
    return Timed(wall, span.elapsed_s() / calls if span is not None else None, waited)


def _block_in_worker(
    worker: Worker,
    batches: Sequence[Sample],
    timer: Timer,
    arm: str | None,
    checks: Mapping[int, Callable[[Any], None]],
    lead: bool,
) -> Timed:
    """A block run by ``worker``, timed here around one hand-over; no device time.

    What its threads waited for a CPU is the worker's own count, sent after its answer.
    """
    calls = len(batches) - lead
    try:  # the copies (and the lead call) before the clock, while the others settle
        cpu = worker.cpu_ns()
        watched = worker.watch(during=lambda: worker.prepare_block(batches, lead))
        ahead = worker.cpu_ns() - cpu
        timer.sync()
        queued = worker.queued() if on_real_clock(timer) else None  # its word counts there
        continues, cpu = stops.seen(), worker.cpu_ns()  # its CPU read off the clock: it waits
        start, real = timer.now_ns(), time.perf_counter_ns()
        worker.run_block(calls)
        stop, real = timer.now_ns(), time.perf_counter_ns() - real
        halted = stops.seen() != continues  # this process was stopped: the block reads slow
        progress()
        inside = worker.cpu_ns() - cpu
        now_queued = None if queued is None else worker.queued()
        worker.account(watched, max(real, _MIN_NS), ahead, inside)  # CPU time is real too
        waited = worker.waited_s()
        halted = halted or worker.stopped()  # its word, believed of eager's worker only
    except WorkerError as exc:
        raise _worker_failure(exc, arm) from exc
    if waited and queued is not None and now_queued is not None:  # its word, held to the kernel's
        (before, members), (after, now_members) = queued, now_queued
        if members != now_members or before is None or after is None:
            waited = 0.0  # a process came or went, its count cannot be told: its word not taken
        elif waited * 1e9 > after - before + CLAIM_SLACK_NS:
            raise InterferenceError(
                f"{worker.name} said its block waited {waited * 1e3:.2f} ms for a CPU where the "
                f"kernel counted {(after - before) / 1e6:.2f} ms: a block it says was disturbed "
                "is timed again on its word",
                culprit=worker,
            )
    wall = max(stop - start, _MIN_NS)
    for j, inspect in sorted(checks.items()):
        inspect(worker.output(j))
    if not on_real_clock(timer):
        return Timed(wall / 1e9 / calls, None, None)
    return Timed(wall / 1e9 / calls, None, wall / 1e9 if halted else waited)  # halted: all of it


def time_calls(
    fn: Callable[..., Any],
    batch: Sample | tuple[Any, Any],
    n: int,
    *,
    timer: Timer | None = None,
    warmup: int = 0,
    threads: int | None = None,
    arm: str | None = None,
    spot_check: SpotCheck | ReferenceSpotCheck | None = None,
    batches: Sequence[Sample | tuple[Any, Any]] | None = None,
    references: Sequence[Any] | None = None,
    spot_rate: float = DEFAULT_SPOT_RATE,
    spot_seed: int = 0,
    fresh: Callable[[int], Sample] | None = None,
    reference: Callable[..., Any] | None = None,
) -> tuple[float, ...]:
    """Per-call wall latencies (s) of ``n`` timed calls of one arm after ``warmup`` untimed."""
    check_int("n", n, minimum=1)
    check_int("warmup", warmup, minimum=0)
    given = as_batches(batch, batches)
    checks = checks_per_batch(None if fresh is not None else spot_check, references, len(given))
    if fresh is not None and spot_check is not None and reference is None:
        raise InvalidValueError("spot_check on fresh inputs needs reference (eager) to run there")
    picked = spot_calls(n, spot_rate, spot_seed, n_batches=1 if fresh is not None else len(given))
    multi = batches is not None and fresh is None
    samples = [copy_sample(b) for b in given]
    ring = CopyRing()
    clock = timer if timer is not None else timer_for(samples[0])
    with judging([fn], threads):
        for j in range(warmup):
            call_arm(fn, samples[j % len(samples)], arm)
        clock.sync()
        latencies: list[float] = []
        for i in range(n):
            b = i % len(samples)
            own = samples[b] if fresh is None else as_sample(fresh(i))
            check = checks[b] if fresh is None else on_values(spot_check, reference, own)
            inspect = spot_inspector(check, i + 1, b if multi else None) if i in picked else None
            checked = {} if inspect is None else {0: inspect}
            latencies.append(timed_block(fn, [own], clock, arm, checked, ring=ring, lead=False)[0])
        return tuple(latencies)


@contextlib.contextmanager
def judging(fns: Sequence[Any], threads: int | None) -> Iterator[int]:
    """While ``fns`` are timed: no grad, no collector, ``threads`` here (1 when all are workers).

    Yields the arms' threads. Workers run their own teams; ours, left spinning after a spot check,
    took their cores (int8 read 0.49x where it is 1.4x at ``--threads 2``).
    """
    import torch

    workers = [fn.threads for fn in fns if isinstance(fn, Worker)]
    alone = bool(fns) and len(workers) == len(fns)
    with intra_op_threads(1 if alone else threads) as here, torch.no_grad(), gc_paused():
        yield max(workers) if alone else here


def on_values(
    check: SpotCheck | ReferenceSpotCheck | None,
    reference: Callable[..., Any] | None,
    batch: Sample,
) -> SpotCheck | None:
    """``check`` of an output on ``batch`` against ``reference``'s own output there, run untimed."""
    if check is None or reference is None:
        return None
    pair = cast(ReferenceSpotCheck, check)
    return lambda output: pair(output, copy_sample(batch).call(reference))
