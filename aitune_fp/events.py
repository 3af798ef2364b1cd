"""The one place values become log events: names, schema version, builders and ``emit``.

Builders are pure (they return an :class:`Event`); :func:`emit` sends one through
``structlog.get_logger("aitune_fp")``. The library never configures structlog or logging.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import logging
import math
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias

import attrs
import structlog

from aitune_fp.core.messages import (
    fmt_baseline_line,
    fmt_baseline_selected,
    fmt_candidate_line,
    fmt_disabled_line,
    fmt_headline,
    fmt_speedup_msg,
    fmt_speedup_msg_short,
    fmt_throughput_detail,
)
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.core.report import CandidateFailure, Stage
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.errors import InvalidValueError

# cpu_environment: what ``started`` reports, read by the session where it emits the event
from aitune_fp.profiling import CpuEnvironment, cpu_environment

__all__ = [
    "EVENT_NAMES",
    "LOGGER_NAME",
    "SCHEMA_VERSION",
    "SWEEP_EVENT_NAMES",
    "Event",
    "baseline_failed",
    "baseline_measured",
    "candidate_failed",
    "candidate_measured",
    "candidate_rejected",
    "collecting",
    "correctness_checked",
    "cpu_environment",
    "disabled",
    "emit",
    "eval_mode",
    "failed",
    "finished",
    "info_enabled",
    "look",
    "new_run_id",
    "phase",
    "selected",
    "started",
    "sweep_finished",
    "sweep_started",
    "task_failed",
    "task_finished",
    "to_record",
]

LOGGER_NAME: Final = "aitune_fp"
#: Bumped when a key is removed or changes meaning; adding keys keeps the version.
SCHEMA_VERSION: Final = 1

_PREFIX = "aitune_fp.validation."
STARTED: Final = _PREFIX + "started"
DISABLED: Final = _PREFIX + "disabled"
EVAL_MODE: Final = _PREFIX + "eval_mode"
PHASE: Final = _PREFIX + "phase"
LOOK: Final = _PREFIX + "look"
BASELINE_MEASURED: Final = _PREFIX + "baseline_measured"
BASELINE_FAILED: Final = _PREFIX + "baseline_failed"
CORRECTNESS_CHECKED: Final = _PREFIX + "correctness_checked"
CANDIDATE_MEASURED: Final = _PREFIX + "candidate_measured"
CANDIDATE_REJECTED: Final = _PREFIX + "candidate_rejected"
CANDIDATE_FAILED: Final = _PREFIX + "candidate_failed"
SELECTED: Final = _PREFIX + "selected"
FINISHED: Final = _PREFIX + "finished"
_SWEEP = "aitune_fp.sweep."
SWEEP_STARTED: Final = _SWEEP + "started"
TASK_FINISHED: Final = _SWEEP + "task_finished"
TASK_FAILED: Final = _SWEEP + "task_failed"
SWEEP_FINISHED: Final = _SWEEP + "finished"
#: The sweep's own events (``aitune-fp sweep``): ``run_id`` is the sweep's id, ``module_name``
#: the model entry (the sweep's name for ``started`` / ``finished``). Ingest builds no run of them.
SWEEP_EVENT_NAMES: Final = (SWEEP_STARTED, TASK_FINISHED, TASK_FAILED, SWEEP_FINISHED)

EVENT_NAMES: Final = (
    STARTED,
    DISABLED,
    EVAL_MODE,
    PHASE,
    LOOK,
    BASELINE_MEASURED,
    BASELINE_FAILED,
    CORRECTNESS_CHECKED,
    CANDIDATE_MEASURED,
    CANDIDATE_REJECTED,
    CANDIDATE_FAILED,
    SELECTED,
    FINISHED,
    *SWEEP_EVENT_NAMES,
)

Level = Literal["debug", "info", "warning", "error"]
#: How eager is kept out of the candidates' reach (``baseline_measured``).
EagerIsolation: TypeAlias = Literal["private_copy", "shared"]

Phase = Literal["baseline_build", "baseline_measure", "build", "correctness", "measure"]
#: Keys renderers own; never used as payload keys (design §5).
RESERVED_KEYS: Final = frozenset(
    {"message", "name", "level", "timestamp", "logger", "exception", "event"}
)


def _clean(value: Any) -> Any:
    """Make a payload value JSON-safe: finite floats only (a non-finite float becomes None)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@attrs.frozen
class Event:
    """One log event: its dotted name, level and flat payload (no reserved keys)."""

    name: str
    level: Level
    fields: Mapping[str, Any]

    def __attrs_post_init__(self) -> None:
        """Refuse payload keys that renderers own."""
        clash = RESERVED_KEYS.intersection(self.fields)
        if clash:
            raise InvalidValueError(f"event {self.name!r} uses reserved keys {sorted(clash)}")


def _event(name: str, level: Level, run_id: str, module_name: str, **fields: Any) -> Event:
    payload = {"schema_version": SCHEMA_VERSION, "run_id": run_id, "module_name": module_name}
    payload.update({k: _clean(v) for k, v in fields.items()})
    return Event(name, level, payload)


def new_run_id() -> str:
    """Return a fresh id shared by all events of one tune call."""
    return uuid.uuid4().hex


def started(
    run_id: str,
    module_name: str,
    *,
    strategy: str,
    device: str,
    decision: str,
    min_speedup_threshold_percent: float,
    required_speedup: float,
    batch_size: int | None,
    cpu: CpuEnvironment | None = None,
) -> Event:
    """A validating tune begins: what is tuned, where, and against which gate.

    ``cpu``: the threads both arms will run with, ``OMP_NUM_THREADS``, the cores available and
    the 1-minute load average now (fields ``threads``, ``interop_threads``, ``omp_num_threads``,
    ``cpus``, ``load_avg_1m``; left out when None).
    """
    return _event(
        STARTED,
        "info",
        run_id,
        module_name,
        strategy=strategy,
        device=device,
        decision=decision,
        min_speedup_threshold_percent=min_speedup_threshold_percent,
        required_speedup=required_speedup,
        batch_size=batch_size,
        **({} if cpu is None else cpu.to_fields()),
        summary="🔄 Profiling eager baseline...please wait",
    )


def disabled(run_id: str, module_name: str, *, strategy: str) -> Event:
    """Validation is off for this tune: no eager build, no profiling."""
    return _event(
        DISABLED, "warning", run_id, module_name, strategy=strategy, summary=fmt_disabled_line()
    )


def eval_mode(run_id: str, module_name: str, *, n_training_modules: int) -> Event:
    """The model came in training mode: it is validated in eval mode and returned as it came."""
    return _event(
        EVAL_MODE,
        "warning",
        run_id,
        module_name,
        n_training_modules=n_training_modules,
        summary=(
            f"⚠️ {module_name} was in training mode ({n_training_modules} module(s)): validated "
            "in eval mode (no dropout, running statistics not updated) and returned in training mode"
        ),
    )


def phase(run_id: str, module_name: str, *, backend_description: str, phase: Phase) -> Event:
    """Progress: a backend enters a phase (debug level; progress bars use it)."""
    return _event(
        PHASE,
        "debug",
        run_id,
        module_name,
        backend_description=backend_description,
        phase=phase,
        summary=f"{backend_description}: {phase.replace('_', ' ')}",
    )


def look(
    run_id: str,
    module_name: str,
    *,
    backend_description: str,
    n_pairs: int,
    max_pairs: int,
    verdict: str,
    estimate: float,
    ci_low: float,
    ci_high: float | None,
) -> Event:
    """Progress of a statistical measurement: the interval at one planned look (debug level)."""
    high = "inf" if ci_high is None or not math.isfinite(ci_high) else f"{ci_high:.3f}"
    return _event(
        LOOK,
        "debug",
        run_id,
        module_name,
        backend_description=backend_description,
        n_pairs=n_pairs,
        max_pairs=max_pairs,
        verdict=verdict,
        estimate=estimate,
        ci_low=ci_low,
        ci_high=ci_high,
        summary=(
            f"🔎 {backend_description}: {n_pairs}/{max_pairs} pairs, "
            f"{estimate:.2f}x [{ci_low:.3f}, {high}] → {verdict}"
        ),
    )


def baseline_measured(
    run_id: str,
    module_name: str,
    *,
    backend_description: str,
    batch_size: int,
    throughput_samples_per_s: float,
    n_calls: int,
    duration_s: float,
    decision: str,
    eager_isolation: EagerIsolation = "private_copy",
) -> Event:
    """The eager baseline was built and (in point mode) measured.

    ``eager_isolation``: whether eager runs on a private copy of the model that no candidate
    can reach (``private_copy``) or, for a model too large to copy, on the user's (``shared``).
    """
    return _event(
        BASELINE_MEASURED,
        "info",
        run_id,
        module_name,
        backend_description=backend_description,
        batch_size=batch_size,
        throughput_samples_per_s=throughput_samples_per_s,
        n_calls=n_calls,
        duration_s=duration_s,
        decision=decision,
        eager_isolation=eager_isolation,
        summary=fmt_baseline_line(batch_size, throughput_samples_per_s),
    )


def baseline_failed(
    run_id: str, module_name: str, *, error_type: str, reason: str, traceback_path: str | None
) -> Event:
    """The eager baseline could not be built or measured; no candidate can be gated."""
    return _event(
        BASELINE_FAILED,
        "error",
        run_id,
        module_name,
        error_type=error_type,
        reason=reason,
        traceback_path=traceback_path,
        summary=f"⚠️ Performance validation baseline failed (log: {traceback_path}): {reason}",
    )


def correctness_checked(
    run_id: str, module_name: str, *, backend_description: str, mismatch: Mismatch
) -> Event:
    """A candidate matched eager within its accuracy budget: how close it came (the worst case)."""
    if mismatch.atol is None:
        figures = "exact on every compared value"
    else:
        figures = (
            f"worst abs error {mismatch.max_abs_error:.3g}, rel {mismatch.max_rel_error:.3g}, "
            f"{mismatch.budget_used:.0%} of the budget (atol={mismatch.atol:g}, "
            f"rtol={mismatch.rtol:g}) at {mismatch.path}"
        )
    return _event(
        CORRECTNESS_CHECKED,
        "info",
        run_id,
        module_name,
        backend_description=backend_description,
        max_abs_error=mismatch.max_abs_error,
        max_rel_error=mismatch.max_rel_error,
        budget_used=mismatch.budget_used,
        atol=mismatch.atol,
        rtol=mismatch.rtol,
        output_path=mismatch.path,
        n_elements=mismatch.n_elements,
        summary=f"✅ {backend_description} matches eager: {figures}",
    )


def candidate_measured(
    run_id: str, module_name: str, result: PerformanceValidationResult, *, duration_s: float
) -> Event:
    """A candidate was timed against eager; carries every figure the verdict was based on."""
    fields = result.to_dict()
    if result.decision == "statistical":  # the figure the verdict was decided on, and the verdict
        summary = (
            f"📊 {result.backend_description}: batch size={result.batch_size or 1}, "
            f"speedup {fmt_headline(result)} → {result.verdict}"
        )
    else:  # AITune's line, byte for byte: its ▲/▼ says whether the point rule passed
        summary = fmt_candidate_line(
            result.backend_description,
            result.batch_size or 1,
            result.throughput,
            result.speedup,
            result.passed,
        )
    return _event(
        CANDIDATE_MEASURED,
        "info",
        run_id,
        module_name,
        backend_description=fields.pop("backend_description"),
        throughput_samples_per_s=fields.pop("throughput"),
        baseline_throughput_samples_per_s=fields.pop("baseline_throughput"),
        duration_s=duration_s,
        **fields,
        summary=summary,
    )


def candidate_rejected(run_id: str, module_name: str, result: PerformanceValidationResult) -> Event:
    """A measured candidate did not clear the gate; it is deactivated and not selected."""
    return _event(
        CANDIDATE_REJECTED,
        "warning",
        run_id,
        module_name,
        backend_description=result.backend_description,
        verdict=result.verdict,
        speedup=result.speedup,
        ci_low=result.ci_low,
        ci_high=result.ci_high,
        required_speedup=result.required_speedup,
        reason=result.reason,
        summary=f"❌ {result.backend_description} rejected ({result.verdict}): {result.reason}",
    )


def candidate_failed(
    run_id: str,
    module_name: str,
    *,
    backend_description: str,
    stage: Stage,
    error_type: str,
    reason: str,
    traceback_path: str | None,
) -> Event:
    """A candidate failed to build, to match eager, or to be profiled; it is rejected."""
    return _event(
        CANDIDATE_FAILED,
        "warning",
        run_id,
        module_name,
        backend_description=backend_description,
        stage=stage,
        error_type=error_type,
        reason=reason,
        traceback_path=traceback_path,
        summary=(
            f"❌ {backend_description} failed at {stage} (log file: {traceback_path}): "
            f"{error_type}: {reason}"
        ),
    )


def failed(run_id: str, module_name: str, failure: CandidateFailure) -> Event:
    """``candidate_failed`` for a recorded failure (the record's fields are the event's keys)."""
    return candidate_failed(run_id, module_name, **failure.to_dict())


def selected(
    run_id: str,
    module_name: str,
    *,
    backend_description: str,
    is_baseline: bool,
    result: PerformanceValidationResult | None,
    baseline_throughput: float | None,
    info_on: bool,
    color: bool = False,
) -> Event:
    """The tune's outcome line: the ⚡ summary, or the baseline-selected line.

    With info off, the line goes out at warning level (the full ``[aitune_fp] ⚡ ...`` form) so it
    stays visible at Python's default level; so does the baseline-selected line.
    """
    level: Level = "info" if info_on else "warning"
    if result is not None and not is_baseline:
        detail = fmt_throughput_detail(result.baseline_throughput, result.throughput)
        if info_on:
            summary = fmt_speedup_msg_short(result.speedup, detail, color=color)
        else:
            summary = "[aitune_fp] " + fmt_speedup_msg(
                result.speedup, detail, module_name, backend_description, color=color
            )
    else:
        summary = fmt_baseline_selected(backend_description, baseline_throughput)
        if not info_on:
            summary = "[aitune_fp] " + summary
    return _event(
        SELECTED,
        level,
        run_id,
        module_name,
        backend_description=backend_description,
        is_baseline=is_baseline,
        speedup=None if result is None else result.speedup,
        throughput_samples_per_s=None if result is None else result.throughput,
        baseline_throughput_samples_per_s=baseline_throughput,
        summary=summary,
    )


def finished(
    run_id: str,
    module_name: str,
    *,
    outcome: Literal["candidate", "baseline", "passthrough", "error"],
    backend_description: str | None,
    n_candidates: int,
    n_measured: int,
    n_passed: int,
    n_failed: int,
    duration_s: float,
    reason: str | None = None,
) -> Event:
    """The tune ended: what was chosen and how many candidates were measured, passed, failed."""
    return _event(
        FINISHED,
        "error" if outcome == "error" else "info",
        run_id,
        module_name,
        outcome=outcome,
        backend_description=backend_description,
        n_candidates=n_candidates,
        n_measured=n_measured,
        n_passed=n_passed,
        n_failed=n_failed,
        duration_s=duration_s,
        reason=reason,
        summary=(
            f"⏱️ Tune of {module_name}: {outcome}"
            + (f" ({backend_description})" if backend_description else "")
            + f" in {duration_s:.2f}s"
        ),
    )


def sweep_started(
    sweep_id: str, sweep_name: str, *, executor: str, models: Sequence[str], skipped: Sequence[str]
) -> Event:
    """A sweep begins: which models it will run and which ``--resume`` skips."""
    return _event(
        SWEEP_STARTED,
        "info",
        sweep_id,
        sweep_name,
        executor=executor,
        models=list(models),
        skipped_models=list(skipped),
        summary=f"🧹 Sweep {sweep_name}: {len(models)} model(s) on {executor}"
        + (f", {len(skipped)} already done" if skipped else ""),
    )


def task_finished(
    sweep_id: str,
    model: str,
    *,
    tune_run_id: str,
    outcome: str,
    hostname: str,
    device: str,
    device_name: str,
    pid: int,
    threads: int,
    started_unix_s: float,
    finished_unix_s: float,
    started_monotonic_s: float,
    finished_monotonic_s: float,
) -> Event:
    """One model's tune task ended with a report (its verdicts are the run ``tune_run_id``).

    Wall-clock times place the task across hosts; monotonic ones (comparable on one host only)
    give its duration and order tasks on a host even when the wall clock is stepped.
    """
    return _event(
        TASK_FINISHED,
        "info",
        sweep_id,
        model,
        tune_run_id=tune_run_id,
        outcome=outcome,
        hostname=hostname,
        device=device,
        device_name=device_name,
        pid=pid,
        threads=threads,
        started_unix_s=started_unix_s,
        finished_unix_s=finished_unix_s,
        started_monotonic_s=started_monotonic_s,
        finished_monotonic_s=finished_monotonic_s,
        duration_s=max(finished_monotonic_s - started_monotonic_s, 0.0),
        summary=f"✅ {model}: tuned on {hostname} ({device_name}): {outcome}",
    )


def task_failed(
    sweep_id: str,
    model: str,
    *,
    error_type: str,
    reason: str,
    tune_run_id: str | None = None,
    hostname: str | None = None,
) -> Event:
    """One model's task ended without a report: it raised, its worker or node died, or cancelled."""
    return _event(
        TASK_FAILED,
        "error",
        sweep_id,
        model,
        error_type=error_type,
        reason=reason,
        tune_run_id=tune_run_id,
        hostname=hostname,
        summary=f"❌ {model}: {error_type}: {reason}",
    )


def sweep_finished(
    sweep_id: str,
    sweep_name: str,
    *,
    finished: Sequence[str],
    failed: Sequence[str],
    duration_s: float,
) -> Event:
    """The sweep ended: which models have a report and which failed (cancelled ones included)."""
    return _event(
        SWEEP_FINISHED,
        "error" if failed else "info",
        sweep_id,
        sweep_name,
        finished_models=list(finished),
        failed_models=list(failed),
        duration_s=duration_s,
        summary=f"🏁 Sweep {sweep_name}: {len(finished)} done, {len(failed)} failed"
        + (f" ({', '.join(failed)})" if failed else "")
        + f" in {duration_s:.1f}s",
    )


#: Where :func:`emit` sends this context's events instead of the logger (see :func:`collecting`).
_SINK: contextvars.ContextVar[Callable[[dict[str, Any]], None] | None] = contextvars.ContextVar(
    "aitune_fp_event_sink", default=None
)


def to_record(event: Event) -> dict[str, Any]:
    """``event`` as one JSON-lines record: name, level, UTC ISO timestamp, then its payload."""
    now = datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z")
    return {"event": event.name, "level": event.level, "timestamp": now, **event.fields}


@contextlib.contextmanager
def collecting(sink: Callable[[dict[str, Any]], None]) -> Iterator[None]:
    """Within the block, this context's events go to ``sink`` as records, not to the logger.

    A sweep task uses it to carry its tune's events back to the driver, which writes one log;
    no logging configuration is touched, so other threads and contexts log as before.
    """
    token = _SINK.set(sink)
    try:
        yield
    finally:
        _SINK.reset(token)


def _logger() -> Any:
    return structlog.get_logger(LOGGER_NAME)


def info_enabled(logger: Any = None) -> bool:
    """Whether the aitune_fp logger lets info events through (stdlib or structlog filtering)."""
    if logger is None and _SINK.get() is not None:
        return True
    bound = (logger or _logger()).bind()
    check = getattr(bound, "is_enabled_for", None) or getattr(bound, "isEnabledFor", None)
    if check is None:
        return True
    return bool(check(logging.INFO))


def emit(event: Event, logger: Any = None) -> None:
    """Send ``event`` through the aitune_fp structlog logger at its level (or to the collector)."""
    sink = _SINK.get()
    if logger is None and sink is not None:
        sink(to_record(event))
        return
    log = logger or _logger()
    getattr(log, event.level)(event.name, **event.fields)
