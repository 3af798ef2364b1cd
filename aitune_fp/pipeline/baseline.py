"""Opening a tune: the eager baseline, built or adopted, and what comparisons time on.

The operating point, the private copy of eager that candidates cannot reach, and the inputs
every comparison is timed on (the batch and held-out batches).
"""

from __future__ import annotations

import copy
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import attrs
import torch

from aitune_fp.backends.eager import TorchEagerBackend
from aitune_fp.core.budget import plan_budget
from aitune_fp.core.config import for_batch_size
from aitune_fp.core.messages import one_line
from aitune_fp.correctness.degenerate import degenerate_outputs
from aitune_fp.correctness.noise import eager_noise_floor
from aitune_fp.errors import (
    InvalidStateError,
    InvalidValueError,
)
from aitune_fp.events.baseline import baseline_failed, baseline_measured
from aitune_fp.events.names import EagerIsolation
from aitune_fp.events.validation import eval_mode, started
from aitune_fp.inputs import GraphSpec, Sample, as_sample, copy_sample
from aitune_fp.isolation.domain import embedding_limits
from aitune_fp.isolation.heldout import heldout_batches
from aitune_fp.pipeline.guarding import settle_guard
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
from aitune_fp.profiling.threads import cpu_environment

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


def private_eager(baseline: Any, module: torch.nn.Module) -> tuple[Any, EagerIsolation]:
    """A copy of the eager baseline, its model with it, that no candidate can reach.

    Eager is timed and used as the reference on this copy, so a candidate that slows the user's
    model down (a hook, a replaced ``forward``) cannot make itself look faster. The rule: copy
    when the model's tensors take at most half of the free memory where they live; otherwise
    (or when the baseline cannot be copied) eager runs on the user's model (``shared``) and the
    model guard is what catches such a change.
    """
    size = sum(t.numel() * t.element_size() for t in [*module.parameters(), *module.buffers()])
    if 2 * size > _free_bytes(module):
        return baseline, "shared"
    try:
        return copy.deepcopy(baseline), "private_copy"
    except Exception:  # a baseline that cannot be copied: eager shares the user's model
        return baseline, "shared"


def resolve_batch_size(session: TuneSession) -> int:
    """The batch size to validate at: the graph spec's max, or what the config narrows to.

    ``batching=False`` validates the raw sample (batch size 1); ``batch_sizes`` picks the
    largest of them, which must fit the graph spec.
    """
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
    """Emit ``started``, then build (or adopt) and measure the eager baseline; never raises.

    ``baseline``: an eager baseline built elsewhere (AITune's) to adopt instead of building
    one; None adopts one that failed to build there. ``batch_size``: an operating point
    chosen elsewhere (default: the graph spec's max, narrowed by the config).
    """
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
            started(
                session.run_id,
                t.name,
                strategy=session.strategy,
                device=str(t.device),
                decision=session.rule.name,
                min_speedup_threshold_percent=session.options.min_speedup_threshold_percent,
                required_speedup=session.options.required_speedup,
                batch_size=session.batch_size,
                cpu=cpu_environment(session.config.threads),
                isolation=session.isolation,
                isolation_note=session.isolation_note,
            )
        )
    session.take_model()
    if session.was_training:
        session.emit(
            eval_mode(session.run_id, t.name, n_training_modules=len(session.was_training))
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
        settle_guard(session)
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
            baseline_failed(
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
        baseline_measured(
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
    """With ``Closeness(calibrate=True)``: measure eager's own noise floor, adopt it for the tune.

    float32 eager against a float64 copy on the recorded samples (``eager_noise_floor``); every
    candidate's norm budgets then use it. Returns the ``baseline_measured`` fields (none when
    not asked and none given). A model that cannot be copied to float64, or too large to copy, is not
    calibrated: the fields say why, and the tune goes on with the dtype floors.
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
    """The timing batch and two held-out ones derived from it, timed in turn.

    A candidate that returns what it computed for an earlier batch of the same shape is
    then wrong on the batches it did not compute, where the spot checks look.
    """
    spec = session.target.graph_spec
    return (batch, *held_out(heldout_batches, batch, 2, seed=session.heldout_seed, graph_spec=spec))


#: How many of the correctness check's inputs the degenerate-output rule reads eager's outputs on.
_DEGENERATE_INPUTS = 6


def _checked_outputs(session: TuneSession, eager: Callable[..., Any]) -> tuple[Any, ...]:
    """Eager's outputs on the inputs the correctness check compares on (recorded, then held-out).

    Not the timing batches: those are near-copies of one batch (held-out noise is small), on
    which a smooth model's outputs hardly move, so every model read as degenerate there.
    """
    inputs = (*session.target.data, *session.heldout())[:_DEGENERATE_INPUTS]
    return tuple(reference_output(eager, as_sample(s)) for s in inputs)


def reference_output(eager: Callable[..., Any], batch: Sample) -> Any:
    """Eager's output on the timing batch: what every spot check while timing compares with."""
    with torch.no_grad():
        return copy_sample(batch).call(eager)
