"""Specs of aitune_fp.testing: the fake clock and the event capture a user's tests get."""

from __future__ import annotations

import copy
import logging
import pickle
import threading

import pytest
import structlog

from aitune_fp.core.config import ProfilingConfig
from aitune_fp.errors import InvalidTypeError, InvalidValueError
from aitune_fp.events.kinds import LOGGER_NAME
from aitune_fp.inputs import Sample
from aitune_fp.measure.rules import measure_speedup
from aitune_fp.profiling.timers import Timer, has_device_clock
from aitune_fp.testing import FakeClock, capture_events


class TestFakeClock:
    def test_an_arm_advances_by_its_scripted_latency(self) -> None:
        """A float every call, a sequence in turn (cycled), or a function of the call number."""
        clock = FakeClock()
        fixed, listed, ramp = clock.arm(0.5), clock.arm([1.0, 2.0]), clock.arm(lambda i: i * 0.25)
        steps = []
        for call in (fixed, listed, listed, listed, ramp, ramp):
            before = clock.now_ns()
            call()
            steps.append(clock.now_ns() - before)
        assert steps == [500_000_000, 1_000_000_000, 2_000_000_000, 1_000_000_000, 0, 250_000_000]

    def test_an_arm_logs_its_label_and_returns_what_fn_returns(self) -> None:
        clock, log = FakeClock(), list[str]()
        a = clock.arm(0.001, log=log, label="A", fn=lambda x: x + 1)
        b = clock.arm(0.002, log=log, label="B")
        assert (a(1), b(), a(2)) == (2, None, 3)
        assert log == ["A", "B", "A"]

    def test_device_time_only_with_a_device_clock(self) -> None:
        """Without device_scale there is no device span (CPU); with it, spans read device time."""
        assert not has_device_clock(FakeClock())
        clock = FakeClock(device_scale=0.5)
        span = clock.device_span()
        assert span is not None
        span.start()
        clock.arm(0.002)()
        clock.arm(0.002, device_seconds=0.003)()
        span.stop()
        assert span.elapsed_s() == pytest.approx(0.001 + 0.003)
        assert clock.now_ns() == 4_000_000

    def test_sync_is_counted(self) -> None:
        clock = FakeClock()
        clock.sync()
        clock.sync()
        assert clock.syncs == 2

    def test_jitter_is_bounded_and_seeded(self) -> None:
        def steps(seed: int) -> list[int]:
            clock, out = FakeClock(jitter=0.1, seed=seed), []
            for _ in range(50):
                before = clock.ns
                clock.advance(0.001)
                out.append(clock.ns - before)
            return out

        assert steps(1) == steps(1) != steps(2)
        assert all(900_000 <= s <= 1_100_000 for s in steps(1))

    def test_each_thread_has_its_own_time(self) -> None:
        clock = FakeClock()
        clock.advance(1.0)
        seen: list[int] = []
        worker = threading.Thread(target=lambda: (clock.advance(0.5), seen.append(clock.ns)))
        worker.start()
        worker.join()
        assert seen == [500_000_000]
        assert clock.ns == 1_000_000_000
        clock.reset()
        assert clock.ns == 0

    def test_copies_and_pickles_are_the_same_clock(self) -> None:
        """A strategy holding the clock is copied or pickled: the copy must tick with the work."""
        clock = FakeClock(jitter=0.02)
        assert copy.copy(clock) is clock
        assert copy.deepcopy(clock) is clock
        assert pickle.loads(pickle.dumps(clock)) is clock

    def test_is_a_timer_that_measures(self) -> None:
        """A 2 ms eager against a 1 ms candidate: faster at the first look, instantly."""
        clock: Timer = FakeClock()
        assert isinstance(clock, FakeClock)
        result = measure_speedup(
            clock.arm(0.002), clock.arm(0.001), Sample(), 4, ProfilingConfig(), timer=clock
        ).result
        assert result.verdict == "faster"
        assert result.estimate == pytest.approx(2.0)

    def test_its_machine_reports_the_load_it_is_given(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """``load=5.8`` on 2 cores: a 2x candidate is held back as busy; the default is quiet."""
        from aitune_fp.profiling import threads

        monkeypatch.setattr(threads, "usable_cpus", lambda: 2)
        for load, verdict in ((5.8, "inconclusive"), (None, "faster")):
            clock = FakeClock(load=load)
            config = ProfilingConfig(threads=1)
            result = measure_speedup(
                clock.arm(0.002), clock.arm(0.001), Sample(), 4, config, timer=clock
            ).result
            assert result.verdict == verdict
            assert ("machine_busy" in result.flags) == (load is not None)

    @pytest.mark.parametrize(
        ("kwargs", "error"),
        [
            ({"load": "x"}, InvalidTypeError),
            ({"load": -1.0}, InvalidValueError),
            ({"jitter": "x"}, InvalidTypeError),
            ({"jitter": 1.0}, InvalidValueError),
            ({"jitter": -0.1}, InvalidValueError),
            ({"device_scale": 0}, InvalidValueError),
        ],
    )
    def test_bad_settings_name_themselves(self, kwargs: dict[str, object], error: type) -> None:
        with pytest.raises(error, match=next(iter(kwargs))):
            FakeClock(**kwargs)  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        ("latency", "error"),
        [("1", InvalidTypeError), ([], InvalidValueError), ([0.1, -1.0], InvalidValueError)],
    )
    def test_bad_latencies_name_themselves(self, latency: object, error: type) -> None:
        with pytest.raises(error, match="seconds"):
            FakeClock().arm(latency)  # type: ignore[arg-type]


class TestCaptureEvents:
    def test_collects_the_librarys_events_only(self) -> None:
        with capture_events() as events:
            structlog.get_logger(LOGGER_NAME).info("aitune_fp.x", a=1)
            structlog.get_logger(f"{LOGGER_NAME}.sweep").warning("aitune_fp.y")
            structlog.get_logger("someone.else").info("theirs")
            structlog.get_logger().info("unnamed")
        assert events == [
            {"event": "aitune_fp.x", "a": 1, "log_level": "info"},
            {"event": "aitune_fp.y", "log_level": "warning"},
        ]

    def test_level_filters(self) -> None:
        with capture_events(logging.WARNING) as events:
            log = structlog.get_logger(LOGGER_NAME)
            log.debug("aitune_fp.d")
            log.info("aitune_fp.i")
            log.warning("aitune_fp.w")
        assert [e["event"] for e in events] == ["aitune_fp.w"]

    def test_restores_the_configuration(self) -> None:
        structlog.reset_defaults()
        with capture_events():
            pass
        assert not structlog.is_configured()
        mine: list[object] = []

        def keep(logger: object, method: str, event: dict[str, object]) -> dict[str, object]:
            mine.append(event["event"])
            raise structlog.DropEvent

        structlog.configure(processors=[keep])
        with capture_events() as events:
            structlog.get_logger(LOGGER_NAME).info("aitune_fp.inside")
        structlog.get_logger(LOGGER_NAME).info("aitune_fp.after")
        assert [e["event"] for e in events] == ["aitune_fp.inside"]
        assert mine == ["aitune_fp.after"]
