"""Specification of decision engine v2 (issue 14): futility stop, honest inconclusive, guards.

Properties on synthetic paired timings with heavy tails, serial correlation and drift; the error
rates are checked by simulation with fixed seeds and binomial slack, never by timing anything.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.dependence import (
    ar1_coefficient,
    autocorrelation_flag_level,
    inflation_factor,
    lag1_rank_autocorrelation,
    ratio_shift_index,
    shift_p_value,
)
from aitune_fp.core.messages import fmt_level, ruled_out, ruled_out_statement
from aitune_fp.core.sequential import decide_at_look, decide_speedup
from aitune_fp.core.speedup import Gate
from aitune_fp.core.timings import is_settled, is_steady
from aitune_fp.errors import InvalidValueError
from aitune_fp.inputs import Sample
from aitune_fp.measure.rules import measure_speedup
from aitune_fp.testing import FakeClock
from tests.strategies import latencies

LOOKS = (10, 20, 40, 80, 160, 320)
V2 = {
    "futility_margin_percent": 1.0,
    "futility_error": 0.20,
    "guard_serial_correlation": True,
    "guard_shift": True,
}


def _pairs(
    seed: int, n: int, ratio: float, *, sd: float = 0.06, phi: float = 0.0, drift: float = 0.0
) -> tuple[list[float], list[float]]:
    """Paired timings whose log ratio is ln(ratio) + heavy-tailed (t3) AR(1) noise.

    Both arms share a common machine-level drift (``drift`` per pair, on the log scale) that the
    pairing must cancel.
    """
    rng = np.random.default_rng(seed)
    t = rng.standard_t(3, size=n) / math.sqrt(3.0)
    noise = np.empty(n)
    noise[0] = t[0]
    for i in range(1, n):
        noise[i] = phi * noise[i - 1] + math.sqrt(1.0 - phi * phi) * t[i]
    common = drift * np.arange(n) + rng.normal(0.0, 0.03, size=n)
    base = 0.01 * np.exp(common)
    cand = base * np.exp(-(math.log(ratio) + sd * noise))
    return base.tolist(), cand.tolist()


def _sequential(
    base: Sequence[float], cand: Sequence[float], looks: Sequence[int] = LOOKS, **options: object
) -> tuple[str, int]:
    """Run the group-sequential loop over ``looks``: (final verdict, pairs used)."""
    verdict = "inconclusive"
    for look in looks:
        decision = decide_at_look(
            base[:look],
            cand[:look],
            Gate(1.0),
            confidence=0.95,
            n_looks=len(looks),
            **options,  # type: ignore[arg-type]
        )
        verdict = decision.verdict
        if verdict != "inconclusive":
            return verdict, look
    return verdict, looks[-1]


def _upper_slack(rate: float, runs: int) -> float:
    """``rate`` plus three binomial standard errors: the most a correct rule may show by chance."""
    return rate + 3.0 * math.sqrt(rate * (1.0 - rate) / runs)


# ---------------------------------------------------------------------------------------------
# The dependence checks
# ---------------------------------------------------------------------------------------------


class TestDependenceChecks:
    @given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=0, max_size=60))
    def test_autocorrelation_is_a_correlation(self, values: list[float]) -> None:
        """Lag-1 rank autocorrelation lies in [-1, 1] and is 0.0 where it is undefined."""
        rho = lag1_rank_autocorrelation(values)
        assert -1.0 <= rho <= 1.0
        if len(set(values)) <= 1:
            assert rho == 0.0

    @given(st.lists(latencies, min_size=3, max_size=40, unique=True))
    def test_autocorrelation_depends_on_ranks_only(self, values: list[float]) -> None:
        """A monotone transform (log) leaves it unchanged: outliers cannot drive it."""
        logs = [math.log(v) for v in values]
        assume(len(set(logs)) == len(logs))  # log may merge neighbouring floats
        assert lag1_rank_autocorrelation(logs) == pytest.approx(lag1_rank_autocorrelation(values))

    def test_trend_is_strongly_autocorrelated_and_alternation_is_negative(self) -> None:
        """A slow wander reads near +1; a zig-zag reads negative."""
        assert lag1_rank_autocorrelation(list(range(50))) > 0.9
        assert lag1_rank_autocorrelation([(-1) ** i * (1 + i / 100) for i in range(50)]) < -0.5

    def test_flag_detects_ar1_correlation_but_rarely_independent_ratios(self) -> None:
        """phi = 0.2 at 160 pairs is flagged in most runs; independent ratios in about 5 %."""
        flagged = {0.0: 0, 0.2: 0}
        for phi in flagged:
            for seed in range(200):
                base, cand = _pairs(seed, 160, 1.0, phi=phi)
                logs = [math.log(b / c) for b, c in zip(base, cand, strict=True)]
                flagged[phi] += lag1_rank_autocorrelation(logs) > autocorrelation_flag_level(160)
        assert flagged[0.0] / 200 <= _upper_slack(0.05, 200)
        assert flagged[0.2] / 200 >= 0.6

    @given(st.floats(-5.0, 5.0, allow_nan=False))
    def test_inflation_never_narrows_and_grows_with_phi(self, phi: float) -> None:
        """The factor is >= 1, 1 for phi <= 0, and monotone in phi (capped at 0.9)."""
        factor = inflation_factor(phi)
        assert factor >= 1.0
        if phi <= 0:
            assert factor == 1.0
        assert inflation_factor(phi + 0.05) >= factor
        assert factor <= inflation_factor(0.9)

    @given(st.floats(-1.0, 1.0), st.integers(1, 500))
    def test_bias_corrected_coefficient_stays_a_correlation(self, r: float, n: int) -> None:
        """The corrected AR(1) coefficient is in [-0.99, 0.99] and, for n > 6 and r >= -1/3
        (where the bias is upward), never below r."""
        phi = ar1_coefficient(r, n)
        assert -0.99 <= phi <= 0.99
        if n > 6 and -1 / 3 <= r < 0.9:
            assert phi >= min(r, 0.99) - 1e-12

    def test_inflation_refuses_nan(self) -> None:
        """NaN is not a correlation."""
        with pytest.raises(ValueError, match="NaN"):
            inflation_factor(math.nan)

    @given(st.lists(st.floats(-1.0, 1.0, allow_nan=False), min_size=0, max_size=80))
    def test_shift_index_leaves_both_segments_long_enough(self, values: list[float]) -> None:
        """A reported shift splits into two segments of at least min_segment values each."""
        k = ratio_shift_index(values, min_segment=10)
        if k is not None:
            assert 10 <= k <= len(values) - 10
        assert 0.0 < shift_p_value(values) <= 1.0

    def test_a_three_percent_ratio_shift_is_found_near_where_it_happened(self) -> None:
        """1.03x for 80 pairs then 1.00x at 6 % noise: found in most runs, close to pair 80."""
        found = []
        for seed in range(60):
            base, cand = _pairs(seed, 160, 1.0, sd=0.02)
            cand = [c / 1.03 if i < 80 else c for i, c in enumerate(cand)]
            logs = [math.log(b / c) for b, c in zip(base, cand, strict=True)]
            found.append(ratio_shift_index(logs))
        hits = [k for k in found if k is not None]
        assert len(hits) >= 45
        assert sorted(hits)[len(hits) // 2] == pytest.approx(80, abs=10)

    def test_no_shift_is_rarely_reported(self) -> None:
        """Independent ratios at one level: a shift in at most ~1 % of runs (alpha 0.01)."""
        false = 0
        for seed in range(200):
            base, cand = _pairs(seed, 160, 1.0)
            logs = [math.log(b / c) for b, c in zip(base, cand, strict=True)]
            false += ratio_shift_index(logs) is not None
        assert false / 200 <= _upper_slack(0.01, 200)

    @pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1, math.nan])
    def test_shift_alpha_must_be_a_probability(self, alpha: float) -> None:
        """The test's level is checked and named."""
        with pytest.raises(InvalidValueError, match="alpha"):
            ratio_shift_index([1.0] * 30, alpha=alpha)


# ---------------------------------------------------------------------------------------------
# The futility stop and the verdict rule
# ---------------------------------------------------------------------------------------------


class TestFutilityRule:
    @settings(max_examples=60, deadline=None)
    @given(
        seed=st.integers(0, 10_000),
        n=st.integers(10, 120),
        ratio=st.floats(0.9, 1.1),
        margin=st.floats(0.0, 5.0),
    )
    def test_faster_is_untouched_by_the_futility_options(
        self, seed: int, n: int, ratio: float, margin: float
    ) -> None:
        """The accept side is the same rule at the same level whatever the futility options."""
        base, cand = _pairs(seed, n, ratio)
        v1 = decide_at_look(base, cand, Gate(1.0), confidence=0.95, n_looks=6)
        v2 = decide_at_look(
            base,
            cand,
            Gate(1.0),
            confidence=0.95,
            n_looks=6,
            futility_margin_percent=margin,
            futility_error=0.2,
        )
        assert (v1.ci_low, v1.ci_high, v1.speedup) == (v2.ci_low, v2.ci_high, v2.speedup)
        assert (v1.verdict == "faster") == (v2.verdict == "faster")
        if v1.verdict == "not_faster":  # the futility stop only adds not_faster verdicts
            assert v2.verdict == "not_faster"

    @settings(max_examples=60, deadline=None)
    @given(seed=st.integers(0, 10_000), n=st.integers(10, 120), ratio=st.floats(0.95, 1.05))
    def test_a_wider_margin_never_undoes_a_not_faster(
        self, seed: int, n: int, ratio: float
    ) -> None:
        """Monotone in the margin: not_faster at margin m stays not_faster at any m' > m."""
        base, cand = _pairs(seed, n, ratio)
        verdicts = [
            decide_at_look(
                base,
                cand,
                Gate(1.0),
                confidence=0.95,
                n_looks=6,
                futility_margin_percent=m,
                futility_error=0.2,
            ).verdict
            for m in (0.0, 0.5, 1.0, 2.0, 4.0)
        ]
        first = verdicts.index("not_faster") if "not_faster" in verdicts else len(verdicts)
        assert all(v == "not_faster" for v in verdicts[first:])

    @settings(max_examples=60, deadline=None)
    @given(seed=st.integers(0, 10_000), n=st.integers(10, 120), ratio=st.floats(0.95, 1.05))
    def test_futility_verdict_is_reproduced_by_its_fields(
        self, seed: int, n: int, ratio: float
    ) -> None:
        """A futility not_faster has its estimate below required and its upper bound in margin."""
        base, cand = _pairs(seed, n, ratio)
        d = decide_at_look(base, cand, Gate(1.0), confidence=0.95, n_looks=6, **V2)  # type: ignore[arg-type]
        if d.verdict == "not_faster" and d.ci_high >= d.required_speedup:
            assert d.speedup < d.required_speedup
            assert d.upper_for_futility < d.required_speedup + 0.01
        assert d.guarantee == 0.95
        assert d.futility_high is None or d.futility_high <= d.ci_high

    def test_one_look_decision_takes_a_margin_too(self) -> None:
        """decide_speedup's margin turns an identical candidate's inconclusive into not_faster."""
        base, cand = _pairs(0, 60, 1.0)
        plain = decide_speedup(base, cand, paired=True)
        margin = decide_speedup(base, cand, paired=True, futility_margin_percent=2.0)
        assert plain.verdict == "inconclusive"
        assert margin.verdict == "not_faster"

    @pytest.mark.parametrize("bad", [0.0, 1.0, math.nan])
    def test_futility_error_is_checked(self, bad: float) -> None:
        """futility_error must be a probability; its name is in the error."""
        base, cand = _pairs(1, 20, 1.0)
        with pytest.raises(InvalidValueError, match="futility_error"):
            decide_at_look(base, cand, Gate(1.0), confidence=0.95, n_looks=6, futility_error=bad)

    def test_negative_margin_is_refused(self) -> None:
        """A negative margin would accept the futility stop above the threshold's far side."""
        base, cand = _pairs(1, 20, 1.0)
        with pytest.raises(InvalidValueError, match="futility_margin_percent"):
            decide_speedup(base, cand, paired=True, futility_margin_percent=-1.0)


# ---------------------------------------------------------------------------------------------
# Error control across looks, by simulation
# ---------------------------------------------------------------------------------------------


def _rates(true: float, runs: int, **kwargs: float) -> tuple[float, float, float, float]:
    """(accept, not_faster, inconclusive, median pairs) of the v2 loop over ``runs`` seeds."""
    outcomes = [
        _sequential(*_pairs(1000 + seed, LOOKS[-1], true, **kwargs), **V2) for seed in range(runs)
    ]
    verdicts = [v for v, _ in outcomes]
    pairs = sorted(p for _, p in outcomes)
    return (
        verdicts.count("faster") / runs,
        verdicts.count("not_faster") / runs,
        verdicts.count("inconclusive") / runs,
        pairs[runs // 2],
    )


@pytest.mark.slow
class TestErrorControl:
    def test_identical_candidates_settle_early_and_are_not_accepted(self) -> None:
        """A/A: never accepted here, settled not_faster in a median of <= 60 pairs, <= 10 % open."""
        accept, _, open_, median = _rates(1.0, 150)
        assert accept <= _upper_slack(0.02, 150)
        assert open_ <= 0.10
        assert median <= 60

    def test_false_accepts_at_the_threshold_stay_within_the_guarantee(self) -> None:
        """At exactly the required 1.01x, accepts stay <= 5 % over all looks (heavy tails)."""
        accept, *_ = _rates(1.01, 200)
        assert accept <= _upper_slack(0.05, 200)

    def test_a_common_drift_is_cancelled_by_pairing(self) -> None:
        """Both arms slowing by 20 % over the run does not make an identical candidate faster."""
        accept, *_ = _rates(1.01, 150, drift=0.2 / 320)
        assert accept <= _upper_slack(0.05, 150)

    def test_serial_correlation_guard_keeps_the_threshold_error_down(self) -> None:
        """AR(1) phi = 0.3 at the threshold: the guard keeps accepts near the 5 % guarantee."""
        runs = 200
        guarded = unguarded = 0
        for seed in range(runs):
            base, cand = _pairs(2000 + seed, LOOKS[-1], 1.01, phi=0.3)
            guarded += _sequential(base, cand, **V2)[0] == "faster"
            off = {**V2, "guard_serial_correlation": False}
            unguarded += _sequential(base, cand, **off)[0] == "faster"
        assert guarded <= unguarded
        assert guarded / runs <= _upper_slack(0.05, runs)

    def test_clear_candidates_are_decided_within_twenty_pairs(self) -> None:
        """<= 0.9x and >= 1.5x: settled the right way by the second look."""
        for true, want in ((0.9, "not_faster"), (1.5, "faster")):
            outcomes = [
                _sequential(*_pairs(3000 + seed, 40, true), looks=LOOKS, **V2) for seed in range(60)
            ]
            assert all(v == want and p <= 20 for v, p in outcomes), (true, outcomes)

    def test_three_percent_faster_is_accepted_nearly_always(self) -> None:
        """1.03x at 6 % noise: accepted in >= 90 % of runs."""
        accept, *_ = _rates(1.03, 100)
        assert accept >= 0.90


# ---------------------------------------------------------------------------------------------
# The honest inconclusive
# ---------------------------------------------------------------------------------------------


class TestRuledOut:
    @given(
        low=st.floats(0.01, 5.0),
        width=st.floats(0.0, 5.0),
        level=st.floats(0.5, 0.999, exclude_min=True),
    )
    def test_statement_names_both_bounds_and_the_level(
        self, low: float, width: float, level: float
    ) -> None:
        """Both finite bounds appear with three decimals, and the level as a percentage."""
        high = low + width
        text = ruled_out_statement(low, high, level)
        assert f"faster than {high:.3f}x" in text
        assert f"slower than {low:.3f}x" in text
        assert f"ruled out at {fmt_level(level)}" in text
        assert "of eager" in text

    def test_unbounded_sides_rule_nothing_out(self) -> None:
        """0 and inf bounds are not claims."""
        assert ruled_out_statement(0.0, math.inf, 0.95) == "too few timings to rule anything out"
        assert "slower than" not in ruled_out_statement(0.0, 1.2, 0.95)

    def test_example_from_the_issue(self) -> None:
        """[0.97, 1.04], each side at 95 %: within -3 %/+4 % of eager, a two-sided claim that
        holds at 90 % (issue 22)."""
        text = ruled_out_statement(0.97, 1.04, 0.95)
        assert text.startswith("faster than 1.040x and slower than 0.970x are ruled out at 95%")
        assert text.endswith("within -3%/+4% of eager at 90% (both sides together)")

    def test_the_two_sided_claim_has_its_own_level(self) -> None:
        """Each side at L: the two together at 2L - 1, printed with its precision; a one-sided
        statement has no two-sided claim."""
        text = ruled_out_statement(0.97, 1.04, 0.975)
        assert "ruled out at 97.5% (one-sided each)" in text
        assert text.endswith("of eager at 95% (both sides together)")
        assert ruled_out_statement(0.97, 1.04, 0.9966).endswith("at 99.32% (both sides together)")
        assert "together" not in ruled_out_statement(0.0, 1.2, 0.95)

    def test_one_look_prints_its_level_with_its_precision(self) -> None:
        """decide_speedup at 95 % two-sided: each side at 97.5 %, never rounded to "98%"."""
        rng = random.Random(4)
        base = [0.01 * rng.lognormvariate(0, 0.05) for _ in range(40)]
        cand = [b * rng.lognormvariate(0, 0.05) for b in base]
        text = ruled_out(decide_speedup(base, cand, paired=True))
        assert "98%" not in text
        assert "ruled out at 97.5%" in text
        assert text.endswith("of eager at 95% (both sides together)")

    def test_a_decision_states_its_overall_guarantee(self) -> None:
        """Sequential: the guarantee is the configured confidence; one look: its one-sided level."""
        rng = random.Random(3)
        base = [0.01 * rng.lognormvariate(0, 0.05) for _ in range(40)]
        cand = [b * rng.lognormvariate(0, 0.05) for b in base]
        look = decide_at_look(base, cand, Gate(1.0), confidence=0.95, n_looks=6)
        assert look.overall == 0.95
        assert look.confidence == pytest.approx(1 - 2 * 0.05 / 6)
        assert "at 95%" in ruled_out(look)
        once = decide_speedup(base, cand, paired=True, confidence=0.9)
        assert once.overall == pytest.approx(0.95)
        assert ruled_out(once).endswith("at 90% (both sides together)")


# ---------------------------------------------------------------------------------------------
# The measuring loop uses it (fake clock)
# ---------------------------------------------------------------------------------------------


def _noisy(mean: float, seed: int, spread: float = 0.05) -> Callable[[int], float]:
    rng = random.Random(seed)
    return lambda i: mean * (1.0 + rng.uniform(-spread, spread))


def _measure(eager: Callable[[int], float], cand: Callable[[int], float], **changes: Any) -> Any:
    clock = FakeClock()
    config = ProfilingConfig(warmup_window=3, warmup_max_calls=10, **changes)
    return measure_speedup(clock.arm(eager), clock.arm(cand), Sample(), 1, config, timer=clock)


class TestMeasuringLoop:
    def test_identical_candidate_is_settled_by_the_futility_stop(self) -> None:
        """An identical candidate ends not_faster early, saying the margin settled it."""
        m = _measure(_noisy(0.002, 1), _noisy(0.002, 2))
        assert m.result.verdict == "not_faster"
        assert m.result.n_baseline <= 80
        assert "futility margin" in m.result.reason
        assert m.result.guarantee == 0.95

    def test_without_margin_the_same_candidate_runs_on(self) -> None:
        """futility_margin_percent=0 is the symmetric rule: more pairs, maybe no verdict."""
        with_margin = _measure(_noisy(0.002, 1), _noisy(0.002, 2))
        without = _measure(_noisy(0.002, 1), _noisy(0.002, 2), futility_margin_percent=0.0)
        assert without.result.n_baseline >= with_margin.result.n_baseline
        if without.result.verdict == "inconclusive":
            assert "ruled out at 95%" in without.result.reason

    def test_inconclusive_says_what_was_ruled_out(self) -> None:
        """At the threshold with the looks spent, the reason states the interval's content."""
        m = _measure(
            _noisy(0.00202, 3, 0.2),
            _noisy(0.002, 4, 0.2),
            looks=(10, 20, 40),
            futility_margin_percent=0.0,
        )
        assert m.result.verdict == "inconclusive"
        assert "are ruled out at 95% (one-sided each)" in m.result.reason
        assert "of eager" in m.result.reason

    def test_a_ratio_shift_is_flagged_and_the_latest_regime_decides(self) -> None:
        """Identical for ~40 calls, then 1.25x faster: the estimate and throughputs are the new
        regime's, the verdict agrees with the whole run, the flag names the pair."""
        fast = _noisy(0.002 / 1.25, 6, 0.2)
        slow = _noisy(0.002, 5, 0.2)
        m = _measure(
            _noisy(0.002, 7, 0.2),
            lambda i: slow(i) if i < 40 else fast(i),
            futility_margin_percent=0.0,
            looks=(10, 20, 40, 80),
            quantity="typical",  # the shift is placed by call
        )
        shifts = [f for f in m.result.flags if f.startswith("ratio_shift_at_pair_")]
        assert m.result.verdict == "faster"
        assert len(shifts) == 1
        k = int(shifts[0].rsplit("_", 1)[-1])
        assert 20 <= k <= 45
        assert m.result.n_baseline == 80
        assert m.result.speedup == pytest.approx(1.25, rel=0.05)
        assert m.result.estimate == pytest.approx(1.25, rel=0.08)
        assert f"the ratio shifted at pair {k}" in m.result.reason


class TestShiftRemedy:
    @settings(max_examples=40, deadline=None)
    @given(seed=st.integers(0, 10_000), phi=st.sampled_from([0.0, 0.5, 0.8]))
    @example(seed=2195, phi=0.5)  # the whole run's throughput disagrees, the later pairs' not
    def test_a_shift_never_makes_accepting_easier(self, seed: int, phi: float) -> None:
        """With the shift guard, the interval contains the one without it: never a new faster."""
        base, cand = _pairs(seed, 160, 1.01, phi=phi)
        off = decide_at_look(base, cand, Gate(1.0), confidence=0.95, n_looks=6)
        on = decide_at_look(base, cand, Gate(1.0), confidence=0.95, n_looks=6, guard_shift=True)
        assert on.ci_low <= off.ci_low and on.ci_high >= off.ci_high
        if on.verdict == "faster":
            assert off.verdict == "faster"
        assert (on.shift_index is None) == ("ratio_shift" not in on.flags)

    def test_paired_check_of_a_shifted_recording_is_not_faster(self) -> None:
        """1.3x for 40 pairs then 1.0x: without the guard the mixture is 'faster'; with it, the
        later pairs veto the acceptance."""
        rng = random.Random(4)
        base = [0.01 * rng.uniform(0.98, 1.02) for _ in range(80)]
        cand = [b / (1.3 if i < 40 else 1.0) * rng.uniform(0.98, 1.02) for i, b in enumerate(base)]
        assert decide_speedup(base, cand, guard_dependence=False).verdict == "faster"
        guarded = decide_speedup(base, cand)  # the guard is on by default
        assert guarded.verdict != "faster"
        assert guarded.shift_index is not None and 30 <= guarded.shift_index <= 50


class TestSerialCorrelationRemedy:
    def test_correlated_ratios_get_a_wider_interval_around_the_same_estimate(self) -> None:
        """Strong AR(1) correlation is flagged and the interval widened; the estimate stays."""
        base, cand = _pairs(11, 160, 1.02, phi=0.8)
        off = decide_at_look(base, cand, Gate(1.0), confidence=0.95, n_looks=6)
        on = decide_at_look(
            base, cand, Gate(1.0), confidence=0.95, n_looks=6, guard_serial_correlation=True
        )
        assert "serial_correlation" in on.flags and not off.flags
        assert on.autocorrelation is not None and on.autocorrelation > 0.5
        assert on.speedup == pytest.approx(off.speedup)
        assert on.ci_low < off.ci_low and on.ci_high > off.ci_high

    def test_independent_ratios_are_left_alone(self) -> None:
        """Without correlation the guard changes nothing (same bounds, no flag)."""
        base, cand = _pairs(12, 160, 1.02)
        off = decide_at_look(base, cand, Gate(1.0), confidence=0.95, n_looks=6)
        on = decide_at_look(
            base, cand, Gate(1.0), confidence=0.95, n_looks=6, guard_serial_correlation=True
        )
        if not on.flags:
            assert (on.ci_low, on.ci_high) == (off.ci_low, off.ci_high)


# ---------------------------------------------------------------------------------------------
# Warm-up steadiness scaled to the machine's noise
# ---------------------------------------------------------------------------------------------


def _stationary(seed: int, n: int, sd: float) -> list[float]:
    rng = np.random.default_rng(seed)
    return (0.01 * np.exp(sd * rng.standard_t(3, size=n) / math.sqrt(3.0))).tolist()


class TestSettled:
    def test_stationary_noisy_calls_settle_where_the_fixed_rule_does_not(self) -> None:
        """6 % heavy-tailed noise, no trend: the fixed 10 % spread rule rarely passes on 5 calls
        within 20, the noise-scaled rule nearly always does."""
        runs = 200
        fixed = scaled = 0
        for seed in range(runs):
            times = _stationary(seed, 19, 0.06)
            fixed += any(is_steady(times[:k], 5, 0.10) for k in range(5, 20))
            scaled += any(is_settled(times[:k], 5, 0.10) for k in range(5, 20))
        assert scaled / runs >= 0.95
        assert scaled > fixed

    def test_a_cold_start_is_not_settled_until_it_has_decayed(self) -> None:
        """Calls 3x slower decaying over ~10 calls: not settled while the decay is under way."""
        rng = random.Random(5)
        times = [0.01 * (1 + 2 * math.exp(-i / 4)) * rng.uniform(0.99, 1.01) for i in range(40)]
        assert not any(is_settled(times[:k], 5, 0.10) for k in range(5, 12))
        assert is_settled(times[:40], 5, 0.10)

    @given(st.lists(latencies, min_size=0, max_size=30), st.integers(2, 8))
    def test_steady_implies_settled(self, times: list[float], window: int) -> None:
        """The new rule only ever adds 'settled' verdicts to the old one."""
        if is_steady(times, window, 0.1):
            assert is_settled(times, window, 0.1)

    def test_z_must_be_positive(self) -> None:
        """z is checked and named."""
        with pytest.raises(InvalidValueError, match="z"):
            is_settled([0.01] * 10, 5, 0.1, z=0.0)


@given(ratio=st.floats(0.01, 100.0))
def test_a_bound_in_percent_never_reads_minus_or_plus_zero(ratio: float) -> None:
    """Each side of "within -a%/+b%": its sign is the change's, and zero only as "±0%"."""
    from aitune_fp.core.messages import _signed_percent

    text = _signed_percent(ratio)
    assert text not in ("-0%", "+0%", "-0.0%", "+0.0%", "-0.00%", "+0.00%")
    if text != "±0%":
        assert (text[0] == "+") == (ratio > 1.0)
        assert abs(float(text[:-1]) - (ratio - 1.0) * 100.0) <= 0.5
    else:
        assert abs(ratio - 1.0) < 0.00005


class TestDefaults:
    def test_decide_speedup_defaults_are_check_paired_and_the_tunes(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """``check --paired`` with its default flags calls decide_speedup with exactly its
        defaults; the gate, confidence and dependence guards are the tune's defaults too."""
        import inspect

        import aitune_fp.core.sequential as sequential
        from aitune_fp.cli import build_parser, main
        from aitune_fp.pipeline.values import ValidationOptions

        calls: list[inspect.BoundArguments] = []
        real = sequential.decide_speedup
        signature = inspect.signature(real)

        def spy(*args: Any, **kwargs: Any) -> Any:
            calls.append(signature.bind(*args, **kwargs))
            return real(*args, **kwargs)

        monkeypatch.setattr(sequential, "decide_speedup", spy)
        b, c = tmp_path / "b.txt", tmp_path / "c.txt"
        b.write_text("\n".join(str(0.01 + i * 1e-4) for i in range(12)))
        c.write_text("\n".join(str(0.005 + i * 1e-4) for i in range(12)))
        main(["check", "--baseline-times", str(b), "--candidate-times", str(c), "--paired"])
        (call,) = calls
        defaults = {
            name: p.default
            for name, p in signature.parameters.items()
            if p.default is not inspect.Parameter.empty
        }
        given = {k: v for k, v in call.arguments.items() if k in defaults}
        assert given == {k: defaults[k] for k in given}  # nothing check passes differs
        config, tune_args = ProfilingConfig(), build_parser().parse_args(["tune"])
        assert defaults["confidence"] == config.confidence
        assert defaults["guard_dependence"] is config.guard_serial_correlation is config.guard_shift
        assert defaults["min_speedup_threshold_percent"] == tune_args.threshold
        assert defaults["min_speedup_threshold_percent"] == (
            ValidationOptions().min_speedup_threshold_percent
        )
        assert defaults["paired"] is True  # the tune times its arms interleaved, in pairs
