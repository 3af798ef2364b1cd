"""The clocks of a measurement (injected): the Timer protocol, CPU and CUDA timers, host_bound."""

from __future__ import annotations

import contextlib
import gc
import os
import threading
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from aitune_fp.inputs import Sample, as_sample

if TYPE_CHECKING:
    import torch


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


@runtime_checkable
class ReportedClock(Timer, Protocol):
    """An injected clock calls move (a test's ``FakeClock``): the only one a worker's report moves.

    On the host clock the judge times the hand-over itself and believes nothing sent.
    """

    def spend_ns(self, ns: int) -> None:
        """Let ``ns`` nanoseconds pass on this clock (a worker's call spent them on its copy)."""


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


class ThreadClocks:
    """The schedstat files of this process's threads (Linux), held open: a reading costs µs.

    So a worker reads them inside its timed block: the block's wait for a CPU is its own alone.
    With them, the idle time of the cores it may use (cpuidle), where the kernel keeps it.
    """

    def __init__(self) -> None:
        """No file open yet: :meth:`refresh` opens them."""
        self._files: dict[str, int] = {}
        self._idle: list[int] | None = None  # the cores' cpuidle ``time`` files (µs); [] unknown
        self._cpus: frozenset[int] | None = None  # the cores those are of

    def refresh(self) -> None:
        """Open the files of threads started since; close those of threads that ended."""
        try:
            tasks = set(os.listdir("/proc/self/task"))
        except OSError:
            tasks = set()
        for gone in set(self._files) - tasks:  # a fork's child inherits its parent's: not its own
            os.close(self._files.pop(gone))
        for task in tasks - set(self._files):
            with contextlib.suppress(OSError):
                self._files[task] = os.open(f"/proc/self/task/{task}/schedstat", os.O_RDONLY)
        cpus = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        if self._idle is None or cpus != self._cpus:  # the cores it may use: theirs
            for file in self._idle or ():
                os.close(file)
            self._idle, self._cpus = _idle_files(cpus or ()), cpus

    def read(self) -> tuple[int, ...] | None:
        """Now, the threads' CPU time and wait for a CPU while runnable, the cores' idle (ns).

        None: unknown. The idle time is left out where a core does not say it. An ended thread
        takes its share.
        """
        ran = waited = 0
        read = False
        for file in self._files.values():
            try:
                fields = os.pread(file, 128, 0).split()
                ran, waited, read = ran + int(fields[0]), waited + int(fields[1]), True
            except (OSError, IndexError, ValueError):
                continue  # a thread that ended meanwhile
        if not read:
            return None
        now, idle = time.perf_counter_ns(), self._idle_ns()
        return (now, ran, waited) if idle is None else (now, ran, waited, idle)

    def _idle_ns(self) -> int | None:
        """The cores' idle time (ns) as cpuidle has counted it; None where no core says it."""
        try:
            return (
                sum(int(os.pread(file, 32, 0)) for file in self._idle) * 1000
                if self._idle
                else None
            )
        except (OSError, ValueError):
            return None

    def idle_counted(self) -> tuple[int, int] | None:
        """Now and the cores' idle time (ns), each core's idle period in progress counted too.

        cpuidle counts an idle period as it ends, so a core idle at :meth:`read` has not counted
        it yet; this thread runs on each core in turn, which ends its period. None: unknown.
        """
        if not self._idle or not self._cpus:
            return None
        mine = os.sched_getaffinity(0)
        try:
            for cpu in sorted(self._cpus):
                with contextlib.suppress(OSError):  # a core gone offline meanwhile
                    os.sched_setaffinity(0, {cpu})  # this thread moves there at once
        finally:
            os.sched_setaffinity(0, mine)
        idle = self._idle_ns()
        return None if idle is None else (time.perf_counter_ns(), idle)


def _idle_files(cpus: Iterable[int]) -> list[int]:
    """The cpuidle ``time`` files of each of ``cpus``; [] where one has none (or no cpus)."""
    files: list[int] = []
    for cpu in sorted(cpus):
        folder = f"/sys/devices/system/cpu/cpu{cpu}/cpuidle"
        try:
            states = [s for s in os.listdir(folder) if s.startswith("state")]
            files += [os.open(f"{folder}/{state}/time", os.O_RDONLY) for state in states]
        except OSError:
            states = []
        if not states:
            for file in files:
                os.close(file)
            return []
    return files


_THIS_PROCESS = ThreadClocks()


def run_clocks() -> tuple[int, ...] | None:
    """Now, and this process's threads' CPU time and wait for a CPU (:class:`ThreadClocks`)."""
    _THIS_PROCESS.refresh()
    return _THIS_PROCESS.read()


def waited_on_others_s(
    before: tuple[int, ...] | None,
    after: tuple[int, ...] | None = None,
    clocks: ThreadClocks = _THIS_PROCESS,
) -> float | None:
    """Seconds from ``before`` to ``after`` (default: now) this process waited for another's CPU.

    ``clocks``: where both were read. A wait that reads as others' is read again with every
    core's idle period counted (:meth:`ThreadClocks.idle_counted`): a core idle since within
    the span, not counted yet, read as CPU time other processes had.
    """
    if before is not None and after is None:
        after = run_clocks()
    if before is None or after is None:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    others = others_wait_s(before, after, cores)
    if others > 0 and len(before) > 3 and len(after) > 3:
        counted = clocks.idle_counted()
        if counted is not None:
            now, idle = counted
            # over the longer span, this thread ran all the time since ``after``
            later = (now, after[1] + max(now - after[0], 0), after[2], idle)
            others = min(others, others_wait_s(before, later, cores))
    return others


def others_wait_s(before: tuple[int, ...], after: tuple[int, ...], cores: int) -> float:
    """The wait for a CPU between two :func:`run_clocks` readings that others caused (seconds).

    The wait its own threads' running explains (more runnable threads than its ``cores``) is
    its own cost, not counted: only the wait beyond what it ran on the cores it may use. With
    the cores' idle time (a fourth field), at most the CPU time other processes had on them.
    """
    span, ran, waited = (max(b - a, 0) for a, b in zip(before[:3], after[:3], strict=True))
    free = cores * span - ran  # core time the arm's threads did not use
    if len(before) > 3 and len(after) > 3:
        free -= max(after[3] - before[3], 0)  # less what idled: what other processes ran
    return max(min(waited, free), 0) / 1e9


def reads_waits(timer: Timer) -> bool:
    """Whether each timed block reads its wait for a CPU (schedstat, on the real clock)."""
    return on_real_clock(timer) and run_clocks() is not None


def machine_load(timer: Timer) -> float | None:
    """The load of the machine ``timer`` times: this host's on the real clock, else the clock's own.

    An injected clock is a machine of its own (``load_average()``; none: quiet), so what the host
    runs never changes its verdict.
    """
    if on_real_clock(timer):
        from aitune_fp.profiling import threads

        return threads.load_average()
    own = getattr(timer, "load_average", None)
    load = own() if callable(own) else None
    return None if load is None else float(load)


def on_real_clock(timer: Timer) -> bool:
    """Whether ``timer`` is the real clock (the only one a CPU wait can be held against)."""
    return isinstance(timer, (CpuTimer, CudaTimer))


def timer_for(sample: Sample | tuple[Any, Any]) -> Timer:
    """The timer for a batch: CUDA when any tensor in it (nested too) is on a CUDA device."""
    import torch
    from torch.utils._pytree import tree_leaves

    batch = as_sample(sample)
    for value in tree_leaves((batch.args, dict(batch.kwargs))):
        if isinstance(value, torch.Tensor) and value.device.type == "cuda":
            return CudaTimer(value.device)
    return CpuTimer()


#: ``host_bound``: an arm whose host wall time exceeds its device time by more than this
#: factor (median over the pairs decided on) spends a third or more of each call on the host
#: (launches, Python, synchronisation): the two clocks then tell different stories.
HOST_BOUND_FACTOR = 1.5


def is_host_bound(host_s: float, device_s: float, factor: float = HOST_BOUND_FACTOR) -> bool:
    """Whether host time exceeds device time by more than ``factor`` (``host_bound``)."""
    return device_s > 0 and host_s > factor * device_s


def has_device_clock(timer: Timer) -> bool:
    """Whether ``timer`` gives device time (CUDA events) for each call."""
    return timer.device_span() is not None


#: Pauses of the collector open in this process (any thread), and its state before the first.
_GC_LOCK = threading.Lock()
_gc_pause = {"open": 0, "enabled": True}


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Keep Python's garbage collector out of the timed region (as ``timeit`` does); restore after.

    Counted across threads (two tunes at once): the first pause saves its state, the last restores.
    """
    with _GC_LOCK:
        if not _gc_pause["open"]:
            _gc_pause["enabled"] = gc.isenabled()
        _gc_pause["open"] += 1
        gc.disable()
    try:
        yield
    finally:
        with _GC_LOCK:
            _gc_pause["open"] -= 1
            if not _gc_pause["open"] and _gc_pause["enabled"]:
                gc.enable()


def gc_enabled() -> bool:
    """Whether the collector is on as the process means it: a timing's pause set aside."""
    with _GC_LOCK:
        return bool(_gc_pause["enabled"]) if _gc_pause["open"] else gc.isenabled()


def set_gc_enabled(enabled: bool) -> None:
    """Turn the collector on or off; while a timing pauses it, from the pause's end."""
    with _GC_LOCK:
        if _gc_pause["open"]:
            _gc_pause["enabled"] = enabled
        else:
            (gc.enable if enabled else gc.disable)()
