"""Randomised quad orientation (issue 22): each quad is ABBA or BAAB drawn from a seeded stream.

A fixed ABBA / BAAB alternation lets interference whose period matches the pattern (8 calls)
land on one arm only; drawing each quad's orientation at random spreads it over both arms.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any, Literal

import pytest

from aitune_fp.core.hodges_lehmann import paired_log_speedup_bounds
from aitune_fp.errors import InvalidValueError
from aitune_fp.inputs import Sample
from aitune_fp.profiling.interleaved import InterleavedRun
from aitune_fp.profiling.layout import orientation_stream, pair_order
from aitune_fp.testing import FakeClock


def quad_orientations(seed: int, n_quads: int) -> tuple[bool, ...]:
    """Each quad's orientation (True: ABBA), a seeded fair coin per quad, as the run draws them."""
    stream = orientation_stream(seed)
    return tuple(stream.random() < 0.5 for _ in range(n_quads))


def _timed_log(order: Literal["random", "fixed"] = "random", **kwargs: Any) -> str:
    """The arms of 40 timed pairs (after the look's two untimed calls), as 'AB...'."""
    clock, log = FakeClock(), list[str]()
    with InterleavedRun(
        clock.arm(0.001, log=log, label="A"),
        clock.arm(0.001, log=log, label="B"),
        Sample(),
        timer=clock,
        order=order,
        **kwargs,
    ) as run:
        run.extend(40)
    return "".join(log[2:])


class TestOrientationSequence:
    def test_reproducible_for_a_seed(self) -> None:
        """The same seed gives the same orientations, as a function and in a run."""
        assert quad_orientations(7, 50) == quad_orientations(7, 50)
        assert _timed_log(order_seed=7) == _timed_log(order_seed=7)
        assert quad_orientations(7, 50) != quad_orientations(8, 50)
        assert _timed_log(order_seed=7) != _timed_log(order_seed=8)

    def test_a_prefix_does_not_depend_on_the_length(self) -> None:
        """Quad q's orientation is the same however many quads are drawn (looks of any size)."""
        assert quad_orientations(3, 100)[:10] == quad_orientations(3, 10)

    def test_the_run_follows_the_drawn_orientations(self) -> None:
        """Quad q is ABBA exactly when quad_orientations(seed)[q]; every pair is one A, one B."""
        log = _timed_log(order_seed=11)
        want = "".join("ABBA" if abba else "BAAB" for abba in quad_orientations(11, 20))
        assert log == want
        assert all(sorted(log[i : i + 2]) == ["A", "B"] for i in range(0, 80, 2))

    def test_the_seed_defaults_to_the_spot_seed(self) -> None:
        """Without ``order_seed`` the spot seed the session passes seeds the orientations."""
        assert _timed_log(spot_seed=5) == _timed_log(order_seed=5)
        assert _timed_log() == _timed_log(order_seed=0)

    def test_both_orientations_occur_and_are_roughly_balanced(self) -> None:
        """A fair coin per quad: over 1,000 quads each orientation is 50 % +- 5 %."""
        drawn = quad_orientations(0, 1000)
        assert 450 <= sum(drawn) <= 550
        assert any(a == b for a, b in itertools.pairwise(drawn))  # not alternating

    def test_looks_of_odd_size_continue_the_quad(self) -> None:
        """A look ending mid-quad: the next look's first pair completes that quad."""
        clock, log = FakeClock(), list[str]()
        with InterleavedRun(
            clock.arm(0.001, log=log, label="A"),
            clock.arm(0.001, log=log, label="B"),
            Sample(),
            timer=clock,
            order_seed=4,
        ) as run:
            timed = []
            for n in (3, 5, 4):
                log.clear()
                run.extend(n)
                timed.append("".join(log[2:]))
        want = "".join("ABBA" if abba else "BAAB" for abba in quad_orientations(4, 6))
        assert "".join(timed) == want

    def test_fixed_order_is_still_available(self) -> None:
        """``order="fixed"``: the ABBA / BAAB alternation of ``pair_order``."""
        assert _timed_log(order="fixed") == "ABBABAAB" * 10
        assert "".join("AB" if pair_order(i) else "BA" for i in range(2)) == "ABBA"
        drawn = (False, True)
        assert "".join("AB" if pair_order(i, drawn) else "BA" for i in range(4)) == "BAABABBA"

    def test_bad_order_is_refused(self) -> None:
        with pytest.raises(InvalidValueError, match="order"):
            InterleavedRun(lambda: None, lambda: None, Sample(), order="abba")  # type: ignore[arg-type]


def _interfered(seconds: float, calls: list[int], clock: FakeClock) -> Callable[..., None]:
    """An arm whose call is 50 % slower at calls 1 and 2 of every 8 timed calls (counting both
    arms, after the look's two untimed calls): interference with the period of ABBA / BAAB."""

    def model(*args: Any) -> None:
        phase = (calls[0] - 2) % 8
        calls[0] += 1
        clock.advance(seconds * (1.5 if calls[0] > 2 and phase in (1, 2) else 1.0))

    return model


def _estimate(
    order: Literal["random", "fixed"], seed: int = 0, pairs: int = 400
) -> tuple[float, float]:
    """(paired Hodges-Lehmann speedup, mean-latency ratio) of an identical candidate."""
    clock, calls = FakeClock(), [0]
    with InterleavedRun(
        _interfered(0.001, calls, clock),
        _interfered(0.001, calls, clock),
        Sample(),
        timer=clock,
        order=order,
        order_seed=seed,
    ) as run:
        run.extend(pairs)
        timings = run.timings()
    estimate, _, _ = paired_log_speedup_bounds(timings.baseline_s, timings.candidate_s, 0.05)
    return math.exp(estimate), sum(timings.baseline_s) / sum(timings.candidate_s)


class TestPeriodicInterference:
    def test_the_fixed_order_is_biased(self) -> None:
        """In phase with ABBA / BAAB, the interference always hits the candidate: an identical
        candidate looks ~20 % slower."""
        typical, means = _estimate("fixed")
        assert typical < 0.85
        assert means < 0.9

    @pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
    def test_the_randomised_order_is_not(self, seed: int) -> None:
        """Drawn at random, it hits either arm: the estimate is within 3 % of 1.0."""
        typical, means = _estimate("random", seed)
        assert typical == pytest.approx(1.0, abs=0.03)
        assert means == pytest.approx(1.0, abs=0.03)
