"""Specs of PerformanceValidationResult: AITune's fields, its parts, flat names, JSON round trip."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp import PerformanceValidationResult, compute_speedup, meets_threshold
from aitune_fp.core.results import (
    FLAT,
    PARTS,
    Decision,
    PerformanceValidationMixinResult,
    unstructure,
)
from aitune_fp.events.kinds import structure
from tests.factories import flat_result
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
    return flat_result(
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
            Decision(ci_low=2.0, ci_high=1.0)

    def test_verdict_agrees_with_passed(self) -> None:
        """passed is verdict == 'faster'; a contradiction is refused."""
        with pytest.raises(ValueError, match="contradicts"):
            PerformanceValidationResult(
                "x", 2.0, 1.0, 2.0, False, decided=Decision(verdict="faster")
            )
        with pytest.raises(ValueError, match="verdict"):
            Decision(verdict="maybe")  # type: ignore[arg-type]


class TestParts:
    def test_every_flat_name_reads_its_part(self) -> None:
        """Each field of each part is also a read-only flat name (``decision`` is ``decided.rule``)."""
        r = fake_parts()
        for name, (part, field) in FLAT.items():
            assert getattr(r, name) == getattr(getattr(r, part), field), name
            with pytest.raises(AttributeError):
                setattr(r, name, None)
        assert len(FLAT) == sum(len(attrs.fields(cls)) for cls in PARTS.values())

    def test_a_part_of_the_wrong_type_is_refused(self) -> None:
        with pytest.raises(TypeError, match="decided"):
            PerformanceValidationResult("x", 2.0, 1.0, 2.0, True, decided=None)  # type: ignore[arg-type]


def fake_parts() -> PerformanceValidationResult:
    return flat_result(
        "x",
        2.0,
        1.0,
        2.0,
        True,
        verdict="faster",
        decision="statistical",
        ci_low=1.5,
        threads=2,
        device_isolation="unknown",
        max_abs_error=0.1,
        baseline_latencies_s=(1.0,),
    )


class TestJsonRoundTrip:
    @given(results())
    def test_json_round_trip(self, result: PerformanceValidationResult) -> None:
        """unstructure is JSON-ready (parts nested) and structure rebuilds an equal value."""
        text = json.dumps(unstructure(result), allow_nan=False)
        again = structure(PerformanceValidationResult, json.loads(text), "result")
        assert again == result

    def test_unknown_key(self) -> None:
        """Reading refuses keys it does not know, naming them, in the parts too."""
        data = unstructure(PerformanceValidationResult("x", 2.0, 1.0, 2.0, True))
        with pytest.raises(ValueError, match="surprise"):
            structure(PerformanceValidationResult, {**data, "surprise": 1}, "result")
        data["decided"]["ci_lo"] = 1.0
        with pytest.raises(ValueError, match=r"result\.decided has no key \['ci_lo'\]"):
            structure(PerformanceValidationResult, data, "result")

    def test_missing_key(self) -> None:
        """Reading names the required keys that are missing."""
        with pytest.raises(ValueError, match="speedup"):
            structure(
                PerformanceValidationResult,
                {
                    "backend_description": "x",
                    "throughput": 1.0,
                    "baseline_throughput": 1.0,
                    "passed": True,
                },
                "result",
            )


class TestFlags:
    def test_flags_round_trip_as_list(self) -> None:
        """Flags are a tuple on the value and a list in JSON, and survive the round trip."""
        r = flat_result("x", 2.0, 1.0, 2.0, True, flags=["recompiled"])
        assert r.flags == ("recompiled",)
        assert unstructure(r)["decided"]["flags"] == ["recompiled"]
        assert structure(PerformanceValidationResult, unstructure(r), "result") == r

    @pytest.mark.parametrize("bad", ["recompiled", [1], None])
    def test_bad_flags(self, bad: object) -> None:
        """Flags must be a list or tuple of strings."""
        with pytest.raises(TypeError, match="flags"):
            Decision(flags=bad)  # type: ignore[arg-type]


def test_a_statistical_result_carries_its_decision_detail_as_fields() -> None:
    """Margin, method and autocorrelation reach the result (and its event), not only the text."""
    from aitune_fp.core.config import ProfilingConfig
    from aitune_fp.core.sequential import decide_at_look
    from aitune_fp.core.speedup import Gate
    from aitune_fp.measure.measurement import RunContext
    from aitune_fp.measure.statistical import statistical_result
    from aitune_fp.profiling.interleaved import PairedTimings

    base = [1.0 + 0.01 * (i % 7) for i in range(40)]
    cand = [0.5 + 0.004 * ((i * 3) % 5) for i in range(40)]
    decision = decide_at_look(
        base, cand, Gate(1.0), confidence=0.95, n_looks=3, futility_margin_percent=2.5, look=2
    )
    timings = PairedTimings(
        baseline_s=tuple(base),
        candidate_s=tuple(cand),
        baseline_device_s=None,
        candidate_device_s=None,
        warmup=None,
        threads=1,
        wall_s=1.0,
        flags=(),
    )
    config = ProfilingConfig()
    result = statistical_result(
        decision, 40, timings, 1, config, False, 1.0, "C()", RunContext(), None
    ).result
    assert result.futility_margin_percent == pytest.approx(2.5)
    assert result.method == decision.method == "wilcoxon_signed_rank_hl"
    assert result.autocorrelation == decision.autocorrelation
    again = structure(PerformanceValidationResult, unstructure(result), "result")
    assert again == result
