"""Specs of the speedup arithmetic and AITune's threshold rule."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.core.speedup import compute_speedup, meets_threshold, required_speedup
from tests.strategies import speedups, threshold_percents, throughputs

BAD_NUMBERS = [float("nan"), float("inf"), float("-inf"), True, False, "1.0", None]


class TestComputeSpeedup:
    @given(throughputs)
    def test_identity(self, value: float) -> None:
        """A throughput equal to the baseline is a speedup of exactly 1."""
        assert compute_speedup(value, value) == 1.0

    @given(throughputs, throughputs, throughputs)
    def test_monotone_in_throughput(self, a: float, b: float, base: float) -> None:
        """More throughput against the same baseline never gives less speedup."""
        lo, hi = sorted((a, b))
        assert compute_speedup(lo, base) <= compute_speedup(hi, base)

    @given(throughputs, throughputs)
    def test_is_the_ratio(self, value: float, base: float) -> None:
        """Speedup is throughput over baseline throughput."""
        assert compute_speedup(value, base) == pytest.approx(value / base)

    def test_zero_throughput_is_zero_speedup(self) -> None:
        """A candidate that produced nothing has speedup 0, not an error."""
        assert compute_speedup(0.0, 10.0) == 0.0

    @pytest.mark.parametrize("bad", [0, 0.0, -1.0, *BAD_NUMBERS])
    def test_bad_baseline_names_argument(self, bad: object) -> None:
        """A zero, negative, non-finite or non-number baseline raises naming the argument."""
        with pytest.raises((ValueError, TypeError), match="baseline_throughput") as info:
            compute_speedup(1.0, bad)  # type: ignore[arg-type]
        assert repr(bad) in str(info.value)

    @pytest.mark.parametrize("bad", [-0.5, *BAD_NUMBERS])
    def test_bad_throughput_names_argument(self, bad: object) -> None:
        """A negative, non-finite or non-number throughput raises naming the argument."""
        with pytest.raises((ValueError, TypeError), match="throughput") as info:
            compute_speedup(bad, 1.0)  # type: ignore[arg-type]
        assert repr(bad) in str(info.value)

    def test_overflow_is_an_error_not_infinity(self) -> None:
        """A ratio too large for a float raises instead of returning infinity."""
        with pytest.raises(ValueError, match="overflows"):
            compute_speedup(1e308, 1e-308)


class TestRequiredSpeedup:
    def test_default_is_one_percent(self) -> None:
        """1 % means a 1.01x speedup is required."""
        assert required_speedup(1.0) == pytest.approx(1.01)

    @given(threshold_percents)
    def test_formula(self, pct: float) -> None:
        """The required speedup is 1 + pct/100 and stays positive."""
        value = required_speedup(pct)
        assert value == pytest.approx(1 + pct / 100)
        assert value > 0

    @pytest.mark.parametrize("bad", [-100, -100.0, -150.0, *BAD_NUMBERS])
    def test_bad_percent(self, bad: object) -> None:
        """A percent that is not finite or is <= -100 raises naming the argument."""
        with pytest.raises((ValueError, TypeError), match="min_speedup_threshold_percent"):
            required_speedup(bad)  # type: ignore[arg-type]


class TestMeetsThreshold:
    def test_aitune_examples(self) -> None:
        """101.5 vs 100 passes at the default 1 %; 100.5 vs 100 does not (reference §2.1 16, 17)."""
        assert meets_threshold(compute_speedup(101.5, 100.0)) is True
        assert meets_threshold(compute_speedup(100.5, 100.0)) is False

    @given(threshold_percents)
    def test_exactly_at_threshold_passes(self, pct: float) -> None:
        """The comparison is >=: a speedup equal to the requirement passes."""
        assert meets_threshold(required_speedup(pct), pct)

    @given(threshold_percents)
    def test_just_below_threshold_fails(self, pct: float) -> None:
        """The largest float below the requirement fails."""
        below = math.nextafter(required_speedup(pct), 0.0)
        assert not meets_threshold(below, pct)

    @given(speedups, threshold_percents, threshold_percents)
    def test_monotone_in_threshold(self, speedup: float, a: float, b: float) -> None:
        """Passing a stricter threshold implies passing a looser one."""
        loose, strict = sorted((a, b))
        if meets_threshold(speedup, strict):
            assert meets_threshold(speedup, loose)

    @given(speedups, speedups, threshold_percents)
    def test_monotone_in_speedup(self, a: float, b: float, pct: float) -> None:
        """A larger speedup never fails where a smaller one passes."""
        lo, hi = sorted((a, b))
        if meets_threshold(lo, pct):
            assert meets_threshold(hi, pct)

    @pytest.mark.parametrize("bad", [-1.0, *BAD_NUMBERS])
    def test_bad_speedup(self, bad: object) -> None:
        """A bad speedup raises naming the argument."""
        with pytest.raises((ValueError, TypeError), match="speedup"):
            meets_threshold(bad)  # type: ignore[arg-type]

    @given(st.sampled_from([float("nan"), float("inf"), float("-inf")]))
    def test_non_finite_threshold(self, pct: float) -> None:
        """A non-finite threshold percent is refused, never compared."""
        with pytest.raises(ValueError, match="min_speedup_threshold_percent"):
            meets_threshold(1.5, pct)
