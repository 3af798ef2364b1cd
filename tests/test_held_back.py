"""What held an open look back (issue 36), the minimum pairs for ``faster`` and the throughput
bound: properties of :func:`aitune_fp.core.sequential.decide_at_look` on paired timings."""

from __future__ import annotations

import math
from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from aitune_fp.core.sequential import decide_at_look, throughput_log_lower
from aitune_fp.core.speedup import Gate
from aitune_fp.core.verdict import HELD_BACK

V31 = {
    "futility_margin_percent": 1.0,
    "futility_error": 0.2,
    "guard_serial_correlation": True,
    "guard_shift": True,
}

ratios = st.lists(st.floats(0.5, 2.0), min_size=10, max_size=90)


def _pairs(rs: list[float]) -> tuple[list[float], list[float]]:
    base = [0.001 * (1.0 + 0.3 * math.sin(i * 0.7)) for i in range(len(rs))]
    return base, [b / r for b, r in zip(base, rs, strict=True)]


def _look(rs: list[float], **options: object) -> object:
    look = 1 + min(5, max(0, int(math.log2(len(rs) / 10))))
    return decide_at_look(
        *_pairs(rs), Gate(1.0), confidence=0.95, n_looks=6, look=look, **{**V31, **options}
    )  # type: ignore[arg-type]


@settings(max_examples=80, deadline=None)
@given(ratios)
def test_an_open_look_names_what_held_it_back(rs: list[float]) -> None:
    """Settled: no reason. Open: one of HELD_BACK; ``interval`` means the bounds straddle."""
    d = _look(rs)
    if d.verdict == "inconclusive":  # type: ignore[attr-defined]
        assert d.held_back in HELD_BACK  # type: ignore[attr-defined]
    else:
        assert d.held_back is None  # type: ignore[attr-defined]


@settings(max_examples=60, deadline=None)
@given(ratios, st.integers(0, 100))
def test_no_faster_before_the_minimum_pairs(rs: list[float], minimum: int) -> None:
    """Below ``min_accept_pairs`` a would-be ``faster`` is held back as ``early``; the rest of
    the decision (bounds, not_faster) is unchanged."""
    free, held = _look(rs), _look(rs, min_accept_pairs=minimum)
    if len(rs) >= minimum or free.verdict != "faster":  # type: ignore[attr-defined]
        assert held == free
    else:
        assert held.verdict == "inconclusive" and held.held_back == "early"  # type: ignore[attr-defined]
        assert (held.ci_low, held.ci_high) == (free.ci_low, free.ci_high)  # type: ignore[attr-defined]


@given(
    st.lists(st.floats(1e-4, 1e-2), min_size=3, max_size=60),
    st.floats(0.5, 2.0),
    st.floats(1e-4, 0.4),
)
def test_the_throughput_bound_is_below_the_point(
    base: list[float], ratio: float, alpha: float
) -> None:
    """The delta-method bound never exceeds the throughput ratio it bounds."""
    cand = [b / ratio * (1.0 + 0.1 * math.cos(i)) for i, b in enumerate(base)]
    point = math.log(sum(base) / sum(cand))
    assert throughput_log_lower(tuple(base), tuple(cand), alpha) <= point + 1e-12


def test_a_throughput_just_at_the_gate_is_held_by_the_bound() -> None:
    """Typical call 1.06x, every tenth call 1.5x slower: the throughput ratio is 1.011x, just
    past the gate. The point lets it through; its bound does not (the throughput condition
    alone: without the serial-correlation guard, the block guard is off)."""
    rs = [1.06 * math.exp(0.01 * math.sin(i * 2.3)) / (1.5 if i % 10 == 3 else 1.0) for i in range(80)]  # fmt: skip
    base, cand = _pairs(rs)
    assert 1.01 < sum(base) / sum(cand) < 1.012
    point = _look(rs, guard_serial_correlation=False)
    bound = _look(rs, guard_serial_correlation=False, throughput_bound=True)
    assert point.verdict == "faster"  # type: ignore[attr-defined]
    assert bound.verdict == "inconclusive" and bound.held_back == "throughput"  # type: ignore[attr-defined]
    assert "throughput_bound" in bound.flags  # type: ignore[attr-defined]


def test_the_run_records_which_candidate_calls_followed_eager() -> None:
    """``candidate_after_eager`` is read off the call log, over looks (untimed calls included)."""
    from aitune_fp.inputs import Sample
    from aitune_fp.profiling.interleaved import InterleavedRun
    from aitune_fp.testing import FakeClock

    clock, log = FakeClock(), list[str]()
    with InterleavedRun(
        clock.arm(0.001, log=log, label="A"),
        clock.arm(0.001, log=log, label="B"),
        Sample(),
        timer=clock,
        order_seed=4,
    ) as run:
        run.extend(13)
        run.extend(10)
        flags = run.timings().candidate_after_eager
    timed = [i for i in range(len(log)) if not (i in (0, 1) or i in (28, 29))]  # untimed calls
    expected = [log[i - 1] == "A" for i in timed if log[i] == "B"]
    assert list(flags) == expected and len(flags) == 23


def _carry(n: int, gain: float) -> tuple[list[float], list[float], list[bool]]:
    """Pairs at 1.005x, the candidate ``gain`` faster when right after eager (every other pair)."""
    after = [i % 4 in (0, 3) for i in range(n)]
    rs = [1.005 * math.exp(0.004 * math.sin(i * 1.7)) * (gain if a else 1.0) for i, a in enumerate(after)]  # fmt: skip
    base, cand = _pairs(rs)
    return base, cand, after


def _fifth_look(base: Any, cand: Any, after: Any = None) -> Any:
    """The decision at look 5 of 6 (v3.1's settings), with the carry-over pairs when given."""
    return decide_at_look(
        base,
        cand,
        Gate(1.0),
        confidence=0.95,
        n_looks=6,
        look=5,
        candidate_after_eager=after,
        **V31,  # type: ignore[arg-type]
    )


def test_a_carry_over_is_measured_and_holds_a_faster_back() -> None:
    """3 % faster right after eager: measured, flagged, and the pairs after itself (1.005x with
    a narrow spread) must clear alone; they do not (1.005x), and without the flags it passes."""
    base, cand, after = _carry(160, 1.03)
    free, held = _fifth_look(base, cand), _fifth_look(base, cand, after)
    assert free.verdict == "faster"
    assert held.carryover is not None and 1.02 < held.carryover < 1.04
    assert "carryover" in held.flags
    assert held.verdict == "inconclusive" and held.held_back == "carryover"


def test_no_carry_over_changes_nothing_but_the_measurement() -> None:
    base, cand, after = _carry(160, 1.0)
    free, measured = _fifth_look(base, cand), _fifth_look(base, cand, after)
    assert "carryover" not in measured.flags
    assert measured.carryover is not None and abs(measured.carryover - 1.0) < 0.01
    assert attrs.evolve(measured, carryover=None) == free
