"""What measuring one candidate gives back, and what every rule's result is built from."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.core.results import (
    Accuracy,
    Decision,
    Device,
    Environment,
    PerformanceValidationResult,
    Raw,
)
from aitune_fp.core.speedup import Gate, compute_speedup
from aitune_fp.core.spot import DEFAULT_SPOT_RATE
from aitune_fp.core.timings import throughput_from_latencies
from aitune_fp.core.verdict import SpeedupDecision
from aitune_fp.inputs import Sample
from aitune_fp.profiling.calls import ReferenceSpotCheck, SpotCheck
from aitune_fp.profiling.threads import CpuEnvironment, is_oversubscribed
from aitune_fp.profiling.timers import Timer


@attrs.frozen(kw_only=True)
class Measurement:
    """One candidate measured against eager: its result record plus how the loop ran.

    ``decision``: the statistical decision (None in point mode); ``wall_s``: warm-up included.
    """

    result: PerformanceValidationResult
    decision: SpeedupDecision | None
    wall_s: float
    threads: int | None = None


#: Called at each look of the statistical mode with the pairs timed so far and the decision.
OnLook = Callable[[int, SpeedupDecision], None]


@attrs.frozen(kw_only=True)
class Comparison:
    """One candidate against eager: what every decision rule compares, on what, at which gate."""

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
    mismatch: Mismatch | None = None
    #: Where the candidate runs (``process``: both arms are workers; the result records it).
    isolation: str | None = None
    #: New values for every timed call, by draw number (None: the ``batches`` in turn).
    fresh: Callable[[int], Sample] | None = None


@attrs.frozen(kw_only=True)
class RunContext:
    """Where and how a comparison ran: extra flags, a note for the reason, and result parts."""

    flags: tuple[str, ...] = ()
    note: str | None = None
    environment: Environment = attrs.field(factory=Environment)
    device: Device = attrs.field(factory=Device)
    raw: Raw = attrs.field(factory=Raw)


def raw_latencies(
    baseline_s: Sequence[float],
    candidate_s: Sequence[float],
    start: int | None,
    block: int = 1,
    candidate_block: int | None = None,
) -> Raw:
    """A comparison's raw timings, from pair ``start`` (None: unpaired), ``block`` calls each."""
    return Raw(
        latencies_from=start if baseline_s else None,
        baseline_latencies_s=tuple(baseline_s),
        candidate_latencies_s=tuple(candidate_s),
        latencies_block=block,
        candidate_latencies_block=None if candidate_block == block else candidate_block,
    )


def run_context(
    env: CpuEnvironment,
    load_end: float | None,
    threads: int | None,
    *,
    clock: str | None = None,
    flags: Sequence[str] = (),
    note: str | None = None,
    isolation: str | None = None,
    device: Device | None = None,
    raw: Raw | None = None,
) -> RunContext:
    """The CPU environment, the clock, extra flags and ``oversubscribed``, alike for every rule."""
    threads = threads if threads is not None else env.threads
    extra = list(flags)
    if is_oversubscribed((env.load_avg_1m, load_end), cpus=env.cpus, threads=threads):
        extra.append("oversubscribed")
    return RunContext(
        flags=tuple(extra),
        note=note,
        environment=Environment(
            threads=threads,
            interop_threads=env.interop_threads,
            omp_num_threads=env.omp_num_threads,
            cpus=env.cpus,
            load_avg_start=env.load_avg_1m,
            load_avg_end=load_end,
            clock=clock,
            isolation=isolation,
        ),
        device=device or Device(),
        raw=raw or Raw(),
    )


def collecting(
    check: SpotCheck | ReferenceSpotCheck | None, seen: list[Mismatch]
) -> SpotCheck | ReferenceSpotCheck | None:
    """``check``, keeping each :class:`Mismatch` it returns in ``seen`` (how close each spot came)."""
    if check is None:
        return None

    def collect(*args: Any) -> None:
        found = check(*args)
        if isinstance(found, Mismatch):
            seen.append(found)

    return collect


def closeness_of(c: Comparison, seen: Sequence[Mismatch]) -> Mismatch | None:
    """The worst of the comparison's own ``mismatch`` and the spot checks' (None: neither)."""
    parts = [*([] if c.mismatch is None else [c.mismatch]), *seen]
    return Mismatch.combine(parts) if parts else None


def assemble(
    description: str,
    base_s: Sequence[float],
    cand_s: Sequence[float],
    size: int,
    decided: Decision,
    context: RunContext,
    mismatch: Mismatch | None,
) -> PerformanceValidationResult:
    """The one result of a comparison from its parts; the context's flags and note join the decision's."""
    baseline_throughput = throughput_from_latencies(base_s, size)
    throughput = throughput_from_latencies(cand_s, size)
    note, reason = context.note, decided.reason
    if note is not None:
        reason = f"{reason} ({note})" if reason else note
    return PerformanceValidationResult(
        description,
        throughput,
        baseline_throughput,
        compute_speedup(throughput, baseline_throughput),
        decided.verdict == "faster",
        decided=attrs.evolve(decided, reason=reason, flags=(*decided.flags, *context.flags)),
        environment=context.environment,
        device=context.device,
        accuracy=Accuracy() if mismatch is None else mismatch.accuracy(),
        raw=context.raw,
    )
