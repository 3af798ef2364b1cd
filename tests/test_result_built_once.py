"""Specs of the one result record: each rule builds it once, complete; nothing evolves it after."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.mismatch import Mismatch
from aitune_fp.core.report import make_result
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.inputs import Sample
from aitune_fp.measure.rules import measure_speedup
from aitune_fp.pipeline.strategies import FirstWinsStrategy
from aitune_fp.testing import FakeClock
from tests.validation_helpers import Pruned, gated, make_case

_errors = st.floats(min_value=0.0, max_value=1e3, allow_nan=False)


class TestMakeResult:
    @given(
        abs_error=_errors,
        note=st.none() | st.text(min_size=1, max_size=20),
        threads=st.integers(1, 64),
    )
    def test_every_part_lands_in_the_one_record(
        self, abs_error: float, note: str | None, threads: int
    ) -> None:
        """Closeness, context fields, the note and the rule's name are in the record as built."""
        result = make_result(
            "B()",
            baseline_throughput=100.0,
            throughput=150.0,
            speedup=1.5,
            batch_size=4,
            n_baseline=10,
            n_candidate=10,
            required_speedup=1.01,
            decision=None,
            passed_point=True,
            reason="because",
            flags=("oversubscribed",),
            rule="toy",
            note=note,
            mismatch=Mismatch(max_abs_error=abs_error, atol=0.1, rtol=0.1),
            context={"threads": threads, "clock": "host"},
        )
        assert result.decision == "toy"
        assert result.max_abs_error == abs_error and result.atol == 0.1
        assert result.threads == threads and result.clock == "host"
        assert result.flags == ("oversubscribed",)
        assert result.reason == ("because" if note is None else f"because ({note})")

    def test_the_label_follows_the_decision_without_a_rule_name(self) -> None:
        """Without ``rule``: a point outcome is labelled point, anything else statistical."""
        figures: dict[str, Any] = {
            "baseline_throughput": 1.0,
            "throughput": 1.0,
            "speedup": 1.0,
            "batch_size": 1,
            "n_baseline": 1,
            "n_candidate": 1,
            "required_speedup": 1.01,
            "decision": None,
            "reason": "r",
        }
        assert make_result("B()", passed_point=False, **figures).decision == "point"
        undecided = make_result("B()", **figures)
        assert (undecided.decision, undecided.verdict) == ("statistical", "inconclusive")

    def test_an_unknown_context_field_is_refused(self) -> None:
        """A context key that is not a result field fails at once, not silently dropped."""
        with pytest.raises(TypeError, match="no_such_field"):
            make_result(
                "B()",
                baseline_throughput=1.0,
                throughput=1.0,
                speedup=1.0,
                batch_size=1,
                n_baseline=1,
                n_candidate=1,
                required_speedup=1.01,
                decision=None,
                reason="r",
                context={"no_such_field": 1},
            )


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
    assert result.max_abs_error == pytest.approx(max(seen))
    assert result.decision == decision
    assert result.threads is not None


def test_nothing_evolves_a_result_during_a_tune(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a whole validated tune, no ``attrs.evolve`` is applied to a result record."""
    real = attrs.evolve
    evolved: list[str] = []

    def watching(inst: Any, **changes: Any) -> Any:
        if isinstance(inst, PerformanceValidationResult):
            evolved.append(", ".join(sorted(changes)))
        return real(inst, **changes)

    monkeypatch.setattr(attrs, "evolve", watching)
    module, spec, data = make_case()
    strategy = gated(FirstWinsStrategy([Pruned()]))
    strategy.tune(module, "m", spec, data, "cpu", tmp_path)
    (result,) = strategy.perf_validation_results
    assert result.max_abs_error is not None and result.threads is not None
    assert evolved == []
