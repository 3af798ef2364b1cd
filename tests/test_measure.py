"""Tests of the measuring loop: looks, early stops, budgets, point mode (fake clock and real CPU)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.results import unstructure
from aitune_fp.core.spot import DEFAULT_SPOT_RATE, spot_positions
from aitune_fp.inputs import Sample
from aitune_fp.measure.rules import measure_baseline_point, measure_speedup
from aitune_fp.profiling.calls import ProfilingError, SpotCheckError
from aitune_fp.testing import FakeClock

ROOT = Path(__file__).resolve().parent.parent


def noisy(mean: float, seed: int, spread: float = 0.05) -> Any:
    """Per-call times around ``mean`` with a deterministic +-spread relative jitter."""
    rng = random.Random(seed)
    return lambda i: mean * (1.0 + rng.uniform(-spread, spread))


def config(**changes: Any) -> ProfilingConfig:
    """Statistical config with a short warm-up for fake-clock tests."""
    return ProfilingConfig(warmup_window=3, warmup_max_calls=10, **changes)


class TestStatisticalLoop:
    def test_two_x_candidate_stops_at_the_first_look(self) -> None:
        """A 2x faster candidate is accepted after the first look's 10 pairs."""
        clock = FakeClock()
        m = measure_speedup(
            clock.arm(noisy(0.002, 1)),
            clock.arm(noisy(0.001, 2)),
            Sample(),
            64,
            config(),
            timer=clock,
        )
        assert m.result.verdict == "faster"
        assert m.result.passed
        assert m.result.n_baseline == m.result.n_candidate == 10
        assert m.decision is not None
        assert m.decision.ci_low > 1.01
        assert m.result.speedup == pytest.approx(2.0, rel=0.05)
        assert m.result.baseline_throughput == pytest.approx(64 / 0.002, rel=0.05)
        assert m.result.reason.startswith("lower bound ")
        assert m.result.reason.endswith("at 10 pairs")
        assert m.result.decision == "statistical"

    def test_slower_candidate_is_rejected_at_the_first_look(self) -> None:
        """A 2x slower candidate is 'not_faster' after 10 pairs."""
        clock = FakeClock()
        m = measure_speedup(
            clock.arm(noisy(0.002, 1)),
            clock.arm(noisy(0.004, 2)),
            Sample(),
            8,
            config(),
            timer=clock,
        )
        assert m.result.verdict == "not_faster"
        assert not m.result.passed
        assert m.result.n_baseline == 10
        assert "upper bound" in m.result.reason

    def test_identical_times_are_not_faster(self) -> None:
        """Exactly equal arms give an interval at 1.00x, below the 1.01x gate."""
        clock = FakeClock()
        m = measure_speedup(clock.arm(0.002), clock.arm(0.002), Sample(), 1, config(), timer=clock)
        assert m.result.verdict == "not_faster"
        assert m.result.speedup == 1.0

    def test_close_call_uses_every_look_then_is_inconclusive(self) -> None:
        """A candidate right at the threshold stays open through the last look."""
        clock = FakeClock()
        m = measure_speedup(
            clock.arm(noisy(0.00202, 3, 0.2)),
            clock.arm(noisy(0.002, 4, 0.2)),
            Sample(),
            1,
            config(looks=(10, 20, 40)),
            timer=clock,
        )
        assert m.result.verdict == "inconclusive"
        assert not m.result.passed
        assert m.result.n_baseline == 40
        assert "after the last look (40 pairs)" in m.result.reason
        assert "budget_spent" not in m.result.flags

    def test_threshold_is_used(self) -> None:
        """A 1.5x candidate passes a 20 % gate and fails a 100 % gate."""
        for pct, verdict in ((20.0, "faster"), (100.0, "not_faster")):
            clock = FakeClock()
            m = measure_speedup(
                clock.arm(noisy(0.003, 1)),
                clock.arm(noisy(0.002, 2)),
                Sample(),
                1,
                config(),
                pct,
                timer=clock,
            )
            assert m.result.verdict == verdict

    def test_budget_ends_after_a_completed_look(self) -> None:
        """With calls of 1 s and a 30 s budget, the verdict is the first look's, flagged."""
        clock = FakeClock()
        m = measure_speedup(
            clock.arm(noisy(1.01, 5, 0.2)),
            clock.arm(noisy(1.0, 6, 0.2)),
            Sample(),
            1,
            config(max_seconds=30.0, warmup_tolerance=1.0),
            timer=clock,
        )
        # warm-up 1 + 3 calls per arm (8 s), look 1: 2 untimed + 20 timed calls (22 s) -> 30 s
        assert m.result.verdict == "inconclusive"
        assert m.result.n_baseline == 10
        assert "budget_spent" in m.result.flags
        assert m.result.reason.startswith("budget of 30 s spent at 10 pairs, interval [")
        assert m.wall_s == pytest.approx(30.0, abs=3.0)

    def test_a_look_predicted_to_overrun_is_not_started(self) -> None:
        """A look that cannot fit in the rest of the budget is skipped, not begun."""
        clock = FakeClock()
        m = measure_speedup(
            clock.arm(noisy(1.01, 5, 0.2)),
            clock.arm(noisy(1.0, 6, 0.2)),
            Sample(),
            1,
            config(max_seconds=45.0, warmup_tolerance=1.0),
            timer=clock,
        )
        assert m.result.n_baseline == 10
        assert "budget_spent" in m.result.flags
        assert m.wall_s == pytest.approx(30.0, abs=3.0)

    def test_deadline_cuts_a_look_that_slows_down(self) -> None:
        """Calls that slow down mid-look hit the hard deadline; the last completed look decides."""
        clock = FakeClock()
        slow_after = 4 + 1 + 10  # warm-up, untimed, look-1 calls of each arm
        jitter_a, jitter_b = noisy(1.0, 7, 0.2), noisy(1.0, 8, 0.2)
        m = measure_speedup(
            clock.arm(lambda i: (1.01 if i < slow_after else 10.1) * jitter_a(i)),
            clock.arm(lambda i: (1.0 if i < slow_after else 10.0) * jitter_b(i)),
            Sample(),
            1,
            config(max_seconds=60.0, warmup_tolerance=1.0),
            timer=clock,
        )
        assert m.result.n_baseline == 10
        assert "budget_spent" in m.result.flags
        assert m.wall_s <= 60.0 + 2 * 10.0  # at most one pair past the deadline

    def test_baseline_latencies_refused_in_statistical_mode(self) -> None:
        """Up-front baseline latencies belong to point mode only."""
        with pytest.raises(ValueError, match="baseline_latencies is for decision='point'"):
            measure_speedup(
                lambda: None, lambda: None, Sample(), 1, config(), baseline_latencies=[0.1, 0.1]
            )

    def test_bad_arguments_raise(self) -> None:
        """Batch size and threshold are checked, naming the argument."""
        with pytest.raises(ValueError, match="batch_size"):
            measure_speedup(lambda: None, lambda: None, Sample(), 0, config())
        with pytest.raises(ValueError, match="min_speedup_threshold_percent"):
            measure_speedup(lambda: None, lambda: None, Sample(), 1, config(), -100.0)


class TestPointMode:
    def test_reproduces_aitune(self) -> None:
        """Point mode: warm-up + steps, mean-latency throughput, passed = speedup >= 1 + pct/100."""
        clock = FakeClock()
        log: list[str] = []
        m = measure_speedup(
            clock.arm(0.004, log=log, label="A"),
            clock.arm(0.002, log=log, label="B"),
            Sample(),
            16,
            ProfilingConfig(decision="point"),
            timer=clock,
        )
        assert "".join(log) == "A" * 30 + "B" * 30  # baseline once, before the candidate
        assert m.result.decision == "point"
        assert m.decision is None
        assert m.result.verdict == "faster"
        assert m.result.passed
        assert m.result.speedup == pytest.approx(2.0)
        assert m.result.throughput == pytest.approx(16 / 0.002)
        assert m.result.n_baseline == m.result.n_candidate == 20
        assert "baseline measured once" in m.result.reason

    def test_given_baseline_latencies_are_not_remeasured(self) -> None:
        """With baseline_latencies the baseline is never called; a 1 % slower candidate fails."""
        clock = FakeClock()

        def baseline() -> None:
            raise AssertionError("baseline must not be called")

        m = measure_speedup(
            baseline,
            clock.arm(0.00101),
            Sample(),
            1,
            ProfilingConfig(decision="point"),
            timer=clock,
            baseline_latencies=[0.001] * 20,
        )
        assert m.result.verdict == "not_faster"
        assert m.result.n_baseline == 20
        assert m.result.speedup == pytest.approx(1 / 1.01)

    def test_measure_baseline_point(self) -> None:
        """The baseline arm: point_warmup_calls untimed, point_steps timed, throughput from mean."""
        clock = FakeClock()
        model = clock.arm(lambda i: 9.0 if i < 2 else 0.5)
        throughput, latencies = measure_baseline_point(
            model, Sample(), 4, ProfilingConfig(point_warmup_calls=2, point_steps=3), timer=clock
        )
        assert latencies == (0.5, 0.5, 0.5)
        assert throughput == pytest.approx(8.0)


class TestOneRecord:
    def test_the_result_is_built_from_the_decision(self) -> None:
        """The verdict, estimate and bounds of the result are the decision's, unchanged."""
        clock = FakeClock()
        m = measure_speedup(
            clock.arm(noisy(0.002, 1)),
            clock.arm(noisy(0.001, 2)),
            Sample(),
            1,
            config(),
            timer=clock,
            description="Cand()",
        )
        assert m.decision is not None
        r = m.result
        assert (r.backend_description, r.verdict, r.passed) == ("Cand()", m.decision.verdict, True)
        assert (r.estimate, r.ci_low, r.ci_high) == (
            m.decision.speedup,
            m.decision.ci_low,
            m.decision.ci_high,
        )
        data = json.loads(json.dumps(unstructure(r)))
        assert data["decided"]["verdict"] == "faster"
        assert data["decided"]["rule"] == "statistical"


class TestHardBudget:
    @pytest.mark.parametrize(("per_call_s", "budget_s"), [(1.0, 5.0), (2.0, 9.0), (10.0, 25.0)])
    def test_no_call_starts_after_the_budget(self, per_call_s: float, budget_s: float) -> None:
        """Slow calls: the first look cannot complete; inconclusive, eager kept, budget named."""
        clock = FakeClock()
        m = measure_speedup(
            clock.arm(noisy(per_call_s, 1, 0.01)),
            clock.arm(noisy(per_call_s / 3, 2, 0.01)),
            Sample(),
            1,
            config(max_seconds=budget_s),
            timer=clock,
        )
        r = m.result
        assert (r.verdict, r.passed, r.ci_low) == ("inconclusive", False, None)
        assert r.reason.startswith(f"budget of {budget_s:g} s spent before the first look")
        assert "budget_spent" in r.flags
        # a call may end past the deadline, but none starts after it
        assert m.wall_s <= budget_s + 2 * per_call_s * 1.02

    def test_nothing_timed_is_a_profiling_error_naming_the_budget(self) -> None:
        """When even the untimed first calls use the budget up, the error names it."""
        clock = FakeClock()
        with pytest.raises(ProfilingError, match=r"budget of 5 s \(max_seconds\)"):
            measure_speedup(
                clock.arm(noisy(10.0, 1, 0.01)),
                clock.arm(noisy(10.0, 2, 0.01)),
                Sample(),
                1,
                config(max_seconds=5.0),
                timer=clock,
            )


class TestSpotCheck:
    @pytest.mark.parametrize("decision", ["statistical", "point"])
    def test_outputs_are_checked_while_timing(self, decision: str) -> None:
        """The spot check sees candidate outputs while timing; a failure names the call."""
        clock = FakeClock()
        seen: list[Any] = []

        def check(output: Any) -> None:
            seen.append(output)
            if len(seen) >= 2:
                raise AssertionError("values differ")

        with pytest.raises(SpotCheckError, match="timed call") as info:
            measure_speedup(
                clock.arm(noisy(0.002, 1)),
                clock.arm(noisy(0.001, 2)),
                Sample(),
                1,
                config(decision=decision),
                timer=clock,
                spot_check=check,
            )
        assert info.value.call > 1
        assert len(seen) == 2

    def test_a_passing_check_changes_nothing(self) -> None:
        """Single calls: a passing check sees the first, last and ~10 % of the pairs; the verdict
        stands (blocks show it every call of a picked block: ``test_blocks.py``)."""
        clock = FakeClock()
        seen: list[Any] = []
        m = measure_speedup(
            clock.arm(noisy(0.002, 1)),
            clock.arm(noisy(0.001, 2)),
            Sample(),
            1,
            config(quantity="typical"),
            timer=clock,
            spot_check=seen.append,
        )
        assert m.result.verdict == "faster"
        assert (
            len(seen) == len(spot_positions(10, DEFAULT_SPOT_RATE, 0)) == 3
        )  # one look of 10 pairs: ends + one inner


class Repeat(torch.nn.Module):
    """``times`` applications of the same Linear: ``times`` x the work, same shapes."""

    def __init__(self, linear: torch.nn.Linear, times: int) -> None:
        super().__init__()
        self.linear, self.times = linear, times

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.times):
            x = self.linear(x)
        return x


class TestRealCpu:
    def test_four_times_the_work_is_not_faster_and_the_reverse_is(self) -> None:
        """Real timings: 4x the work is rejected, 1/4 of it accepted, both at the first look."""
        linear = torch.nn.Linear(128, 128)
        batch = Sample((torch.randn(32, 128),))
        cfg = ProfilingConfig(threads=1, looks=(10, 20, 40))
        slow = measure_speedup(Repeat(linear, 1), Repeat(linear, 4), batch, 32, cfg)
        fast = measure_speedup(Repeat(linear, 4), Repeat(linear, 1), batch, 32, cfg)
        assert slow.result.verdict == "not_faster"
        assert fast.result.verdict == "faster"
        assert fast.threads == 1
        assert fast.result.speedup > 1.5

    def test_point_mode_real(self) -> None:
        """Point mode on real modules yields a verdict and AITune's 20 timed calls per arm."""
        linear = torch.nn.Linear(64, 64)
        m = measure_speedup(
            Repeat(linear, 1),
            Repeat(linear, 1),
            Sample((torch.randn(8, 64),)),
            8,
            ProfilingConfig(decision="point", threads=1),
        )
        assert m.result.verdict in ("faster", "not_faster")
        assert m.result.n_candidate == 20


@pytest.mark.slow
def test_decision_quality_quick_smoke(tmp_path: Path) -> None:
    """benchmarks/decision_quality.py --quick runs and its table names every case in every mode."""
    out = tmp_path / "table.md"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "decision_quality.py"),
            "--quick",
            "--out",
            str(out),
        ],
        check=True,
        cwd=ROOT,
        timeout=120,
    )
    table = out.read_text()
    for case in ("A/A", "0.90x", "0.97x", "1.02x", "1.03x", "1.10x", "1.50x", "2.00x"):
        assert table.count(f"| {case} ") == 3, case
    assert "| statistical-v1 |" in table
    assert "A/A inconclusive <= 10 %" in table
    assert "fp32 on cpu," in table


def test_decision_quality_device_is_checked_up_front(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--device`` names a device this machine lacks or does not know: one line, exit 1."""
    from tests.benchmark_scripts import load_benchmark

    bench = load_benchmark("decision_quality")
    bad = ["tpu"] if torch.cuda.is_available() else ["cuda", "tpu"]
    for device in bad:
        with pytest.raises(SystemExit) as stopped:
            bench.main(["--quick", "--device", device])
        assert f"--device {device}:" in str(stopped.value.code)  # printed, exit status 1


@pytest.mark.gpu
def test_decision_quality_runs_on_cuda(tmp_path: Path) -> None:
    """On a GPU the campaign runs there: ``--device cuda --quick`` decides every case."""
    out = tmp_path / "table.md"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "decision_quality.py"),
            "--quick",
            "--device",
            "cuda",
            "--cases",
            "A/A",
            "2.00x",
            "--out",
            str(out),
        ],
        check=True,
        cwd=ROOT,
        timeout=300,
    )
    assert "fp32 on cuda" in out.read_text()


class TestSteadyThroughput:
    def test_waits_for_steady_calls(self) -> None:
        """A slow start (cold calls) is warmed through before the timed calls count."""
        from aitune_fp.core.config import ProfilingConfig
        from aitune_fp.measure.statistical import measure_throughput_steady
        from aitune_fp.profiling.timers import CpuTimer

        class Clock(CpuTimer):
            """The first calls get faster and faster, then settle at 1 ms (a cold process)."""

            def __init__(self) -> None:
                self.t = 0
                self.calls = 0

            def now_ns(self) -> int:
                return self.t

        clock = Clock()

        cold_ms = [40, 30, 20, 15, 10, 5, 3, 2]

        def fn(*args: object) -> None:
            clock.calls += 1
            n = clock.calls
            clock.t += (cold_ms[n - 1] if n <= len(cold_ms) else 1) * 1_000_000

        config = ProfilingConfig(point_steps=20, warmup_window=5, warmup_max_calls=30)
        throughput, latencies = measure_throughput_steady(fn, ((), {}), 4, config, timer=clock)
        assert latencies == (0.001,) * 20
        assert throughput == 4000.0
