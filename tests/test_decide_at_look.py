"""``decide_at_look``: error spent late, widened for any positive correlation, and ``faster``
only when the throughput agrees (the simulation figures are in ``benchmarks/RESULTS.md``).
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.core.sequential import EARLY_PAIRS, decide_at_look, look_alpha
from aitune_fp.core.speedup import Gate
from aitune_fp.errors import InvalidValueError


@given(total=st.floats(1e-4, 0.5), n_looks=st.integers(1, 12))
def test_the_looks_spend_exactly_the_total_and_more_later(total: float, n_looks: int) -> None:
    parts = [look_alpha(total, k, n_looks) for k in range(1, n_looks + 1)]
    assert math.isclose(math.fsum(parts), total, rel_tol=1e-9)
    assert all(a < b for a, b in itertools.pairwise(parts))


@pytest.mark.parametrize(("look", "n_looks"), [(0, 6), (7, 6), (1, 0)])
def test_a_look_outside_the_plan_is_refused_by_name(look: int, n_looks: int) -> None:
    with pytest.raises(InvalidValueError, match="look"):
        look_alpha(0.05, look, n_looks)


def _pairs(ratios: list[float]) -> tuple[list[float], list[float]]:
    base = [0.01] * len(ratios)
    return base, [b / r for b, r in zip(base, ratios, strict=True)]


def test_faster_needs_the_throughput_to_agree() -> None:
    """Most calls 1.3x faster, a few 4x slower: the typical call clears 1.01x, throughput does not."""
    ratios = [1.3] * 36 + [0.25] * 4
    base, cand = _pairs(ratios)
    assert sum(base) / sum(cand) < 1.01
    decision = decide_at_look(base, cand, Gate(1.0), confidence=0.95, n_looks=6)
    assert decision.verdict == "inconclusive" and "throughput_disagrees" in decision.flags
    assert decision.held_back == "throughput"  # the interval alone said faster
    # when the throughput agrees, nothing changes
    fine = _pairs([1.3] * 40)
    assert decide_at_look(*fine, Gate(1.0), confidence=0.95, n_looks=6).verdict == "faster"


def test_early_looks_are_widened_and_spend_little() -> None:
    ratios = [1.05 * (1.0 + 0.03 * math.sin(i)) for i in range(20)]
    base, cand = _pairs(ratios)
    assert len(base) < EARLY_PAIRS
    v2 = decide_at_look(
        base, cand, Gate(1.0), confidence=0.95, n_looks=6, guard_serial_correlation=True
    )
    v3 = decide_at_look(
        base, cand, Gate(1.0), confidence=0.95, n_looks=6, guard_serial_correlation=True,
        look=2,
    )  # fmt: skip
    assert v3.ci_low < v2.ci_low and v3.ci_high > v2.ci_high
    assert v3.confidence > v2.confidence  # look 2 of 6 spends less than an even share


def test_a_held_back_verdict_says_why_and_never_that_the_interval_straddles() -> None:
    """The reason of a look held back by the throughput names the throughput, not a straddle."""
    from aitune_fp.measure.statistical import reason_text

    base, cand = _pairs([1.3] * 36 + [0.25] * 4)
    decision = decide_at_look(base, cand, Gate(1.0), confidence=0.95, n_looks=6)
    text = reason_text(decision, 40, stopped=None, last_look=True)
    assert "straddles" not in text
    assert "clears required" in text and "throughput ratio" in text and "not called faster" in text
