"""GPU telemetry (issue 24): NVML readings around each look give ``throttled``, ``clock_changed``,
``device_shared`` and ``device_isolation``. The pure flag logic is tested with hypothesis; the
NVML shell with a fake ``pynvml`` module (put in ``sys.modules``) whose every function returns
a scripted value per call; without CUDA or without ``pynvml`` nothing is known and no flag is
raised. ``gpu`` tests read the real device."""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Sequence
from typing import Any

import attrs
import jsonschema
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.telemetry import (
    CLOCK_CHANGE_SHARE,
    GPU_IDLE,
    THROTTLE_REASONS,
    DeviceSample,
    LookTelemetry,
    assess,
    clock_changed,
    device_isolation,
    other_processes,
    throttle_names,
    throttled,
)
from aitune_fp.errors import InvalidTypeError, InvalidValueError
from aitune_fp.events.candidates import CandidateMeasured
from aitune_fp.events.ingest import event_schema
from aitune_fp.events.sending import to_record
from aitune_fp.measure import telemetry
from aitune_fp.measure.rules import measure_speedup
from aitune_fp.testing import FakeClock
from tests.factories import result_of

ME = os.getpid()
OTHER = ME + 1 if ME + 1 != 0 else ME + 2
COUNTED = sum(THROTTLE_REASONS)
UNCOUNTED = [0x01, 0x02, 0x10, 0x100, 0x200, 0x400]


def look(*samples: DeviceSample, number: int = 1) -> LookTelemetry:
    return LookTelemetry(look=number, samples=samples)


# ---------------------------------------------------------------------------- the pure logic


class TestThrottled:
    @given(st.sampled_from(list(THROTTLE_REASONS)), st.integers(0, 0x7FF))
    def test_a_counted_reason_at_any_reading_flags(self, bit: int, other: int) -> None:
        quiet = DeviceSample(throttle_reasons=0)
        hot = DeviceSample(throttle_reasons=bit | other)
        assert throttled(look(quiet, hot)) and throttled(look(hot, quiet))

    @given(st.lists(st.sampled_from(UNCOUNTED), max_size=4), st.integers(0, 10**12))
    def test_idle_app_clocks_sync_boost_display_do_not(self, bits: list[int], ns: int) -> None:
        reasons = sum(set(bits))
        samples = [DeviceSample(throttle_reasons=reasons, violation_ns=ns)] * 2
        assert not throttled(look(*samples))

    @given(st.integers(0, 10**12), st.integers(1, 10**9))
    def test_violation_time_grown_within_the_look_flags(self, start: int, grown: int) -> None:
        """A throttle that began and ended between the readings shows in the counters."""
        before = DeviceSample(throttle_reasons=0, violation_ns=start)
        after = DeviceSample(throttle_reasons=0, violation_ns=start + grown)
        assert throttled(look(before, after))
        assert not throttled(look(before, attrs.evolve(after, violation_ns=start)))

    def test_unknown_readings_flag_nothing(self) -> None:
        assert not throttled(look(DeviceSample(), DeviceSample()))
        assert not throttled(look(DeviceSample(violation_ns=5), DeviceSample()))

    def test_names(self) -> None:
        assert throttle_names(0x04 | 0x01 | 0x40) == ("SW power cap", "HW thermal")
        assert throttle_names(0) == ()


class TestClockChanged:
    @given(st.integers(300, 3000), st.floats(0, 0.2))
    def test_beyond_the_share_flags(self, high: int, drop: float) -> None:
        low = round(high * (1 - drop))
        got = clock_changed(look(DeviceSample(sm_clock_mhz=high), DeviceSample(sm_clock_mhz=low)))
        assert got == ((high - low) / high > CLOCK_CHANGE_SHARE)

    @given(st.lists(st.integers(1400, 1470), min_size=1, max_size=6))
    def test_within_the_share_does_not(self, clocks: list[int]) -> None:
        assert not clock_changed(look(*(DeviceSample(sm_clock_mhz=c) for c in clocks)))

    def test_idle_readings_are_left_out(self) -> None:
        busy = DeviceSample(sm_clock_mhz=1500, throttle_reasons=0)
        idle = DeviceSample(sm_clock_mhz=300, throttle_reasons=GPU_IDLE)
        assert not clock_changed(look(busy, idle, busy))
        assert clock_changed(look(busy, attrs.evolve(idle, throttle_reasons=0)))

    def test_one_or_no_reading_flags_nothing(self) -> None:
        assert not clock_changed(look(DeviceSample(sm_clock_mhz=1500), DeviceSample()))
        assert not clock_changed(look(DeviceSample(sm_clock_mhz=0), DeviceSample(sm_clock_mhz=0)))


class TestProcesses:
    @given(st.sets(st.integers(1, 10**6), max_size=5))
    def test_others_counted_beside_our_own(self, others: set[int]) -> None:
        others.discard(ME)
        assert other_processes((ME, *sorted(others)), ME) == len(others)

    @given(st.sets(st.integers(1, 10**6), min_size=1, max_size=5))
    def test_own_pid_not_listed_one_of_them_is_us(self, pids: set[int]) -> None:
        """In a container NVML lists host PIDs: one of the listed contexts is ours."""
        pids.discard(ME)
        if pids:
            assert other_processes(tuple(sorted(pids)), ME) == len(pids) - 1

    def test_nothing_listed_or_unreadable_is_unknown(self) -> None:
        assert other_processes((), ME) is None
        assert other_processes(None, ME) is None

    @given(st.lists(st.sampled_from(["me", "other", "unread", "empty"]), min_size=1, max_size=6))
    def test_isolation(self, kinds: list[str]) -> None:
        pids = {"me": (ME,), "other": (ME, OTHER), "unread": None, "empty": ()}
        samples = [DeviceSample(pids=pids[k]) for k in kinds]
        got = device_isolation([look(*samples)], ME)
        if "other" in kinds:
            assert got == "shared"
        elif set(kinds) == {"me"}:
            assert got == "exclusive"
        else:
            assert got == "unknown"

    def test_no_looks_is_unknown(self) -> None:
        assert device_isolation([], ME) == "unknown"


samples_st = st.builds(
    DeviceSample,
    sm_clock_mhz=st.none() | st.integers(0, 3000),
    temperature_c=st.none() | st.integers(20, 95),
    power_w=st.none() | st.floats(0, 1000),
    throttle_reasons=st.none() | st.integers(0, 0x7FF),
    violation_ns=st.none() | st.integers(0, 10**12),
    pids=st.none() | st.lists(st.sampled_from([ME, OTHER]), max_size=2, unique=True),
)


class TestAssess:
    @given(st.lists(st.lists(samples_st, min_size=1, max_size=3), max_size=4))
    def test_flags_are_the_rules_over_the_looks(self, looks: list[list[DeviceSample]]) -> None:
        seen = [look(*s, number=i) for i, s in enumerate(looks, start=1)]
        verdict = assess(seen, ME)
        assert ("throttled" in verdict.flags) == any(throttled(t) for t in seen)
        assert ("clock_changed" in verdict.flags) == any(clock_changed(t) for t in seen)
        assert ("device_shared" in verdict.flags) == (verdict.device_isolation == "shared")
        assert verdict.throttled_looks == tuple(t.look for t in seen if throttled(t))
        assert (verdict.note() is None) == (not verdict.flags)
        if verdict.sm_clock_mhz_min is not None:
            assert verdict.sm_clock_mhz_max is not None
            assert verdict.sm_clock_mhz_min <= verdict.sm_clock_mhz_max

    def test_nothing_read_is_unknown_without_flags(self) -> None:
        verdict = assess([], ME)
        assert verdict.flags == () and verdict.device_isolation == "unknown"
        assert verdict.note() is None
        assert set(verdict.result_fields().values()) == {"unknown", None}

    def test_note_names_reasons_and_looks(self) -> None:
        hot = DeviceSample(sm_clock_mhz=1200, throttle_reasons=0x20, pids=(ME, OTHER))
        cool = DeviceSample(sm_clock_mhz=1500, throttle_reasons=0, pids=(ME,))
        verdict = assess([look(cool, cool, number=1), look(cool, hot, number=2)], ME)
        assert verdict.flags == ("throttled", "clock_changed", "device_shared")
        note = verdict.note()
        assert note is not None
        assert "throttled (SW thermal) at look 2" in note
        assert "1200-1500 MHz" in note and "another process" in note


class TestValidators:
    def test_bad_values_are_refused(self) -> None:
        with pytest.raises(InvalidValueError, match="sm_clock_mhz"):
            DeviceSample(sm_clock_mhz=-1)
        with pytest.raises(InvalidTypeError, match="power_w"):
            DeviceSample(power_w="hot")  # type: ignore[arg-type]
        with pytest.raises(InvalidValueError, match="look"):
            LookTelemetry(look=0, samples=())

    def test_pids_become_a_tuple(self) -> None:
        assert DeviceSample(pids=[3, 4]).pids == (3, 4)


# ---------------------------------------------------------------------------- the NVML shell


class NVMLError(Exception):
    """The fake's NVMLError (NotSupported and the like)."""


REFUSED = object()  # scripted: this call raises NVMLError


class FakeNvml(types.ModuleType):
    """A ``pynvml`` whose readings are scripted per call: each function takes the next value
    of its own list (the last one repeats); ``REFUSED`` raises NVMLError."""

    NVMLError = NVMLError

    def __init__(self, **scripts: Sequence[Any]) -> None:
        super().__init__("pynvml")
        defaults: dict[str, Sequence[Any]] = {
            "sm": [1500],
            "mem": [2600],
            "temp": [60],
            "power_mw": [250_000],
            "reasons": [0],
            "violation": [0],
            "pids": [[ME]],
        }
        self.scripts = {k: list(v) for k, v in {**defaults, **scripts}.items()}
        self.inits = self.shutdowns = 0
        self.fail_init = False

    def _next(self, key: str) -> Any:
        seq = self.scripts[key]
        value = seq.pop(0) if len(seq) > 1 else seq[0]
        if value is REFUSED:
            raise NVMLError("NotSupported")
        return value

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise NVMLError("DriverNotLoaded")
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        return f"handle:{uuid}"

    def nvmlDeviceGetClockInfo(self, handle: str, kind: int) -> int:
        return int(self._next("sm" if kind == 1 else "mem"))

    def nvmlDeviceGetTemperature(self, handle: str, sensor: int) -> int:
        return int(self._next("temp"))

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        return int(self._next("power_mw"))

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: str) -> int:
        return int(self._next("reasons"))

    def nvmlDeviceGetViolationStatus(self, handle: str, policy: int) -> Any:
        value = self._next("violation") if policy == 0 else 0  # thermal stays at 0
        return types.SimpleNamespace(referenceTime=0, violationTime=value)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[Any]:
        return [types.SimpleNamespace(pid=p, usedGpuMemory=1) for p in self._next("pids")]


class CudaClock(FakeClock):
    """The fake clock, timing "cuda:0" (host time only): telemetry looks the device up."""

    device = torch.device("cuda", 0)


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    """A fake pynvml in sys.modules; the device found by a fake UUID (no CUDA needed)."""
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(telemetry, "device_identity", lambda device: ("GPU-fake", None))
    return fake


def measured(clock: FakeClock, **config: Any) -> Any:
    """Eager 2 ms against a 1 ms candidate: ``faster`` at the first look (10 pairs)."""
    return measure_speedup(
        clock.arm(0.002),
        clock.arm(0.001),
        ((), {}),
        4,
        ProfilingConfig(looks=(10, 20), **config),
        timer=clock,
    ).result


TELEMETRY_FLAGS = {"throttled", "clock_changed", "device_shared"}


class TestShell:
    def test_steady_exclusive_device_raises_nothing(self, nvml: FakeNvml) -> None:
        r = measured(CudaClock())
        assert r.verdict == "faster"
        assert TELEMETRY_FLAGS.isdisjoint(r.flags)
        assert r.device_isolation == "exclusive"
        assert (r.sm_clock_mhz_min, r.sm_clock_mhz_max) == (1500, 1500)
        assert r.temperature_c_max == 60 and r.power_w_max == pytest.approx(250.0)
        assert nvml.inits == 1 and nvml.shutdowns == 1

    @pytest.mark.parametrize("bit", sorted(THROTTLE_REASONS))
    def test_throttle_reason_after_the_pairs(self, nvml: FakeNvml, bit: int) -> None:
        nvml.scripts["reasons"] = [0, bit]  # before the look: none; after it: throttled
        r = measured(CudaClock())
        assert "throttled" in r.flags
        assert f"throttled ({THROTTLE_REASONS[bit]}) at look 1" in r.reason

    def test_violation_counter_grown(self, nvml: FakeNvml) -> None:
        nvml.scripts["violation"] = [10, 5_000_000]
        r = measured(CudaClock())
        assert "throttled" in r.flags and "violation time grew" in r.reason

    def test_idle_reason_is_no_throttle(self, nvml: FakeNvml) -> None:
        nvml.scripts["reasons"] = [GPU_IDLE, 0x02]
        nvml.scripts["sm"] = [300, 1500]  # the idle reading's clock is not compared
        r = measured(CudaClock())
        assert TELEMETRY_FLAGS.isdisjoint(r.flags)
        assert r.sm_clock_mhz_min == 1500

    def test_clock_changed(self, nvml: FakeNvml) -> None:
        nvml.scripts["sm"] = [1500, 1380]
        r = measured(CudaClock())
        assert "clock_changed" in r.flags and "throttled" not in r.flags
        assert "1380-1500 MHz" in r.reason

    def test_clock_within_the_share(self, nvml: FakeNvml) -> None:
        nvml.scripts["sm"] = [1500, 1440]
        assert "clock_changed" not in measured(CudaClock()).flags

    def test_device_shared(self, nvml: FakeNvml) -> None:
        nvml.scripts["pids"] = [[ME], [ME, OTHER]]
        r = measured(CudaClock())
        assert "device_shared" in r.flags and r.device_isolation == "shared"
        assert "another process computed on the device" in r.reason

    def test_refused_readings_are_none_and_processes_unknown(self, nvml: FakeNvml) -> None:
        for key in ("sm", "temp", "power_mw", "reasons", "violation"):
            nvml.scripts[key] = [REFUSED]
        nvml.scripts["pids"] = [[]]  # NVML sees no context (another PID namespace)
        r = measured(CudaClock())
        assert TELEMETRY_FLAGS.isdisjoint(r.flags)
        assert r.device_isolation == "unknown" and r.sm_clock_mhz_max is None

    def test_legacy_throttle_function(self, nvml: FakeNvml) -> None:
        """A pynvml before driver 535 names it ...ClocksThrottleReasons."""
        sampler = telemetry.NvmlSampler(_legacy(nvml), "h")
        sample = sampler.sample()
        assert sample is not None and sample.throttle_reasons == 0x08
        sampler.close()
        sampler.close()
        assert sampler.sample() is None

    def test_telemetry_reaches_the_event(self, nvml: FakeNvml) -> None:
        nvml.scripts["pids"] = [[ME, OTHER]]
        r = measured(CudaClock())
        record = to_record(
            CandidateMeasured(run_id="0" * 16, module_name="m", result=r, duration_s=0.1).to_event()
        )
        jsonschema.validate(record, event_schema())
        assert record["result"]["device"]["device_isolation"] == "shared"
        assert "device_shared" in record["result"]["decided"]["flags"]
        assert result_of(record) == r
        device = {**record["result"]["device"], "device_isolation": "solo"}
        bad = {**record, "result": {**record["result"], "device": device}}
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, event_schema())


def _legacy(nvml: FakeNvml) -> types.ModuleType:
    old = types.ModuleType("pynvml")
    for name in ("nvmlDeviceGetClockInfo", "nvmlDeviceGetComputeRunningProcesses"):
        setattr(old, name, getattr(nvml, name))
    old.nvmlDeviceGetCurrentClocksThrottleReasons = lambda handle: 0x08  # type: ignore[attr-defined]
    return old


class TestUnknown:
    def test_cpu_timer_reads_nothing(self, nvml: FakeNvml) -> None:
        r = measured(FakeClock())
        assert r.device_isolation == "unknown" and nvml.inits == 0
        assert TELEMETRY_FLAGS.isdisjoint(r.flags)

    def test_without_pynvml(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
        r = measured(CudaClock())
        assert r.device_isolation == "unknown" and r.sm_clock_mhz_max is None
        assert TELEMETRY_FLAGS.isdisjoint(r.flags)

    def test_nvml_failing_to_start(self, nvml: FakeNvml) -> None:
        nvml.fail_init = True
        r = measured(CudaClock())
        assert r.device_isolation == "unknown" and nvml.shutdowns == 0

    def test_device_not_found(self, nvml: FakeNvml, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(nvml, "nvmlDeviceGetHandleByUUID", _refuse, raising=False)
        r = measured(CudaClock())
        assert r.device_isolation == "unknown" and nvml.inits == nvml.shutdowns == 1

    def test_device_identity_failing(self, nvml: FakeNvml, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(telemetry, "device_identity", _refuse)
        assert telemetry.open_sampler(CudaClock()) is telemetry.NO_TELEMETRY

    def test_point_mode_records_no_telemetry(self, nvml: FakeNvml) -> None:
        r = measured(CudaClock(), decision="point", point_warmup_calls=1, point_steps=3)
        assert r.device_isolation is None and nvml.inits == 0

    def test_only_looks_decided_on_count(self) -> None:
        watch = telemetry.LookWatch(_Scripted([0, 0, 0x04, 0x04]))
        for number in (1, 2):
            watch.before()
            watch.after(number)
        assert watch.verdict(1).flags == () and watch.verdict().flags == ("throttled",)


def _refuse(*args: Any) -> Any:
    raise NVMLError("NotFound")


class _Scripted(telemetry.Sampler):
    def __init__(self, reasons: list[int]) -> None:
        self.reasons = reasons

    def sample(self) -> DeviceSample | None:
        return DeviceSample(throttle_reasons=self.reasons.pop(0), pids=(ME,))


# ---------------------------------------------------------------------------- a real device


@pytest.mark.gpu
class TestOnCuda:
    def test_reads_the_timed_device(self) -> None:
        import pynvml  # noqa: F401  # an extra README's set-up installs: never skipped

        from aitune_fp.profiling.timers import CudaTimer

        timer = CudaTimer()
        torch.ones(1, device=timer.device).sum().item()  # a context on the device
        with telemetry.watch(timer) as watch:
            watch.before()
            torch.randn(2048, 2048, device=timer.device).matmul(torch.eye(2048, device="cuda"))
            timer.sync()
            watch.after(1)
            verdict = watch.verdict()
        assert verdict.sm_clock_mhz_max is not None and verdict.sm_clock_mhz_max > 0
        assert verdict.temperature_c_max is not None and verdict.power_w_max is not None
        assert verdict.device_isolation in ("exclusive", "shared", "unknown")

    def test_a_tune_on_cuda_records_it(self) -> None:
        import pynvml  # noqa: F401  # an extra README's set-up installs: never skipped

        layer = torch.nn.Linear(256, 256).cuda().eval()
        x = torch.randn(64, 256, device="cuda")
        r = measure_speedup(layer, layer, ((x,), {}), 64, ProfilingConfig(looks=(10, 20))).result
        assert r.device_isolation in ("exclusive", "shared", "unknown")
        assert r.sm_clock_mhz_max is not None
