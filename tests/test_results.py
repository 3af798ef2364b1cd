"""Specs of PerformanceValidationResult: validated, ordered fields, JSON round trip."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.core.results import PerformanceValidationMixinResult, PerformanceValidationResult
from aitune_fp.core.speedup import compute_speedup, meets_threshold
from tests.strategies import throughputs


@st.composite
def results(draw: st.DrawFn) -> PerformanceValidationResult:
    """Valid results, with or without the statistical fields."""
    base = draw(throughputs)
    value = draw(throughputs)
    speedup = compute_speedup(value, base)
    verdict = draw(st.sampled_from(["faster", "not_faster", "inconclusive", None]))
    passed = verdict == "faster" if verdict is not None else meets_threshold(speedup)
    lo, hi = sorted(draw(st.lists(st.floats(0, 100, allow_nan=False), min_size=2, max_size=2)))
    stats = draw(st.booleans())
    return PerformanceValidationResult(
        draw(st.text(max_size=40)),
        value,
        base,
        speedup,
        passed,
        estimate=(lo + hi) / 2 if stats else None,
        ci_low=lo if stats else None,
        ci_high=hi if stats else None,
        confidence=0.95 if stats else None,
        n_baseline=draw(st.integers(2, 10_000)) if stats else None,
        n_candidate=draw(st.integers(2, 10_000)) if stats else None,
        batch_size=draw(st.integers(1, 1 << 20)) if stats else None,
        required_speedup=1.01 if stats else None,
        verdict=verdict,
        decision=draw(st.sampled_from(["statistical", "point"])) if stats else None,
        reason=draw(st.text(max_size=80)) if stats else None,
    )


class TestFields:
    def test_aitune_fields_first_in_order(self) -> None:
        """AITune's five fields come first, in AITune's order."""
        names = [a.name for a in attrs.fields(PerformanceValidationResult)][:5]
        assert names == [
            "backend_description",
            "throughput",
            "baseline_throughput",
            "speedup",
            "passed",
        ]

    def test_alias(self) -> None:
        """AITune's class name is an alias of the same class."""
        assert PerformanceValidationMixinResult is PerformanceValidationResult

    def test_positional_like_aitune(self) -> None:
        """The five AITune fields can be given positionally, as with its dataclass."""
        r = PerformanceValidationResult("mock", 2.0, 1.0, 2.0, True)
        assert (r.speedup, r.passed, r.verdict) == (2.0, True, None)

    def test_frozen(self) -> None:
        """Results are immutable values."""
        r = PerformanceValidationResult("mock", 2.0, 1.0, 2.0, True)
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            r.speedup = 3.0  # type: ignore[misc]


class TestValidation:
    @pytest.mark.parametrize(
        ("field", "bad"),
        [
            ("throughput", float("nan")),
            ("throughput", -1.0),
            ("throughput", "1"),
            ("baseline_throughput", 0.0),
            ("baseline_throughput", float("inf")),
            ("speedup", float("nan")),
            ("speedup", True),
            ("passed", 1),
            ("backend_description", None),
        ],
    )
    def test_bad_core_field(self, field: str, bad: object) -> None:
        """A bad value in an AITune field raises naming the field."""
        kwargs: dict[str, Any] = {
            "backend_description": "x",
            "throughput": 2.0,
            "baseline_throughput": 1.0,
            "speedup": 2.0,
            "passed": True,
        }
        kwargs[field] = bad
        with pytest.raises((ValueError, TypeError), match=field):
            PerformanceValidationResult(**kwargs)

    def test_bounds_ordered(self) -> None:
        """ci_low above ci_high is refused."""
        with pytest.raises(ValueError, match="ci_low"):
            PerformanceValidationResult("x", 2.0, 1.0, 2.0, True, ci_low=2.0, ci_high=1.0)

    def test_verdict_agrees_with_passed(self) -> None:
        """passed is verdict == 'faster'; a contradiction is refused."""
        with pytest.raises(ValueError, match="contradicts"):
            PerformanceValidationResult("x", 2.0, 1.0, 2.0, False, verdict="faster")
        with pytest.raises(ValueError, match="verdict"):
            PerformanceValidationResult("x", 2.0, 1.0, 2.0, False, verdict="maybe")  # type: ignore[arg-type]


class TestDictRoundTrip:
    @given(results())
    def test_json_round_trip(self, result: PerformanceValidationResult) -> None:
        """to_dict is JSON-ready and from_dict rebuilds an equal value."""
        text = json.dumps(result.to_dict(), allow_nan=False)
        assert PerformanceValidationResult.from_dict(json.loads(text)) == result

    def test_unknown_key(self) -> None:
        """from_dict refuses keys it does not know, naming them."""
        data = PerformanceValidationResult("x", 2.0, 1.0, 2.0, True).to_dict()
        data["surprise"] = 1
        with pytest.raises(ValueError, match="surprise"):
            PerformanceValidationResult.from_dict(data)

    def test_missing_key(self) -> None:
        """from_dict names the required keys that are missing."""
        with pytest.raises(ValueError, match="speedup"):
            PerformanceValidationResult.from_dict(
                {
                    "backend_description": "x",
                    "throughput": 1.0,
                    "baseline_throughput": 1.0,
                    "passed": True,
                }
            )


class TestFlags:
    def test_flags_round_trip_as_list(self) -> None:
        """Flags are a tuple on the value and a list in the dict, and survive the round trip."""
        r = PerformanceValidationResult("x", 2.0, 1.0, 2.0, True, flags=["recompiled"])
        assert r.flags == ("recompiled",)
        assert r.to_dict()["flags"] == ["recompiled"]
        assert PerformanceValidationResult.from_dict(r.to_dict()) == r

    @pytest.mark.parametrize("bad", ["recompiled", [1], None])
    def test_bad_flags(self, bad: object) -> None:
        """Flags must be a list or tuple of strings."""
        with pytest.raises(TypeError, match="flags"):
            PerformanceValidationResult("x", 2.0, 1.0, 2.0, True, flags=bad)  # type: ignore[arg-type]


def test_a_statistical_result_carries_its_decision_detail_as_fields() -> None:
    """Margin, method and autocorrelation reach the result (and its event), not only the text."""
    from aitune_fp.core.gate import Gate
    from aitune_fp.core.report import make_result
    from aitune_fp.core.sequential import decide_at_look

    base = [1.0 + 0.01 * (i % 7) for i in range(40)]
    cand = [0.5 + 0.004 * ((i * 3) % 5) for i in range(40)]
    decision = decide_at_look(
        base, cand, Gate(1.0), confidence=0.95, n_looks=3, futility_margin_percent=2.5, look=2
    )
    result = make_result(
        "C()",
        baseline_throughput=100.0,
        throughput=200.0,
        speedup=2.0,
        batch_size=1,
        n_baseline=40,
        n_candidate=40,
        required_speedup=1.01,
        decision=decision,
        reason="r",
    )
    assert result.futility_margin_percent == pytest.approx(2.5)
    assert result.method == decision.method == "wilcoxon_signed_rank_hl"
    assert result.autocorrelation == decision.autocorrelation
    again = PerformanceValidationResult.from_dict(result.to_dict())
    assert (again.futility_margin_percent, again.method) == (pytest.approx(2.5), result.method)
