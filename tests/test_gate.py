"""The gate as one value: the threshold in percent and the speedup it requires, decided once."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.sequential import decide_at_look, decide_speedup
from aitune_fp.core.speedup import Gate, meets_threshold
from aitune_fp.errors import AitunefpError
from aitune_fp.inputs import Sample
from aitune_fp.measure.measurement import Comparison
from aitune_fp.measure.rules import rule_for
from aitune_fp.testing import FakeClock
from tests.strategies import speedups, threshold_percents

PACKAGE = Path(__file__).resolve().parent.parent / "aitune_fp"
#: Where the formula ``1 + pct / 100`` may be called: its own module and the Gate.
FORMULA_HOMES = {"core/speedup.py"}


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


def test_the_required_speedup_is_computed_in_one_place() -> None:
    """Below the edge nothing turns a percent into a required speedup again: only the Gate does."""
    callers = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            func = node.func if isinstance(node, ast.Call) else None
            name = getattr(func, "id", None) or getattr(func, "attr", None)
            if name == "required_speedup":
                callers.add(path.relative_to(PACKAGE).as_posix())
    assert callers <= FORMULA_HOMES, sorted(callers - FORMULA_HOMES)


@settings(max_examples=25, deadline=None)
@given(threshold_percents, st.floats(0.3, 3.0), st.sampled_from(["statistical", "point"]))
def test_every_consumer_agrees_with_the_gate(pct: float, ratio: float, mode: str) -> None:
    """The decisions and both rules' results carry the gate's own required speedup."""
    gate = Gate(pct)
    base = [0.01 * (1 + 0.01 * (i % 5)) for i in range(20)]
    cand = [b / ratio for b in base]
    assert decide_at_look(base, cand, gate, confidence=0.95, n_looks=2).required_speedup == (
        gate.required_speedup
    )
    assert decide_speedup(base, cand, pct).required_speedup == gate.required_speedup
    clock = FakeClock()
    config = ProfilingConfig(decision=mode, looks=(10, 20), point_steps=5, point_warmup_calls=2)
    comparison = Comparison(
        eager=clock.arm(0.002),
        candidate=clock.arm(0.002 / ratio),
        batch=Sample(),
        size=1,
        config=config,
        gate=gate,
        timer=clock,
    )
    measured = rule_for(config).compare(comparison, None)
    assert measured.result.required_speedup == gate.required_speedup
    if measured.decision is not None:
        assert measured.decision.required_speedup == gate.required_speedup
    else:
        assert measured.result.passed == gate.passes(measured.result.speedup)
