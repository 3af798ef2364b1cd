"""Specs of the spot-check schedule (pure core)."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.core.spot import DEFAULT_SPOT_RATE, spot_positions
from aitune_fp.errors import InvalidTypeError, InvalidValueError

n_calls = st.integers(min_value=1, max_value=2000)
rates = st.floats(min_value=1e-6, max_value=1.0, allow_nan=False)
seeds = st.integers(min_value=-(2**70), max_value=2**70)
periods = st.integers(min_value=1, max_value=300)


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
        expected = runs * len(spot_positions(n, rate, 0)) - 2 * runs
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
        assert len(spot_positions(102, DEFAULT_SPOT_RATE, 0)) == 12

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


def test_module_is_pure() -> None:
    """Importing the spot module imports no torch."""
    code = "import sys, aitune_fp.core.spot; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
