"""Order-statistic confidence bounds for a latency quantile (aitune_fp.core.quantiles)."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aitune_fp.core.quantiles import (
    EXACT_MAX_N,
    QuantileBound,
    min_samples_for_upper_bound,
    quantile_upper_bound,
)
from aitune_fp.errors import InvalidTypeError, InvalidValueError


def binomial_cdf(n: int, q: Fraction, k: int) -> Fraction:
    """``P(B <= k)``, ``B ~ binomial(n, q)``, straight from the definition."""
    return sum(
        (math.comb(n, j) * q**j * (1 - q) ** (n - j) for j in range(k + 1)), start=Fraction(0)
    )


def test_known_ranks_and_sample_sizes() -> None:
    values = list(range(1, 101))  # the order statistics are their own ranks
    upper = quantile_upper_bound(values, 0.9, 0.95)
    assert (upper.high, upper.high_rank, upper.estimate) == (96, 96, 90)
    assert upper.coverage >= 0.95
    assert min_samples_for_upper_bound(0.9) == 29
    assert min_samples_for_upper_bound(0.95) == 59
    assert min_samples_for_upper_bound(0.99) == 299


def test_too_few_values_give_an_infinite_bound_never_a_wrong_one() -> None:
    need = min_samples_for_upper_bound(0.9, 0.95)
    short = quantile_upper_bound([1.0] * (need - 1), 0.9, 0.95)
    assert short.high == math.inf and short.high_rank is None and not short.bounded
    assert not short.within(1e9)
    enough = quantile_upper_bound(list(range(need)), 0.9, 0.95)
    assert enough.bounded and enough.high == need - 1  # the largest value


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 120),
    q=st.sampled_from([0.05, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99]),
    confidence=st.sampled_from([0.6, 0.8, 0.9, 0.95, 0.99]),
)
def test_ranks_are_exact_and_tight(n: int, q: float, confidence: float) -> None:
    """The bound errs with at most ``1 - confidence``; one rank closer would err with more."""
    values = [float(i) for i in range(1, n + 1)]
    qf, level = Fraction(repr(q)), Fraction(repr(confidence))
    bound = quantile_upper_bound(values, q, confidence)
    u = bound.high_rank
    if u is None:
        assert binomial_cdf(n, qf, n - 1) < level  # not even the largest value holds
    else:
        assert binomial_cdf(n, qf, u - 1) >= level
        assert u == 1 or binomial_cdf(n, qf, u - 2) < level
    assert bound.coverage >= confidence - 1e-12
    assert bound.bounded == (n >= min_samples_for_upper_bound(q, confidence))


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=80),
    q=st.floats(0.01, 0.99),
    seed=st.integers(0, 100),
)
def test_order_and_permutation(values: list[float], q: float, seed: int) -> None:
    bound = quantile_upper_bound(values, q)
    assert bound.estimate <= bound.high
    assert bound.estimate in values
    shuffled = values[:]
    random.Random(seed).shuffle(shuffled)
    assert quantile_upper_bound(shuffled, q) == bound


def test_coverage_by_simulation_continuous_and_tied() -> None:
    """At 95 % the true p90 of an exponential (and of a tied, discrete law) is covered."""
    true_p90 = math.log(10.0)
    upper_held = 0
    runs = 1500
    for seed in range(runs):
        rng = random.Random(seed)
        values = [rng.expovariate(1.0) for _ in range(60)]
        upper_held += quantile_upper_bound(values, 0.9, 0.95).high >= true_p90
    assert upper_held / runs >= 0.94
    # discrete latencies (ties): P(1 ms) = 0.5, P(2 ms) = 0.45, P(10 ms) = 0.05; p90 = 2 ms
    held = 0
    for seed in range(runs):
        rng = random.Random(10_000 + seed)
        values = rng.choices([1.0, 2.0, 10.0], weights=[50, 45, 5], k=40)
        held += quantile_upper_bound(values, 0.9, 0.95).high >= 2.0
    assert held / runs >= 0.95


def test_large_samples_use_floats_on_the_safe_side() -> None:
    n = EXACT_MAX_N + 500
    values = [float(i) for i in range(1, n + 1)]
    bound = quantile_upper_bound(values, 0.99, 0.95)
    assert bound.high_rank is not None and 0.99 * n < bound.high_rank
    assert 0.95 <= bound.coverage < 0.97


@pytest.mark.parametrize(
    ("call", "error", "names"),
    [
        (lambda: quantile_upper_bound([1.0, float("nan")], 0.9), InvalidValueError, "values[1]"),
        (lambda: quantile_upper_bound([1.0, math.inf], 0.9), InvalidValueError, "values[1]"),
        (lambda: quantile_upper_bound([], 0.9), InvalidValueError, "values"),
        (lambda: quantile_upper_bound("123", 0.9), InvalidTypeError, "values"),  # type: ignore[arg-type]
        (lambda: quantile_upper_bound([1.0, True], 0.9), InvalidTypeError, "values[1]"),
        (lambda: quantile_upper_bound([1.0], 1.0), InvalidValueError, "q"),
        (lambda: quantile_upper_bound([1.0], 0.0), InvalidValueError, "q"),
        (lambda: quantile_upper_bound([1.0], 0.9, 0.4), InvalidValueError, "confidence"),
        (lambda: min_samples_for_upper_bound(0.9, 1.0), InvalidValueError, "confidence"),
        (lambda: min_samples_for_upper_bound("0.9", 0.95), InvalidTypeError, "q"),  # type: ignore[arg-type]
    ],
)
def test_bad_inputs_name_the_value(call: object, error: type[Exception], names: str) -> None:
    with pytest.raises(error, match=names.replace("[", r"\[").replace("]", r"\]")):
        call()  # type: ignore[operator]


def test_the_value_checks_itself() -> None:
    with pytest.raises(InvalidValueError, match="estimate <= high"):
        QuantileBound(
            q=0.9, confidence=0.95, n=3, estimate=5.0, high=4.0, high_rank=3, coverage=0.96
        )
