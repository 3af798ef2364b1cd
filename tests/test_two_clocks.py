"""Two clocks on CUDA (issue 24): host wall time decides by default, CUDA-event device time is
recorded beside it, ``host_bound`` says when they disagree. On CPU a fake CUDA timer (host and
device time moved separately by each fake call) exercises every branch; ``gpu`` tests run the
real CUDA events where a device is present."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
import torch

from aitune_fp.cli import main
from aitune_fp.cli.tune_args import profiling_config
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.errors import InvalidValueError
from aitune_fp.events.candidates import CandidateMeasured
from aitune_fp.events.ingest import event_schema
from aitune_fp.events.sending import to_record
from aitune_fp.measure.rules import measure_speedup
from aitune_fp.profiling.timers import CpuTimer, has_device_clock, is_host_bound
from aitune_fp.sweep.spec import parse_sweep
from aitune_fp.testing import FakeClock
from tests.factories import result_of
from tests.validation_helpers import tune_args

LOOKS = ProfilingConfig(looks=(10, 20))


def _measure(
    timer: FakeClock, eager: tuple[float, float], cand: tuple[float, float], **config: Any
) -> Any:
    return measure_speedup(
        timer.arm(eager[0], device_seconds=eager[1]),
        timer.arm(cand[0], device_seconds=cand[1]),
        ((), {}),
        4,
        ProfilingConfig(looks=(10, 20), **config),
        timer=timer,
    ).result


#: Launch-bound eager (2 ms host, 0.5 ms on the device) against a CUDA-graph-like candidate
#: that removes the host overhead (1 ms host) but runs 20 % longer on the device (0.6 ms).
EAGER, GRAPHED = (0.002, 0.0005), (0.001, 0.0006)


class TestHostDecides:
    def test_default_is_the_host_clock_and_both_are_recorded(self) -> None:
        """Host decides (2x: faster); the device's 0.83x is recorded; the reason says which."""
        r = _measure(FakeClock(device_scale=1.0), EAGER, GRAPHED)
        assert r.clock == "host"
        assert r.verdict == "faster"
        assert r.estimate == pytest.approx(2.0)
        assert r.host_estimate == pytest.approx(2.0)
        assert r.device_estimate == pytest.approx(0.5 / 0.6)
        assert r.baseline_host_latency_s == pytest.approx(0.002)
        assert r.candidate_host_latency_s == pytest.approx(0.001)
        assert r.baseline_device_latency_s == pytest.approx(0.0005)
        assert r.candidate_device_latency_s == pytest.approx(0.0006)
        assert r.baseline_throughput == pytest.approx(4 / 0.002)  # host figures
        assert "host clock decided; device clock estimate 0.833x" in r.reason

    def test_host_bound_flag_names_the_arm(self) -> None:
        """Host time over 1.5x device time: host_bound once, the reason names each such arm."""
        r = _measure(FakeClock(device_scale=1.0), EAGER, GRAPHED)  # eager 4x, candidate 1.67x
        assert r.flags.count("host_bound") == 1
        assert "eager's host time is 4.0x its device time" in r.reason
        assert "the candidate's host time is 1.7x its device time" in r.reason
        only_eager = _measure(
            FakeClock(device_scale=1.0), EAGER, (0.0007, 0.0006)
        )  # candidate 1.17x
        assert "host_bound" in only_eager.flags
        assert "the candidate's" not in only_eager.reason

    def test_not_host_bound_when_the_clocks_agree(self) -> None:
        """Host within 1.5x of device for both arms: no flag, and the note only names clocks."""
        r = _measure(FakeClock(device_scale=1.0), (0.0011, 0.001), (0.00055, 0.0005))
        assert "host_bound" not in r.flags
        assert r.reason.endswith("(host clock decided; device clock estimate 2.000x)")


class TestDeviceDecides:
    def test_device_clock_flips_the_verdict(self) -> None:
        """clock='device': the same run is decided on CUDA-event time: 0.83x, not faster."""
        r = _measure(FakeClock(device_scale=1.0), EAGER, GRAPHED, clock="device")
        assert r.clock == "device"
        assert r.verdict == "not_faster"
        assert r.estimate == pytest.approx(0.5 / 0.6)
        assert r.device_estimate == pytest.approx(0.5 / 0.6)
        assert r.host_estimate == pytest.approx(2.0)
        assert r.baseline_throughput == pytest.approx(4 / 0.0005)  # device figures
        assert "device clock decided; host clock estimate 2.000x" in r.reason
        assert "host_bound" in r.flags

    def test_device_clock_without_device_time_is_refused(self) -> None:
        """A CPU timer has no device time: clock='device' is an error naming clock."""
        clock = FakeClock()
        with pytest.raises(InvalidValueError, match=r"clock='device'.*FakeClock"):
            measure_speedup(
                clock.arm(0.002),
                clock.arm(0.001),
                ((), {}),
                4,
                ProfilingConfig(looks=(10, 20), clock="device"),
                timer=clock,
            )


class TestCpuUnchanged:
    def test_cpu_results_carry_no_device_figures(self) -> None:
        """On CPU: host clock, no device fields, no clock note in the reason."""
        clock = FakeClock()
        r = measure_speedup(
            clock.arm(0.002), clock.arm(0.001), ((), {}), 4, LOOKS, timer=clock
        ).result
        assert r.clock == "host"
        assert r.device_estimate is None and r.host_estimate is None
        assert r.baseline_device_latency_s is None and r.candidate_device_latency_s is None
        assert "clock decided" not in (r.reason or "")
        assert "host_bound" not in r.flags
        assert r.estimate == pytest.approx(2.0)
        assert r.baseline_throughput == pytest.approx(2000.0)

    def test_helpers(self) -> None:
        """has_device_clock and the stated 1.5x factor."""
        assert not has_device_clock(CpuTimer())
        assert has_device_clock(FakeClock(device_scale=1.0))
        assert is_host_bound(1.51, 1.0) and not is_host_bound(1.5, 1.0)
        assert not is_host_bound(1.0, 0.0)


class TestEvents:
    def test_device_fields_round_trip_and_validate(self) -> None:
        """candidate_measured carries both clocks' figures; the schema accepts them; ingest
        rebuilds the same result."""
        r = _measure(FakeClock(device_scale=1.0), EAGER, GRAPHED)
        record = to_record(
            CandidateMeasured(run_id="0" * 16, module_name="m", result=r, duration_s=0.1).to_event()
        )
        jsonschema.validate(record, event_schema())
        assert record["result"]["device"]["device_estimate"] == pytest.approx(0.5 / 0.6)
        assert record["result"]["environment"]["clock"] == "host"
        assert result_of(record) == r
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(
                {**record, "result": {**record["result"], "environment": {"clock": "wall"}}},
                event_schema(),
            )


class TestOptions:
    def test_cli_flag_reaches_the_config(self) -> None:
        """--clock device sets ProfilingConfig.clock; host is the default."""
        assert profiling_config(tune_args(clock="device")).clock == "device"
        assert profiling_config(tune_args()).clock == "host"

    @pytest.mark.parametrize(
        ("args", "match"),
        [
            (["--clock", "device", "--decision", "point"], "--clock applies to --decision"),
            (["--clock", "device", "--device", "cpu"], "--clock device needs a CUDA device"),
        ],
    )
    def test_cli_refusals(
        self, args: list[str], match: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--clock with the point rule or on CPU: one line, exit 2."""
        assert main(["tune", *args]) == 2
        err = capsys.readouterr().err
        assert match in err and len(err.strip().splitlines()) == 1

    def test_sweep_file(self) -> None:
        """[budget] clock: accepted on CUDA, refused on CPU and for the point rule, by name."""
        spec = parse_sweep({"device": "cuda", "budget": {"clock": "device"}, "models": ["mlp"]})
        assert spec.profiling.clock == "device"
        with pytest.raises(InvalidValueError, match=r'budget\.clock "device" needs device'):
            parse_sweep({"budget": {"clock": "device"}, "models": ["mlp"]})
        with pytest.raises(InvalidValueError, match=r"budget\.clock applies to decision"):
            parse_sweep({"decision": "point", "budget": {"clock": "host"}, "models": ["mlp"]})
        with pytest.raises(ValueError, match=r"budget\.clock"):
            parse_sweep({"budget": {"clock": "wall"}, "models": ["mlp"]})


@pytest.mark.gpu
class TestOnCuda:
    """The real CUDA events (skipped without a CUDA device; the fake timer covers the logic)."""

    def test_real_device_time_beside_host_time(self) -> None:
        """A small matmul on CUDA: both clocks recorded, device time below host time."""
        from aitune_fp.profiling.timers import CudaTimer

        x = torch.randn(256, 256, device="cuda")
        w = torch.randn(256, 256, device="cuda")

        def eager(a: torch.Tensor) -> torch.Tensor:
            return (a @ w).relu() @ w

        def cand(a: torch.Tensor) -> torch.Tensor:
            return a @ w @ w

        for clock in ("host", "device"):
            r = measure_speedup(
                eager,
                cand,
                ((x,), {}),
                256,
                ProfilingConfig(looks=(10, 20), clock=clock),
                timer=CudaTimer(),
            ).result
            assert r.clock == clock
            assert r.device_estimate is not None and r.host_estimate is not None
            assert r.baseline_device_latency_s is not None
            assert r.baseline_host_latency_s is not None
            assert r.baseline_device_latency_s <= r.baseline_host_latency_s * 1.05
            assert f"{clock} clock decided" in (r.reason or "")
