"""Specification of the pure statistics: deciding "faster" from timings, with sound bounds."""

from __future__ import annotations

import array
import itertools
import json
import math
import random
import re
import statistics
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aitune_fp.core import hodges_lehmann, timings
from aitune_fp.core.hodges_lehmann import (
    _PairSums,
    mann_whitney_critical_count,
    paired_log_speedup_bounds,
    signed_rank_critical_count,
    unpaired_log_speedup_bounds,
)
from aitune_fp.core.sequential import decide_at_look, decide_speedup
from aitune_fp.core.speedup import Gate
from aitune_fp.core.timings import (
    coefficient_of_variation,
    is_steady,
    level_shift_index,
    throughput_from_latencies,
)
from aitune_fp.core.verdict import VERDICTS, SpeedupDecision
from aitune_fp.errors import InvalidTypeError, InvalidValueError
from tests.strategies import latencies, latency_lists, one_sided_alphas

_RANK = {"not_faster": 0, "inconclusive": 1, "faster": 2}


# ---------------------------------------------------------------------------------------------
# Independent reference computations (brute force), used only by the tests
# ---------------------------------------------------------------------------------------------


def _signed_rank_null(n: int) -> list[Fraction]:
    """Exact null pmf of T+ by enumerating all 2**n sign patterns."""
    counts = [0] * (n * (n + 1) // 2 + 1)
    for signs in itertools.product((0, 1), repeat=n):
        counts[sum(rank for rank, s in zip(range(1, n + 1), signs, strict=True) if s)] += 1
    return [Fraction(c, 2**n) for c in counts]


def _mann_whitney_null(n: int, m: int) -> list[Fraction]:
    """Exact null pmf of U = #{x_i > y_j} by enumerating which pooled ranks the x's take."""
    counts = [0] * (n * m + 1)
    for xs in itertools.combinations(range(n + m), n):
        # the x at pooled position p (0-based) beats the y's below it: p minus the x's below it
        counts[sum(p - k for k, p in enumerate(xs))] += 1
    total = math.comb(n + m, n)
    return [Fraction(c, total) for c in counts]


def _cdf(pmf: list[Fraction], c: int) -> Fraction:
    return sum(pmf[: c + 1], Fraction(0)) if c >= 0 else Fraction(0)


def _signed_rank_null_dp(n: int) -> list[Fraction]:
    """Exact null pmf of T+ by a dictionary DP (for n too large to enumerate)."""
    dist = {0: 1}
    for k in range(1, n + 1):
        nxt = dict(dist)
        for t, c in dist.items():
            nxt[t + k] = nxt.get(t + k, 0) + c
        dist = nxt
    top = n * (n + 1) // 2
    return [Fraction(dist.get(t, 0), 2**n) for t in range(top + 1)]


def _lognormal_pairs(
    rng: random.Random, n: int, ratio: float, sigma: float
) -> tuple[list[float], list[float]]:
    """Paired timings: eager ~ 10 ms with lognormal noise, candidate = eager / ratio with its own."""
    base = [0.01 * rng.lognormvariate(0.0, sigma) for _ in range(n)]
    cand = [0.01 / ratio * rng.lognormvariate(0.0, sigma) for _ in range(n)]
    return base, cand


def _binomial_band(p: float, draws: int, z: float = 4.5) -> float:
    """Half-width of a band that a binomial proportion leaves with probability < ~1e-5."""
    return z * math.sqrt(p * (1.0 - p) / draws) + 1.0 / draws


# ---------------------------------------------------------------------------------------------
# Critical counts
# ---------------------------------------------------------------------------------------------


class TestSignedRankCriticalCount:
    def test_findings_example(self) -> None:
        """n = 10 pairs at 0.01 per side gives c = 5, as in the measurement findings."""
        assert signed_rank_critical_count(10, 0.01) == 5

    @given(n=st.integers(min_value=1, max_value=12), alpha=one_sided_alphas)
    def test_is_largest_count_within_alpha(self, n: int, alpha: float) -> None:
        """P0(T+ <= c) <= alpha < P0(T+ <= c+1), checked against full enumeration of signs."""
        pmf = _signed_rank_null(n)
        c = signed_rank_critical_count(n, alpha)
        assert c >= -1
        assert _cdf(pmf, c) <= Fraction(alpha)
        assert _cdf(pmf, c + 1) > Fraction(alpha)

    @pytest.mark.parametrize("n", [13, 20, 33, 50])
    @pytest.mark.parametrize("alpha", [0.001, 0.01, 0.025, 0.2])
    def test_matches_independent_dp(self, n: int, alpha: float) -> None:
        """Beyond enumeration, the count agrees with an independent dictionary DP of the null."""
        pmf = _signed_rank_null_dp(n)
        c = signed_rank_critical_count(n, alpha)
        assert _cdf(pmf, c) <= Fraction(alpha) < _cdf(pmf, c + 1)

    def test_too_few_pairs_give_minus_one(self) -> None:
        """When even an all-negative sign pattern (2**-n) is more likely than alpha, c is -1."""
        assert signed_rank_critical_count(6, 0.01) == -1  # 1/64 > 0.01
        assert signed_rank_critical_count(7, 0.01) == 0  # 1/128 <= 0.01

    def test_monotone_in_n_across_normal_cutoff(self) -> None:
        """The count never decreases with n, also where the normal approximation takes over."""
        counts = [signed_rank_critical_count(n, 0.01) for n in range(198, 204)]
        assert counts == sorted(counts)
        steps = [b - a for a, b in itertools.pairwise(counts)]
        assert all(75 <= step <= 95 for step in steps)  # the exact steps are 83-86 here

    @given(n=st.integers(min_value=1, max_value=80), a=one_sided_alphas, b=one_sided_alphas)
    def test_monotone_in_alpha(self, n: int, a: float, b: float) -> None:
        """A larger alpha never gives a smaller critical count."""
        low, high = sorted((a, b))
        assert signed_rank_critical_count(n, low) <= signed_rank_critical_count(n, high)


class TestMannWhitneyCriticalCount:
    @given(
        n=st.integers(min_value=1, max_value=6),
        m=st.integers(min_value=1, max_value=6),
        alpha=one_sided_alphas,
    )
    def test_is_largest_count_within_alpha(self, n: int, m: int, alpha: float) -> None:
        """P0(U <= c) <= alpha < P0(U <= c+1), checked against enumeration of rank orders."""
        pmf = _mann_whitney_null(n, m)
        c = mann_whitney_critical_count(n, m, alpha)
        assert _cdf(pmf, c) <= Fraction(alpha)
        assert _cdf(pmf, c + 1) > Fraction(alpha)

    @given(n=st.integers(1, 30), m=st.integers(1, 30), alpha=one_sided_alphas)
    def test_symmetric_in_sample_sizes(self, n: int, m: int, alpha: float) -> None:
        """Swapping the two samples' sizes does not change the count."""
        assert mann_whitney_critical_count(n, m, alpha) == mann_whitney_critical_count(m, n, alpha)

    @pytest.mark.parametrize(("n", "m"), [(15, 15), (7, 23), (40, 3), (1, 50)])
    @pytest.mark.parametrize("alpha", [0.001, 0.01, 0.025, 0.2])
    def test_matches_independent_recursion(self, n: int, m: int, alpha: float) -> None:
        """Mid-sized samples agree with the textbook recursion f(n,m,u) = f(n-1,m,u-m) + f(n,m-1,u)."""
        pmf = _mann_whitney_null_dp(n, m)
        c = mann_whitney_critical_count(n, m, alpha)
        assert _cdf(pmf, c) <= Fraction(alpha) < _cdf(pmf, c + 1)

    def test_textbook_value(self) -> None:
        """n = m = 20 at 0.025 per side: 127, the value quoted in measurement.md section 2.2."""
        assert mann_whitney_critical_count(20, 20, 0.025) == 127

    def test_normal_approximation_continues_the_exact_counts(self) -> None:
        """Past the exact range (n*m > 10000) the count continues smoothly and monotonically."""
        exact = mann_whitney_critical_count(100, 100, 0.01)
        approx = mann_whitney_critical_count(100, 101, 0.01)
        assert exact <= approx <= exact + 100


# ---------------------------------------------------------------------------------------------
# Estimates and bounds
# ---------------------------------------------------------------------------------------------


class TestLogSpeedupBounds:
    @given(data=st.data(), alpha=one_sided_alphas)
    def test_paired_bounds_bracket_the_estimate(self, data: st.DataObject, alpha: float) -> None:
        """Paired: lower <= Hodges-Lehmann estimate <= upper on the log scale."""
        base = data.draw(latency_lists)
        cand = data.draw(st.lists(st.floats(1e-6, 10.0), min_size=len(base), max_size=len(base)))
        estimate, lower, upper = paired_log_speedup_bounds(base, cand, alpha)
        assert lower <= estimate <= upper

    @given(base=latency_lists, cand=latency_lists, alpha=one_sided_alphas)
    def test_unpaired_bounds_bracket_the_estimate(
        self, base: list[float], cand: list[float], alpha: float
    ) -> None:
        """Unpaired: lower <= Hodges-Lehmann shift <= upper on the log scale."""
        estimate, lower, upper = unpaired_log_speedup_bounds(base, cand, alpha)
        assert lower <= estimate <= upper

    @given(times=latency_lists)
    def test_identical_data_estimate_is_zero(self, times: list[float]) -> None:
        """The same timings in both arms give a log speedup of exactly 0 (speedup 1.0)."""
        assert paired_log_speedup_bounds(times, times, 0.05)[0] == 0.0
        assert unpaired_log_speedup_bounds(times, times, 0.05)[0] == 0.0
        for paired in (True, False):
            assert decide_speedup(times, times, paired=paired).speedup == 1.0

    def test_paired_hand_example(self) -> None:
        """Three pairs at alpha 1/8 (c = 0): estimate = median Walsh average, bounds = min/max d."""
        d = [0.1, 0.2, 0.6]
        cand = [0.01, 0.02, 0.03]
        base = [c * math.exp(x) for c, x in zip(cand, d, strict=True)]
        estimate, lower, upper = paired_log_speedup_bounds(base, cand, 0.125)
        # Walsh averages: 0.1, 0.2, 0.6, 0.15, 0.35, 0.4 -> sorted median (0.2 + 0.35) / 2
        assert estimate == pytest.approx(0.275)
        assert lower == pytest.approx(0.1)
        assert upper == pytest.approx(0.6)

    def test_unpaired_hand_example(self) -> None:
        """Two against two at alpha 0.17 >= 1/6 (c = 0): bounds are the extreme pairwise log differences."""
        base = [math.e**1, math.e**2]
        cand = [1.0, math.e**0.5]
        estimate, lower, upper = unpaired_log_speedup_bounds(base, cand, 0.17)
        # differences 1, 0.5, 2, 1.5 -> median 1.25, min 0.5, max 2
        assert (estimate, lower, upper) == pytest.approx((1.25, 0.5, 2.0))

    def test_too_few_pairs_are_unbounded(self) -> None:
        """Two pairs cannot bound anything at 0.01 per side: the bounds are -inf and +inf."""
        _, lower, upper = paired_log_speedup_bounds([1.0, 2.0], [0.5, 1.0], 0.01)
        assert (lower, upper) == (-math.inf, math.inf)

    @given(times=st.lists(st.floats(1e-3, 1.0), min_size=2, max_size=20))
    def test_scaling_the_candidate_shifts_the_estimate(self, times: list[float]) -> None:
        """A candidate exactly k times faster moves the log estimate and bounds by ln k."""
        cand = [t / 3.0 for t in times]
        e0, l0, u0 = paired_log_speedup_bounds(times, times, 0.05)
        e1, l1, u1 = paired_log_speedup_bounds(times, cand, 0.05)
        assert e1 == pytest.approx(e0 + math.log(3.0), abs=1e-12)
        if math.isfinite(l0):
            assert l1 == pytest.approx(l0 + math.log(3.0), abs=1e-12)
            assert u1 == pytest.approx(u0 + math.log(3.0), abs=1e-12)


class TestCoverage:
    def test_paired_interval_covers_at_nominal_rate(self) -> None:
        """400 draws of 20 pairs: the 90 % interval holds the true log ratio ~ its exact level."""
        n, alpha, draws = 20, 0.05, 400
        c = signed_rank_critical_count(n, alpha)
        exact_level = 1 - 2 * float(_cdf(_signed_rank_null_dp(n), c))
        assert 0.9 <= exact_level < 0.92  # conservative by the discreteness of the null only
        rng = random.Random(20240601)
        truth = math.log(1.3)
        hits = 0
        for _ in range(draws):
            base, cand = _lognormal_pairs(rng, n, 1.3, 0.1)
            _, lower, upper = paired_log_speedup_bounds(base, cand, alpha)
            hits += lower <= truth <= upper
        assert abs(hits / draws - exact_level) <= _binomial_band(exact_level, draws)

    def test_unpaired_interval_covers_at_nominal_rate(self) -> None:
        """400 draws of 15 + 15 independent timings: the 90 % shift interval covers ~ its level."""
        n, alpha, draws = 15, 0.05, 400
        c = mann_whitney_critical_count(n, n, alpha)
        exact_level = 1 - 2 * float(_cdf(_mann_whitney_null_dp(n, n), c))
        assert 0.9 <= exact_level < 0.92
        rng = random.Random(7)
        truth = math.log(0.8)
        hits = 0
        for _ in range(draws):
            base, cand = _lognormal_pairs(rng, n, 0.8, 0.2)
            _, lower, upper = unpaired_log_speedup_bounds(base, cand, alpha)
            hits += lower <= truth <= upper
        assert abs(hits / draws - exact_level) <= _binomial_band(exact_level, draws)

    def test_group_sequential_false_accepts_stay_below_alpha(self) -> None:
        """Exactly at the threshold, 3 looks (10, 20, 40 pairs) accept in <= 5 % of 300 runs."""
        rng = random.Random(99)
        runs, accepts, pct = 300, 0, 1.0
        for _ in range(runs):
            base, cand = _lognormal_pairs(rng, 40, 1.0 + pct / 100, 0.08)
            for n in (10, 20, 40):
                decision = decide_at_look(base[:n], cand[:n], Gate(pct), confidence=0.95, n_looks=3)
                if decision.verdict != "inconclusive":
                    accepts += decision.verdict == "faster"
                    break
        assert accepts / runs <= 0.05 + _binomial_band(0.05, runs)


def _mann_whitney_null_dp(n: int, m: int) -> list[Fraction]:
    """Exact null pmf of U by the recursion f(n, m, u) = f(n-1, m, u-m) + f(n, m-1, u)."""
    table: dict[tuple[int, int], list[int]] = {}
    for i in range(n + 1):
        for j in range(m + 1):
            if i == 0 or j == 0:
                table[i, j] = [1]
                continue
            size = i * j + 1
            row = [0] * size
            for u, count in enumerate(table[i - 1, j]):
                row[u + j] += count
            for u, count in enumerate(table[i, j - 1]):
                row[u] += count
            table[i, j] = row
    total = math.comb(n + m, n)
    return [Fraction(c, total) for c in table[n, m]]


# ---------------------------------------------------------------------------------------------
# Decisions
# ---------------------------------------------------------------------------------------------


class TestDecideSpeedup:
    @pytest.mark.parametrize("paired", [True, False])
    def test_clearly_faster(self, paired: bool) -> None:
        """A 2x faster candidate with 5 % noise over 20 calls is 'faster'."""
        base, cand = _lognormal_pairs(random.Random(1), 20, 2.0, 0.05)
        decision = decide_speedup(base, cand, 1.0, paired=paired)
        assert decision.verdict == "faster"
        assert decision.speedup == pytest.approx(2.0, rel=0.1)
        assert decision.ci_low > decision.required_speedup == pytest.approx(1.01)

    @pytest.mark.parametrize("paired", [True, False])
    def test_clearly_slower(self, paired: bool) -> None:
        """A 2x slower candidate is 'not_faster'."""
        base, cand = _lognormal_pairs(random.Random(2), 20, 0.5, 0.05)
        decision = decide_speedup(base, cand, 1.0, paired=paired)
        assert decision.verdict == "not_faster"
        assert decision.ci_high < 1.0

    @pytest.mark.parametrize("paired", [True, False])
    def test_identical_noisy_small_sample_is_inconclusive(self, paired: bool) -> None:
        """Same distribution, 30 % noise, 6 calls per arm: the data cannot decide."""
        base, cand = _lognormal_pairs(random.Random(3), 6, 1.0, 0.3)
        decision = decide_speedup(base, cand, 1.0, paired=paired)
        assert decision.verdict == "inconclusive"
        assert decision.ci_low <= decision.required_speedup <= decision.ci_high

    def test_paired_removes_shared_drift(self) -> None:
        """A 10 % speedup under large drift shared by each pair: paired decides, unpaired cannot."""
        rng = random.Random(4)
        drift = [rng.lognormvariate(0.0, 0.4) for _ in range(20)]
        base = [0.01 * s * rng.lognormvariate(0.0, 0.01) for s in drift]
        cand = [0.01 / 1.1 * s * rng.lognormvariate(0.0, 0.01) for s in drift]
        paired = decide_speedup(base, cand, 1.0, paired=True)
        unpaired = decide_speedup(base, cand, 1.0, paired=False)
        assert (paired.verdict, paired.method) == ("faster", "wilcoxon_signed_rank_hl")
        assert (unpaired.verdict, unpaired.method) == ("inconclusive", "mann_whitney_hl")

    @settings(max_examples=60)
    @given(
        noise=st.lists(st.floats(-0.3, 0.3), min_size=4, max_size=25),
        factors=st.tuples(st.floats(0.3, 3.0), st.floats(0.3, 3.0)),
        paired=st.booleans(),
        pct=st.floats(-50.0, 100.0),
    )
    def test_verdict_is_monotone_in_true_speedup(
        self, noise: list[float], factors: tuple[float, float], paired: bool, pct: float
    ) -> None:
        """Same noise, candidate made faster: the verdict never gets worse."""
        slow, fast = sorted(factors)
        base = [0.01 * math.exp(e) for e in noise]
        cand = [0.01 * math.exp(-e / 2) for e in reversed(noise)]
        worse = decide_speedup(base, [c / slow for c in cand], pct, paired=paired)
        better = decide_speedup(base, [c / fast for c in cand], pct, paired=paired)
        assert _RANK[better.verdict] >= _RANK[worse.verdict]
        assert better.speedup >= worse.speedup

    @given(base=latency_lists, cand=latency_lists, pct=st.floats(-50.0, 100.0))
    def test_verdict_follows_the_bounds(
        self, base: list[float], cand: list[float], pct: float
    ) -> None:
        """faster iff ci_low > required; not_faster iff ci_high < required; else inconclusive."""
        d = decide_speedup(base, cand, pct, paired=False)
        assert d.required_speedup == 1.0 + pct / 100.0
        assert (d.verdict == "faster") == (d.ci_low > d.required_speedup)
        assert (d.verdict == "not_faster") == (d.ci_high < d.required_speedup)
        assert d.verdict in VERDICTS
        assert d.ci_low <= d.speedup <= d.ci_high
        assert d.confidence == pytest.approx(0.95)

    def test_reports_sizes_and_noise(self) -> None:
        """The decision records both sample sizes and each arm's coefficient of variation."""
        d = decide_speedup([1.0, 3.0], [2.0, 2.0, 2.0], paired=False)
        assert (d.n_baseline, d.n_candidate) == (2, 3)
        assert d.cv_baseline == pytest.approx(math.sqrt(2) / 2)
        assert d.cv_candidate == 0.0


class TestDecideAtLook:
    def test_bonferroni_level_per_look(self) -> None:
        """0.95 over 5 looks: 0.01 per side per look, a 98 % two-sided interval at each look."""
        base, cand = _lognormal_pairs(random.Random(5), 10, 1.5, 0.05)
        look = decide_at_look(base, cand, Gate(1.0), confidence=0.95, n_looks=5)
        assert look.confidence == pytest.approx(0.98)
        assert look.method == "wilcoxon_signed_rank_hl"
        single = decide_speedup(base, cand, 1.0, confidence=look.confidence, paired=True)
        assert (single.ci_low, single.ci_high) == pytest.approx((look.ci_low, look.ci_high))

    def test_ten_pairs_decide_a_clear_case(self) -> None:
        """A 1.5x candidate is settled at the first look of 10 pairs (c = 5 leaves a tight bound)."""
        base, cand = _lognormal_pairs(random.Random(6), 10, 1.5, 0.05)
        assert decide_at_look(base, cand, Gate(1.0), confidence=0.95, n_looks=5).verdict == "faster"

    def test_single_look_matches_two_sided_rule(self) -> None:
        """With one look, alpha per side is 1 - confidence."""
        base, cand = _lognormal_pairs(random.Random(8), 12, 1.0, 0.1)
        look = decide_at_look(base, cand, Gate(1.0), confidence=0.95, n_looks=1)
        assert look.confidence == pytest.approx(0.9)


class TestSpeedupDecision:
    @given(base=latency_lists, cand=latency_lists, paired=st.booleans())
    def test_to_dict_round_trips_through_json(
        self, base: list[float], cand: list[float], paired: bool
    ) -> None:
        """to_dict is plain JSON (no NaN/inf): dumps/loads gives the same dict back."""
        if paired:
            cand = (cand * len(base))[: len(base)]
        d = decide_speedup(base, cand, paired=paired).to_dict()
        assert json.loads(json.dumps(d, allow_nan=False)) == d
        assert set(d) == {f.name for f in attrs.fields(SpeedupDecision)}  # values, no text
        assert d["flags"] == list(decide_speedup(base, cand, paired=paired).flags)
        for key, value in d.items():
            if key == "flags":
                continue
            assert value is None or isinstance(value, (str, int, float))
            assert not isinstance(value, float) or math.isfinite(value)

    def test_unbounded_upper_is_none_in_json(self) -> None:
        """Too few pairs: ci_high is inf on the value and None in its dict."""
        d = decide_speedup([1.0, 2.0], [1.0, 2.0], paired=True)
        assert (d.ci_low, d.ci_high, d.verdict) == (0.0, math.inf, "inconclusive")
        assert d.to_dict()["ci_high"] is None

    def test_bound_equal_to_threshold_is_inconclusive(self) -> None:
        """A bound exactly on the threshold settles nothing: only 'inconclusive' is accepted."""
        fields: dict[str, Any] = {
            "speedup": 1.05,
            "ci_low": 1.01,
            "ci_high": 1.1,
            "n_baseline": 10,
            "n_candidate": 10,
            "confidence": 0.95,
            "required_speedup": 1.01,
            "method": "mann_whitney_hl",
            "cv_baseline": 0.1,
            "cv_candidate": 0.1,
        }
        assert SpeedupDecision(verdict="inconclusive", **fields).verdict == "inconclusive"
        with pytest.raises(ValueError, match="verdict"):
            SpeedupDecision(verdict="faster", **fields)
        with pytest.raises(ValueError, match="verdict"):
            SpeedupDecision(
                verdict="not_faster", **{**fields, "speedup": 1.0, "ci_low": 0.9, "ci_high": 1.01}
            )

    def test_rejects_inconsistent_fields(self) -> None:
        """Unknown verdicts/methods, tiny samples and estimates outside the interval are refused."""
        good: dict[str, Any] = {
            "verdict": "faster",
            "speedup": 1.5,
            "ci_low": 1.2,
            "ci_high": 1.8,
            "n_baseline": 10,
            "n_candidate": 10,
            "confidence": 0.95,
            "required_speedup": 1.01,
            "method": "wilcoxon_signed_rank_hl",
            "cv_baseline": 0.1,
            "cv_candidate": 0.1,
        }
        SpeedupDecision(**good)
        for name, value, error in [
            ("verdict", "maybe", ValueError),
            ("method", "t_test", ValueError),
            ("n_baseline", 1, ValueError),
            ("n_candidate", 2.0, TypeError),
            ("confidence", 1.0, ValueError),
            ("speedup", 2.0, ValueError),
            ("ci_low", math.nan, ValueError),  # NaN is a bad value, not a bad type
            ("cv_baseline", -0.1, ValueError),
        ]:
            with pytest.raises(error, match=name):
                SpeedupDecision(**{**good, name: value})


# ---------------------------------------------------------------------------------------------
# Descriptive helpers
# ---------------------------------------------------------------------------------------------


class TestThroughput:
    def test_exact_example(self) -> None:
        """Batch 8 at a mean latency of 10 ms is 800 samples/s."""
        assert throughput_from_latencies([0.01, 0.01], 8) == 800.0
        assert throughput_from_latencies([0.01], 8) == 800.0

    def test_uses_the_mean_latency(self) -> None:
        """Throughput comes from the mean latency, not the mean of per-call throughputs."""
        assert throughput_from_latencies([0.01, 0.03], 4) == pytest.approx(200.0)

    @given(latency=st.floats(1e-6, 10.0), count=st.integers(1, 20), batch=st.integers(1, 4096))
    def test_constant_latency(self, latency: float, count: int, batch: int) -> None:
        """Identical latencies give batch_size / latency."""
        assert throughput_from_latencies([latency] * count, batch) == pytest.approx(batch / latency)


class TestCoefficientOfVariation:
    def test_examples(self) -> None:
        """Equal values have CV 0; [1, 3] has sample sd sqrt(2) over mean 2."""
        assert coefficient_of_variation([5.0, 5.0, 5.0]) == 0.0
        assert coefficient_of_variation([1.0, 3.0]) == pytest.approx(math.sqrt(2) / 2)

    @given(values=latency_lists, scale=st.floats(1e-3, 1e3))
    def test_scale_invariant(self, values: list[float], scale: float) -> None:
        """Changing the time unit does not change the relative noise."""
        scaled = [v * scale for v in values]
        assert coefficient_of_variation(scaled) == pytest.approx(
            coefficient_of_variation(values), rel=1e-9, abs=1e-12
        )


class TestIsSteady:
    def test_examples(self) -> None:
        """Steady when the last window spreads by <= tolerance of its median; short is not steady."""
        assert not is_steady([], 5, 0.1)
        assert not is_steady([1.0] * 4, 5, 0.1)
        assert is_steady([3.0, 1.0, 1.0, 1.05, 1.0, 0.98], 5, 0.1)
        assert not is_steady([1.0, 1.0, 1.2, 1.0, 1.0], 5, 0.1)
        assert is_steady([1.0, 1.0, 1.5, 1.0, 1.0], 5, 0.5)  # boundary: equal passes

    @given(times=st.lists(st.floats(1e-3, 1.0), min_size=5, max_size=30))
    def test_matches_definition(self, times: list[float]) -> None:
        """is_steady equals (max - min) / median <= tolerance over the last window."""
        last = times[-5:]
        expected = (max(last) - min(last)) / statistics.median(last) <= 0.1
        assert is_steady(times, 5, 0.1) == expected


class TestLevelShiftIndex:
    def test_no_shift(self) -> None:
        """Constant or mildly noisy timings show no shift; too few timings give None."""
        assert level_shift_index([1.0] * 40) is None
        rng = random.Random(9)
        assert level_shift_index([rng.uniform(0.95, 1.05) for _ in range(100)]) is None
        assert level_shift_index([1.0] * 10 + [2.0] * 9) is None

    def test_step_is_found(self) -> None:
        """A clean 50 % step is flagged no later than where it happens (medians flag early)."""
        assert level_shift_index([1.0] * 30 + [1.5] * 10) == 20  # half of times[20:] shifted
        assert level_shift_index([1.0] * 15 + [1.5] * 15) == 10  # first split with >= 10 a side
        assert level_shift_index([1.0] * 40 + [0.5] * 5, min_segment=5, ratio=0.3) == 36

    @given(
        times=st.lists(st.sampled_from([1.0, 1.1, 1.6, 2.0]), min_size=0, max_size=40),
        seg=st.integers(1, 8),
    )
    def test_matches_brute_force(self, times: list[float], seg: int) -> None:
        """The result is the first split with >= seg on each side whose medians differ > ratio."""
        expected = None
        for k in range(seg, len(times) - seg + 1):
            before, after = statistics.median(times[:k]), statistics.median(times[k:])
            if abs(after - before) > 0.15 * before:
                expected = k
                break
        assert level_shift_index(times, min_segment=seg, ratio=0.15) == expected


# ---------------------------------------------------------------------------------------------
# Bad input: every function names the argument and the value
# ---------------------------------------------------------------------------------------------

_OK = [0.01, 0.012, 0.011]


def _any(value: object) -> Any:
    """Pass a deliberately ill-typed value past the type checker."""
    return value


_BAD_CASES: list[tuple[str, Callable[[], object], type[Exception], str]] = [
    ("one timing", lambda: decide_speedup([0.01], _OK), ValueError, "baseline_times"),
    ("no timings", lambda: decide_speedup(_OK, []), ValueError, "candidate_times"),
    ("nan timing", lambda: decide_speedup([0.01, math.nan], _OK), ValueError, "baseline_times[1]"),
    ("inf timing", lambda: decide_speedup(_OK, [math.inf, 1.0]), ValueError, "candidate_times[0]"),
    ("zero timing", lambda: decide_speedup([0.01, 0.0], _OK), ValueError, "baseline_times[1]"),
    ("negative", lambda: decide_speedup(_OK, [0.1, -0.1]), ValueError, "candidate_times[1]"),
    ("bool timing", lambda: decide_speedup([True, 0.01], _OK), TypeError, "baseline_times[0]"),
    ("str timings", lambda: decide_speedup(_any("0.01"), _OK), TypeError, "baseline_times"),
    ("str items", lambda: decide_speedup(_any(["1", "2"]), _OK), TypeError, "baseline_times[0]"),
    ("not iterable", lambda: decide_speedup(_OK, _any(0.5)), TypeError, "candidate_times"),
    ("paired lengths", lambda: decide_speedup(_OK, _OK[:2], paired=True), ValueError, "lengths"),
    ("paired flag", lambda: decide_speedup(_OK, _OK, paired=_any(1)), TypeError, "paired"),
    ("confidence 0", lambda: decide_speedup(_OK, _OK, confidence=0.0), ValueError, "confidence"),
    ("confidence 1", lambda: decide_speedup(_OK, _OK, confidence=1.0), ValueError, "confidence"),
    (
        "confidence nan",
        lambda: decide_speedup(_OK, _OK, confidence=math.nan),
        ValueError,
        "confidence",
    ),
    ("confidence bool", lambda: decide_speedup(_OK, _OK, confidence=True), TypeError, "confidence"),
    (
        "threshold -100",
        lambda: decide_speedup(_OK, _OK, -100.0),
        ValueError,
        "min_speedup_threshold_percent",
    ),
    (
        "threshold nan",
        lambda: decide_speedup(_OK, _OK, math.nan),
        ValueError,
        "min_speedup_threshold_percent",
    ),
    (
        "threshold str",
        lambda: decide_speedup(_OK, _OK, _any("1")),
        TypeError,
        "min_speedup_threshold_percent",
    ),
    (
        "look lengths",
        lambda: decide_at_look(_OK, _OK[:2], Gate(1.0), confidence=0.95, n_looks=5),
        ValueError,
        "lengths",
    ),
    (
        "looks 0",
        lambda: decide_at_look(_OK, _OK, Gate(1.0), confidence=0.95, n_looks=0),
        ValueError,
        "n_looks",
    ),
    (
        "looks float",
        lambda: decide_at_look(_OK, _OK, Gate(1.0), confidence=0.95, n_looks=_any(2.0)),
        TypeError,
        "n_looks",
    ),
    (
        "look alpha",
        lambda: decide_at_look(_OK, _OK, Gate(1.0), confidence=0.4, n_looks=1),
        ValueError,
        "n_looks",
    ),
    (
        "look gate",
        lambda: decide_at_look(_OK, _OK, _any(1.0), confidence=0.95, n_looks=5),
        TypeError,
        "gate",
    ),
    (
        "look confidence",
        lambda: decide_at_look(_OK, _OK, Gate(1.0), confidence=1.5, n_looks=5),
        ValueError,
        "confidence",
    ),
    (
        "look one timing",
        lambda: decide_at_look([0.01], [0.01], Gate(1.0), confidence=0.95, n_looks=5),
        ValueError,
        "baseline_times",
    ),
    ("batch 0", lambda: throughput_from_latencies(_OK, 0), ValueError, "batch_size"),
    ("batch bool", lambda: throughput_from_latencies(_OK, True), TypeError, "batch_size"),
    ("batch float", lambda: throughput_from_latencies(_OK, _any(8.0)), TypeError, "batch_size"),
    ("no latencies", lambda: throughput_from_latencies([], 8), ValueError, "latencies_s"),
    (
        "bad latency",
        lambda: throughput_from_latencies([0.01, -1.0], 8),
        ValueError,
        "latencies_s[1]",
    ),
    ("cv one value", lambda: coefficient_of_variation([1.0]), ValueError, "values"),
    ("cv nan", lambda: coefficient_of_variation([1.0, math.nan]), ValueError, "values[1]"),
    ("sr n 0", lambda: signed_rank_critical_count(0, 0.01), ValueError, "n"),
    ("sr alpha 0", lambda: signed_rank_critical_count(10, 0.0), ValueError, "alpha"),
    ("sr alpha 0.5", lambda: signed_rank_critical_count(10, 0.5), ValueError, "alpha"),
    ("sr alpha nan", lambda: signed_rank_critical_count(10, math.nan), ValueError, "alpha"),
    ("mw m 0", lambda: mann_whitney_critical_count(3, 0, 0.01), ValueError, "m"),
    ("mw n bool", lambda: mann_whitney_critical_count(True, 3, 0.01), TypeError, "n"),
    ("mw alpha", lambda: mann_whitney_critical_count(3, 3, 0.7), ValueError, "alpha"),
    ("pb alpha", lambda: paired_log_speedup_bounds(_OK, _OK, 0.6), ValueError, "alpha_one_sided"),
    ("pb lengths", lambda: paired_log_speedup_bounds(_OK, _OK[:2], 0.05), ValueError, "lengths"),
    (
        "ub alpha",
        lambda: unpaired_log_speedup_bounds(_OK, _OK, -0.1),
        ValueError,
        "alpha_one_sided",
    ),
    (
        "ub timing",
        lambda: unpaired_log_speedup_bounds(_OK, [0.0, 1.0], 0.05),
        ValueError,
        "candidate_times[0]",
    ),
    ("steady window", lambda: is_steady(_OK, 1, 0.1), ValueError, "window"),
    ("steady tolerance", lambda: is_steady(_OK, 2, -0.1), ValueError, "tolerance"),
    ("steady times", lambda: is_steady([-1.0, 1.0], 2, 0.1), ValueError, "times[0]"),
    ("shift segment", lambda: level_shift_index(_OK, min_segment=0), ValueError, "min_segment"),
    ("shift ratio", lambda: level_shift_index(_OK, ratio=0.0), ValueError, "ratio"),
    ("shift times", lambda: level_shift_index([1.0, math.inf]), ValueError, "times[1]"),
]


class TestBadInput:
    @pytest.mark.parametrize(
        ("call", "error", "name"),
        [case[1:] for case in _BAD_CASES],
        ids=[case[0] for case in _BAD_CASES],
    )
    def test_raises_naming_the_argument(
        self, call: Callable[[], object], error: type[Exception], name: str
    ) -> None:
        """Each bad input raises ValueError/TypeError whose message names the argument."""
        with pytest.raises(error, match=re.escape(name)):
            call()


# ---------------------------------------------------------------------------------------------
# Implicit selection (large samples): the same order statistics without building the pairs
# ---------------------------------------------------------------------------------------------

#: Values with many ties, with magnitudes far apart (rounding of the sums matters), and plain ones.
_selection_values = st.one_of(
    st.sampled_from([-1.0, 0.0, 0.5, 2.0, 0.1, 0.2, 0.3]),
    st.sampled_from([1e10, -1e10, 1e-10, 3.0, 1e16 + 2.0]),
    st.floats(-3.0, 3.0),
)


def _old_bounds(
    base: list[float], cand: list[float], alpha: float, *, paired: bool
) -> tuple[float, float, float]:
    """The pre-selection implementation: build and sort every Walsh average or difference."""
    if paired:
        diffs = [math.log(b) - math.log(c) for b, c in zip(base, cand, strict=True)]
        n = len(diffs)
        values = sorted((diffs[i] + diffs[j]) / 2.0 for i in range(n) for j in range(i, n))
        critical = signed_rank_critical_count(n, alpha)
    else:
        values = sorted(math.log(b) - math.log(c) for b in base for c in cand)
        critical = mann_whitney_critical_count(len(base), len(cand), alpha)
    size = len(values)
    median = values[size // 2] if size % 2 else (values[size // 2 - 1] + values[size // 2]) / 2.0
    if critical < 0:
        return median, -math.inf, math.inf
    return median, values[critical], values[size - 1 - critical]


def _same_fields(new: dict[str, object], old: dict[str, object]) -> dict[str, object]:
    """The fields of ``new`` that the old implementation also wrote (v2 only added fields)."""
    return {key: new[key] for key in old}


def _old_decision(
    base: list[float], cand: list[float], pct: float, confidence: float, *, paired: bool
) -> dict[str, object]:
    """The pre-selection decision, field by field (brute-force reference for small samples)."""
    alpha = (1.0 - confidence) / 2.0
    estimate, lower, upper = _old_bounds(base, cand, alpha, paired=paired)

    def exp(x: float) -> float:
        try:
            return math.exp(x)
        except OverflowError:
            return math.inf

    ci_low, ci_high = exp(lower), exp(upper)
    required = 1.0 + pct / 100.0
    verdict = (
        "faster" if ci_low > required else "not_faster" if ci_high < required else "inconclusive"
    )
    return {
        "verdict": verdict,
        "speedup": min(max(exp(estimate), ci_low), ci_high),
        "ci_low": ci_low,
        "ci_high": ci_high if math.isfinite(ci_high) else None,
        "n_baseline": len(base),
        "n_candidate": len(cand),
        "confidence": 1.0 - 2.0 * alpha,
        "required_speedup": required,
        "method": "wilcoxon_signed_rank_hl" if paired else "mann_whitney_hl",
        "cv_baseline": statistics.stdev(base) / statistics.fmean(base),
        "cv_candidate": statistics.stdev(cand) / statistics.fmean(cand),
    }


class TestImplicitSelection:
    @settings(max_examples=150, deadline=None)
    @given(
        rows=st.lists(_selection_values, min_size=1, max_size=12),
        cols=st.lists(_selection_values, min_size=1, max_size=12),
        triangle=st.booleans(),
        sample_size=st.integers(1, 12),
        enumerate_max=st.integers(0, 8),
    )
    def test_every_rank_equals_the_sorted_sums(
        self,
        rows: list[float],
        cols: list[float],
        triangle: bool,
        sample_size: int,
        enumerate_max: int,
    ) -> None:
        """select(k) is exactly the k-th of the sorted float sums, ties and rounding included.

        Tiny samples and enumeration limits force the narrowing rounds even for a few sums.
        """
        ordered_rows = np.sort(np.array(rows, dtype=np.float64))
        ordered_cols = ordered_rows if triangle else np.sort(np.array(cols, dtype=np.float64))
        n = len(ordered_rows)
        pairs = (
            [(i, j) for i in range(n) for j in range(i, n)]
            if triangle
            else [(i, j) for i in range(n) for j in range(len(ordered_cols))]
        )
        expected = sorted(float(ordered_rows[i]) + float(ordered_cols[j]) for i, j in pairs)
        sums = _PairSums(ordered_rows, ordered_cols, triangle=triangle)
        assert sums.size == len(expected)
        for rank, value in enumerate(expected):
            got = sums.select(rank, sample_size=sample_size, enumerate_max=enumerate_max)
            assert got == value
            if rank + 1 < len(expected):
                assert sums.following(value, rank) == expected[rank + 1]

    def test_rank_out_of_range(self) -> None:
        """Asking for a rank past the last sum is an error, not a wrong value."""
        sums = _PairSums(np.array([1.0, 2.0]), np.array([1.0, 2.0]), triangle=True)
        with pytest.raises(InvalidValueError, match="rank"):
            sums.select(3)

    @settings(max_examples=80, deadline=None)
    @given(
        data=st.data(),
        alpha=one_sided_alphas,
        paired=st.booleans(),
        quantum=st.sampled_from([0.0, 1e-3, 1e-2]),
    )
    def test_implicit_path_equals_the_materialised_one(
        self, data: st.DataObject, alpha: float, paired: bool, quantum: float
    ) -> None:
        """Forcing the implicit path (no pairs built) gives bit-identical estimates and bounds."""
        base = data.draw(latency_lists)
        size = len(base) if paired else data.draw(st.integers(2, 30))
        cand = data.draw(st.lists(latencies, min_size=size, max_size=size))
        if quantum:  # a coarse timer: many tied timings
            base = [max(quantum, round(b / quantum) * quantum) for b in base]
            cand = [max(quantum, round(c / quantum) * quantum) for c in cand]
        bounds = paired_log_speedup_bounds if paired else unpaired_log_speedup_bounds
        materialised = bounds(base, cand, alpha)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(hodges_lehmann, "_MATERIALISE_MAX_PAIRS", 0)
            implicit = bounds(base, cand, alpha)
        assert implicit == materialised

    @settings(max_examples=120)
    @given(
        data=st.data(),
        pct=st.floats(-50.0, 100.0),
        confidence=st.floats(0.5, 0.999),
        paired=st.booleans(),
        quantum=st.sampled_from([0.0, 1e-3]),
    )
    def test_small_sample_decisions_are_unchanged(
        self, data: st.DataObject, pct: float, confidence: float, paired: bool, quantum: float
    ) -> None:
        """Up to 30 timings per arm every field equals the old build-and-sort implementation."""
        base = data.draw(latency_lists)
        size = len(base) if paired else data.draw(st.integers(2, 30))
        cand = data.draw(st.lists(latencies, min_size=size, max_size=size))
        if quantum:
            base = [max(quantum, round(b / quantum) * quantum) for b in base]
            cand = [max(quantum, round(c / quantum) * quantum) for c in cand]
        got = decide_speedup(
            base, cand, pct, confidence=confidence, paired=paired, guard_dependence=False
        ).to_dict()
        old = _old_decision(base, cand, pct, confidence, paired=paired)
        assert _same_fields(got, old) == old

    @pytest.mark.parametrize(("n", "m"), [(300, 300), (447, 447), (150, 600)])
    def test_untied_samples_in_the_normal_range_are_unchanged(self, n: int, m: int) -> None:
        """Past the exact nulls but still built and sorted: no ties, so the old results stand."""
        rng = random.Random(n + m)
        base = [0.01 * rng.lognormvariate(0.0, 0.1) for _ in range(n)]
        cand = [0.01 / 1.01 * rng.lognormvariate(0.0, 0.1) for _ in range(m)]
        if n == m:
            old = _old_decision(base, cand, 1.0, 0.95, paired=True)
            new = decide_speedup(base, cand, guard_dependence=False).to_dict()
            assert _same_fields(new, old) == old
        old = _old_decision(base, cand, 1.0, 0.95, paired=False)
        assert _same_fields(decide_speedup(base, cand, paired=False).to_dict(), old) == old

    def test_large_sample_noise_matches_statistics_stdev(self) -> None:
        """Above the exact-stdev size the fsum noise figure agrees with statistics.stdev."""
        rng = random.Random(11)
        times = tuple(0.01 * rng.lognormvariate(0.0, 0.2) for _ in range(5000))
        exact = statistics.stdev(times) / statistics.fmean(times)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(timings, "_EXACT_STDEV_MAX", 10)
            assert coefficient_of_variation(times) == pytest.approx(exact, rel=1e-12)

    @given(values=st.lists(st.sampled_from([0.1, 0.2, 0.3, 1.5]), max_size=40))
    def test_tie_terms_agree(self, values: list[float]) -> None:
        """The vectorised tie term equals the pure one: sum(t**3 - t) over runs of equal values."""
        ordered = sorted(values)
        expected = sum(t**3 - t for t in (ordered.count(v) for v in set(ordered)))
        assert hodges_lehmann.tie_correction_sorted(np.array(ordered, dtype=np.float64)) == expected


# ---------------------------------------------------------------------------------------------
# Tie and continuity correction of the normal approximation
# ---------------------------------------------------------------------------------------------


class TestTieCorrection:
    def test_exact_range_ignores_ties(self) -> None:
        """The exact nulls assume no ties: the tie term does not move their counts."""
        assert signed_rank_critical_count(50, 0.01, tie_term=60) == signed_rank_critical_count(
            50, 0.01
        )
        assert mann_whitney_critical_count(20, 20, 0.025, tie_term=24) == 127

    @pytest.mark.parametrize("tie_term", [0, 6, 10**6, 10**8])
    def test_signed_rank_uses_the_midrank_variance(self, tie_term: int) -> None:
        """Above n = 200: c = floor(mean + z * sd - 1/2), var = n(n+1)(2n+1)/24 - tie_term/48."""
        n, alpha = 1000, 0.025
        variance = n * (n + 1) * (2 * n + 1) / 24 - tie_term / 48
        z = statistics.NormalDist().inv_cdf(alpha)
        expected = math.floor(n * (n + 1) / 4 + z * math.sqrt(variance) - 0.5)
        assert signed_rank_critical_count(n, alpha, tie_term=tie_term) == expected

    @pytest.mark.parametrize("tie_term", [0, 6, 10**6, 10**8])
    def test_mann_whitney_uses_the_midrank_variance(self, tie_term: int) -> None:
        """Above n*m = 10000: var = nm/12 ((N+1) - tie_term / (N (N-1))), continuity corrected."""
        n, m, alpha = 1000, 800, 0.025
        pooled = n + m
        variance = n * m / 12 * ((pooled + 1) - tie_term / (pooled * (pooled - 1)))
        z = statistics.NormalDist().inv_cdf(alpha)
        expected = math.floor(n * m / 2 + z * math.sqrt(variance) - 0.5)
        assert mann_whitney_critical_count(n, m, alpha, tie_term=tie_term) == expected

    def test_midrank_variance_identity(self) -> None:
        """The correction is the variance of the midrank statistics: sum(r^2)/4 for signed ranks."""
        values = [1.0, 1.0, 2.0, 3.0, 3.0, 3.0, 4.0, 5.0, 5.0, 5.0, 5.0]
        n = len(values)
        midranks = [
            (sum(1 for w in values if w < v) + 1 + sum(1 for w in values if w <= v)) / 2
            for v in values
        ]
        tie_term = hodges_lehmann.tie_correction_sorted(np.array(sorted(values), dtype=np.float64))
        assert sum(r * r for r in midranks) / 4 == pytest.approx(
            n * (n + 1) * (2 * n + 1) / 24 - tie_term / 48
        )

    @given(alpha=one_sided_alphas, tie_term=st.integers(0, 6_000_000))
    def test_ties_never_widen_the_interval(self, alpha: float, tie_term: int) -> None:
        """Less null variance gives a larger count, i.e. a narrower interval, never a wider one."""
        assert signed_rank_critical_count(500, alpha, tie_term=tie_term) >= (
            signed_rank_critical_count(500, alpha)
        )
        assert mann_whitney_critical_count(150, 150, alpha, tie_term=tie_term) >= (
            mann_whitney_critical_count(150, 150, alpha)
        )

    def test_all_tied_samples_still_have_a_positive_variance(self) -> None:
        """The largest tie terms (every value of each sample equal) are accepted."""
        assert signed_rank_critical_count(300, 0.01, tie_term=300**3 - 300) >= 0
        most = 200**3 - 200 + 100**3 - 100
        assert mann_whitney_critical_count(200, 100, 0.01, tie_term=most) >= 0


# ---------------------------------------------------------------------------------------------
# Accepted inputs: any 1-D sequence of real numbers
# ---------------------------------------------------------------------------------------------

_BASE = [0.0100, 0.0110, 0.0105, 0.0102, 0.0111, 0.0108, 0.0104, 0.0109]
_CAND = [0.0080, 0.0082, 0.0081, 0.0079, 0.0083, 0.0084, 0.0080, 0.0085]


class TestInputKinds:
    @pytest.mark.parametrize("paired", [True, False])
    @pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
    def test_numpy_float_arrays(self, dtype: Any, paired: bool) -> None:
        """A float array decides as the list of its values (as floats) does."""
        base, cand = np.array(_BASE, dtype=dtype), np.array(_CAND, dtype=dtype)
        expected = decide_speedup(base.tolist(), cand.tolist(), paired=paired)
        assert decide_speedup(base, cand, paired=paired) == expected
        assert decide_speedup(list(base), tuple(cand), paired=paired) == expected  # np scalars

    @pytest.mark.parametrize("paired", [True, False])
    def test_numpy_integer_arrays(self, paired: bool) -> None:
        """Integer timings (e.g. nanoseconds as int64) are real numbers too."""
        base = np.array([1000, 1100, 1050, 1020, 1110, 1080], dtype=np.int64)
        cand = np.array([800, 820, 810, 790, 830, 840], dtype=np.uint32)
        expected = decide_speedup(base.tolist(), cand.tolist(), paired=paired)
        assert decide_speedup(base, cand, paired=paired) == expected

    @pytest.mark.parametrize("paired", [True, False])
    def test_torch_tensors(self, paired: bool) -> None:
        """1-D tensors (and lists of 0-d tensors) decide as the equivalent lists."""
        import torch

        base = torch.tensor(_BASE, dtype=torch.float32)
        cand = torch.tensor(_CAND, dtype=torch.float64)
        expected = decide_speedup(base.tolist(), cand.tolist(), paired=paired)
        assert decide_speedup(base, cand, paired=paired) == expected
        assert decide_speedup(list(base), list(cand), paired=paired) == expected

    def test_other_iterables(self) -> None:
        """Tuples, generators and array.array are read like lists."""
        expected = decide_speedup(_BASE, _CAND)
        assert decide_speedup(tuple(_BASE), (c for c in _CAND)) == expected
        assert decide_speedup(array.array("d", _BASE), _CAND) == expected

    def test_the_other_timing_functions_accept_arrays(self) -> None:
        """Every function that takes timings reads arrays the same way."""
        values = np.array(_BASE, dtype=np.float32)
        assert coefficient_of_variation(values) == coefficient_of_variation(values.tolist())
        assert throughput_from_latencies(values, 8) == throughput_from_latencies(values.tolist(), 8)
        assert is_steady(values, 4, 0.5) == is_steady(values.tolist(), 4, 0.5)


_BAD_KINDS: list[tuple[str, Callable[[], object], type[Exception], str]] = [
    ("2-D array", lambda: decide_speedup(np.ones((2, 3)), _CAND), InvalidTypeError, "1-D"),
    ("column", lambda: decide_speedup(_BASE, np.ones((8, 1))), InvalidTypeError, "candidate_times"),
    ("numpy scalar", lambda: decide_speedup(np.float64(1.0), _CAND), InvalidTypeError, "baseline"),
    ("0-d array", lambda: decide_speedup(_BASE, np.array(0.5)), InvalidTypeError, "candidate"),
    (
        "bool array",
        lambda: decide_speedup(np.array([True, False]), _CAND),
        InvalidTypeError,
        "baseline_times[0]",
    ),
    (
        "numpy bool item",
        lambda: decide_speedup([0.01, np.True_], _CAND),
        InvalidTypeError,
        "baseline_times[1]",
    ),
    (
        "nan in float32",
        lambda: decide_speedup(_BASE, np.array([0.01, np.nan], dtype=np.float32)),
        InvalidValueError,
        "candidate_times[1]",
    ),
    (
        "nan numpy scalar",
        lambda: decide_speedup([np.float32(np.nan), 0.01], _CAND),
        InvalidValueError,
        "baseline_times[0]",
    ),
    (
        "inf array",
        lambda: decide_speedup(np.array([0.01, np.inf]), _CAND),
        InvalidValueError,
        "baseline_times[1]",
    ),
    (
        "zero int array",
        lambda: decide_speedup(np.array([3, 0], dtype=np.int64), _CAND),
        InvalidValueError,
        "baseline_times[1]",
    ),
    (
        "complex array",
        lambda: decide_speedup(np.array([1 + 1j, 2]), _CAND),
        InvalidTypeError,
        "baseline_times[0]",
    ),
    (
        "str array",
        lambda: decide_speedup(np.array(["1", "2"]), _CAND),
        InvalidTypeError,
        "baseline_times[0]",
    ),
    (
        "huge int",
        lambda: decide_speedup([1, 10**400], _CAND),
        InvalidValueError,
        "baseline_times[1]",
    ),
    (
        "nested list",
        lambda: decide_speedup([[0.01], [0.02]], _CAND),
        InvalidTypeError,
        "baseline_times[0]",
    ),
    (
        "tie term negative",
        lambda: signed_rank_critical_count(300, 0.01, tie_term=-1),
        InvalidValueError,
        "tie_term",
    ),
    (
        "tie term bool",
        lambda: mann_whitney_critical_count(300, 300, 0.01, tie_term=_any(True)),
        InvalidTypeError,
        "tie_term",
    ),
    (
        "tie term too big",
        lambda: signed_rank_critical_count(3, 0.01, tie_term=25),
        InvalidValueError,
        "tie_term",
    ),
]


class TestBadKinds:
    @pytest.mark.parametrize(
        ("call", "error", "name"),
        [case[1:] for case in _BAD_KINDS],
        ids=[case[0] for case in _BAD_KINDS],
    )
    def test_refused_with_the_library_errors(
        self, call: Callable[[], object], error: type[Exception], name: str
    ) -> None:
        """Wrong kinds are InvalidTypeError, bad values InvalidValueError, naming the argument."""
        with pytest.raises(error, match=re.escape(name)):
            call()

    def test_torch_refusals(self) -> None:
        """A 2-D tensor, a bool tensor and a NaN tensor are refused like the numpy ones."""
        import torch

        with pytest.raises(InvalidTypeError, match="1-D"):
            decide_speedup(torch.ones(2, 4), _CAND)
        with pytest.raises(InvalidTypeError, match=re.escape("baseline_times[0]")):
            decide_speedup(torch.tensor([True, False]), _CAND)
        with pytest.raises(InvalidValueError, match=re.escape("candidate_times[1]")):
            decide_speedup(_BASE, torch.tensor([0.01, float("nan")]))
        with pytest.raises(InvalidTypeError, match=re.escape("candidate_times[0]")):
            decide_speedup(_BASE, [torch.tensor([0.01]), 0.02])
