"""Specs of the one result record: each rule builds it once, and the report holds that very value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aitune_fp import FirstWinsStrategy, MaxThroughputStrategy, ProfilingConfig, Sample
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.events.candidates import CandidateMeasured
from aitune_fp.events.kinds import Event
from aitune_fp.events.sending import sinks
from aitune_fp.measure.rules import measure_speedup
from aitune_fp.testing import FakeClock
from tests.validation_helpers import Pruned, Slower, gated, make_case


@pytest.mark.parametrize("decision", ["statistical", "point"])
def test_the_rule_records_the_worst_spot_check_itself(decision: str) -> None:
    """Called directly (no session), a rule keeps the worst mismatch its spot checks returned."""
    clock = FakeClock()
    seen: list[float] = []

    def spot(output: Any) -> Mismatch:
        seen.append(0.001 * (len(seen) + 1))
        return Mismatch(max_abs_error=seen[-1], budget_used=seen[-1], atol=0.5, rtol=0.5)

    result = measure_speedup(
        clock.arm(0.002),
        clock.arm(0.001),
        Sample(),
        4,
        ProfilingConfig(decision=decision),  # type: ignore[arg-type]
        timer=clock,
        spot_check=spot,
    ).result
    assert seen, "the spot checks ran"
    assert result.accuracy.max_abs_error == pytest.approx(max(seen))
    assert result.decided.rule == decision
    assert result.environment.threads is not None


@pytest.mark.parametrize(
    "make",
    [lambda: FirstWinsStrategy([Pruned()]), lambda: MaxThroughputStrategy([Slower(), Pruned()])],
    ids=["first-wins", "max-throughput"],
)
def test_the_report_holds_the_measured_result_itself(make: Any, tmp_path: Path) -> None:
    """The result each rule built is the one the event carries and the report keeps (``is``)."""
    measured: list[PerformanceValidationResult] = []

    def keep(event: Event) -> None:
        if isinstance(event.payload, CandidateMeasured):
            measured.append(event.payload.result)

    module, spec, data = make_case()
    strategy = gated(make())
    with sinks(keep):
        strategy.tune(module, "m", spec, data, "cpu", tmp_path)
    report = strategy.last_report
    assert measured and len(report.results) == len(measured)
    assert all(kept is built for kept, built in zip(report.results, measured, strict=True))
    assert all(a is b for a, b in zip(strategy.perf_validation_results, measured, strict=True))
