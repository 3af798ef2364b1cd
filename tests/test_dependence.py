"""Decision engine v3.1: the block-median guard of ``decide_at_look`` (issue 22).

A ``faster`` stands only when the Wilcoxon / Hodges-Lehmann bound on the medians of blocks of
``floor(sqrt(n))`` pairs clears the required speedup too. A drifting ratio that the lag-1 widening
and the shift test both miss is held back; where the guard does not fire, the decision is v3's,
bit for bit. The simulation figures are in ``benchmarks/RESULTS.md`` (v3.1).
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from aitune_fp.core.dependence import block_means, block_size
from aitune_fp.core.gate import Gate
from aitune_fp.core.sequential import decide_at_look
from aitune_fp.core.verdict import SpeedupDecision

#: The production options (``measure``'s), v3: everything but the block guard.
V3: dict[str, object] = {
    "confidence": 0.95,
    "n_looks": 6,
    "futility_margin_percent": 1.0,
    "futility_error": 0.20,
    "guard_serial_correlation": True,
    "guard_shift": True,
    "always_widen": True,
    "throughput_consistent": True,
}


def _pairs(ratios: list[float]) -> tuple[list[float], list[float]]:
    base = [0.01] * len(ratios)
    return base, [b / r for b, r in zip(base, ratios, strict=True)]


def _decide(ratios: list[float], look: int, **options: object) -> SpeedupDecision:
    return decide_at_look(*_pairs(ratios), Gate(1.0), look=look, **V3, **options)  # type: ignore[arg-type]


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
    """1.04x drifting to 1.00x: v3 accepts at 80 pairs (the early pairs carry it); v3.1 does not."""
    ratios = _drifting()
    v3 = _decide(ratios, 4, block_guard=False)
    assert v3.verdict == "faster" and v3.shift_index is None  # the shift test misses it
    v31 = _decide(ratios, 4)  # block_guard follows always_widen
    assert v31.verdict == "inconclusive"
    assert "block_bound" in v31.flags
    assert v31.ci_low <= v31.required_speedup < v3.ci_low  # the interval says why
    assert (v31.speedup, v31.ci_high) == (v3.speedup, v3.ci_high)


def test_an_iid_ratio_is_accepted_with_the_same_decision_as_before() -> None:
    rng = random.Random(3)
    ratios = [1.05 * math.exp(rng.gauss(0.0, 0.03)) for _ in range(80)]
    v3 = _decide(ratios, 4, block_guard=False)
    assert v3.verdict == "faster"
    assert _decide(ratios, 4) == v3


def test_the_guard_is_off_by_default_without_always_widen() -> None:
    ratios = _drifting()
    plain = decide_at_look(*_pairs(ratios), Gate(1.0), confidence=0.95, n_looks=6, look=4)
    assert "block_bound" not in plain.flags
    assert (
        decide_at_look(
            *_pairs(ratios), Gate(1.0), confidence=0.95, n_looks=6, look=4, block_guard=False
        )
        == plain
    )


def test_too_few_blocks_leave_the_decision_alone() -> None:
    """At 10 or 20 pairs the blocks cannot reach the look's level: v3's decision, unchanged."""
    ratios = [1.2] * 20
    for n, look in ((10, 1), (20, 2)):
        assert _decide(ratios[:n], look) == _decide(ratios[:n], look, block_guard=False)


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
    """Never more liberal than v3, bit-identical where it does not fire, and deterministic.

    The block guard runs before the throughput guard: a `faster` it holds back may also have
    been held back by the throughput guard without it (CI found one, 2026-12-05)."""
    rng = random.Random(seed)
    ratios = [level * math.exp(slope * i / n + scatter * rng.uniform(-1.0, 1.0)) for i in range(n)]
    look = {40: 3, 80: 4, 160: 5}[n]
    v3 = _decide(ratios, look, block_guard=False)
    v31 = _decide(ratios, look, block_guard=True)
    assert _decide(ratios, look, block_guard=True) == v31
    if "block_bound" in v31.flags:
        assert v31.verdict == "inconclusive"
        assert v3.verdict == "faster" or "throughput_disagrees" in v3.flags
        assert v31.ci_low <= v31.required_speedup
        before_throughput = tuple(f for f in v3.flags if not f.startswith("throughput"))
        assert v31.flags == (*before_throughput, "block_bound")
    else:
        assert v31 == v3
