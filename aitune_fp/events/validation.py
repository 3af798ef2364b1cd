"""The builders of a tune's own events: it starts, makes progress, measures eager, ends.

Each returns an :class:`~aitune_fp.events.names.Event` (pure); the session emits it.
"""

from __future__ import annotations

import math
from typing import Literal

from aitune_fp.core.messages import (
    fmt_baseline_line,
    fmt_baseline_selected,
    fmt_disabled_line,
    fmt_speedup_msg,
    fmt_speedup_msg_short,
    fmt_throughput_detail,
)
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.errors import InvalidValueError
from aitune_fp.events.names import (
    BASELINE_FAILED,
    BASELINE_MEASURED,
    DISABLED,
    EVAL_MODE,
    FINISHED,
    LOOK,
    PHASE,
    SELECTED,
    STARTED,
    EagerIsolation,
    Event,
    Level,
    Phase,
    _event,
)
from aitune_fp.profiling import CpuEnvironment

__all__ = [
    "baseline_failed",
    "baseline_measured",
    "disabled",
    "eval_mode",
    "finished",
    "look",
    "phase",
    "selected",
    "started",
]


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
    **noise_floor: object,
) -> Event:
    """The eager baseline was built and (in point mode) measured.

    ``eager_isolation``: whether eager runs on a private copy of the model that no candidate
    can reach (``private_copy``) or, for a model too large to copy, on the user's (``shared``).
    ``noise_floor``: with ``Closeness(calibrate=True)``, eager's own noise floor
    (``noise_floor_rel_l2``: its largest figure; ``noise_floor``: per leaf) or why it was not
    measured (``noise_floor_note``).
    """
    unknown = set(noise_floor) - {"noise_floor_rel_l2", "noise_floor", "noise_floor_note"}
    if unknown:
        raise InvalidValueError(f"baseline_measured has no field {sorted(unknown)}")
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
        **noise_floor,
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
