"""Opening a tune: eager (built or adopted), the operating point and the timing inputs."""

from __future__ import annotations

import copy
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import attrs
import torch

from aitune_fp import events
from aitune_fp.backends import TorchEagerBackend
from aitune_fp.core.budget import plan_budget
from aitune_fp.core.config import for_batch_size
from aitune_fp.core.messages import one_line
from aitune_fp.correctness import degenerate_outputs, eager_noise_floor
from aitune_fp.errors import (
    InvalidStateError,
    InvalidValueError,
)
from aitune_fp.inputs import GraphSpec, Sample, as_sample, copy_sample
from aitune_fp.isolation.domain import embedding_limits
from aitune_fp.isolation.heldout import heldout_batches
from aitune_fp.pipeline.stages import fresh_batches, held_out
from aitune_fp.pipeline.values import (
    BASELINE_DIR,
    BUILD,
    append_failure_log,
    describe,
    has_lazy,
    infer_of,
)
from aitune_fp.pipeline.workers import start_eager

if TYPE_CHECKING:
    from aitune_fp.pipeline.tune import TuneSession


def _free_bytes(module: torch.nn.Module) -> float:
    """Free memory where ``module`` lives (CUDA: the device's; else the host's; inf: unknown)."""
    first = next(iter([*module.parameters(), *module.buffers()]), None)
    try:
        if first is not None and first.device.type == "cuda":
            return float(torch.cuda.mem_get_info(first.device)[0])
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError, RuntimeError):
        return math.inf


def private_eager(baseline: Any, module: torch.nn.Module) -> tuple[Any, events.EagerIsolation]:
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


def resolve_batch_size(session: TuneSession) -> int:
    """The batch size to validate at: the graph spec's max, or the largest of ``batch_sizes``."""
    assert session.options is not None
    config = session.options.profiling_config
    spec_max = session.target.graph_spec.get_max_batch_size()
    if not config.batching:
        return 1
    if not config.batch_sizes:
        return spec_max
    size = max(config.batch_sizes)
    if size > spec_max:
        raise InvalidValueError(
            f"profiling_config.batch_sizes asks for batch size {size}, above the graph "
            f"spec's max_batch_size {spec_max}"
        )
    return size


def open_baseline(
    session: TuneSession, *, baseline: Any = BUILD, batch_size: int | None = None
) -> None:
    """Emit ``started``, then build (or adopt ``baseline``) and measure eager; never raises."""
    assert session.options is not None
    t = session.target
    try:
        session.batch_size = resolve_batch_size(session) if batch_size is None else batch_size
        session.config = for_batch_size(session.options.profiling_config, session.batch_size)
        if session.isolation == "process" and session.config.threads is None:
            # without --threads workers are forked at one thread, and eager here runs the same,
            # named (docs/threads.md: more threads in workers read sub-millisecond calls wrong)
            session.config = attrs.evolve(session.config, threads=1)
    finally:
        session.emit(
            events.started(
                session.run_id,
                t.name,
                strategy=session.strategy,
                device=str(t.device),
                decision=session.rule.name,
                min_speedup_threshold_percent=session.options.min_speedup_threshold_percent,
                required_speedup=session.options.required_speedup,
                batch_size=session.batch_size,
                cpu=events.cpu_environment(session.config.threads),
                isolation=session.isolation,
                isolation_note=session.isolation_note,
            )
        )
    session.take_model()
    assert session.guards is not None
    if session.guards.was_training:
        session.emit(
            events.eval_mode(
                session.run_id, t.name, n_training_modules=len(session.guards.was_training)
            )
        )
    adopted = baseline is not BUILD
    description = (
        describe(baseline) if adopted and baseline is not None else TorchEagerBackend().describe()
    )
    folder = t.cache_dir / BASELINE_DIR
    start = time.perf_counter()
    try:
        if not t.data:
            raise InvalidValueError(f"data for {t.name!r} must hold at least one sample, got none")
        session.batch = copy_sample(
            t.graph_spec.make_batch(as_sample(t.data[0]), session.batch_size)
        )
        if adopted:
            if baseline is None:
                raise InvalidStateError(
                    f"the eager baseline of {session.strategy} failed to build (see its log)"
                )
            session.baseline = baseline
        else:
            session.phase(description, "baseline_build")
            spec = cast(GraphSpec, t.graph_spec)  # the built-in path's own graph spec
            session.baseline = TorchEagerBackend().build(
                t.module, spec, list(t.data), t.device, folder
            )
        if has_lazy(t.module):  # materialise its parameters before copying them
            reference_output(infer_of(session.baseline), session.batch)
        # eager's calls here (up-front, references) run on a copy: the user's model is never
        # called by the tune, so one that changes its own state comes back as it came; with
        # workers, eager is timed in a worker started from that copy
        session.eager, copied = private_eager(session.baseline, t.module)
        session.eager_isolation = "process" if session.isolation == "process" else copied
        session.phase(description, "baseline_measure")
        eager = infer_of(session.eager)
        session.batches = timing_batches(session, session.batch)
        throughput, latencies = session.rule.measure_eager(
            eager,
            session.batch,
            session.batch_size,
            session.config,
            timer=session.timer,
            batches=session.batches,
            fresh=fresh_batches(session.batch, session.heldout_seed, t.graph_spec),
        )
        if not (math.isfinite(throughput) and throughput > 0):
            raise InvalidStateError(f"eager baseline throughput is {throughput!r} samples/s")
        session.reference_outputs = tuple(reference_output(eager, b) for b in session.batches)
        session.id_limits = embedding_limits(eager, session.batch)  # before held-out draws
        session.heldout()  # drawn now: a user's input generator that fails fails the baseline
        noise = calibrate_noise(session)  # never raises: a model without a float64 copy notes it
        session.settle_guards()
        if session.isolation == "process":
            session.baseline_latencies = latencies  # what a call's deadline derives from
            start_eager(session)  # forked now: before any candidate code ran anywhere
            if session.eager_worker is None:  # it could not start: eager stays on its copy
                session.eager_isolation = copied
    except Exception as exc:
        path = append_failure_log(folder / "error.log", "Eager baseline failed", exc)
        session.baseline_error = f"{type(exc).__name__}: {one_line(exc)}"
        session.baseline = session.eager = (
            None  # an eager baseline that cannot be measured is no fallback
        )
        session.emit(
            events.baseline_failed(
                session.run_id,
                t.name,
                error_type=type(exc).__name__,
                reason=one_line(exc),
                traceback_path=path,
            )
        )
        return
    session.baseline_throughput, session.baseline_latencies = throughput, latencies
    session.emit(
        events.baseline_measured(
            session.run_id,
            t.name,
            backend_description=description,
            batch_size=session.batch_size,
            throughput_samples_per_s=throughput,
            n_calls=len(latencies),
            duration_s=time.perf_counter() - start,
            decision=session.rule.name,
            eager_isolation=session.eager_isolation,
            degenerate_outputs=degenerate_outputs(
                _checked_outputs(session, eager), session.closeness.budget(None)
            ),
            budget_plan=_plan(session, latencies),
            **noise,
        )
    )


def _plan(session: TuneSession, latencies: Sequence[float]) -> str | None:
    """What each candidate's budget buys at eager's median call time (statistical rule)."""
    positive = sorted(x for x in latencies if x > 0)
    if session.rule.name != "statistical" or not positive:
        return None
    config = session.config
    return plan_budget(
        positive[len(positive) // 2], max_seconds=config.max_seconds, looks=config.looks
    ).text()


def calibrate_noise(session: TuneSession) -> dict[str, Any]:
    """With ``Closeness(calibrate=True)``, adopt eager's float32-vs-float64 noise.

    Returns the ``baseline_measured`` fields; uncopyable to float64: the dtype floors stay.
    """
    closeness = session.closeness
    if not closeness.calibrate:  # a floor the caller measured is recorded as it is
        given = closeness.noise_floor
        return (
            {}
            if given is None
            else {"noise_floor_rel_l2": given.worst, "noise_floor": given.to_dict()}
        )
    if session.eager_isolation == "shared":
        return {"noise_floor_note": "not measured: the model is too large to copy to float64"}
    t = session.target
    try:
        floor = eager_noise_floor(t.module, list(t.data), graph_spec=t.graph_spec)
    except Exception as exc:
        return {"noise_floor_note": f"not measured: {type(exc).__name__}: {one_line(exc)}"}
    if closeness.noise_floor is not None:  # a floor the caller measured: the larger of both
        floor = closeness.noise_floor.merge(floor)
    session.closeness = attrs.evolve(closeness, noise_floor=floor)
    return {"noise_floor_rel_l2": floor.worst, "noise_floor": floor.to_dict()}


def timing_batches(session: TuneSession, batch: Sample) -> tuple[Sample, ...]:
    """The timing batch and two held-out batches from it (catches replayed earlier outputs)."""
    spec = session.target.graph_spec
    return (batch, *held_out(heldout_batches, batch, 2, seed=session.heldout_seed, graph_spec=spec))


#: How many of the correctness check's inputs the degenerate-output rule reads eager's outputs on.
_DEGENERATE_INPUTS = 6


def _checked_outputs(session: TuneSession, eager: Callable[..., Any]) -> tuple[Any, ...]:
    """Eager's outputs on the correctness check's inputs (recorded, then held-out).

    Not the timing batches: near-copies on which a smooth model's outputs hardly move.
    """
    inputs = (*session.target.data, *session.heldout())[:_DEGENERATE_INPUTS]
    return tuple(reference_output(eager, as_sample(s)) for s in inputs)


def reference_output(eager: Callable[..., Any], batch: Sample) -> Any:
    """Eager's output on the timing batch: what every spot check while timing compares with."""
    with torch.no_grad():
        return copy_sample(batch).call(eager)
