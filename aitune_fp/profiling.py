"""Timed calls of inference callables on CPU or CUDA: timing values only, no decisions.

What is timed is the wall time of one call as a user experiences it: on CUDA the device is
synchronised before and after the call, so launch overhead is included (CUDA events around the
call also give the device time); on CPU a monotonic nanosecond clock brackets the call. Calls run
under ``torch.no_grad()`` with the same intra-op thread count for both arms.

Inputs are prepared before any clock starts: each arm gets its own copy of the batch once, made
when the run begins, and the same copy is passed to every call of that arm (callables must not
mutate their inputs; if one does, only its own copy changes). The output of a call is released
after the clock stops, so freeing it is not timed either. Given several ``batches``, each arm
gets one copy of each, made once, and pair ``i`` runs both arms on batch ``i % len(batches)``
(the pair stays paired; a candidate that caches outputs by input shape meets distinct data).
Pairs run in quads, ABBA or BAAB, each quad's orientation drawn from a seeded random stream
(:func:`quad_orientations`), so that interference in phase with a fixed order cannot land on one
arm only.

Spot checks (untimed) compare candidate outputs of a seeded random ~10 % of each look's timed
calls, plus its first and last, and the first call on each batch not already among them
(:func:`aitune_fp.core.spot.spot_positions`). Python's collector is paused while timing; the
young generation it let pile up is collected before each look's deadline check, and only when
its predicted cost fits in the time left, so no housekeeping runs between that check and a call.

Clocks are injected through the small :class:`Timer` protocol (``now_ns``, ``sync``,
``device_span``) so that the CUDA code paths and the sampling loop are testable on CPU with a
fake clock.
"""

from __future__ import annotations

import contextlib
import gc
import os
import random
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias, cast

import attrs

from aitune_fp.core._checks import check_int, check_type
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.spot import DEFAULT_SPOT_RATE, spot_positions
from aitune_fp.core.stats import is_settled, level_shift_index
from aitune_fp.errors import AitunefpError, InvalidStateError, InvalidTypeError, InvalidValueError
from aitune_fp.inputs import Sample, as_sample, copy_sample

if TYPE_CHECKING:
    import torch

__all__ = [
    "HOST_BOUND_FACTOR",
    "CpuEnvironment",
    "CpuTimer",
    "CudaTimer",
    "DeviceSpan",
    "InterleavedRun",
    "PairedTimings",
    "ProfilingError",
    "ReferenceSpotCheck",
    "SpotCheck",
    "SpotCheckError",
    "Timer",
    "WarmupReport",
    "as_batches",
    "compare",
    "cpu_environment",
    "gc_paused",
    "has_device_clock",
    "intra_op_threads",
    "is_host_bound",
    "is_oversubscribed",
    "load_average",
    "pair_order",
    "quad_orientations",
    "set_threads",
    "spot_calls",
    "time_calls",
    "timer_for",
    "usable_cpus",
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

    ``call`` is the 1-based number of the candidate's timed call whose output was wrong;
    ``batch`` the 0-based index into ``batches`` it ran on (None when one batch was timed).
    """

    def __init__(self, message: str, *, call: int, batch: int | None = None) -> None:
        """Keep the call (and batch) number; the message says what differed."""
        where = f"timed call {call}" + ("" if batch is None else f" (batch {batch})")
        super().__init__(f"{where}: {message}")
        self.call = call
        self.batch = batch


#: Checks one candidate output against eager's reference; raises when it differs.
SpotCheck: TypeAlias = Callable[[Any], None]
#: Checks one candidate output against ``reference``, eager's output on the same batch.
ReferenceSpotCheck: TypeAlias = Callable[[Any, Any], None]


def _spot(
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
    """The batches timed in turn: ``batches`` when given (not empty), else the one ``batch``.

    Raises InvalidTypeError / InvalidValueError naming ``batches`` when it is not a non-empty
    sequence of samples.
    """
    if batches is None:
        return (as_sample(batch),)
    if isinstance(batches, (str, bytes, Sample)) or not isinstance(batches, Sequence):
        raise InvalidTypeError(
            f"batches must be a sequence of samples, got {type(batches).__name__}"
        )
    if not batches:
        raise InvalidValueError("batches must hold at least one sample")
    return tuple(as_sample(b) for b in batches)


def _checks_per_batch(
    spot_check: SpotCheck | ReferenceSpotCheck | None,
    references: Sequence[Any] | None,
    n_batches: int,
) -> tuple[SpotCheck | None, ...]:
    """One one-argument check per batch: ``spot_check(output, references[b])`` for batch ``b``.

    Without ``references`` the check is called as ``spot_check(output)`` (one batch only: it
    could not tell the batches apart).
    """
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

    :func:`~aitune_fp.core.spot.spot_positions` (first, last and a seeded ~``rate`` of the rest),
    plus, over rotating batches (call ``j`` on batch ``(first_pair + j) % n_batches``), the first
    call on each batch that none of those lands on, so every batch of a look is checked.
    """
    picked = set(spot_positions(n_calls, rate, seed))
    n_batches = check_int("n_batches", n_batches, minimum=1)
    covered = {(first_pair + j) % n_batches for j in picked}
    for j in range(min(n_calls, n_batches)):
        if (first_pair + j) % n_batches not in covered:
            picked.add(j)
            covered.add((first_pair + j) % n_batches)
    return frozenset(picked)


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


def set_threads(threads: int) -> None:
    """Run this process's CPU work on ``threads`` threads: ``tune --threads`` and a sweep task.

    The one code path for both: ``OMP_NUM_THREADS`` first, when torch has not been imported
    yet (OpenMP reads it once, when torch loads; setting threads only later measured slower
    here), then torch's intra-op threads. Once torch is loaded the environment is left as it is.
    Raises InvalidValueError / InvalidTypeError naming ``threads`` for a count below 1.
    """
    n = check_int("threads", threads, minimum=1)
    if "torch" not in sys.modules:
        os.environ["OMP_NUM_THREADS"] = str(n)
    import torch

    torch.set_num_threads(n)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; all CPUs where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


def load_average() -> float | None:
    """The 1-minute load average of the machine (None where the platform has none)."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None


def _omp_threads() -> int | None:
    text = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


@attrs.frozen(kw_only=True)
class CpuEnvironment:
    """The CPU side of a measurement: threads used, cores available, the machine's load.

    ``threads``: torch's intra-op threads both arms run with; ``interop_threads``: torch's
    inter-op threads; ``omp_num_threads``: ``OMP_NUM_THREADS`` (None: unset or not one
    integer); ``cpus``: :func:`usable_cpus`; ``load_avg_1m``: :func:`load_average`.
    """

    threads: int
    interop_threads: int
    omp_num_threads: int | None
    cpus: int
    load_avg_1m: float | None

    def to_fields(self) -> dict[str, Any]:
        """The values as event fields."""
        return attrs.asdict(self)


def cpu_environment(threads: int | None = None) -> CpuEnvironment:
    """The environment now; ``threads``: the intra-op count a measurement sets (None: torch's)."""
    import torch

    return CpuEnvironment(
        threads=int(threads) if threads is not None else int(torch.get_num_threads()),
        interop_threads=int(torch.get_num_interop_threads()),
        omp_num_threads=_omp_threads(),
        cpus=usable_cpus(),
        load_avg_1m=load_average(),
    )


def is_oversubscribed(loads: Iterable[float | None], *, cpus: int, threads: int) -> bool:
    """Whether a measurement ran with less CPU than its threads need (the ``oversubscribed`` flag).

    The rule: the load of other work exceeds the cores available minus the tune's threads, at
    any of ``loads`` (1-minute load averages read at the comparison's start and end). The other
    work's load is taken as the load average less the tune's own ``threads`` (at most that much
    of it can be the tune's), so the rule is ``load - threads > cpus - threads``, which is
    ``load > cpus``: a tune never flags itself, and on 2 cores a 1-thread tune is flagged once
    others keep more than one core busy. ``threads > cpus`` is flagged whatever the load. A
    missing load average (None) flags nothing.
    """
    if threads > cpus:
        return True
    return any(load is not None and load - threads > cpus - threads for load in loads)


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
    spot_check: SpotCheck | ReferenceSpotCheck | None = None,
    batches: Sequence[Sample | tuple[Any, Any]] | None = None,
    references: Sequence[Any] | None = None,
    spot_rate: float = DEFAULT_SPOT_RATE,
    spot_seed: int = 0,
) -> tuple[float, ...]:
    """Per-call wall latencies (s) of ``n`` timed calls of one arm, after ``warmup`` untimed calls.

    For the point rule and single-arm use; ``arm`` names the callable in errors. Each batch is
    copied once before the first call; with ``batches`` (replacing ``batch``) timed call ``i``
    runs on ``batches[i % len(batches)]``. ``spot_check`` sees, untimed, the outputs of the
    calls :func:`spot_calls` picks (``spot_rate``, ``spot_seed``): ``spot_check(output)``, or
    ``spot_check(output, references[b])`` when ``references`` (eager's output on each batch) is
    given. A mismatch raises :class:`SpotCheckError`.
    """
    check_int("n", n, minimum=1)
    check_int("warmup", warmup, minimum=0)
    import torch

    given = as_batches(batch, batches)
    checks = _checks_per_batch(spot_check, references, len(given))
    picked = spot_calls(n, spot_rate, spot_seed, n_batches=len(given))
    multi = batches is not None
    samples = [copy_sample(b) for b in given]
    clock = timer if timer is not None else timer_for(samples[0])
    with intra_op_threads(threads), torch.no_grad(), gc_paused():
        for j in range(warmup):
            _call(fn, samples[j % len(samples)], arm)
        clock.sync()
        latencies: list[float] = []
        for i in range(n):
            b = i % len(samples)
            inspect = _spot(checks[b], i + 1, b if multi else None) if i in picked else None
            latencies.append(_timed_call(fn, samples[b], clock, arm, inspect)[0])
        return tuple(latencies)


def pair_order(index: int, orientations: Sequence[bool] | None = None) -> bool:
    """Whether pair ``index`` times the baseline first.

    Pairs ``2q`` and ``2q + 1`` form quad ``q``: ABBA (baseline first, then candidate first) or
    BAAB, so each arm takes each position in a quad equally often (position bias cancels). Quad
    ``q`` is ABBA when ``orientations[q]`` is true; without ``orientations``, the fixed
    alternation: quad 0 ABBA, quad 1 BAAB, and so on (A B | B A | B A | A B).
    """
    quad, half = divmod(index, 2)
    abba = quad % 2 == 0 if orientations is None else orientations[quad]
    return abba == (half == 0)


def _orientation_stream(seed: int) -> random.Random:
    """The random stream of quad orientations for ``seed`` (apart from the spot checks')."""
    return random.Random(f"aitune_fp quad orientation {seed}")


def quad_orientations(seed: int, n_quads: int) -> tuple[bool, ...]:
    """Each of ``n_quads`` quads' orientation (True: ABBA, False: BAAB), a fair coin per quad.

    Reproducible for a ``seed``; quad ``q``'s orientation does not depend on ``n_quads``. This is
    what :class:`InterleavedRun` times (``order="random"``): interference whose period matches a
    fixed ABBA / BAAB order would slow one arm only and bias the ratio; drawn at random, it lands
    on either arm alike.
    """
    check_int("n_quads", n_quads, minimum=0)
    stream = _orientation_stream(check_type("seed", seed, int))
    return tuple(stream.random() < 0.5 for _ in range(n_quads))


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

    On enter: threads set, ``no_grad`` on, one copy of each batch per arm. ``warm_up`` first, then
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
        spot_check: SpotCheck | ReferenceSpotCheck | None = None,
        batches: Sequence[Sample | tuple[Any, Any]] | None = None,
        references: Sequence[Any] | None = None,
        spot_rate: float = DEFAULT_SPOT_RATE,
        spot_seed: int = 0,
        order: Literal["random", "fixed"] = "random",
        order_seed: int | None = None,
    ) -> None:
        """Prepare the run; nothing is called or copied until the context is entered.

        ``batches`` (replacing ``batch``): pair ``i`` runs both arms on ``batches[i % len]``.
        ``spot_check`` sees, untimed, the candidate's outputs of the calls :func:`spot_calls`
        picks in each :meth:`extend` (look ``k`` seeded ``spot_seed + k``), as
        ``spot_check(output)``, or ``spot_check(output, references[b])`` when ``references``
        (eager's output on each batch) is given; a mismatch raises :class:`SpotCheckError`.
        ``order``: each quad's orientation drawn at random (:func:`quad_orientations` seeded
        ``order_seed``, by default ``spot_seed``), or ``"fixed"``, the ABBA / BAAB alternation.
        """
        self._fns = {"baseline": baseline, "candidate": candidate}
        self._inputs = as_batches(batch, batches)
        self._multi = batches is not None
        self._checks = _checks_per_batch(spot_check, references, len(self._inputs))
        spot_positions(1, spot_rate, spot_seed)  # checks both now, naming them
        self._spot_rate = spot_rate
        self._spot_seed = spot_seed
        self._looks = 0
        if order not in ("random", "fixed"):
            raise InvalidValueError(f"order must be 'random' or 'fixed', got {order!r}")
        seed = check_type("order_seed", spot_seed if order_seed is None else order_seed, int)
        self._orientation: random.Random | None = (
            _orientation_stream(seed) if order == "random" else None
        )
        self._orientations: list[bool] = []  # drawn so far, quad by quad
        self._timer = timer
        self._threads = threads
        self._stack: contextlib.ExitStack | None = None
        self._clock: Timer = CpuTimer()
        self._batches: dict[str, tuple[Sample, ...]] = {}
        self._collect_ns = 0  # the last young collection's cost, on the run's clock
        self._collect_ns_per_object = 0.0  # the highest cost per young object seen
        self._gc_was_enabled = True
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
        self._clock = self._timer if self._timer is not None else timer_for(self._inputs[0])
        self._batches = {arm: tuple(copy_sample(b) for b in self._inputs) for arm in self._fns}
        stack = contextlib.ExitStack()
        try:
            self._threads_in_effect = stack.enter_context(intra_op_threads(self._threads))
            stack.enter_context(torch.no_grad())
            self._gc_was_enabled = gc.isenabled()
            self._collect(None, first=True)  # empty the young generation, learn what it costs
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

    def _baseline_first(self, index: int) -> bool:
        """Whether pair ``index`` times the baseline first (drawing its quad's orientation)."""
        if self._orientation is None:
            return pair_order(index)
        while len(self._orientations) <= index // 2:
            self._orientations.append(self._orientation.random() < 0.5)
        return pair_order(index, self._orientations)

    def _require_entered(self) -> None:
        if self._stack is None:
            raise InvalidStateError("InterleavedRun must be used as a context manager (with ...)")

    def _untimed(self, arm: str, index: int) -> None:
        _call(self._fns[arm], self._batches[arm][index % len(self._inputs)], arm)
        self._clock.sync()

    def _timed(self, arm: str, index: int, *, check: bool = False) -> tuple[float, float | None]:
        """Time one call of ``arm`` on batch ``index % len(batches)``, spot-checked if ``check``."""
        b = index % len(self._inputs)
        inspect = None
        if check and arm == "candidate":
            call = len(self._times["candidate"]) + 1
            inspect = _spot(self._checks[b], call, b if self._multi else None)
        return _timed_call(self._fns[arm], self._batches[arm][b], self._clock, arm, inspect)

    def _past(self, deadline_ns: int | None) -> bool:
        return deadline_ns is not None and self._clock.now_ns() >= deadline_ns

    def _collect(self, deadline_ns: int | None, *, first: bool = False) -> None:
        """Collect the young generation the paused collector let pile up, when due and if it fits.

        Due: the collector was on before the run and the young generation outgrew its threshold
        (the collector would have run by now); ``first`` (on enter, collector still on, so the
        generation is small): always, to learn the cost. Fits: the predicted cost (the last
        collection's, or the highest cost per young object seen times the objects now young)
        ends before ``deadline_ns``. Never a full collection: that walks the whole heap.
        """
        if not self._gc_was_enabled:
            return  # the caller turned the collector off: collect nothing
        young = gc.get_count()[0]
        threshold = gc.get_threshold()[0]
        if not first and (threshold <= 0 or young <= threshold):
            return
        predicted = max(self._collect_ns, self._collect_ns_per_object * young)
        if deadline_ns is not None and self._clock.now_ns() + predicted > deadline_ns:
            return
        start = self._clock.now_ns()
        gc.collect(0)
        self._collect_ns = max(self._clock.now_ns() - start, 0)
        self._collect_ns_per_object = max(
            self._collect_ns_per_object, self._collect_ns / max(young, 1)
        )

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
            self._untimed("baseline", 0)
            self._untimed("candidate", 0)
            calls = 1
        while 0 < calls < max_calls:
            if self._past(deadline_ns):
                break
            for arm in ("baseline", "candidate"):
                times[arm].append(self._timed(arm, calls)[0])
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

        Housekeeping (the young-generation collection, the look's spot-check schedule) runs
        first, then the deadline check: it stops early, before a pair (or before the untimed
        calls), once the run's clock reaches ``deadline_ns``, so no call starts after it.
        """
        self._require_entered()
        check_int("n_pairs", n_pairs, minimum=0)
        if n_pairs == 0:
            return 0
        if self._counts_at_start is None:
            self._counts_at_start = _dynamo_counts()
        # between looks, outside any timed region: collect what the paused collector let pile up
        self._collect(deadline_ns)
        start = self.n_pairs
        picked = spot_calls(
            n_pairs,
            self._spot_rate,
            self._spot_seed + self._looks,
            first_pair=start,
            n_batches=len(self._inputs),
        )
        self._looks += 1
        # one untimed call per arm, the next pair's first arm last, so that no arm starts the
        # look warm from its own call (each pair's first call follows the other model)
        first = "baseline" if self._baseline_first(start) else "candidate"
        second = "candidate" if first == "baseline" else "baseline"
        if self._past(deadline_ns):
            return 0
        self._untimed(second, start)
        self._untimed(first, start)
        done = 0
        while done < n_pairs:
            if self._past(deadline_ns):
                break
            index = self.n_pairs
            first, second = (
                ("baseline", "candidate")
                if self._baseline_first(index)
                else ("candidate", "baseline")
            )
            check = done in picked
            results = {
                first: self._timed(first, index, check=check),
                second: self._timed(second, index, check=check),
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
    batches: Sequence[Sample | tuple[Any, Any]] | None = None,
) -> PairedTimings:
    """Warm up both arms, then time ``n_pairs`` interleaved pairs (quads ABBA or BAAB at random).

    ``config`` is a :class:`~aitune_fp.core.config.ProfilingConfig` (warm-up and threads);
    ``batches`` (replacing ``batch``): pair ``i`` runs on ``batches[i % len(batches)]``.
    """
    with InterleavedRun(
        baseline, candidate, batch, timer=timer, threads=config.threads, batches=batches
    ) as run:
        run.warm_up(
            window=config.warmup_window,
            tolerance=config.warmup_tolerance,
            max_calls=config.warmup_max_calls,
        )
        run.extend(n_pairs)
        return run.timings()
