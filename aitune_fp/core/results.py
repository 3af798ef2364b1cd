"""A measured candidate's result: AITune's five fields and five parts, each built where measured."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs

from aitune_fp.core._checks import (
    as_tuple,
    finite,
    integer,
    of_type,
    one_of,
    open_interval,
    optional,
    tuple_of,
)
from aitune_fp.core.telemetry import DEVICE_ISOLATIONS
from aitune_fp.errors import InvalidValueError

__all__ = [
    "FLAT",
    "ISOLATION_MODES",
    "PARTS",
    "QUANTITIES",
    "RESULT_VERDICTS",
    "Accuracy",
    "Decision",
    "Device",
    "Environment",
    "IsolationMode",
    "PerformanceValidationMixinResult",
    "PerformanceValidationResult",
    "Quantity",
    "Raw",
    "ResultVerdict",
    "flat",
    "unstructure",
]

#: Where a candidate ran until it was chosen (``docs/guarantees.md`` says what each promises).
IsolationMode = Literal["process", "in_process"]
ISOLATION_MODES: tuple[IsolationMode, ...] = ("process", "in_process")
ResultVerdict = Literal["faster", "not_faster", "inconclusive"]
Quantity = Literal["throughput", "typical"]
#: What a statistical verdict is about (``ProfilingConfig.quantity``): the mean over a block of
#: calls (throughput) or the typical single call.
QUANTITIES: tuple[Quantity, ...] = ("throughput", "typical")
RESULT_VERDICTS: tuple[ResultVerdict, ...] = ("faster", "not_faster", "inconclusive")


def unstructure(value: Any) -> Any:
    """``value`` as JSON holds it: records as objects, tuples as lists, non-finite floats null."""
    if attrs.has(type(value)):
        return {a.name: unstructure(getattr(value, a.name)) for a in attrs.fields(type(value))}
    if isinstance(value, (list, tuple)):
        return [unstructure(v) for v in value]
    if isinstance(value, Mapping):
        return {k: unstructure(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _number() -> Any:
    return optional(finite(minimum=0))


@attrs.frozen(kw_only=True)
class Decision:
    """How the rule decided: the verdict, the figure and interval it rests on, the gate, why."""

    rule: str | None = optional(of_type(str))
    verdict: ResultVerdict | None = attrs.field(
        default=None, validator=attrs.validators.optional(one_of(RESULT_VERDICTS))
    )
    estimate: float | None = _number()
    ci_low: float | None = _number()
    ci_high: float | None = _number()
    confidence: float | None = optional(open_interval(0, 1))
    guarantee: float | None = optional(open_interval(0, 1))
    futility_high: float | None = _number()
    futility_level: float | None = optional(open_interval(0, 1))
    futility_margin_percent: float | None = _number()
    method: str | None = optional(of_type(str))
    #: What the statistical verdict is about (None: the point rule, and logs before version 4).
    quantity: Quantity | None = attrs.field(
        default=None, validator=attrs.validators.optional(one_of(QUANTITIES))
    )
    autocorrelation: float | None = optional(finite(minimum=-1, strict=True))
    n_baseline: int | None = optional(integer(minimum=0))
    n_candidate: int | None = optional(integer(minimum=0))
    batch_size: int | None = optional(integer(minimum=1))
    required_speedup: float | None = _number()
    reason: str | None = optional(of_type(str))
    flags: tuple[str, ...] = attrs.field(
        default=(), converter=as_tuple, validator=tuple_of(of_type(str))
    )

    def __attrs_post_init__(self) -> None:
        """The interval's bounds in order."""
        if self.ci_low is not None and self.ci_high is not None and self.ci_low > self.ci_high:
            raise InvalidValueError(
                f"ci_low ({self.ci_low!r}) must be <= ci_high ({self.ci_high!r})"
            )


@attrs.frozen(kw_only=True)
class Environment:
    """Where and how the comparison ran: threads, cores, load, isolation, the deciding clock."""

    threads: int | None = optional(integer(minimum=1))
    interop_threads: int | None = optional(integer(minimum=1))
    omp_num_threads: int | None = optional(integer(minimum=1))
    cpus: int | None = optional(integer(minimum=1))
    load_avg_start: float | None = _number()
    load_avg_end: float | None = _number()
    isolation: str | None = optional(one_of(ISOLATION_MODES))
    clock: str | None = optional(one_of(("host", "device")))


@attrs.frozen(kw_only=True)
class Device:
    """The GPU side (None on CPU): each clock's estimate and latencies, and NVML telemetry."""

    host_estimate: float | None = _number()
    device_estimate: float | None = _number()
    baseline_host_latency_s: float | None = _number()
    candidate_host_latency_s: float | None = _number()
    baseline_device_latency_s: float | None = _number()
    candidate_device_latency_s: float | None = _number()
    device_isolation: str | None = optional(one_of(DEVICE_ISOLATIONS))
    sm_clock_mhz_min: int | None = optional(integer(minimum=0))
    sm_clock_mhz_max: int | None = optional(integer(minimum=0))
    temperature_c_max: int | None = optional(integer(minimum=0))
    power_w_max: float | None = _number()


@attrs.frozen(kw_only=True)
class Accuracy:
    """The worst mismatch with eager (checks before and while timing) against the budget."""

    max_abs_error: float | None = _number()
    max_rel_error: float | None = _number()
    budget_used: float | None = _number()
    atol: float | None = _number()
    rtol: float | None = _number()


@attrs.frozen(kw_only=True)
class Raw:
    """Each arm's seconds per call in the order timed, and the first pair the figures rest on."""

    latencies_from: int | None = optional(integer(minimum=0))
    baseline_latencies_s: tuple[float, ...] = attrs.field(
        default=(), converter=as_tuple, validator=tuple_of(finite(minimum=0))
    )
    candidate_latencies_s: tuple[float, ...] = attrs.field(
        default=(), converter=as_tuple, validator=tuple_of(finite(minimum=0))
    )
    #: Calls each raw latency is the mean of (a timed block; 1: single calls, older logs).
    latencies_block: int = attrs.field(default=1, validator=integer(minimum=1))
    #: The candidate's calls a block, as long in time as eager's (None: as eager's, older logs).
    candidate_latencies_block: int | None = optional(integer(minimum=0))


#: The parts of a result, by attribute; each part's fields are also the result's flat names.
PARTS: Final = {
    "decided": Decision,
    "environment": Environment,
    "device": Device,
    "accuracy": Accuracy,
    "raw": Raw,
}
#: A flat name -> (part, field): ``result.ci_low`` is ``result.decided.ci_low``.
FLAT: Final = {
    ("decision" if a.name == "rule" else a.name): (part, a.name)
    for part, cls in PARTS.items()
    for a in attrs.fields(cls)
}


def flat(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A result's JSON object with its parts' fields at the top, by flat name (``["verdict"]``)."""
    top = {k: v for k, v in fields.items() if k not in PARTS}
    for name, (part, field) in FLAT.items():
        if isinstance(fields.get(part), Mapping) and field in fields[part]:
            top[name] = fields[part][field]
    return top


@attrs.frozen
class PerformanceValidationResult:
    """One measured candidate: AITune's five fields, then its parts (each field also read flat)."""

    backend_description: str = attrs.field(validator=of_type(str))
    throughput: float = attrs.field(validator=finite(minimum=0))
    baseline_throughput: float = attrs.field(validator=finite(minimum=0, strict=True))
    speedup: float = attrs.field(validator=finite(minimum=0))
    passed: bool = attrs.field(validator=of_type(bool))
    decided: Decision = attrs.field(factory=Decision, kw_only=True, validator=of_type(Decision))
    environment: Environment = attrs.field(
        factory=Environment, kw_only=True, validator=of_type(Environment)
    )
    device: Device = attrs.field(factory=Device, kw_only=True, validator=of_type(Device))
    accuracy: Accuracy = attrs.field(factory=Accuracy, kw_only=True, validator=of_type(Accuracy))
    raw: Raw = attrs.field(factory=Raw, kw_only=True, validator=of_type(Raw))

    def __attrs_post_init__(self) -> None:
        """A verdict consistent with ``passed``."""
        verdict = self.decided.verdict
        if verdict is not None and self.passed != (verdict == "faster"):
            raise InvalidValueError(
                f"passed={self.passed!r} contradicts verdict={verdict!r} "
                "(passed means verdict == 'faster')"
            )

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any:
            """The flat names (``ci_low``, ``threads``, ...), read from the parts."""

    @property
    def sequential(self) -> bool:
        """Whether the statistical (sequential, interval) rule decided it, not the point rule."""
        return self.decided.rule == "statistical"

    @classmethod
    def of_flat(
        cls,
        description: str,
        throughput: float,
        baseline: float,
        speedup: float,
        passed: bool,
        **fields: Any,
    ) -> PerformanceValidationResult:
        """A result from AITune's five fields and any flat names (``ci_low=...``), each in its part."""
        parts: dict[str, dict[str, Any]] = {part: {} for part in PARTS}
        for name, value in fields.items():
            part, field = FLAT[name]
            parts[part][field] = value
        built = {part: PARTS[part](**values) for part, values in parts.items()}
        return cls(description, throughput, baseline, speedup, passed, **built)


def _flat(part: str, name: str) -> property:
    return property(lambda r: getattr(getattr(r, part), name), doc=f"``{part}.{name}``")


for _name, (_where, _field) in FLAT.items():
    setattr(PerformanceValidationResult, _name, _flat(_where, _field))


#: AITune's name for the same record, kept so existing code keeps importing it.
PerformanceValidationMixinResult = PerformanceValidationResult
