"""Hung means no progress, not slow: in a worker or in process, every call has its own deadline, derived from
eager's measured call time (20x its slowest call, at least ``hang_grace_s``), so a check that
keeps completing slow calls is never ``hung``, and one that stops answering is, within that
deadline, with the deadline and what sets it named.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch

from aitune_fp.adapters.validation import validation_of
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.inputs import Sample
from aitune_fp.pipeline.strategies import OneBackendStrategy
from tests.factories import tune_one
from tests.validation_helpers import (
    CLOCK,
    USEFUL_NS,
    WASTE_NS,
    TinyNet,
    _ModuleBackend,
    gated,
    make_case,
)

EAGER_S = 0.005
MAX_S = 1.0  # the tune's budget and the grace that the old step deadline summed
GRACE_S = 0.5
OLD_STEP_DEADLINE_S = MAX_S + GRACE_S
CONFIG = ProfilingConfig(
    looks=(10,), max_seconds=MAX_S, hang_grace_s=GRACE_S, warmup_window=3, warmup_max_calls=4
)


class SlowCandidate(_ModuleBackend):
    """Right, and ``factor`` times slower than eager a call; never answers past ``stop_after``."""

    def __init__(self, factor: float, stop_after: int | None = None) -> None:
        super().__init__(f"{factor}x, stops after {stop_after}")
        self.factor = factor
        self.stop_after = stop_after
        self.calls = 0

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        while self.stop_after is not None and self.calls > self.stop_after:
            time.sleep(0.01)  # short sleeps: in process the interrupt lands between them
        time.sleep(EAGER_S * self.factor)
        with torch.no_grad():
            return torch.tanh(self.module.fc(*args))


ISOLATIONS = pytest.mark.parametrize("isolation", ["process", "in_process"])


def _tune(candidate: SlowCandidate, tmp_path: Path, isolation: str) -> Any:
    data = [Sample((torch.randn(1, 8),)), Sample((torch.randn(1, 8),))]
    model = TinyNet(8, sleep_s=EAGER_S).eval()
    report = tune_one(
        candidate, model, data, tmp_path, profiling_config=CONFIG, isolation=isolation
    )
    assert report.isolation == isolation
    return report


@pytest.mark.slow
@ISOLATIONS
def test_a_check_slower_than_the_old_step_deadline_is_not_hung(
    tmp_path: Path, isolation: str
) -> None:
    """15x eager's call: its check and timing outlast max_seconds + hang_grace_s (1.5 s)."""
    start = time.monotonic()
    report = _tune(SlowCandidate(factor=15), tmp_path, isolation)
    assert time.monotonic() - start > OLD_STEP_DEADLINE_S  # longer than the old deadline
    assert not report.failures, report.failures
    (result,) = report.results  # timed, and a verdict recorded
    assert not result.passed


@pytest.mark.slow
@ISOLATIONS
def test_a_candidate_that_stops_answering_is_hung_within_its_call_deadline(
    tmp_path: Path, isolation: str
) -> None:
    start = time.monotonic()
    report = _tune(SlowCandidate(factor=1, stop_after=20), tmp_path, isolation)
    assert time.monotonic() - start < 30
    (failure,) = report.failures
    assert failure.stage == "hung"
    assert "20x eager's slowest call" in failure.reason and "hang_grace_s" in failure.reason


def test_a_slow_model_gets_its_first_look_within_the_budget() -> None:
    """Eager 2 s a call (FakeClock), 60 s budget: the warm-up yields to the first look's 10
    pairs (it would take 20 calls an arm, 80 s, and leave none), so the comparison decides."""
    from aitune_fp.core.config import ProfilingConfig
    from aitune_fp.measure.rules import measure_speedup
    from aitune_fp.testing import FakeClock

    clock = FakeClock()

    def unsteady(base: float) -> Any:
        calls = [0]

        def latency(_i: int) -> float:
            calls[0] += 1
            return base * (1.0 + 0.3 * (calls[0] % 2))  # never steady within 10 %

        return latency

    config = ProfilingConfig(max_seconds=60.0)
    result = measure_speedup(
        clock.arm(unsteady(2.0)), clock.arm(unsteady(1.0)), Sample(), 1, config, timer=clock
    ).result
    assert result.n_baseline >= 10, result.reason
    assert result.verdict == "faster", result.reason


class TenTimesEager(_ModuleBackend):
    """On the FakeClock, 10x eager's fake call time; each call also takes ``real_s`` of real
    time (so the whole step outlasts the old step deadline); stops after ``stop_after``."""

    def __init__(self, real_s: float, stop_after: int | None = None) -> None:
        super().__init__(f"10x, stops after {stop_after}")
        self.real_s = real_s
        self.stop_after = stop_after
        self.calls = 0

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        while self.stop_after is not None and self.calls > self.stop_after:
            time.sleep(0.01)
        CLOCK.advance(9 * (USEFUL_NS + WASTE_NS) / 1e9)  # and eager's own work below: 10x
        time.sleep(self.real_s)
        with torch.no_grad():
            return self.module(*args)


def _fake_clock_tune(candidate: TenTimesEager, tmp_path: Path) -> Any:
    # the watchdog's per-call deadline in this process (a worker bounds its own calls:
    # test_process_isolation.py), on the fake clock
    strategy = gated(OneBackendStrategy(candidate), profiling_config=CONFIG, isolation="in_process")
    module, spec, data = make_case()
    strategy.tune(module, "m", spec, data, "cpu", tmp_path)
    report = validation_of(strategy).last_report
    assert report is not None and report.isolation == "in_process"
    return report


@pytest.mark.slow
def test_on_the_fake_clock_a_candidate_ten_times_slower_is_decided_not_hung(
    tmp_path: Path,
) -> None:
    """Each call 0.1 s real, inside its 0.5 s deadline; the timing alone outlasts the old bound
    on a step (``max_seconds + hang_grace_s``, 1.5 s)."""
    start = time.monotonic()
    report = _fake_clock_tune(TenTimesEager(real_s=0.1), tmp_path)
    assert time.monotonic() - start > OLD_STEP_DEADLINE_S
    assert not report.failures, report.failures
    (result,) = report.results
    assert result.verdict == "not_faster"
    assert result.speedup is not None and 0.05 < result.speedup < 0.2  # about 0.1x


@pytest.mark.slow
def test_on_the_fake_clock_a_candidate_that_stops_is_hung_within_its_deadline(
    tmp_path: Path,
) -> None:
    start = time.monotonic()
    report = _fake_clock_tune(TenTimesEager(real_s=0.0, stop_after=12), tmp_path)
    assert time.monotonic() - start < 10
    (failure,) = report.failures
    assert failure.stage == "hung"
    assert "deadline of 0.5 s" in failure.reason and "hang_grace_s" in failure.reason
