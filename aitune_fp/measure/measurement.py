"""What measuring one candidate gives back, and the CPU context every rule's result carries.

:class:`Measurement` is the value both rules return; :func:`_in_context` adds the threads, cores,
load and ``oversubscribed`` flag to its result, the same way for the statistical and point rules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.gate import Gate
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.core.spot import DEFAULT_SPOT_RATE
from aitune_fp.core.verdict import SpeedupDecision
from aitune_fp.inputs import Sample
from aitune_fp.profiling import (
    CpuEnvironment,
    ReferenceSpotCheck,
    SpotCheck,
    Timer,
    is_oversubscribed,
)

__all__ = ["Comparison", "Measurement", "OnLook"]


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


#: Called at each look of the statistical mode with the pairs timed so far and the decision.
OnLook = Callable[[int, SpeedupDecision], None]


@attrs.frozen(kw_only=True)
class Comparison:
    """One candidate against eager: what every decision rule compares, on what, against which gate.

    ``eager_latencies``: eager's latencies measured once up front (the point rule reuses them,
    as AITune does; the statistical rule refuses them: it times eager alongside). ``batches``
    (replacing ``batch``) are timed in turn; ``spot_check`` sees candidate outputs while timing,
    against ``references`` (eager's output on each batch) when given, at ``spot_rate`` seeded
    ``spot_seed``.
    """

    eager: Callable[..., Any]
    candidate: Callable[..., Any]
    batch: Sample
    size: int
    config: ProfilingConfig
    gate: Gate
    timer: Timer
    description: str = "candidate"
    eager_latencies: Sequence[float] | None = None
    spot_check: SpotCheck | ReferenceSpotCheck | None = None
    batches: Sequence[Sample | tuple[Any, Any]] | None = None
    references: Sequence[Any] | None = None
    spot_rate: float = DEFAULT_SPOT_RATE
    spot_seed: int = 0


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
