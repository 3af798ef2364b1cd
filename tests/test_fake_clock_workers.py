"""A fake clock times worker processes as it times calls in process: the default path, fast.

The model and the candidate move a :class:`FakeClock` by scripted latencies; in a worker the
call moves the worker's copy, the worker sends what the call spent, and the judge's clock
moves by it. So a tune on a fake clock runs the default path (a worker per arm) and is
deterministic, and a candidate that reaches eager through shared Python state (here: the
model's class) is judged on eager's own time, not on the time it added to eager.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import torch

from aitune_fp.adapters.validation import validation_of, with_performance_validation
from aitune_fp.backends.base import BackendBase
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.inputs import GraphSpec, Sample
from aitune_fp.pipeline.strategies import OneBackendStrategy
from aitune_fp.testing import FakeClock, capture_events

#: Scripted seconds a call: eager's, and a candidate twice as fast.
EAGER_S = 0.002
FAST_S = 0.001
CONFIG = ProfilingConfig(looks=(10, 20, 40), max_seconds=5.0, warmup_max_calls=8)


class Clocked(torch.nn.Module):
    """A real small model whose every call spends ``seconds`` on its clock.

    ``slowed`` (a class attribute) adds ten times that: what a candidate in the same process
    could set to make eager look slow.
    """

    slowed = False

    def __init__(self, clock: FakeClock, seconds: float) -> None:
        super().__init__()
        self.clock = clock
        self.seconds = seconds
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.clock.advance(self.seconds * (11 if type(self).slowed else 1))
        return self.fc(x)


class Candidate(BackendBase):
    """Eager's outputs on its own clocked time; ``slows_eager``: its build sets ``slowed``."""

    def __init__(self, seconds: float, slows_eager: bool = False) -> None:
        self.seconds = seconds
        self.slows_eager = slows_eager
        self.module: Any = None

    def _config(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "slows_eager": self.slows_eager}

    def _build(self, given: Any) -> None:
        self.module = given.module
        if self.slows_eager:
            Clocked.slowed = True

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        self.module.clock.advance(self.seconds)
        with torch.no_grad():
            return self.module.fc(*args)


def _tune(
    candidate: Candidate, clock: Any, cache: Path, threads: int | None = None
) -> tuple[Any, Any, list[dict[str, Any]]]:
    torch.manual_seed(0)
    model = Clocked(clock if isinstance(clock, FakeClock) else clock.clock, EAGER_S).eval()
    config = CONFIG if threads is None else attrs.evolve(CONFIG, threads=threads)
    wrapped = with_performance_validation(
        OneBackendStrategy(candidate), timer=clock, profiling_config=config
    )
    spec, data = GraphSpec(max_batch_size=4), [Sample((torch.randn(1, 8),))]
    try:
        with capture_events() as events:
            chosen = wrapped.tune(model, "m", spec, data, "cpu", cache)
    finally:
        Clocked.slowed = False
    return chosen, validation_of(wrapped).last_report, events


STARTS = pytest.mark.parametrize("threads", [None, 2], ids=["fork", "forkserver"])


@STARTS
def test_a_fake_clock_times_the_workers(tmp_path: Path, threads: int | None) -> None:
    clock = FakeClock()
    chosen, report, events = _tune(Candidate(FAST_S), clock, tmp_path, threads)
    started = next(e for e in events if e["event"].endswith(".started"))
    assert started["isolation"] == "process", started["isolation_note"]
    (result,) = report.results
    assert result.isolation == "process"
    assert result.verdict == "faster"
    assert result.estimate == pytest.approx(EAGER_S / FAST_S, rel=0.01)
    assert isinstance(chosen, Candidate)


@STARTS
def test_as_fast_as_eager_on_the_fake_clock_is_not_faster(
    tmp_path: Path, threads: int | None
) -> None:
    _, report, _ = _tune(Candidate(EAGER_S), FakeClock(), tmp_path, threads)
    (result,) = report.results
    assert result.isolation == "process" and result.verdict != "faster"
    assert result.estimate == pytest.approx(1.0, rel=0.01)


@STARTS
def test_a_candidate_that_slows_eagers_class_is_timed_against_eager_unslowed(
    tmp_path: Path, threads: int | None
) -> None:
    """As slow as eager, its build makes eager's class 11x slower: in one process that read
    11x faster; in workers eager's process never saw it."""
    before = Clocked.slowed
    _, report, _ = _tune(Candidate(EAGER_S, slows_eager=True), FakeClock(), tmp_path, threads)
    assert Clocked.slowed is before
    (result,) = report.results
    assert result.verdict != "faster"
    assert result.estimate == pytest.approx(1.0, rel=0.01)


class _PlainTimer:
    """An injected timer that cannot be moved by a worker's report (no ``spend_ns``)."""

    def __init__(self) -> None:
        self.clock = FakeClock()

    def now_ns(self) -> int:
        return self.clock.now_ns()

    def sync(self) -> None:
        """Nothing to wait for."""

    def device_span(self) -> None:
        return None


def test_a_timer_that_cannot_time_a_worker_keeps_the_tune_in_process_and_says_why(
    tmp_path: Path,
) -> None:
    _, _, events = _tune(Candidate(FAST_S), _PlainTimer(), tmp_path)
    started = next(e for e in events if e["event"].endswith(".started"))
    assert started["isolation"] == "in_process"
    assert "ReportedClock" in started["isolation_note"]


def test_a_model_on_its_modules_clock_is_timed_in_fork_server_workers(tmp_path: Path) -> None:
    """A model that spends on its module's clock, not one it holds, in fork-server workers: the
    module the worker imports to unpickle the recipe makes that clock again, and the judge's
    clock, pickled with the recipe, is found there (it was a new one: every ratio read 1.00x)."""
    from tests.validation_helpers import FAST_CONFIG, Pruned, gated, make_case

    strategy = gated(
        OneBackendStrategy(Pruned()), profiling_config=attrs.evolve(FAST_CONFIG, threads=2)
    )
    module, spec, data = make_case()
    chosen = strategy.tune(module, "m", spec, data, "cpu", tmp_path)
    (result,) = validation_of(strategy).last_report.results
    assert result.isolation == "process" and result.threads == 2
    assert result.verdict == "faster" and result.estimate > 5  # about 11x on the clock
    assert isinstance(chosen, Pruned)
