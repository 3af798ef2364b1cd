"""The block guard of ``decide_at_look``: a ``faster`` stands only when the Wilcoxon /
Hodges-Lehmann bound on the means of blocks of ``floor(sqrt(n))`` pairs clears the required
speedup too, so a drifting ratio that the lag-1 widening and the shift test both miss is held
back. The simulation figures are in ``benchmarks/RESULTS.md`` (v3.1).
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from aitune_fp.core.dependence import block_means, block_size
from aitune_fp.core.sequential import decide_at_look
from aitune_fp.core.speedup import Gate
from aitune_fp.core.verdict import SpeedupDecision

#: The production options (``measure``'s).
PRODUCTION: dict[str, object] = {
    "confidence": 0.95,
    "n_looks": 6,
    "futility_margin_percent": 1.0,
    "futility_error": 0.20,
    "guard_serial_correlation": True,
    "guard_shift": True,
}


def _pairs(ratios: list[float]) -> tuple[list[float], list[float]]:
    base = [0.01] * len(ratios)
    return base, [b / r for b, r in zip(base, ratios, strict=True)]


def _decide(ratios: list[float], look: int, **options: object) -> SpeedupDecision:
    return decide_at_look(*_pairs(ratios), Gate(1.0), look=look, **PRODUCTION, **options)  # type: ignore[arg-type]


def _drifting(n: int = 80) -> list[float]:
    """1.04x falling to 1.00x over ``n`` pairs, with +-4 % of deterministic scatter."""
    return [1.04 * (1.0 / 1.04) ** (i / (n - 1)) * math.exp(0.04 * math.sin(i * i * 0.618)) for i in range(n)]  # fmt: skip


def test_block_size_grows_like_the_square_root() -> None:
    assert [block_size(n) for n in (1, 10, 40, 80, 320, 10**6)] == [1, 3, 6, 8, 17, 1000]


@given(st.lists(st.floats(-1.0, 1.0), min_size=1, max_size=60), st.integers(1, 9))
def test_block_means_cover_the_latest_pairs(values: list[float], block: int) -> None:
    means = block_means(values, block)
    assert len(means) == len(values) // block
    start = len(values) - len(means) * block
    for k, mean in enumerate(means):
        chunk = values[start + k * block : start + (k + 1) * block]
        assert min(chunk) - 1e-12 <= mean <= max(chunk) + 1e-12
        assert mean == pytest.approx(sum(chunk) / block)


def test_a_drifting_ratio_is_not_accepted() -> None:
    """1.04x drifting to 1.00x: the early pairs would carry it at 80 pairs; the blocks do not."""
    decision = _decide(_drifting(), 4)
    assert decision.verdict == "inconclusive" and decision.shift_index is None  # shift missed
    assert "block_bound" in decision.flags and decision.held_back == "block"
    assert decision.ci_low <= decision.required_speedup  # the interval says why


def test_an_iid_ratio_is_accepted() -> None:
    rng = random.Random(3)
    ratios = [1.05 * math.exp(rng.gauss(0.0, 0.03)) for _ in range(80)]
    decision = _decide(ratios, 4)
    assert decision.verdict == "faster" and "block_bound" not in decision.flags


def test_the_guard_is_off_without_the_serial_correlation_guard() -> None:
    plain = decide_at_look(*_pairs(_drifting()), Gate(1.0), confidence=0.95, n_looks=6, look=4)
    assert "block_bound" not in plain.flags


def test_too_few_blocks_leave_the_decision_alone() -> None:
    """At 10 or 20 pairs the blocks cannot reach the look's level: the guard never fires."""
    ratios = [1.2] * 20
    for n, look in ((10, 1), (20, 2)):
        assert "block_bound" not in _decide(ratios[:n], look).flags


@settings(max_examples=60, deadline=None)
@given(
    level=st.floats(0.98, 1.08),
    slope=st.floats(-0.06, 0.06),
    scatter=st.floats(0.0, 0.08),
    seed=st.integers(0, 2**16),
    n=st.sampled_from([40, 80, 160]),
)
@example(level=1.01, slope=0.0, scatter=0.0, seed=0, n=80)  # exactly at the gate: both guards
def test_the_guard_only_ever_holds_a_faster_back(
    level: float, slope: float, scatter: float, seed: int, n: int
) -> None:
    """When the guard fires the look stays open, below the gate, deterministically.

    The block guard runs before the throughput guard, which then has nothing left to hold back."""
    rng = random.Random(seed)
    ratios = [level * math.exp(slope * i / n + scatter * rng.uniform(-1.0, 1.0)) for i in range(n)]
    look = {40: 3, 80: 4, 160: 5}[n]
    decision = _decide(ratios, look)
    assert _decide(ratios, look) == decision
    if "block_bound" in decision.flags:
        assert decision.verdict == "inconclusive" and decision.held_back == "block"
        assert decision.ci_low <= decision.required_speedup
        assert decision.flags[-1] == "block_bound"
        assert not any(f.startswith("throughput") for f in decision.flags)
