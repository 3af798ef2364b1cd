"""The gate as one value: the threshold in percent and the speedup it requires, decided once."""

from __future__ import annotations

import math

import pytest
from hypothesis import given

from aitune_fp.core.gate import Gate
from aitune_fp.core.speedup import meets_threshold
from aitune_fp.errors import AitunefpError
from tests.strategies import speedups, threshold_percents


@given(threshold_percents)
def test_the_required_speedup_is_one_plus_the_percent(pct: float) -> None:
    """``required_speedup`` is ``1 + pct/100``, computed with the gate."""
    assert Gate(pct).required_speedup == pytest.approx(1.0 + pct / 100.0)


@given(threshold_percents, speedups)
def test_the_point_rule_agrees_with_meets_threshold(pct: float, speedup: float) -> None:
    """``Gate.passes`` is AITune's rule, exactly at the gate included."""
    assert Gate(pct).passes(speedup) == meets_threshold(speedup, pct)


@pytest.mark.parametrize("bad", [-100.0, -150.0, math.nan, math.inf, "5"])
def test_a_bad_threshold_is_refused_by_name(bad: object) -> None:
    """The edge refuses what no gate could mean, naming the value."""
    with pytest.raises(AitunefpError, match="min_speedup_threshold_percent"):
        Gate(bad)  # type: ignore[arg-type]


def test_the_required_speedup_is_not_an_argument() -> None:
    """It follows from the percent; it cannot be given apart from it."""
    with pytest.raises(TypeError):
        Gate(5.0, 2.0)  # type: ignore[call-arg]
