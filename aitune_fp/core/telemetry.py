"""GPU telemetry flags: NVML readings of the timed device in, ``throttled`` and friends out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import attrs

from aitune_fp.core._checks import as_tuple, finite, integer, one_of, optional, tuple_of

DeviceIsolation = Literal["exclusive", "shared", "unknown"]
#: ``device_isolation`` of a run: no other compute process seen, another one seen, or not known.
DEVICE_ISOLATIONS: tuple[DeviceIsolation, ...] = ("exclusive", "shared", "unknown")

#: The NVML throttle ("clocks event") reason bits counted as a throttle (docs/architecture.md).
THROTTLE_REASONS: dict[int, str] = {
    0x04: "SW power cap",  # the driver holds board power under its limit by lowering clocks
    0x08: "HW slowdown",  # hardware halves clocks or more: over temperature or power supply
    0x20: "SW thermal",  # the driver lowers clocks to keep the GPU under its target temperature
    0x40: "HW thermal",  # hardware slowdown because the GPU is too hot
    0x80: "HW power brake",  # an external power-brake signal (the node's power supply)
}
#: Not counted: 0x01 GPU idle, 0x02 application clocks, 0x10 sync boost, 0x100 display clock.
GPU_IDLE = 0x01
_COUNTED = sum(THROTTLE_REASONS)

#: ``clock_changed``: the SM clock's readings within one look spread by more than this share.
CLOCK_CHANGE_SHARE = 0.05


@attrs.frozen(kw_only=True)
class DeviceSample:
    """One NVML reading of the timed device; None where the value could not be read."""

    sm_clock_mhz: int | None = optional(integer(minimum=0))
    mem_clock_mhz: int | None = optional(integer(minimum=0))
    temperature_c: int | None = optional(integer(minimum=0))
    power_w: float | None = optional(finite(minimum=0))
    throttle_reasons: int | None = optional(integer(minimum=0))
    violation_ns: int | None = optional(integer(minimum=0))
    pids: tuple[int, ...] | None = attrs.field(
        default=None, converter=as_tuple, validator=attrs.validators.optional(tuple_of(integer()))
    )


@attrs.frozen(kw_only=True)
class LookTelemetry:
    """The readings taken around one look's pairs (in time order: before, after, any between)."""

    look: int = attrs.field(validator=integer(minimum=1))
    samples: tuple[DeviceSample, ...] = attrs.field(
        converter=as_tuple, validator=tuple_of(attrs.validators.instance_of(DeviceSample))
    )


def _busy_clock(sample: DeviceSample) -> int | None:
    """The SM clock of ``sample``, None when unread or read while NVML reported the GPU idle."""
    idle = sample.throttle_reasons is not None and bool(sample.throttle_reasons & GPU_IDLE)
    return None if idle else sample.sm_clock_mhz


def throttle_names(reasons: int) -> tuple[str, ...]:
    """The counted throttle reasons set in NVML's bitmask ``reasons``, by name."""
    return tuple(name for bit, name in THROTTLE_REASONS.items() if reasons & bit)


def throttled(look: LookTelemetry) -> bool:
    """Whether ``look`` ran under a thermal or power throttle (the ``throttled`` flag)."""
    if any(s.throttle_reasons is not None and s.throttle_reasons & _COUNTED for s in look.samples):
        return True
    counters = [s.violation_ns for s in look.samples if s.violation_ns is not None]
    return len(counters) >= 2 and counters[-1] > counters[0]


def clock_changed(look: LookTelemetry, share: float = CLOCK_CHANGE_SHARE) -> bool:
    """Whether the SM clock's readings in ``look`` spread by more than ``share`` of the highest."""
    clocks = [c for c in map(_busy_clock, look.samples) if c is not None]
    if len(clocks) < 2 or max(clocks) == 0:
        return False
    return (max(clocks) - min(clocks)) / max(clocks) > share


def other_processes(pids: tuple[int, ...] | None, own_pid: int) -> int | None:
    """How many processes other than ``own_pid`` hold a compute context (None: not known)."""
    if not pids:
        return None
    if own_pid in pids:
        return sum(1 for pid in pids if pid != own_pid)
    return len(pids) - 1


def device_isolation(looks: Sequence[LookTelemetry], own_pid: int) -> DeviceIsolation:
    """``shared`` when another process was seen; ``exclusive`` when every reading listed none."""
    counts = [other_processes(s.pids, own_pid) for look in looks for s in look.samples]
    if any(n for n in counts):
        return "shared"
    if counts and all(n == 0 for n in counts):
        return "exclusive"
    return "unknown"


@attrs.frozen(kw_only=True)
class TelemetryVerdict:
    """What a comparison's telemetry says: its flags and the figures shown with them."""

    flags: tuple[str, ...] = attrs.field(
        default=(),
        converter=as_tuple,
        validator=tuple_of(one_of(("throttled", "clock_changed", "device_shared"))),
    )
    device_isolation: DeviceIsolation = attrs.field(
        default="unknown", validator=one_of(DEVICE_ISOLATIONS)
    )
    throttled_looks: tuple[int, ...] = attrs.field(
        default=(), converter=as_tuple, validator=tuple_of(integer())
    )
    clock_changed_looks: tuple[int, ...] = attrs.field(
        default=(), converter=as_tuple, validator=tuple_of(integer())
    )
    reasons: tuple[str, ...] = attrs.field(
        default=(), converter=as_tuple, validator=tuple_of(one_of(tuple(THROTTLE_REASONS.values())))
    )
    sm_clock_mhz_min: int | None = optional(integer(minimum=0))
    sm_clock_mhz_max: int | None = optional(integer(minimum=0))
    temperature_c_max: int | None = optional(integer(minimum=0))
    power_w_max: float | None = optional(finite(minimum=0))

    def result_fields(self) -> dict[str, Any]:
        """The values a result records (``device_isolation`` and the figures)."""
        names = ("device_isolation", "sm_clock_mhz_min", "sm_clock_mhz_max", "temperature_c_max")
        return {name: getattr(self, name) for name in (*names, "power_w_max")}

    def note(self) -> str | None:
        """The words a result's reason gets for the flags raised (None: none raised)."""
        parts = []
        if self.throttled_looks:
            why = ", ".join(self.reasons) or "power/thermal violation time grew"
            parts.append(f"throttled ({why}) at look {', '.join(map(str, self.throttled_looks))}")
        if self.clock_changed_looks:
            parts.append(
                f"SM clock moved {self.sm_clock_mhz_min}-{self.sm_clock_mhz_max} MHz "
                f"(> {CLOCK_CHANGE_SHARE:.0%} within look {', '.join(map(str, self.clock_changed_looks))})"
            )
        if "device_shared" in self.flags:
            parts.append("another process computed on the device")
        return "; ".join(parts) or None


def _extreme(values: Sequence[Any], pick: Any) -> Any:
    known = [v for v in values if v is not None]
    return pick(known) if known else None


def assess(
    looks: Sequence[LookTelemetry], own_pid: int, *, share: float = CLOCK_CHANGE_SHARE
) -> TelemetryVerdict:
    """The flags and figures of a comparison's ``looks`` (``own_pid``: the timing process)."""
    samples = [s for look in looks for s in look.samples]
    throttled_looks = tuple(look.look for look in looks if throttled(look))
    changed_looks = tuple(look.look for look in looks if clock_changed(look, share))
    isolation = device_isolation(looks, own_pid)
    seen = 0
    for s in samples:
        seen |= s.throttle_reasons or 0
    flags = ["throttled"] if throttled_looks else []
    flags += ["clock_changed"] if changed_looks else []
    flags += ["device_shared"] if isolation == "shared" else []
    return TelemetryVerdict(
        flags=tuple(flags),
        device_isolation=isolation,
        throttled_looks=throttled_looks,
        clock_changed_looks=changed_looks,
        reasons=throttle_names(seen),
        sm_clock_mhz_min=_extreme([_busy_clock(s) for s in samples], min),
        sm_clock_mhz_max=_extreme([_busy_clock(s) for s in samples], max),
        temperature_c_max=_extreme([s.temperature_c for s in samples], max),
        power_w_max=_extreme([s.power_w for s in samples], max),
    )
