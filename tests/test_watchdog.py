"""Every tune ends: a step that does not return is interrupted, or recorded as hung.

The watchdog raises :class:`CandidateHungError` in a step stuck in Python code; a step stuck in
native code (here ``time.sleep``) is reported ``grace_s`` after its deadline, and the tune is
closed with ``finished`` (outcome ``error``) while the thread is still stuck.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from aitune_fp.adapters.validation import validation_of
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.errors import CandidateHungError, InvalidValueError
from aitune_fp.pipeline.strategies import FirstWinsStrategy, OneBackendStrategy
from aitune_fp.profiling.watchdog import Watchdog, progress
from aitune_fp.testing import capture_events
from tests.validation_helpers import CLOCK, Pruned, _ModuleBackend, gated, make_case


def _spin() -> None:
    while True:
        pass


def _calls_forever() -> None:
    while True:
        time.sleep(0.01)
        progress()


def _sleep(flag: threading.Event) -> None:
    flag.set()
    time.sleep(1.0)  # native: the interrupt waits for it to return
    flag.clear()


def test_a_step_stuck_in_python_is_interrupted_and_named() -> None:
    watchdog = Watchdog(grace_s=5.0)
    start = time.monotonic()
    with (
        pytest.raises(CandidateHungError, match=r"the spin did not return within .* 0\.2 s"),
        watchdog.step("the spin", 0.2),
    ):
        _spin()
    assert time.monotonic() - start < 2.0


def test_a_step_that_ends_in_time_never_raises_later() -> None:
    watchdog = Watchdog(grace_s=0.1)
    stuck: list[str] = []
    watchdog.on_stuck = lambda what, elapsed: stuck.append(what)
    for _ in range(20):
        with watchdog.step("quick", 0.05):
            total = sum(range(1000))
    deadline = time.monotonic() + 0.4  # past every deadline and grace: bytecode keeps running
    while time.monotonic() < deadline:
        total += 1
    assert stuck == [] and total > 0


@pytest.mark.slow  # a real deadline or process: seconds of waiting
def test_a_step_stuck_in_native_code_is_reported_while_it_is_stuck() -> None:
    reports: list[tuple[str, float, bool]] = []
    sleeping = threading.Event()

    def on_stuck(what: str, elapsed: float) -> None:
        reports.append((what, elapsed, sleeping.is_set()))

    watchdog = Watchdog(grace_s=0.2, on_stuck=on_stuck)
    with pytest.raises(CandidateHungError), watchdog.step("the kernel", 0.1):
        _sleep(sleeping)
    ((what, elapsed, while_stuck),) = reports
    assert what == "the kernel" and 0.25 <= elapsed < 0.9 and while_stuck


@pytest.mark.slow  # a real deadline or process: seconds of waiting
def test_a_per_call_step_that_keeps_completing_calls_outlives_its_deadline() -> None:
    """Per call, the deadline counts from the last completed call, not from the step's start."""
    watchdog = Watchdog(grace_s=5.0)
    start = time.monotonic()
    with watchdog.step("the slow check", 0.2, per_call=True):
        for _ in range(8):  # 8 calls of 0.1 s: 0.8 s in all, each well inside 0.2 s
            time.sleep(0.1)
            progress()
    assert time.monotonic() - start >= 0.8


def test_a_per_call_step_whose_call_stops_is_interrupted_and_names_its_deadline() -> None:
    watchdog = Watchdog(grace_s=5.0)
    start = time.monotonic()
    stalled: list[float] = []

    def three_calls_then_stop() -> None:
        for _ in range(3):
            time.sleep(0.05)
            progress()
        stalled.append(time.monotonic())
        _spin()

    with (
        pytest.raises(
            CandidateHungError,
            match=r"the check: no call completed within its deadline of 0\.2 s \(20x eager's\)",
        ),
        watchdog.step("the check", 0.2, per_call=True, note="20x eager's"),
    ):
        three_calls_then_stop()
    assert 0.2 <= time.monotonic() - stalled[0] < 1.5 and time.monotonic() - start < 2.0


def test_progress_outside_a_per_call_step_changes_nothing() -> None:
    """A whole-step deadline (a build) is not extended by calls; progress alone is a no-op."""
    progress()
    watchdog = Watchdog(grace_s=5.0)
    with pytest.raises(CandidateHungError), watchdog.step("the build", 0.2):
        _calls_forever()


@pytest.mark.slow  # a real deadline or process: seconds of waiting
def test_a_per_call_step_stuck_in_native_code_is_reported_after_its_grace() -> None:
    reports: list[float] = []
    watchdog = Watchdog(grace_s=0.2, on_stuck=lambda what, elapsed: reports.append(elapsed))
    with pytest.raises(CandidateHungError), watchdog.step("the call", 0.1, per_call=True):
        time.sleep(0.8)  # native: the interrupt waits for it to return
    (elapsed,) = reports
    assert 0.25 <= elapsed < 0.75


@pytest.mark.parametrize("bad", [0, -1.0])
def test_bad_deadlines_and_graces_are_refused_by_name(bad: float) -> None:
    with pytest.raises(InvalidValueError, match="grace_s"):
        Watchdog(grace_s=bad)
    with pytest.raises(InvalidValueError, match="deadline_s"):
        Watchdog(grace_s=1.0).step("x", bad)


class _Hangs(_ModuleBackend):
    """Correct in the correctness check, then hangs on its first timed call (``how``)."""

    how = "python"

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls > 4:
            if self.how == "python":
                while True:
                    pass
            time.sleep(2.0)
        with torch.no_grad():
            return self.module(*args)


CONFIG = ProfilingConfig(looks=(10, 20), max_seconds=0.5, hang_grace_s=0.5, warmup_max_calls=10)


@pytest.mark.slow  # a real deadline or process: seconds of waiting
def test_a_candidate_hung_in_python_is_recorded_and_the_next_one_tried(tmp_path: Path) -> None:
    strategy = gated(  # the watchdog in this process (a worker's hang: test_process_isolation)
        FirstWinsStrategy([_Hangs(), Pruned()]), profiling_config=CONFIG, isolation="in_process"
    )
    module, spec, data = make_case()
    chosen = strategy.tune(module, "m", spec, data, "cpu", tmp_path)
    view = validation_of(strategy)
    (hung,) = view.candidate_failures
    assert (hung.backend_description, hung.stage) == ("_Hangs()", "hung")
    assert "no call completed within its deadline" in hung.reason
    assert "ProfilingConfig.hang_grace_s" in hung.reason  # the flag that sets it
    assert view.last_report is not None and view.last_report.selected_backend == "Pruned()"
    assert chosen is not None


@pytest.mark.slow  # a real deadline or process: seconds of waiting
def test_a_candidate_stuck_in_native_code_still_gets_the_tune_finished(tmp_path: Path) -> None:
    backend = _Hangs()
    backend.how = "native"
    strategy = gated(  # the watchdog in this process (a worker is killed: test_process_isolation)
        OneBackendStrategy(backend), profiling_config=CONFIG, isolation="in_process"
    )
    module, spec, data = make_case()
    CLOCK.reset()
    with capture_events() as logs:
        start = time.monotonic()
        chosen = strategy.tune(module, "m", spec, data, "cpu", tmp_path)
    assert chosen is validation_of(strategy).baseline_backend  # eager, when the thread returns
    finished = [e for e in logs if e["event"].endswith(".finished")]
    assert len(finished) == 1 and finished[0]["outcome"] == "error"
    assert "could not be interrupted" in finished[0]["reason"]
    failed = [e for e in logs if e["event"].endswith("candidate_failed")]
    assert [e["stage"] for e in failed] == ["hung"]
    assert logs.index(finished[0]) == len(logs) - 1  # nothing after finished
    assert time.monotonic() - start < 10
