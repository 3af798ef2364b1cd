"""Tests of the timing shell: interleaving, warm-up, flags, failures, threads (fake clock and real CPU)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from aitune_fp.core.config import ProfilingConfig
from aitune_fp.inputs import Sample
from aitune_fp.profiling import interleaved
from aitune_fp.profiling.calls import ProfilingError, time_calls
from aitune_fp.profiling.interleaved import InterleavedRun, PairedTimings
from aitune_fp.profiling.layout import pair_order
from aitune_fp.profiling.threads import intra_op_threads
from aitune_fp.profiling.timers import CpuTimer, CudaTimer, timer_for
from aitune_fp.testing import FakeClock


def compare(
    baseline: Any, candidate: Any, batch: Any, config: ProfilingConfig, *, n_pairs: int, **run: Any
) -> PairedTimings:
    """Warm up both arms, then time ``n_pairs`` interleaved pairs of single calls (random quads)."""
    with InterleavedRun(baseline, candidate, batch, threads=config.threads, **run) as timed:
        window, tolerance = config.warmup_window, config.warmup_tolerance
        timed.warm_up(window=window, tolerance=tolerance, max_calls=config.warmup_max_calls)
        timed.extend(n_pairs)
        return timed.timings()


def quiet_config(**changes: Any) -> ProfilingConfig:
    """A config with a small warm-up, for fake-clock tests."""
    return ProfilingConfig(warmup_window=3, warmup_max_calls=10, **changes)


class TestPairOrder:
    def test_quads_alternate_abba_and_baab(self) -> None:
        """Pairs run A B | B A | B A | A B: quads ABBA then BAAB, repeating."""
        order = "".join("AB" if pair_order(i) else "BA" for i in range(8))
        assert order == "ABBABAABABBABAAB"

    def test_each_arm_leads_half_the_pairs(self) -> None:
        """Over whole quads each arm is first in exactly half the pairs."""
        assert sum(pair_order(i) for i in range(40)) == 20


class TestInterleavedRun:
    def test_call_sequence(self) -> None:
        """Warm-up alternates; each extend starts with one untimed call per arm, the next pair's
        first arm last (so no arm starts the look warm from its own call), then quads (here in
        the fixed ABBA / BAAB order; random orientations: tests/test_quad_orientation.py)."""
        clock = FakeClock()
        log: list[str] = []
        a = clock.arm(0.002, log=log, label="A")
        b = clock.arm(0.001, log=log, label="B")
        with InterleavedRun(a, b, Sample(), timer=clock, order="fixed") as run:
            report = run.warm_up(window=3, tolerance=0.1, max_calls=10)
            assert report.converged
            assert report.calls_per_arm == 4  # 1 untimed + 3 timed to fill the window
            assert "".join(log) == "AB" * 4
            log.clear()
            assert run.extend(4) == 4
            assert "".join(log) == "BA" + "ABBABAAB"
            log.clear()
            run.extend(2)
            assert "".join(log) == "BA" + "ABBA"
            log.clear()
            run.extend(2)  # pair 6 starts a BAAB quad
            assert "".join(log) == "AB" + "BAAB"
            timings = run.timings()
        assert timings.baseline_s == (0.002,) * 8
        assert timings.candidate_s == (0.001,) * 8
        assert timings.baseline_device_s is None
        assert timings.flags == ()

    def test_first_call_is_never_timed(self) -> None:
        """A slow first call (compile) appears in no timing, not even the warm-up's."""
        clock = FakeClock()
        a = clock.arm(lambda i: 5.0 if i == 0 else 0.002)
        b = clock.arm(lambda i: 9.0 if i == 0 else 0.001)
        with InterleavedRun(a, b, Sample(), timer=clock) as run:
            report = run.warm_up(window=3, tolerance=0.1, max_calls=10)
        assert max(report.baseline_s) == 0.002
        assert max(report.candidate_s) == 0.001

    def test_warmup_waits_for_the_slower_arm_to_settle(self) -> None:
        """Warm-up continues until both arms are steady (the candidate decays for 6 calls)."""
        clock = FakeClock()
        a = clock.arm(0.002)
        b = clock.arm(lambda i: 0.001 * (1 + max(0, 6 - i)))
        with InterleavedRun(a, b, Sample(), timer=clock) as run:
            report = run.warm_up(window=3, tolerance=0.05, max_calls=20)
        assert report.converged
        assert report.candidate_s[-3:] == (0.001, 0.001, 0.001)
        assert report.calls_per_arm == 9

    def test_warmup_gives_up_and_flags(self) -> None:
        """An arm that never settles (slowing down call after call) stops warm-up at max_calls and
        flags the timings."""
        clock = FakeClock()
        a = clock.arm(0.002)
        b = clock.arm(lambda i: 0.001 * (1 + 0.2 * i))
        with InterleavedRun(a, b, Sample(), timer=clock) as run:
            report = run.warm_up(window=3, tolerance=0.1, max_calls=7)
            run.extend(2)
            timings = run.timings()
        assert not report.converged
        assert report.calls_per_arm == 7
        assert len(report.baseline_s) == 6
        assert "warmup_not_steady" in timings.flags

    def test_device_times_come_from_the_span(self) -> None:
        """With device spans, device seconds are recorded per call beside wall seconds."""
        clock = FakeClock(device_scale=0.5)
        with InterleavedRun(clock.arm(0.002), clock.arm(0.001), Sample(), timer=clock) as run:
            run.extend(3)
            timings = run.timings()
        assert timings.baseline_device_s == (0.001,) * 3
        assert timings.candidate_device_s == (0.0005,) * 3

    def test_sync_brackets_every_timed_call(self) -> None:
        """Each timed call is preceded and followed by a device barrier."""
        clock = FakeClock()
        with InterleavedRun(clock.arm(0.002), clock.arm(0.001), Sample(), timer=clock) as run:
            run.extend(5)
        # 2 untimed calls (1 sync each) + 10 timed calls (2 syncs each)
        assert clock.syncs == 2 + 20

    def test_deadline_stops_before_a_pair(self) -> None:
        """extend stops once the clock reaches the deadline and reports the pairs done."""
        clock = FakeClock()
        with InterleavedRun(clock.arm(0.5), clock.arm(0.5), Sample(), timer=clock) as run:
            done = run.extend(10, deadline_ns=3_500_000_000)
        # untimed calls take 1 s, then 1 s per pair: pairs start at 1, 2, 3 s
        assert done == 3
        assert run.n_pairs == 3

    def test_level_shift_is_flagged(self) -> None:
        """A candidate that doubles its time half-way through is flagged (split index reported)."""
        clock = FakeClock()
        a = clock.arm(0.002)
        b = clock.arm(lambda i: 0.001 if i < 21 else 0.002)  # 1 untimed call first
        with InterleavedRun(a, b, Sample(), timer=clock) as run:
            run.extend(40)
            timings = run.timings()
        shifts = [f for f in timings.flags if f.startswith("level_shift_after_pair_")]
        assert len(shifts) == 1
        assert 10 <= int(shifts[0].rsplit("_", 1)[1]) <= 20

    def test_recompile_during_timing_is_flagged(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A change of dynamo's compile counters between looks flags 'recompiled'."""
        clock = FakeClock()
        counts = [0]
        monkeypatch.setattr(interleaved, "dynamo_counts", lambda: (counts[0], counts[0]))

        def candidate(*args: Any) -> None:
            clock.advance(0.001)
            if clock.ns > 0.02e9:
                counts[0] = 1

        with InterleavedRun(clock.arm(0.002), candidate, Sample(), timer=clock) as run:
            run.extend(4)
            assert "recompiled" not in run.timings().flags
            run.extend(10)
            assert "recompiled" in run.timings().flags

    @pytest.mark.slow
    @pytest.mark.compile
    def test_real_dynamo_recompile_is_flagged(self) -> None:
        """A torch.compile guard failure between looks (real dynamo counters) flags 'recompiled'."""
        state = {"scale": 1}

        @torch.compile(backend="eager", dynamic=False)
        def candidate(x: torch.Tensor) -> torch.Tensor:
            return x * state["scale"]

        with InterleavedRun(lambda x: x * 1, candidate, Sample((torch.ones(4),))) as run:
            run.warm_up(window=3, tolerance=10.0, max_calls=5)
            run.extend(2)
            assert "recompiled" not in run.timings().flags
            state["scale"] = 2
            run.extend(2)
            assert "recompiled" in run.timings().flags

    def test_dynamo_counts_without_dynamo(self) -> None:
        """The counter snapshot is a pair of ints whether or not dynamo is loaded."""
        counts = interleaved.dynamo_counts()
        assert len(counts) == 2
        assert all(isinstance(c, int) for c in counts)

    def test_requires_the_context(self) -> None:
        """Using a run outside 'with' is a clear error."""
        run = InterleavedRun(lambda: None, lambda: None, Sample())
        with pytest.raises(RuntimeError, match="context manager"):
            run.extend(1)


class TestInputsAndModes:
    def test_every_call_gets_its_own_copy_of_the_batch(self) -> None:
        """Arms receive fresh copies of the batch on every call (not the caller's tensor)."""
        x = torch.zeros(2)
        seen: dict[str, list[float]] = {"A": [], "B": []}
        pointers: set[int] = set()

        def arm(label: str) -> Callable[[torch.Tensor], None]:
            def model(t: torch.Tensor) -> None:
                seen[label].append(float(t.sum()))
                pointers.add(t.data_ptr())
                t.add_(1.0)  # a mutating model only changes its own call's copy

            return model

        with InterleavedRun(arm("A"), arm("B"), Sample((x,)), timer=FakeClock()) as run:
            run.extend(3)
        assert seen["A"] and set(seen["A"]) == set(seen["B"]) == {0.0}
        assert x.data_ptr() not in pointers
        assert torch.count_nonzero(x) == 0

    def test_calls_run_without_grad_and_with_the_configured_threads(self) -> None:
        """Inside the run grad is off and the thread count is the config's; both restored after."""
        before = torch.get_num_threads()
        states: list[tuple[bool, int]] = []

        def model() -> None:
            states.append((torch.is_grad_enabled(), torch.get_num_threads()))

        compare(model, model, Sample(), quiet_config(threads=1), n_pairs=2, timer=FakeClock())
        assert set(states) == {(False, 1)}
        assert torch.get_num_threads() == before
        assert torch.is_grad_enabled()

    def test_intra_op_threads_none_leaves_the_setting(self) -> None:
        """threads=None yields the current count and changes nothing."""
        before = torch.get_num_threads()
        with intra_op_threads(None) as n:
            assert n == before
        assert torch.get_num_threads() == before


class TestFailures:
    def test_out_of_memory_becomes_profiling_error(self) -> None:
        """torch's OutOfMemoryError becomes ProfilingError(reason='out_of_memory', arm=...)."""

        def candidate() -> None:
            raise torch.OutOfMemoryError("CUDA out of memory")

        with pytest.raises(ProfilingError, match="candidate ran out of device memory") as info:
            compare(lambda: None, candidate, Sample(), quiet_config(), n_pairs=2)
        assert info.value.reason == "out_of_memory"
        assert info.value.arm == "candidate"
        assert isinstance(info.value, RuntimeError)

    def test_other_failures_keep_their_cause(self) -> None:
        """Any other exception becomes ProfilingError(reason='call_failed') chained to it."""

        def baseline() -> None:
            raise ValueError("shape mismatch")

        with pytest.raises(ProfilingError, match="baseline call failed: ValueError") as info:
            compare(baseline, lambda: None, Sample(), quiet_config(), n_pairs=2)
        assert info.value.reason == "call_failed"
        assert isinstance(info.value.__cause__, ValueError)


class TestTimeCalls:
    def test_warmup_untimed_then_timed(self) -> None:
        """time_calls makes `warmup` untimed calls, then returns n per-call latencies."""
        clock = FakeClock()
        model = clock.arm(lambda i: 1.0 if i < 3 else 0.004)
        times = time_calls(model, Sample(), 5, timer=clock, warmup=3)
        assert times == (0.004,) * 5

    def test_bad_counts_raise(self) -> None:
        """n < 1 or warmup < 0 are refused, naming the argument."""
        with pytest.raises(ValueError, match="n must be >= 1"):
            time_calls(lambda: None, Sample(), 0)
        with pytest.raises(ValueError, match="warmup must be >= 0"):
            time_calls(lambda: None, Sample(), 1, warmup=-1)

    def test_real_cpu_linear(self) -> None:
        """On CPU a real module gets positive, finite per-call latencies."""
        model = torch.nn.Linear(16, 16)
        times = time_calls(model, Sample((torch.randn(4, 16),)), 5, warmup=2)
        assert len(times) == 5
        assert all(0 < t < 10 for t in times)


class TestRealCompare:
    def test_real_cpu_compare_returns_pairs(self) -> None:
        """compare on real modules returns equal-length positive timings and the thread count."""
        base = torch.nn.Linear(32, 32)
        cand = torch.nn.Linear(32, 32)
        timings = compare(
            base, cand, Sample((torch.randn(8, 32),)), quiet_config(threads=1), n_pairs=6
        )
        assert timings.n_pairs == 6
        assert len(timings.candidate_s) == 6
        assert all(t > 0 for t in timings.baseline_s + timings.candidate_s)
        assert timings.threads == 1
        assert timings.warmup is not None
        assert timings.wall_s > 0


class TestTimers:
    def test_cpu_timer_is_monotonic(self) -> None:
        """CpuTimer's clock never goes back and has no device span."""
        timer = CpuTimer()
        a = timer.now_ns()
        timer.sync()
        assert timer.now_ns() >= a
        assert timer.device_span() is None

    def test_timer_for_cpu_batch(self) -> None:
        """A CPU batch gets the CPU timer."""
        assert isinstance(timer_for(Sample((torch.ones(1),))), CpuTimer)

    @pytest.mark.gpu
    def test_cuda_compare_records_device_times(self) -> None:
        """On CUDA, timings carry event device times no larger than the synchronised wall times."""
        model = torch.nn.Linear(256, 256).cuda()
        batch = Sample((torch.randn(64, 256, device="cuda"),))
        assert isinstance(timer_for(batch), CudaTimer)
        timings = compare(model, model, batch, quiet_config(), n_pairs=4)
        assert timings.baseline_device_s is not None
        assert timings.candidate_device_s is not None
        for wall, device in zip(timings.baseline_s, timings.baseline_device_s, strict=True):
            assert 0 < device <= wall * 1.01

    @pytest.mark.gpu
    def test_cuda_out_of_memory_is_reported(self) -> None:
        """A real CUDA OOM becomes ProfilingError(reason='out_of_memory')."""

        def greedy() -> None:
            torch.empty(1 << 50, device="cuda")

        with pytest.raises(ProfilingError) as info:
            compare(lambda: None, greedy, Sample(), quiet_config(), n_pairs=2)
        assert info.value.reason == "out_of_memory"


class TestGcPaused:
    def test_gc_off_inside_and_restored(self) -> None:
        """The garbage collector is off while timing and back on afterwards."""
        import gc

        from aitune_fp.profiling.timers import gc_paused

        assert gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert gc.isenabled()

    def test_gc_stays_off_if_it_was_off(self) -> None:
        """A caller who turned the collector off keeps it off."""
        import gc

        from aitune_fp.profiling.timers import gc_paused

        gc.disable()
        try:
            with gc_paused():
                pass
            assert not gc.isenabled()
        finally:
            gc.enable()
