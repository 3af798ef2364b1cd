"""Timed calls of inference callables on CPU or CUDA: timing values only, no decisions.

What is timed is the wall time of one call as a user experiences it: on CUDA the device is
synchronised before and after the call, so launch overhead is included (CUDA events around the
call also give the device time); on CPU a monotonic nanosecond clock brackets the call. Calls run
under ``torch.no_grad()`` with the same intra-op thread count for both arms.

Inputs are prepared before any clock starts: each arm gets its own copy of the batch once, made
when the run begins, and the same copy is passed to every call of that arm (callables must not
mutate their inputs; if one does, only its own copy changes). The output of a call is released
after the clock stops, so freeing it is not timed either.

Clocks are injected through the small :class:`Timer` protocol (``now_ns``, ``sync``,
``device_span``) so that the CUDA code paths and the sampling loop are testable on CPU with a
fake clock.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from aitune_fp.core._checks import check_int
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.stats import is_settled, level_shift_index
from aitune_fp.errors import AitunefpError, InvalidStateError
from aitune_fp.inputs import Sample, as_sample, copy_sample

if TYPE_CHECKING:
    import torch

__all__ = [
    "CpuTimer",
    "CudaTimer",
    "DeviceSpan",
    "InterleavedRun",
    "PairedTimings",
    "ProfilingError",
    "SpotCheck",
    "SpotCheckError",
    "Timer",
    "WarmupReport",
    "compare",
    "gc_paused",
    "intra_op_threads",
    "pair_order",
    "time_calls",
    "timer_for",
]

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

    ``call`` is the 1-based number of the candidate's timed call whose output was wrong.
    """

    def __init__(self, message: str, *, call: int) -> None:
        """Keep the call number; the message says what differed."""
        super().__init__(f"timed call {call}: {message}")
        self.call = call


#: Checks one candidate output against eager's reference; raises when it differs.
SpotCheck = Callable[[Any], None]


def _spot(check: SpotCheck | None, call: int) -> Callable[[Any], None] | None:
    """``check`` for the candidate's timed call number ``call``, raising SpotCheckError."""
    if check is None:
        return None

    def inspect(output: Any) -> None:
        try:
            check(output)
        except Exception as exc:
            raise SpotCheckError(str(exc), call=call) from exc

    return inspect


class DeviceSpan(Protocol):
    """Device-side interval around one call (CUDA events); read it only after ``Timer.sync``."""

    def start(self) -> None:
        """Mark the start on the device stream."""

    def stop(self) -> None:
        """Mark the end on the device stream."""

    def elapsed_s(self) -> float:
        """Seconds between the marks, as the device measured them."""


class Timer(Protocol):
    """The clock of a measurement: a monotonic ns clock, a device barrier, optional device spans."""

    def now_ns(self) -> int:
        """Monotonic time in nanoseconds."""

    def sync(self) -> None:
        """Wait until the device has finished all queued work (no-op on CPU)."""

    def device_span(self) -> DeviceSpan | None:
        """A fresh device span for one call, or None when the device has no timer of its own."""


class CpuTimer:
    """CPU timing: ``time.perf_counter_ns``; nothing to synchronise, no device time."""

    def now_ns(self) -> int:
        """Monotonic high-resolution time in nanoseconds."""
        return time.perf_counter_ns()

    def sync(self) -> None:
        """Nothing to wait for on CPU."""

    def device_span(self) -> DeviceSpan | None:
        """No device time on CPU."""
        return None


class _CudaEventSpan:
    """Two CUDA events recorded on the current stream of ``device``."""

    def __init__(self, device: torch.device) -> None:
        import torch

        with torch.cuda.device(device):
            self._start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            self._stop = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        # record on the device's own current stream, even when another device is current
        self._stream = torch.cuda.current_stream(device)

    def start(self) -> None:
        self._start.record(self._stream)

    def stop(self) -> None:
        self._stop.record(self._stream)

    def elapsed_s(self) -> float:
        return float(self._start.elapsed_time(self._stop)) / 1e3


class CudaTimer:
    """CUDA timing: host clock with ``torch.cuda.synchronize(device)`` barriers, plus CUDA events."""

    def __init__(self, device: torch.device | str | int | None = None) -> None:
        """Time work on ``device`` (default: the current CUDA device)."""
        import torch

        if device is None:
            device = torch.cuda.current_device()
        self.device = (
            torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
        )

    def now_ns(self) -> int:
        """Monotonic high-resolution host time in nanoseconds."""
        return time.perf_counter_ns()

    def sync(self) -> None:
        """Wait for all work queued on the device."""
        import torch

        torch.cuda.synchronize(self.device)

    def device_span(self) -> DeviceSpan | None:
        """A pair of timing events on the device's current stream."""
        return _CudaEventSpan(self.device)


def timer_for(sample: Sample | tuple[Any, Any]) -> Timer:
    """The timer for a batch: CUDA when any tensor in it (nested too) is on a CUDA device."""
    import torch
    from torch.utils._pytree import tree_leaves

    batch = as_sample(sample)
    for value in tree_leaves((batch.args, dict(batch.kwargs))):
        if isinstance(value, torch.Tensor) and value.device.type == "cuda":
            return CudaTimer(value.device)
    return CpuTimer()


@contextlib.contextmanager
def intra_op_threads(threads: int | None) -> Iterator[int]:
    """Set torch's intra-op thread count for the block (None: leave it); yields the count in effect."""
    import torch

    if threads is None:
        yield torch.get_num_threads()
        return
    check_int("threads", threads, minimum=1)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        torch.set_num_threads(previous)


def _call(fn: Callable[..., Any], batch: Sample, arm: str | None) -> Any:
    """Call ``fn`` on ``batch``; failures become :class:`ProfilingError` (OOM: cache emptied)."""
    import torch

    try:
        return batch.call(fn)
    except torch.OutOfMemoryError:
        pass  # handled below, once the exception and the call's frames it holds are released
    except Exception as exc:
        raise ProfilingError(
            f"{arm or 'callable'} call failed: {type(exc).__name__}: {exc}",
            reason="call_failed",
            arm=arm,
        ) from exc
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    raise ProfilingError(
        f"{arm or 'callable'} ran out of device memory", reason="out_of_memory", arm=arm
    )


def _timed_call(
    fn: Callable[..., Any],
    batch: Sample,
    timer: Timer,
    arm: str | None,
    inspect: Callable[[Any], None] | None = None,
) -> tuple[float, float | None]:
    """Wall seconds (and device seconds, if any) of one synchronised call.

    ``inspect`` sees the output after the clock stopped (the spot check), so it is never timed.
    """
    span = timer.device_span()
    timer.sync()
    start = timer.now_ns()
    if span is not None:
        span.start()
    output = _call(fn, batch, arm)
    if span is not None:
        span.stop()
    timer.sync()
    stop = timer.now_ns()
    if inspect is not None:
        inspect(output)
    del output
    wall = max(stop - start, _MIN_NS) / 1e9
    return wall, (span.elapsed_s() if span is not None else None)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Keep Python's garbage collector out of the timed region (as ``timeit`` does); restore after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def time_calls(
    fn: Callable[..., Any],
    batch: Sample | tuple[Any, Any],
    n: int,
    *,
    timer: Timer | None = None,
    warmup: int = 0,
    threads: int | None = None,
    arm: str | None = None,
    spot_check: SpotCheck | None = None,
) -> tuple[float, ...]:
    """Per-call wall latencies (s) of ``n`` timed calls of one arm, after ``warmup`` untimed calls.

    For the point rule and single-arm use. The batch is copied once before the first call;
    ``arm`` names the callable in errors. ``spot_check`` sees the outputs of the first and last
    timed calls (untimed); a mismatch raises :class:`SpotCheckError`.
    """
    check_int("n", n, minimum=1)
    check_int("warmup", warmup, minimum=0)
    import torch

    sample = copy_sample(as_sample(batch))
    clock = timer if timer is not None else timer_for(sample)
    with intra_op_threads(threads), torch.no_grad(), gc_paused():
        for _ in range(warmup):
            _call(fn, sample, arm)
        clock.sync()
        return tuple(
            _timed_call(
                fn, sample, clock, arm, _spot(spot_check, i + 1) if i in (0, n - 1) else None
            )[0]
            for i in range(n)
        )


def pair_order(index: int) -> bool:
    """Whether pair ``index`` times the baseline first: quads alternate ABBA and BAAB.

    Pairs 0, 1 form quad 0 (A B | B A), pairs 2, 3 quad 1 (B A | A B), and so on, so each arm
    takes each position in a quad equally often (position bias cancels).
    """
    quad, half = divmod(index, 2)
    return (quad % 2 == 0) == (half == 0)


def _dynamo_counts() -> tuple[int, int]:
    """torch._dynamo's compiled-frame and graph counters (0, 0 when dynamo was never loaded)."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    if counters is None:
        return (0, 0)
    return (int(counters["frames"]["total"]), int(counters["stats"]["unique_graphs"]))


@attrs.frozen(kw_only=True)
class WarmupReport:
    """Warm-up of both arms: the (timed, undecided) calls and whether both became steady."""

    baseline_s: tuple[float, ...]
    candidate_s: tuple[float, ...]
    converged: bool
    calls_per_arm: int


@attrs.frozen(kw_only=True)
class PairedTimings:
    """Interleaved per-call latencies: ``baseline_s[i]`` and ``candidate_s[i]`` were taken side by side.

    Wall seconds per call (what a user waits); ``*_device_s`` are CUDA event times (None on CPU).
    ``flags``: "warmup_not_steady", "recompiled", "level_shift_after_pair_<k>" (the
    candidate/baseline ratio moved by > 15 % from pair k on). ``wall_s``: the whole run.
    """

    baseline_s: tuple[float, ...]
    candidate_s: tuple[float, ...]
    baseline_device_s: tuple[float, ...] | None
    candidate_device_s: tuple[float, ...] | None
    warmup: WarmupReport | None
    threads: int
    wall_s: float
    flags: tuple[str, ...]

    @property
    def n_pairs(self) -> int:
        """Number of timed pairs."""
        return len(self.baseline_s)


class InterleavedRun:
    """A running A/B measurement that the caller extends look by look (a context manager).

    On enter: threads set, ``no_grad`` on, one copy of the batch per arm. ``warm_up`` first, then
    ``extend(n)`` as often as needed; ``timings()`` returns everything so far.
    """

    def __init__(
        self,
        baseline: Callable[..., Any],
        candidate: Callable[..., Any],
        batch: Sample | tuple[Any, Any],
        *,
        timer: Timer | None = None,
        threads: int | None = None,
        spot_check: SpotCheck | None = None,
    ) -> None:
        """Prepare the run; nothing is called or copied until the context is entered.

        ``spot_check`` sees the candidate's outputs of the first and last timed pair of every
        :meth:`extend` (untimed); a mismatch raises :class:`SpotCheckError`.
        """
        self._fns = {"baseline": baseline, "candidate": candidate}
        self._spot_check = spot_check
        self._batch = as_sample(batch)
        self._timer = timer
        self._threads = threads
        self._stack: contextlib.ExitStack | None = None
        self._clock: Timer = CpuTimer()
        self._batches: dict[str, Sample] = {}
        self._times: dict[str, list[float]] = {"baseline": [], "candidate": []}
        self._device: dict[str, list[float]] = {"baseline": [], "candidate": []}
        self._warmup: WarmupReport | None = None
        self._threads_in_effect = 0
        self._start_ns = 0
        self._counts_at_start: tuple[int, int] | None = None
        self._recompiled = False

    def __enter__(self) -> InterleavedRun:
        """Set threads and ``no_grad``, copy the batch for each arm, start the wall clock."""
        import torch

        # copies and the timer first: if they fail, no global state has been touched yet
        self._clock = self._timer if self._timer is not None else timer_for(self._batch)
        self._batches = {arm: copy_sample(self._batch) for arm in self._fns}
        stack = contextlib.ExitStack()
        try:
            self._threads_in_effect = stack.enter_context(intra_op_threads(self._threads))
            stack.enter_context(torch.no_grad())
            stack.enter_context(gc_paused())
        except BaseException:
            stack.close()
            self._batches = {}
            raise
        self._stack = stack
        self._start_ns = self._clock.now_ns()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Restore threads and grad mode; drop the batch copies."""
        self._batches = {}
        if self._stack is not None:
            self._stack.close()
            self._stack = None

    @property
    def n_pairs(self) -> int:
        """Timed pairs so far."""
        return len(self._times["baseline"])

    def elapsed_s(self) -> float:
        """Wall seconds since the run was entered, on the run's clock."""
        return (self._clock.now_ns() - self._start_ns) / 1e9

    def _require_entered(self) -> None:
        if self._stack is None:
            raise InvalidStateError("InterleavedRun must be used as a context manager (with ...)")

    def _untimed(self, arm: str) -> None:
        _call(self._fns[arm], self._batches[arm], arm)
        self._clock.sync()

    def _timed(self, arm: str, *, check: bool = False) -> tuple[float, float | None]:
        inspect = None
        if check and arm == "candidate":
            inspect = _spot(self._spot_check, len(self._times["candidate"]) + 1)
        return _timed_call(self._fns[arm], self._batches[arm], self._clock, arm, inspect)

    def _past(self, deadline_ns: int | None) -> bool:
        return deadline_ns is not None and self._clock.now_ns() >= deadline_ns

    def warm_up(
        self, *, window: int, tolerance: float, max_calls: int, deadline_ns: int | None = None
    ) -> WarmupReport:
        """Call each arm once untimed, then alternate timed calls until both arms are steady.

        Steady: each arm passes :func:`~aitune_fp.core.stats.is_settled` (spread within
        ``tolerance``, or no trend beyond its own noise).
        At most ``max_calls`` calls per arm (the first, untimed call included); it also stops,
        unsteady, once the run's clock passes ``deadline_ns``.
        """
        self._require_entered()
        check_int("max_calls", max_calls, minimum=1)
        size = max(check_int("window", window, minimum=1), 2)
        times: dict[str, list[float]] = {"baseline": [], "candidate": []}
        calls = 0
        converged = False
        if not self._past(deadline_ns):
            self._untimed("baseline")
            self._untimed("candidate")
            calls = 1
        while 0 < calls < max_calls:
            if self._past(deadline_ns):
                break
            for arm in ("baseline", "candidate"):
                times[arm].append(self._timed(arm)[0])
            calls += 1
            if is_settled(times["baseline"], size, tolerance) and is_settled(
                times["candidate"], size, tolerance
            ):
                converged = True
                break
        self._warmup = WarmupReport(
            baseline_s=tuple(times["baseline"]),
            candidate_s=tuple(times["candidate"]),
            converged=converged,
            calls_per_arm=calls,
        )
        return self._warmup

    def extend(self, n_pairs: int, *, deadline_ns: int | None = None) -> int:
        """Time ``n_pairs`` more interleaved pairs (after one untimed call per arm); return how many.

        Stops early, before a pair (or before the untimed calls), once the run's clock reaches
        ``deadline_ns``: no call starts after it.
        """
        self._require_entered()
        check_int("n_pairs", n_pairs, minimum=0)
        if self._counts_at_start is None:
            self._counts_at_start = _dynamo_counts()
        # between looks, outside any timed region: collect what the paused collector let pile up
        gc.collect()
        # one untimed call per arm, the next pair's first arm last, so that no arm starts the
        # look warm from its own call (each pair's first call follows the other model)
        first = "baseline" if pair_order(self.n_pairs) else "candidate"
        second = "candidate" if first == "baseline" else "baseline"
        if n_pairs == 0 or self._past(deadline_ns):
            return 0
        self._untimed(second)
        self._untimed(first)
        done = 0
        while done < n_pairs:
            if self._past(deadline_ns):
                break
            first, second = (
                ("baseline", "candidate") if pair_order(self.n_pairs) else ("candidate", "baseline")
            )
            check = done in (0, n_pairs - 1)
            results = {
                first: self._timed(first, check=check),
                second: self._timed(second, check=check),
            }
            for arm, (wall, device) in results.items():
                self._times[arm].append(wall)
                if device is not None:
                    self._device[arm].append(device)
            done += 1
        if _dynamo_counts() != self._counts_at_start:
            self._recompiled = True
        return done

    def timings(self) -> PairedTimings:
        """Everything timed so far, with flags."""
        base = tuple(self._times["baseline"])
        cand = tuple(self._times["candidate"])
        flags: list[str] = []
        if self._warmup is not None and not self._warmup.converged:
            flags.append("warmup_not_steady")
        if self._recompiled:
            flags.append("recompiled")
        if base:
            shift = level_shift_index([c / b for b, c in zip(base, cand, strict=True)])
            if shift is not None:
                flags.append(f"level_shift_after_pair_{shift}")
        full = len(self._device["baseline"]) == len(base) and len(base) > 0
        return PairedTimings(
            baseline_s=base,
            candidate_s=cand,
            baseline_device_s=tuple(self._device["baseline"]) if full else None,
            candidate_device_s=tuple(self._device["candidate"]) if full else None,
            warmup=self._warmup,
            threads=self._threads_in_effect,
            wall_s=self.elapsed_s(),
            flags=tuple(flags),
        )


def compare(
    baseline: Callable[..., Any],
    candidate: Callable[..., Any],
    batch: Sample | tuple[Any, Any],
    config: ProfilingConfig,
    *,
    n_pairs: int,
    timer: Timer | None = None,
) -> PairedTimings:
    """Warm up both arms, then time ``n_pairs`` interleaved pairs (ABBA/BAAB quads).

    ``config`` is a :class:`~aitune_fp.core.config.ProfilingConfig` (warm-up and threads).
    """
    with InterleavedRun(baseline, candidate, batch, timer=timer, threads=config.threads) as run:
        run.warm_up(
            window=config.warmup_window,
            tolerance=config.warmup_tolerance,
            max_calls=config.warmup_max_calls,
        )
        run.extend(n_pairs)
        return run.timings()
