"""Timed calls of inference callables on CPU or CUDA: timing values only, no decisions.

What is timed is the wall time of one call as a user experiences it: on CUDA the device is
synchronised before and after the call, so launch overhead is included (CUDA events around the
call also give the device time); on CPU a monotonic nanosecond clock brackets the call. Calls run
under ``torch.no_grad()`` with the same intra-op thread count for both arms.

Inputs are prepared before any clock starts: every call gets its own fresh copy of its batch,
made before the clock starts (in a worker, by the worker, on an untimed request), so a model that
changes its input in place sees the same values on every call. The output of a call is released
after the clock stops, so freeing it is not timed either. Given several ``batches``, pair ``i``
runs both arms on batch ``i % len(batches)``
(the pair stays paired; a candidate that caches outputs by input shape meets distinct data).
Pairs run in quads, ABBA or BAAB, each quad's orientation drawn from a seeded random stream
(:func:`quad_orientations`), so that interference in phase with a fixed order cannot land on one
arm only.

One concept per module, every public name re-exported here:

- :mod:`~aitune_fp.profiling.timers`: the :class:`Timer` protocol, CPU and CUDA clocks,
  ``host_bound``;
- :mod:`~aitune_fp.profiling.threads`: threads, cores and load (``oversubscribed``);
- :mod:`~aitune_fp.profiling.calls`: one timed call, spot checks, :func:`time_calls`;
- :mod:`~aitune_fp.profiling.interleaved`: :class:`InterleavedRun` and :func:`compare`;
- :mod:`~aitune_fp.profiling.layout`: timed blocks' size and the ABBA / BAAB quads;
- :mod:`~aitune_fp.profiling.cache`: :func:`l2_flusher` for ``cache="cold"`` (CUDA).

``usable_cpus``, ``load_average`` and ``dynamo_counts`` are read from this package at call
time, so replacing them here (``monkeypatch.setattr(profiling, ...)``) reaches every caller.
"""

from __future__ import annotations

from aitune_fp.profiling.cache import l2_flusher
from aitune_fp.profiling.calls import (
    ProfilingError,
    ReferenceSpotCheck,
    SpotCheck,
    SpotCheckError,
    as_batches,
    gc_paused,
    spot_calls,
    time_calls,
)
from aitune_fp.profiling.interleaved import (
    InterleavedRun,
    PairedTimings,
    WarmupReport,
    compare,
)
from aitune_fp.profiling.interleaved import dynamo_counts as dynamo_counts
from aitune_fp.profiling.layout import pair_order, quad_orientations
from aitune_fp.profiling.threads import (
    CpuEnvironment,
    cpu_environment,
    intra_op_threads,
    is_oversubscribed,
    load_average,
    set_threads,
    usable_cpus,
)
from aitune_fp.profiling.timers import (
    HOST_BOUND_FACTOR,
    CpuTimer,
    CudaTimer,
    DeviceSpan,
    ReportedClock,
    Timer,
    has_device_clock,
    is_host_bound,
    timer_for,
)

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
    "ReportedClock",
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
    "l2_flusher",
    "load_average",
    "pair_order",
    "quad_orientations",
    "set_threads",
    "spot_calls",
    "time_calls",
    "timer_for",
    "usable_cpus",
]
