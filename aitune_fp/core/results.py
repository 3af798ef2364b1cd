"""Result values of a validation: one frozen record per measured candidate, JSON round-trippable."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from aitune_fp.core._checks import (
    as_tuple,
    finite,
    integer,
    of_type,
    one_of,
    open_interval,
    tuple_of,
)
from aitune_fp.core.telemetry import DEVICE_ISOLATIONS
from aitune_fp.errors import InvalidTypeError, InvalidValueError

__all__ = [
    "EVENT_KEYS",
    "ISOLATION_MODES",
    "RESULT_VERDICTS",
    "IsolationMode",
    "PerformanceValidationMixinResult",
    "PerformanceValidationResult",
    "ResultVerdict",
]

#: Where a candidate ran until it was chosen: a worker process of its own (eager in another), or
#: the user's process, guarded by snapshots (``docs/guarantees.md`` says what each promises).
IsolationMode = Literal["process", "in_process"]
ISOLATION_MODES: tuple[IsolationMode, ...] = ("process", "in_process")
ResultVerdict = Literal["faster", "not_faster", "inconclusive"]
RESULT_VERDICTS: tuple[ResultVerdict, ...] = ("faster", "not_faster", "inconclusive")
#: How a result's fields are named as event keys (``candidate_measured``: the unit goes into the
#: key); the fold renames them back. Fields not listed keep their names.
EVENT_KEYS: dict[str, str] = {
    "throughput": "throughput_samples_per_s",
    "baseline_throughput": "baseline_throughput_samples_per_s",
}


_optional = attrs.validators.optional


@attrs.frozen(kw_only=False)
class PerformanceValidationResult:
    """One measured candidate: AITune's five fields first, then what the verdict was based on.

    ``speedup`` is ``throughput / baseline_throughput`` with both throughputs from mean latency
    (AITune's figure). ``estimate``, ``ci_low`` and ``ci_high`` are the speedup the statistical
    verdict was based on (robust pseudo-median of paired ratios) and its confidence bounds;
    ``max_abs_error`` ... ``rtol`` the worst mismatch with eager against the accuracy budget.
    """

    backend_description: str = attrs.field(validator=of_type(str))
    throughput: float = attrs.field(validator=finite(minimum=0))
    baseline_throughput: float = attrs.field(validator=finite(minimum=0, strict=True))
    speedup: float = attrs.field(validator=finite(minimum=0))
    passed: bool = attrs.field(validator=of_type(bool))
    estimate: float | None = attrs.field(
        default=None, kw_only=True, validator=_optional(finite(minimum=0))
    )
    ci_low: float | None = attrs.field(
        default=None, kw_only=True, validator=_optional(finite(minimum=0))
    )
    ci_high: float | None = attrs.field(
        default=None, kw_only=True, validator=_optional(finite(minimum=0))
    )
    confidence: float | None = attrs.field(
        default=None, kw_only=True, validator=_optional(open_interval(0, 1))
    )
    #: One-sided level at which a wrong verdict is controlled over all looks (what the user
    #: may rely on; ``confidence`` is one look's two-sided level).
    guarantee: float | None = attrs.field(
        default=None, kw_only=True, validator=_optional(open_interval(0, 1))
    )
    #: The futility stop's upper bound at the deciding look (statistical mode), at the one-sided
    #: level ``futility_level`` (``1 - futility_error / len(looks)``). A ``not_faster`` whose
    #: ``ci_high`` is not below ``required_speedup`` was decided on this bound, not on
    #: ``[ci_low, ci_high]`` (:func:`aitune_fp.core.messages.decided_interval`). None in point
    #: mode, without a bound, and in older logs.
    futility_high: float | None = attrs.field(
        default=None, kw_only=True, validator=_optional(finite(minimum=0))
    )
    futility_level: float | None = attrs.field(
        default=None, kw_only=True, validator=_optional(open_interval(0, 1))
    )
    #: The futility margin the stop used, in percentage points above the required speedup
    #: (statistical mode; None in point mode and older logs).
    futility_margin_percent: float | None = attrs.field(
        default=None, kw_only=True, validator=_optional(finite(minimum=0))
    )
    #: How the interval was computed (``wilcoxon_signed_rank_hl``: paired, or
    #: ``mann_whitney_hl``: unpaired; statistical mode).
    method: str | None = attrs.field(default=None, kw_only=True, validator=_optional(of_type(str)))
    #: The lag-1 autocorrelation of the paired log ratios the interval was widened for (None:
    #: not estimated, point mode, older logs).
    autocorrelation: float | None = attrs.field(
        default=None, kw_only=True, validator=_optional(finite(minimum=-1, strict=True))
    )
    n_baseline: int | None = attrs.field(
        default=None, kw_only=True, validator=_optional(integer(minimum=0))
    )
    n_candidate: int | None = attrs.field(
        default=None, kw_only=True, validator=_optional(integer(minimum=0))
    )
    batch_size: int | None = attrs.field(
        default=None, kw_only=True, validator=_optional(integer(minimum=1))
    )
    required_speedup: float | None = attrs.field(
        default=None, kw_only=True, validator=_optional(finite(minimum=0))
    )
    verdict: ResultVerdict | None = attrs.field(
        default=None, kw_only=True, validator=_optional(one_of(RESULT_VERDICTS))
    )
    decision: str | None = attrs.field(
        default=None, kw_only=True, validator=_optional(of_type(str))
    )
    reason: str | None = attrs.field(default=None, kw_only=True, validator=_optional(of_type(str)))
    #: What the measurement noticed that may weaken it (``warmup_not_steady``, ``recompiled``,
    #: ``level_shift_after_pair_<k>``, ``ratio_shift_at_pair_<k>``, ``serial_correlation``,
    #: ``budget_spent``).
    flags: tuple[str, ...] = attrs.field(
        default=(), kw_only=True, converter=as_tuple, validator=tuple_of(of_type(str))
    )
    #: The correctness checks' worst mismatch with eager (before and while timing), against the
    #: candidate's accuracy budget: see :class:`~aitune_fp.core.mismatch.Mismatch`. None when
    #: not recorded (AITune's own strategies, older logs).
    max_abs_error: float | None = attrs.field(
        default=None, kw_only=True, validator=_optional(finite(minimum=0))
    )
    max_rel_error: float | None = attrs.field(
        default=None, kw_only=True, validator=_optional(finite(minimum=0))
    )
    budget_used: float | None = attrs.field(
        default=None, kw_only=True, validator=_optional(finite(minimum=0))
    )
    atol: float | None = attrs.field(
        default=None, kw_only=True, validator=_optional(finite(minimum=0))
    )
    rtol: float | None = attrs.field(
        default=None, kw_only=True, validator=_optional(finite(minimum=0))
    )
    #: The CPU side of the comparison (issue 24): torch's intra-op and inter-op threads,
    #: ``OMP_NUM_THREADS`` (None: unset), the cores available, and the 1-minute load average
    #: at the comparison's start and end (``oversubscribed`` in ``flags`` when the load left
    #: too few cores: :func:`aitune_fp.profiling.is_oversubscribed`). None in older logs.
    threads: int | None = attrs.field(
        default=None, kw_only=True, validator=_optional(integer(minimum=1))
    )
    interop_threads: int | None = attrs.field(
        default=None, kw_only=True, validator=_optional(integer(minimum=1))
    )
    omp_num_threads: int | None = attrs.field(
        default=None, kw_only=True, validator=_optional(integer(minimum=1))
    )
    cpus: int | None = attrs.field(
        default=None, kw_only=True, validator=_optional(integer(minimum=1))
    )
    load_avg_start: float | None = attrs.field(
        default=None, kw_only=True, validator=_optional(finite(minimum=0))
    )
    load_avg_end: float | None = attrs.field(
        default=None, kw_only=True, validator=_optional(finite(minimum=0))
    )
    #: Where the candidate was built, checked and timed (:data:`IsolationMode`); None in older logs.
    isolation: str | None = attrs.field(
        default=None, kw_only=True, validator=_optional(one_of(ISOLATION_MODES))
    )
    #: Which clock decided (statistical mode): ``host`` (wall time around a synchronised call,
    #: the default) or ``device`` (CUDA events). None in point mode and older logs.
    clock: str | None = attrs.field(
        default=None, kw_only=True, validator=_optional(one_of(("host", "device")))
    )
    #: With device time (CUDA): the paired speedup estimate on each clock at the deciding look,
    #: and each arm's median seconds per call on each clock over the pairs decided on
    #: (``host_bound`` in ``flags`` when host exceeds device by
    #: :data:`aitune_fp.profiling.HOST_BOUND_FACTOR`). None without device time (CPU).
    host_estimate: float | None = attrs.field(
        default=None, kw_only=True, validator=_optional(finite(minimum=0))
    )
    device_estimate: float | None = attrs.field(
        default=None, kw_only=True, validator=_optional(finite(minimum=0))
    )
    baseline_host_latency_s: float | None = attrs.field(
        default=None, kw_only=True, validator=_optional(finite(minimum=0))
    )
    candidate_host_latency_s: float | None = attrs.field(
        default=None, kw_only=True, validator=_optional(finite(minimum=0))
    )
    baseline_device_latency_s: float | None = attrs.field(
        default=None, kw_only=True, validator=_optional(finite(minimum=0))
    )
    candidate_device_latency_s: float | None = attrs.field(
        default=None, kw_only=True, validator=_optional(finite(minimum=0))
    )
    #: GPU telemetry (NVML, statistical mode; :mod:`aitune_fp.core.telemetry`): whether another
    #: process computed on the device (``exclusive``, ``shared``, ``unknown``: CPU, no NVML),
    #: the SM clock's range, the highest temperature and power read around the looks decided
    #: on (``throttled``, ``clock_changed``, ``device_shared`` in ``flags``). None in point
    #: mode and older logs; the figures None without NVML.
    device_isolation: str | None = attrs.field(
        default=None, kw_only=True, validator=_optional(one_of(DEVICE_ISOLATIONS))
    )
    sm_clock_mhz_min: int | None = attrs.field(
        default=None, kw_only=True, validator=_optional(integer(minimum=0))
    )
    sm_clock_mhz_max: int | None = attrs.field(
        default=None, kw_only=True, validator=_optional(integer(minimum=0))
    )
    temperature_c_max: int | None = attrs.field(
        default=None, kw_only=True, validator=_optional(integer(minimum=0))
    )
    power_w_max: float | None = attrs.field(
        default=None, kw_only=True, validator=_optional(finite(minimum=0))
    )
    #: The raw timings, kept so any figure above can be derived again: each arm's seconds per
    #: call (one batch) in the order timed, on the clock that decided. Statistical mode: pair
    #: ``i`` is eager's and the candidate's ``i``-th interleaved call, and the figures rest on
    #: the ``n_baseline`` pairs from ``latencies_from`` (later than 0 when the machine changed
    #: or the ratio shifted first). Point mode: eager's up-front calls, then the candidate's.
    #: Empty in older logs.
    latencies_from: int | None = attrs.field(
        default=None, kw_only=True, validator=_optional(integer(minimum=0))
    )
    baseline_latencies_s: tuple[float, ...] = attrs.field(
        default=(), kw_only=True, converter=as_tuple, validator=tuple_of(finite(minimum=0))
    )
    candidate_latencies_s: tuple[float, ...] = attrs.field(
        default=(), kw_only=True, converter=as_tuple, validator=tuple_of(finite(minimum=0))
    )
    #: Calls each raw latency above is the mean of (a timed block; 1: single calls, older logs).
    latencies_block: int = attrs.field(default=1, kw_only=True, validator=integer(minimum=1))

    def __attrs_post_init__(self) -> None:
        """Cross-field checks: bounds in order and a verdict consistent with ``passed``."""
        if self.ci_low is not None and self.ci_high is not None and self.ci_low > self.ci_high:
            raise InvalidValueError(
                f"ci_low ({self.ci_low!r}) must be <= ci_high ({self.ci_high!r})"
            )
        if self.verdict is not None and self.passed != (self.verdict == "faster"):
            raise InvalidValueError(
                f"passed={self.passed!r} contradicts verdict={self.verdict!r} "
                "(passed means verdict == 'faster')"
            )

    @property
    def sequential(self) -> bool:
        """Whether the statistical (sequential, interval) rule decided it, not the point rule.

        The one place a result's mode name is read: what is shown (intervals, which speedup
        heads the line) asks this.
        """
        return self.decision == "statistical"

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict (finite numbers, str, bool, None, lists) in field order."""
        data = attrs.asdict(self, recurse=False)
        data["flags"] = list(self.flags)
        data["baseline_latencies_s"] = list(self.baseline_latencies_s)
        data["candidate_latencies_s"] = list(self.candidate_latencies_s)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PerformanceValidationResult:
        """Rebuild a result from :meth:`to_dict` output; unknown keys are an error."""
        if not isinstance(data, Mapping):
            raise InvalidTypeError(f"data must be a mapping, got {data!r}")
        names = {a.name for a in attrs.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise InvalidValueError(f"unknown PerformanceValidationResult keys: {unknown}")
        required = [a.name for a in attrs.fields(cls) if a.default is attrs.NOTHING]
        missing = [key for key in required if key not in data]
        if missing:
            raise InvalidValueError(f"missing PerformanceValidationResult keys: {missing}")
        return cls(**data)


#: AITune's name for the same record, kept so existing code keeps importing it.
PerformanceValidationMixinResult = PerformanceValidationResult
