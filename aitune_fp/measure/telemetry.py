"""Advisory NVML readings of the CUDA device timed, around each look (without NVML: none)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from aitune_fp.core.telemetry import DeviceSample, LookTelemetry, TelemetryVerdict, assess

# NVML's constants, spelled out so a pynvml that lacks one still works
_CLOCK_SM = 1  # NVML_CLOCK_SM
_CLOCK_MEM = 2  # NVML_CLOCK_MEM
_TEMPERATURE_GPU = 0  # NVML_TEMPERATURE_GPU
_PERF_POLICY_POWER = 0  # NVML_PERF_POLICY_POWER: time power held clocks down
_PERF_POLICY_THERMAL = 1  # NVML_PERF_POLICY_THERMAL: time temperature held clocks down


class Sampler:
    """Reads nothing: the telemetry of a run without NVML (CPU, no ``pynvml``, NVML failing)."""

    def sample(self) -> DeviceSample | None:
        """One reading of the device now; None: no telemetry."""
        return None

    def close(self) -> None:
        """Release NVML (nothing to release here)."""


#: The sampler of a run without telemetry.
NO_TELEMETRY = Sampler()


def _read(nvml: ModuleType, name: str, *args: Any) -> Any:
    """``nvml.<name>(*args)``, or None when this pynvml lacks it or NVML refuses it."""
    fn = getattr(nvml, name, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except Exception:
        return None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and value >= 0 else None


class NvmlSampler(Sampler):
    """Reads one NVML device (``handle``) each :meth:`sample`; shuts NVML down on close."""

    def __init__(self, nvml: ModuleType, handle: Any) -> None:
        """Read ``handle`` through ``nvml`` (the ``pynvml`` module, initialised)."""
        self._nvml = nvml
        self._handle = handle
        self._open = True

    def _violation_ns(self) -> int | None:
        total = 0
        for policy in (_PERF_POLICY_POWER, _PERF_POLICY_THERMAL):
            status = _read(self._nvml, "nvmlDeviceGetViolationStatus", self._handle, policy)
            value = _int(getattr(status, "violationTime", None))
            if value is None:
                return None
            total += value
        return total

    def _pids(self) -> tuple[int, ...] | None:
        procs = _read(self._nvml, "nvmlDeviceGetComputeRunningProcesses", self._handle)
        if procs is None:
            return None
        pids = [_int(getattr(p, "pid", None)) for p in procs]
        return tuple(sorted({p for p in pids if p})) if all(pids) else None

    def sample(self) -> DeviceSample | None:
        """One reading: each value None where NVML refused it; None once closed."""
        if not self._open:
            return None
        nvml, handle = self._nvml, self._handle
        reasons = _read(nvml, "nvmlDeviceGetCurrentClocksEventReasons", handle)
        if reasons is None:  # the name before driver 535
            reasons = _read(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        power_mw = _int(_read(nvml, "nvmlDeviceGetPowerUsage", handle))
        return DeviceSample(
            sm_clock_mhz=_int(_read(nvml, "nvmlDeviceGetClockInfo", handle, _CLOCK_SM)),
            mem_clock_mhz=_int(_read(nvml, "nvmlDeviceGetClockInfo", handle, _CLOCK_MEM)),
            temperature_c=_int(_read(nvml, "nvmlDeviceGetTemperature", handle, _TEMPERATURE_GPU)),
            power_w=None if power_mw is None else power_mw / 1000.0,
            throttle_reasons=_int(reasons),
            violation_ns=self._violation_ns(),
            pids=self._pids(),
        )

    def close(self) -> None:
        """Shut NVML down (once; NVML counts its inits)."""
        if self._open:
            self._open = False
            _read(self._nvml, "nvmlShutdown")


def device_identity(device: Any) -> tuple[str | None, str | None]:
    """(UUID, PCI bus id) of a CUDA ``device``: torch's index is not NVML's, so it is matched so."""
    import torch

    props = torch.cuda.get_device_properties(device)
    uuid = getattr(props, "uuid", None)
    text = None if uuid is None else str(uuid)
    if text is not None and not text.startswith(("GPU-", "MIG-")):
        text = f"GPU-{text}"
    parts = [getattr(props, f"pci_{k}_id", None) for k in ("domain", "bus", "device")]
    bus = None
    if all(isinstance(p, int) for p in parts):
        bus = f"{parts[0]:08X}:{parts[1]:02X}:{parts[2]:02X}.0"
    return text, bus


def _handle(nvml: ModuleType, device: Any) -> Any:
    """NVML's handle of ``device`` (by UUID, PCI bus id, or the only device), or None."""
    uuid, bus = device_identity(device)
    for name, key in (("nvmlDeviceGetHandleByUUID", uuid), ("nvmlDeviceGetHandleByPciBusId", bus)):
        found = None if key is None else _read(nvml, name, key)
        if found is not None:
            return found
    if _read(nvml, "nvmlDeviceGetCount") == 1:
        return _read(nvml, "nvmlDeviceGetHandleByIndex", 0)
    return None


def open_sampler(timer: object) -> Sampler:
    """The sampler of the device ``timer`` times; NO_TELEMETRY when there is none to read."""
    device = getattr(timer, "device", None)
    if getattr(device, "type", None) != "cuda":
        return NO_TELEMETRY
    try:
        import pynvml
    except ImportError:
        return NO_TELEMETRY
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver, no GPU visible to NVML: no telemetry, never a failure
        return NO_TELEMETRY
    try:
        handle = _handle(pynvml, device)
    except Exception:  # torch could not describe the device
        handle = None
    if handle is None:
        _read(pynvml, "nvmlShutdown")
        return NO_TELEMETRY
    return NvmlSampler(pynvml, handle)


class LookWatch:
    """The readings around each look's pairs of one comparison: :meth:`before`, then :meth:`after`."""

    def __init__(self, sampler: Sampler) -> None:
        """Read through ``sampler`` (:data:`NO_TELEMETRY`: nothing is read)."""
        self._sampler = sampler
        self._pending: DeviceSample | None = None
        self._looks: list[LookTelemetry] = []

    def before(self) -> None:
        """Read the device just before a look's pairs."""
        self._pending = self._sampler.sample()

    def after(self, look: int) -> None:
        """Read it just after look ``look``'s pairs (from 1) and keep both readings."""
        samples = [s for s in (self._pending, self._sampler.sample()) if s is not None]
        self._pending = None
        if samples:
            self._looks.append(LookTelemetry(look=look, samples=samples))

    def verdict(self, up_to: int | None = None) -> TelemetryVerdict:
        """The flags of the looks read so far, only looks ``<= up_to`` when given."""
        looks = [t for t in self._looks if up_to is None or t.look <= up_to]
        return assess(looks, os.getpid())


@contextlib.contextmanager
def watch(timer: object) -> Iterator[LookWatch]:
    """A :class:`LookWatch` on the device ``timer`` times (:func:`open_sampler`), for the block."""
    sampler = open_sampler(timer)
    try:
        yield LookWatch(sampler)
    finally:
        sampler.close()
