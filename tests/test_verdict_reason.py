"""The one-line reason (issue 50): a pure sentence from a result that agrees with its verdict.

``fmt_verdict_reason`` names the figure that decided and the gate it was held against; two
figures it compares never print the same unless equal, so the sentence can be checked by reading
its numbers back.
"""

from __future__ import annotations

import re
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.core.messages import fmt_verdict_reason
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.core.verdict import rule_verdict
from tests.factories import fake_result

_HOLDS_BACK = ["machine_changed_at_pair_40", "machine_busy", "carryover", "throughput_disagrees"]


@st.composite
def statistical_results(draw: st.DrawFn) -> PerformanceValidationResult:
    """A statistical result whose verdict follows the rule (or is held back to inconclusive)."""
    need = draw(st.floats(0.5, 2.0))
    estimate = draw(st.floats(0.05, 20.0))
    low = estimate * draw(st.floats(0.0, 1.0))
    high = None if draw(st.integers(0, 4)) == 0 else estimate * draw(st.floats(1.0, 3.0))
    upper = float("inf") if high is None else high
    futility = draw(st.none() | st.floats(0.0, 1.0))
    fh = None if futility is None or high is None else estimate + (high - estimate) * futility
    margin = draw(st.sampled_from([0.0, 1.0, 2.5]))
    verdict = rule_verdict(
        low,
        upper,
        need,
        speedup=estimate,
        futility_high=upper if fh is None else fh,
        margin=margin / 100,
    )
    flags: tuple[str, ...] = ()
    if verdict != "inconclusive" and draw(st.booleans()):
        verdict, flags = "inconclusive", (draw(st.sampled_from(_HOLDS_BACK)),)
    elif verdict == "inconclusive" and draw(st.booleans()):
        flags = ("budget_spent",)
    return fake_result(
        "B()",
        estimate=estimate,
        ci_low=low,
        ci_high=high,
        futility_high=fh,
        futility_margin_percent=margin,
        required_speedup=need,
        verdict=verdict,
        flags=flags,
        n_baseline=draw(st.integers(2, 400)),
        n_candidate=2,
        latencies_from=draw(st.none() | st.integers(0, 400)),
    )


@st.composite
def point_results(draw: st.DrawFn) -> PerformanceValidationResult:
    need = draw(st.floats(0.5, 2.0))
    speedup = draw(st.floats(0.01, 20.0))
    passed = speedup >= need
    return fake_result(
        "P()",
        speedup=speedup,
        estimate=None,
        ci_low=None,
        ci_high=None,
        confidence=None,
        decision="point",
        required_speedup=need,
        verdict="faster" if passed else "not_faster",
    )


def _figures(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"(\d+\.\d+)x", text)]


@given(statistical_results() | point_results())
def test_the_one_line_reason_agrees_with_the_verdict(r: PerformanceValidationResult) -> None:
    """faster: a bound that clears; not_faster: one below; inconclusive: straddles or held back."""
    text = fmt_verdict_reason(r)
    assert "\n" not in text and 0 < len(text) <= 100
    figures = _figures(text)
    if not r.sequential:
        assert text.startswith("speedup ")
        assert ("reaches" in text) == r.passed and ("below" in text) != r.passed
        assert (figures[0] >= figures[1]) if r.passed else (figures[0] <= figures[1])
    elif r.verdict == "faster":
        assert text.startswith("lower bound ") and " clears " in text
        assert "held back" not in text and figures[0] >= figures[1]
    elif r.verdict == "not_faster":
        assert re.match(r"(upper|futility) bound ", text) and " below " in text
        assert "clears" not in text and "held back" not in text
        assert figures[0] <= figures[1]
    else:
        assert "held back" in text or " straddles " in text
        if text.startswith("lower bound"):
            assert "but held back" in text and figures[0] >= figures[1]
        if text.startswith("upper bound"):
            assert "but held back" in text and figures[0] <= figures[1]
        if " straddles " in text:
            found = re.search(r"\[(\S+), (\S+)\] straddles (\S+)x", text)
            assert found is not None
            low, high, need = found.groups()
            assert float(low) <= float(need) and (high == "∞" or float(need) <= float(high))
            pairs = (r.latencies_from or 0) + (r.n_baseline or 0)
            assert f"after {pairs} pairs" in text


def test_no_estimate_says_the_budget_ran_out() -> None:
    r = fake_result(
        estimate=None,
        ci_low=None,
        ci_high=None,
        verdict="inconclusive",
        n_baseline=7,
        flags=("budget_spent",),
    )
    assert (
        fmt_verdict_reason(r) == "no estimate: the budget ran out before the first look (7 pairs)"
    )


def test_no_estimate_from_a_machine_too_busy_says_so_and_not_the_budget() -> None:
    r = fake_result(
        estimate=None,
        ci_low=None,
        ci_high=None,
        verdict="inconclusive",
        n_baseline=2,
        flags=("retimed_41", "machine_too_busy"),
    )
    assert fmt_verdict_reason(r) == (
        "no estimate: the machine was too busy before the first look (2 pairs, 41 timed again)"
    )
    one = attrs.evolve(r, decided=attrs.evolve(r.decided, n_baseline=1))
    assert "(1 pair, 41 timed again)" in fmt_verdict_reason(one)  # a count agrees with its noun


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"verdict": "faster", "estimate": 1.05, "ci_low": 1.03, "ci_high": 1.08},
            "lower bound 1.030x clears 1.010x",
        ),
        ({"ci_high": 0.99}, "upper bound 0.990x below 1.010x"),
        (
            {"verdict": "inconclusive", "ci_low": 0.94, "ci_high": 1.07, "n_baseline": 320},
            "interval [0.940, 1.070] straddles 1.010x after 320 pairs",
        ),
        (
            {"ci_high": 1.05, "futility_high": 1.014, "futility_margin_percent": 1.0},
            "futility bound 1.014x below 1.020x (gate + 1 pt margin)",
        ),
        (
            {"verdict": "inconclusive", "ci_high": 0.998, "flags": ("machine_slowed",)},
            "upper bound 0.998x below 1.010x but held back: the machine moved",
        ),
        (
            {
                "verdict": "inconclusive",
                "ci_low": 1.02,
                "ci_high": 1.08,
                "flags": ("machine_moved_ratio_steady_at_pair_40", "carryover"),
            },
            "lower bound 1.020x clears 1.010x but held back: carry-over from eager's call",
        ),
        (
            {"verdict": "faster", "estimate": 1.05, "ci_low": 1.0100004, "ci_high": 1.08},
            "lower bound 1.0100004x clears 1.0100000x",
        ),
    ],
)
def test_the_issues_sentences(fields: dict[str, Any], expected: str) -> None:
    assert fmt_verdict_reason(fake_result(**fields)) == expected
