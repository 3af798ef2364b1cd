"""The point rule, AITune's: eager measured once up front, the candidate later; no interval."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from aitune_fp.core._checks import check_int
from aitune_fp.core.config import MAX_CALLS, ProfilingConfig
from aitune_fp.core.messages import fmt_apart
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.core.results import Decision
from aitune_fp.core.speedup import compute_speedup
from aitune_fp.core.spot import DEFAULT_SPOT_RATE
from aitune_fp.core.timings import throughput_from_latencies
from aitune_fp.inputs import Sample
from aitune_fp.measure.measurement import (
    Comparison,
    Measurement,
    OnLook,
    assemble,
    closeness_of,
    collecting,
    raw_latencies,
    run_context,
)
from aitune_fp.profiling import threads as host
from aitune_fp.profiling.calls import ReferenceSpotCheck, SpotCheck, time_calls
from aitune_fp.profiling.timers import Timer

#: Where the candidate's fresh draws start: eager's up-front calls take the numbers below it
#: (at most ``MAX_CALLS`` steps), so no two timed calls share input values.
CANDIDATE_DRAWS = MAX_CALLS


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
    fresh: Callable[[int], Sample] | None = None,
    reference: Callable[..., Any] | None = None,
) -> tuple[float, tuple[float, ...]]:
    """AITune's point-mode arm: (samples/s from the mean latency, per-call latencies in s)."""
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
        fresh=fresh,
        reference=reference,
    )
    return throughput_from_latencies(latencies, size), latencies


def compare_point(c: Comparison, on_look: OnLook | None = None) -> Measurement:
    """AITune's rule: ``eager_latencies`` (measured now when None), the candidate later."""
    size, config, timer = c.size, c.config, c.timer
    env = host.cpu_environment(config.threads)
    start = timer.now_ns()
    base = c.eager_latencies
    if base is None:
        _, base = measure_baseline_point(
            c.eager, c.batch, size, config, timer=timer, batches=c.batches, fresh=c.fresh
        )
    base = tuple(base)
    baseline_throughput = throughput_from_latencies(base, size)  # checked before the candidate
    seen: list[Mismatch] = []  # how close each spot check came
    fresh = c.fresh  # the candidate's timed call ``i`` on draw ``CANDIDATE_DRAWS + i``
    _, cand = measure_baseline_point(
        c.candidate,
        c.batch,
        size,
        config,
        timer=timer,
        arm="candidate",
        spot_check=collecting(c.spot_check, seen),
        batches=c.batches,
        references=c.references,
        spot_rate=c.spot_rate,
        spot_seed=c.spot_seed,
        fresh=None if fresh is None else (lambda i: fresh(CANDIDATE_DRAWS + i)),
        reference=c.eager,
    )
    speedup = compute_speedup(throughput_from_latencies(cand, size), baseline_throughput)
    passed = c.gate.passes(speedup)
    shown, need = fmt_apart(speedup, c.gate.required_speedup)
    import torch

    threads = config.threads if config.threads is not None else torch.get_num_threads()
    raw = raw_latencies(base, cand, None)
    context = run_context(env, host.load_average(), threads, isolation=c.isolation, raw=raw)
    wall_s = (timer.now_ns() - start) / 1e9
    decided = Decision(
        rule="point",
        verdict="faster" if passed else "not_faster",
        n_baseline=len(base),
        n_candidate=len(cand),
        batch_size=size,
        required_speedup=c.gate.required_speedup,
        reason=(
            f"point speedup {shown}x {'>=' if passed else '<'} required {need}x "
            f"({len(cand)} timed calls, baseline measured once before the candidate)"
        ),
    )
    result = assemble(c.description, base, cand, size, decided, context, closeness_of(c, seen))
    return Measurement(result=result, decision=None, wall_s=wall_s, threads=threads)
