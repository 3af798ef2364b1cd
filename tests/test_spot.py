"""Specs of the spot-check schedule and its chance of catching a periodic fault (pure core)."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.core.spot import (
    DEFAULT_SPOT_RATE,
    detection_probability,
    spot_count,
    spot_positions,
)
from aitune_fp.errors import InvalidTypeError, InvalidValueError

n_calls = st.integers(min_value=1, max_value=2000)
rates = st.floats(min_value=1e-6, max_value=1.0, allow_nan=False)
seeds = st.integers(min_value=-(2**70), max_value=2**70)
periods = st.integers(min_value=1, max_value=300)


def _simulated(n: int, rate: float, period: int, n_seeds: int) -> float:
    """Share of (seed, phase) pairs whose schedule compares at least one faulty call."""
    hits = 0
    for seed in range(n_seeds):
        checked = spot_positions(n, rate, seed)
        hits += sum(any(i % period == phi for i in checked) for phi in range(period))
    return hits / (n_seeds * period)


class TestSpotPositions:
    @given(n_calls, rates, seeds)
    def test_ends_always_checked(self, n: int, rate: float, seed: int) -> None:
        """The first and the last timed call are always compared."""
        positions = spot_positions(n, rate, seed)
        assert positions[0] == 0
        assert positions[-1] == n - 1

    @given(n_calls, rates, seeds)
    def test_sorted_unique_in_range(self, n: int, rate: float, seed: int) -> None:
        """Positions are call numbers of the look, strictly increasing."""
        positions = spot_positions(n, rate, seed)
        assert all(0 <= p < n for p in positions)
        assert all(a < b for a, b in itertools.pairwise(positions))

    @given(n_calls, rates, seeds)
    def test_count_is_about_rate(self, n: int, rate: float, seed: int) -> None:
        """Both ends plus round(rate x inner calls), at least one inner call when there is one."""
        positions = spot_positions(n, rate, seed)
        assert len(positions) == spot_count(n, rate)
        inner = n - 2
        if inner <= 0:
            assert positions == tuple(range(n))
        else:
            extra = len(positions) - 2
            assert extra >= 1
            assert extra <= inner
            assert extra == 1 or abs(extra - rate * inner) <= 0.5

    @given(n_calls, rates, seeds)
    def test_same_seed_same_positions(self, n: int, rate: float, seed: int) -> None:
        """The schedule is a function of its arguments."""
        assert spot_positions(n, rate, seed) == spot_positions(n, rate, seed)

    def test_seeds_vary_the_inner_calls(self) -> None:
        """Different seeds give different schedules (the inner calls cannot be predicted)."""
        schedules = {spot_positions(100, DEFAULT_SPOT_RATE, seed) for seed in range(50)}
        assert len(schedules) > 40

    def test_inner_calls_are_uniform(self) -> None:
        """Over many seeds every inner call is picked about equally often."""
        n, rate, runs = 12, 0.2, 4000
        counts = [0] * n
        for seed in range(runs):
            for p in spot_positions(n, rate, seed):
                counts[p] += 1
        assert counts[0] == counts[-1] == runs
        expected = runs * spot_count(n, rate) - 2 * runs
        for count in counts[1:-1]:
            assert count == pytest.approx(expected / (n - 2), rel=0.1)

    @pytest.mark.parametrize(("n", "expected"), [(1, (0,)), (2, (0, 1)), (3, (0, 1, 2))])
    def test_short_looks(self, n: int, expected: tuple[int, ...]) -> None:
        """One call: it alone; two: both; three: all (one inner call is always added)."""
        assert spot_positions(n, DEFAULT_SPOT_RATE, 0) == expected

    def test_rate_one_checks_every_call(self) -> None:
        """At rate 1 every call is compared."""
        assert spot_positions(37, 1.0, 5) == tuple(range(37))

    def test_default_rate(self) -> None:
        """The default spot rate is a tenth of the inner calls."""
        assert DEFAULT_SPOT_RATE == 0.10
        assert spot_count(102) == 12

    @pytest.mark.parametrize("bad", [0, -3])
    def test_bad_n_calls_value(self, bad: int) -> None:
        """n_calls below 1 is a value error naming it."""
        with pytest.raises(InvalidValueError, match=rf"n_calls.*{bad}"):
            spot_positions(bad, 0.1, 0)

    @pytest.mark.parametrize("bad", [2.0, True, "10", None])
    def test_bad_n_calls_type(self, bad: object) -> None:
        """A non-int n_calls (a bool included) is a type error naming it."""
        with pytest.raises(InvalidTypeError, match="n_calls") as info:
            spot_positions(bad, 0.1, 0)  # type: ignore[arg-type]
        assert repr(bad) in str(info.value)

    @pytest.mark.parametrize("bad", [0.0, -0.1, 1.5, math.nan, math.inf])
    def test_bad_rate_value(self, bad: float) -> None:
        """A rate outside (0, 1] or not finite is a value error naming it."""
        with pytest.raises(InvalidValueError, match="rate") as info:
            spot_positions(10, bad, 0)
        assert repr(bad) in str(info.value)

    @pytest.mark.parametrize("bad", ["0.1", None, True])
    def test_bad_rate_type(self, bad: object) -> None:
        """A rate that is not a real number is a type error naming it."""
        with pytest.raises(InvalidTypeError, match="rate") as info:
            spot_positions(10, bad, 0)  # type: ignore[arg-type]
        assert repr(bad) in str(info.value)

    @pytest.mark.parametrize("bad", [1.0, "7", None, True])
    def test_bad_seed(self, bad: object) -> None:
        """A seed that is not an int is a type error naming it."""
        with pytest.raises(InvalidTypeError, match="seed") as info:
            spot_positions(10, 0.1, bad)  # type: ignore[arg-type]
        assert repr(bad) in str(info.value)


class TestDetectionProbability:
    @given(n_calls, rates, periods)
    def test_is_a_probability(self, n: int, rate: float, period: int) -> None:
        """Always within [0, 1]."""
        assert 0.0 <= detection_probability(n, rate, period) <= 1.0

    @given(n_calls, rates)
    def test_every_call_faulty_is_always_caught(self, n: int, rate: float) -> None:
        """Period 1: every call is wrong, so the first compared call catches it."""
        assert detection_probability(n, rate, 1) == 1.0

    @given(st.integers(min_value=1, max_value=300), rates)
    def test_even_look_period_two_always_caught(self, half: int, rate: float) -> None:
        """Period 2 over an even number of calls: one of the two ends is always faulty."""
        assert detection_probability(2 * half, rate, 2) == 1.0

    @given(st.integers(min_value=3, max_value=400), periods)
    def test_rate_one_is_exact(self, n: int, period: int) -> None:
        """Checking every call catches the fault whenever it fires inside the look."""
        fired = min(period, n) / period
        assert detection_probability(n, 1.0, period) == pytest.approx(fired)

    def test_single_call(self) -> None:
        """One call is faulty with chance 1/period."""
        assert detection_probability(1, 0.1, 4) == pytest.approx(0.25)

    def test_hand_computed(self) -> None:
        """n=10, one inner call checked, period 5: phases 0 and 4 hit an end (9 % 5 == 4);
        phases 1..3 have two faulty inner calls each (1 and 6, ...) among 8, so miss 6/8."""
        assert detection_probability(10, 0.1, 5) == pytest.approx(1 - 3 * (6 / 8) / 5)

    @given(st.integers(min_value=3, max_value=200), rates, periods)
    def test_more_rate_never_worse(self, n: int, rate: float, period: int) -> None:
        """Checking more calls never lowers the chance."""
        assert (
            detection_probability(n, min(1.0, rate * 2), period)
            >= detection_probability(n, rate, period) - 1e-12
        )

    @pytest.mark.parametrize(
        ("n", "rate", "period"),
        [(10, 0.1, 5), (20, 0.1, 10), (40, 0.1, 7), (40, 0.25, 50), (80, 0.1, 50), (12, 0.3, 3)],
    )
    def test_matches_simulation(self, n: int, rate: float, period: int) -> None:
        """The exact formula agrees with spot_positions' own schedules over many seeds."""
        runs = 3000
        simulated = _simulated(n, rate, period, runs)
        exact = detection_probability(n, rate, period)
        sigma = math.sqrt(max(exact * (1 - exact), 1e-4) / runs)
        assert abs(simulated - exact) <= 5 * sigma + 1e-9

    @pytest.mark.parametrize("bad", [0, -1])
    def test_bad_period_value(self, bad: int) -> None:
        """A period below 1 is a value error naming it."""
        with pytest.raises(InvalidValueError, match=rf"period.*{bad}"):
            detection_probability(10, 0.1, bad)

    @pytest.mark.parametrize("bad", [2.5, True, None])
    def test_bad_period_type(self, bad: object) -> None:
        """A non-int period is a type error naming it."""
        with pytest.raises(InvalidTypeError, match="period") as info:
            detection_probability(10, 0.1, bad)  # type: ignore[arg-type]
        assert repr(bad) in str(info.value)

    @pytest.mark.parametrize(("n", "rate"), [(0, 0.1), (10, 0.0), (10, 2.0), (10, math.nan)])
    def test_bad_schedule_arguments(self, n: int, rate: float) -> None:
        """Bad n_calls and rate are refused as in spot_positions."""
        with pytest.raises(InvalidValueError, match=r"n_calls|rate"):
            detection_probability(n, rate, 3)


def test_module_is_pure() -> None:
    """Importing the spot module imports no torch."""
    code = "import sys, aitune_fp.core.spot; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
