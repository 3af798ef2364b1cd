"""Opening a tune: eager (built or adopted), the operating point and the timing inputs."""

from __future__ import annotations

import copy
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import attrs
import torch

from aitune_fp.backends.eager import TorchEagerBackend
from aitune_fp.core.config import ProfilingConfig, for_batch_size, plan_budget
from aitune_fp.core.messages import one_line
from aitune_fp.core.results import IsolationMode
from aitune_fp.correctness.closeness import Closeness
from aitune_fp.correctness.noise import degenerate_outputs, eager_noise_floor
from aitune_fp.errors import (
    InvalidStateError,
    InvalidValueError,
)
from aitune_fp.events.kinds import ABSENT, EagerIsolation, Event
from aitune_fp.events.validation import BaselineFailed as BaselineFailedEvent
from aitune_fp.events.validation import BaselineMeasured, Started
from aitune_fp.inputs import GraphSpec, Sample, as_sample, copy_sample
from aitune_fp.isolation.domain import embedding_limits
from aitune_fp.isolation.heldout import heldout_batches
from aitune_fp.pipeline.stages import Arena, checked_inputs, fresh_batches, held_out
from aitune_fp.pipeline.values import (
    BASELINE_DIR,
    BUILD,
    Opened,
    TuneTarget,
    ValidationOptions,
    append_failure_log,
    describe,
    has_lazy,
    infer_of,
)
from aitune_fp.profiling.layout import LEAD_FROM, block_calls
from aitune_fp.profiling.serving import fork_server_ready
from aitune_fp.profiling.threads import cpu_environment


def _free_bytes(module: torch.nn.Module) -> float:
    """Free memory where ``module`` lives (CUDA: the device's; else the host's; inf: unknown)."""
    first = next(iter([*module.parameters(), *module.buffers()]), None)
    try:
        if first is not None and first.device.type == "cuda":
            return float(torch.cuda.mem_get_info(first.device)[0])
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError, RuntimeError):
        return math.inf


def private_eager(baseline: Any, module: torch.nn.Module) -> tuple[Any, EagerIsolation]:
    """A copy of eager (model included) no candidate can reach, so none can slow eager down.

    Copied when the model takes at most half the free memory there; else ``shared`` (guarded).
    """
    size = sum(t.numel() * t.element_size() for t in [*module.parameters(), *module.buffers()])
    if 2 * size > _free_bytes(module):
        return baseline, "shared"
    try:
        return copy.deepcopy(baseline), "private_copy"
    except Exception:  # a baseline that cannot be copied: eager shares the user's model
        return baseline, "shared"


def operating_point(
    options: ValidationOptions, target: TuneTarget, isolation: IsolationMode, size: int | None
) -> tuple[int, ProfilingConfig]:
    """The batch size to validate at and the config narrowed to it (workers at torch's threads).

    By default the graph spec's max batch size, or the largest of ``batch_sizes``.
    """
    config, spec_max = options.profiling_config, target.graph_spec.get_max_batch_size()
    if size is None:
        size = max(config.batch_sizes or (spec_max,)) if config.batching else 1
        if size > spec_max:
            raise InvalidValueError(
                f"profiling_config.batch_sizes asks for batch size {size}, above the graph "
                f"spec's max_batch_size {spec_max}"
            )
    config = for_batch_size(config, size)
    if isolation == "process" and config.threads is None:  # the count this process runs
        config = attrs.evolve(config, threads=torch.get_num_threads())
    return size, config


def started(arena: Arena, strategy: str, isolation_note: str | None) -> Event:
    """The tune's ``started`` event: strategy, device, rule, gate, batch, threads, isolation."""
    assert arena.gate is not None
    return Started(
        run_id=arena.run_id,
        module_name=arena.target.name,
        strategy=strategy,
        device=str(arena.target.device),
        decision=arena.rule.name,
        min_speedup_threshold_percent=arena.gate.threshold_percent,
        required_speedup=arena.gate.required_speedup,
        batch_size=arena.batch_size,
        **cpu_environment(arena.config.threads).to_fields(),
        isolation=arena.isolation,
        isolation_note=ABSENT if isolation_note is None else isolation_note,
    ).to_event()


@attrs.frozen
class BaselineFailed:
    """Opening the baseline failed: why, and the ``baseline_failed`` event that says it."""

    error: str
    event: Event


def open_eager(arena: Arena, baseline: Any, strategy: str) -> Opened | BaselineFailed:
    """Build (or adopt) eager and measure it at the arena's operating point; never raises.

    ``baseline``: an eager baseline built elsewhere (AITune's ``strategy``'s) to adopt instead
    of building one; None adopts one that failed to build there.
    """
    t = arena.target
    adopted = baseline is not BUILD
    description = (
        describe(baseline) if adopted and baseline is not None else TorchEagerBackend().describe()
    )
    folder = t.cache_dir / BASELINE_DIR
    start = time.perf_counter()
    try:
        if not t.data:
            raise InvalidValueError(f"data for {t.name!r} must hold at least one sample, got none")
        assert arena.batch_size is not None
        batch = copy_sample(t.graph_spec.make_batch(as_sample(t.data[0]), arena.batch_size))
        if adopted:
            if baseline is None:
                raise InvalidStateError(
                    f"the eager baseline of {strategy} failed to build (see its log)"
                )
        else:
            arena.phase(description, "baseline_build")
            spec = cast(GraphSpec, t.graph_spec)  # the built-in path's own graph spec
            baseline = TorchEagerBackend().build(t.module, spec, list(t.data), t.device, folder)
        if has_lazy(t.module):  # materialise its parameters before copying them
            reference_output(infer_of(baseline), batch)
        # eager's calls here (up-front, references) run on a copy: the user's model is never
        # called by the tune, so one that changes its own state comes back as it came; with
        # workers, eager is timed in a worker started from that copy
        eager, copied = private_eager(baseline, t.module)
        arena.phase(description, "baseline_measure")
        fork_server_ready()  # its preload beside eager's up-front calls read them 4-6x slow
        call = infer_of(eager)
        # the timing batch and two held-out ones from it (catches replayed earlier outputs)
        batches = (
            batch,
            *held_out(heldout_batches, batch, 2, seed=arena.seed, graph_spec=t.graph_spec),
        )
        throughput, latencies = arena.rule.measure_eager(
            call,
            batch,
            arena.batch_size,
            arena.config,
            timer=arena.timer_on(batch),
            batches=batches,
            fresh=fresh_batches(batch, arena.seed, t.graph_spec),
        )
        if not (math.isfinite(throughput) and throughput > 0):
            raise InvalidStateError(f"eager baseline throughput is {throughput!r} samples/s")
        references = tuple(reference_output(call, b) for b in batches)
        id_limits = embedding_limits(call, batch)  # before held-out draws
        # drawn now: a user's input generator that fails fails the baseline
        heldout = checked_inputs(arena, arena.seed, id_limits)
        shared = copied == "shared" and arena.isolation != "process"
        closeness, noise = calibrate_noise(arena, shared)  # never raises: notes why not
    except Exception as exc:
        path = append_failure_log(folder / "error.log", "Eager baseline failed", exc)
        event = BaselineFailedEvent(
            run_id=arena.run_id,
            module_name=t.name,
            error_type=type(exc).__name__,
            reason=one_line(exc),
            traceback_path=path,
        ).to_event()
        return BaselineFailed(f"{type(exc).__name__}: {one_line(exc)}", event)
    return Opened(
        description=description,
        batch=batch,
        baseline=baseline,
        eager=eager,
        copied=copied,
        batches=batches,
        references=references,
        id_limits=id_limits,
        heldout=heldout,
        closeness=closeness,
        throughput=throughput,
        latencies=tuple(latencies),
        noise=noise,
        duration_s=time.perf_counter() - start,
    )


def measured(arena: Arena, opened: Opened, eager_isolation: EagerIsolation) -> Event:
    """The ``baseline_measured`` event of ``opened``, eager run as ``eager_isolation`` says."""
    assert arena.batch_size is not None
    eager = infer_of(opened.eager)
    inputs = (*arena.target.data, *opened.heldout)[:_DEGENERATE_INPUTS]
    outputs = tuple(reference_output(eager, as_sample(s)) for s in inputs)
    degenerate = degenerate_outputs(outputs, opened.closeness.budget(None))
    plan = _plan(arena, opened.latencies)
    return BaselineMeasured(
        run_id=arena.run_id,
        module_name=arena.target.name,
        backend_description=opened.description,
        batch_size=arena.batch_size,
        throughput_samples_per_s=opened.throughput,
        n_calls=len(opened.latencies),
        duration_s=opened.duration_s,
        decision=arena.rule.name,
        eager_isolation=eager_isolation,
        degenerate_outputs=ABSENT if degenerate is None else degenerate,
        budget_plan=ABSENT if plan is None else plan,
        **opened.noise,
    ).to_event()


def _plan(arena: Arena, latencies: Sequence[float]) -> str | None:
    """What each candidate's budget buys at eager's median call time (statistical rule)."""
    positive = sorted(x for x in latencies if x > 0)
    if arena.rule.name != "statistical" or not positive:
        return None
    config, call_s = arena.config, positive[len(positive) // 2]
    block = block_calls(call_s) if config.quantity == "throughput" else 1
    calls = block + (block >= LEAD_FROM)  # a block's untimed lead runs too
    return plan_budget(
        call_s, max_seconds=config.max_seconds, looks=config.looks, calls=calls
    ).text()


def calibrate_noise(arena: Arena, shared: bool) -> tuple[Closeness, dict[str, Any]]:
    """With ``Closeness(calibrate=True)``, adopt eager's float32-vs-float64 noise.

    Returns the closeness and the ``baseline_measured`` fields (why not, when not measured).
    """
    closeness, floor = arena.closeness, arena.closeness.noise_floor
    if closeness.calibrate:  # else a floor the caller measured is recorded as it is
        if shared:
            return closeness, {
                "noise_floor_note": "not measured: the model is too large to copy to float64"
            }
        t = arena.target
        try:
            found = eager_noise_floor(t.module, list(t.data), graph_spec=t.graph_spec)
        except Exception as exc:
            return closeness, {
                "noise_floor_note": f"not measured: {type(exc).__name__}: {one_line(exc)}"
            }
        floor = found if floor is None else floor.merge(found)  # with the caller's: the larger
        closeness = attrs.evolve(closeness, noise_floor=floor)
    if floor is None:
        return closeness, {}
    return closeness, {"noise_floor_rel_l2": floor.worst, "noise_floor": floor.to_dict()}


#: How many of the correctness check's inputs the degenerate-output rule reads eager's outputs on.
_DEGENERATE_INPUTS = 6


def reference_output(eager: Callable[..., Any], batch: Sample) -> Any:
    """Eager's output on the timing batch: what every spot check while timing compares with."""
    with torch.no_grad():
        return copy_sample(batch).call(eager)
