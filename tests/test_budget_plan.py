"""Budgets stated up front from eager's measured call time (issue 35): how many pairs the
per-candidate budget allows, whether the first look fits, and the flag that changes it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aitune_fp.core.config import BudgetPlan, plan_budget
from aitune_fp.errors import InvalidValueError

LOOKS = (10, 20, 40, 80, 160, 320)


def test_a_fast_model_gets_every_look() -> None:
    plan = plan_budget(0.002, max_seconds=60.0, looks=LOOKS)
    assert plan.pairs == 320 and plan.looks_reached == 6 and plan.first_look_fits
    assert plan.text().startswith("eager 2 ms a call: the 60 s budget per candidate reaches all")


def test_a_slow_model_is_told_what_the_budget_allows_and_which_flag_sets_it() -> None:
    plan = plan_budget(2.1, max_seconds=60.0, looks=LOOKS)
    assert plan.pairs == 12 and plan.looks_reached == 1 and plan.first_look_fits
    text = plan.text()
    assert "eager 2.1 s a call" in text and "about 12 pairs (1 of 6 looks)" in text
    assert "the next look (20 pairs) needs about 92 s: --max-seconds" in text


def test_a_budget_the_first_look_cannot_fit_says_so() -> None:
    plan = plan_budget(10.0, max_seconds=60.0, looks=LOOKS)
    assert not plan.first_look_fits and plan.looks_reached == 0
    text = plan.text()
    assert "too short for the first look: its 10 pairs take about 240 s" in text
    assert "--max-seconds 240" in text  # 10 pairs and 2 of warm-up, 20 s a pair


@given(st.floats(1e-5, 1.0), st.integers(2, 129))
def test_blocks_cost_their_calls(call_s: float, calls: int) -> None:
    """A pair of blocks of ``calls`` calls costs what a pair of calls ``calls`` times as long does."""
    blocks = plan_budget(call_s, max_seconds=60.0, looks=LOOKS, calls=calls)
    longer = plan_budget(call_s * calls, max_seconds=60.0, looks=LOOKS)
    assert (blocks.pairs, blocks.looks_reached) == (longer.pairs, longer.looks_reached)
    assert blocks.seconds_for(320) == pytest.approx(longer.seconds_for(320))
    assert f"a call in blocks of {calls} calls: the 60 s budget" in blocks.text()


def test_bad_values_are_named() -> None:
    with pytest.raises(InvalidValueError, match="eager_call_s"):
        plan_budget(0.0, max_seconds=60.0, looks=LOOKS)


@given(
    st.floats(1e-5, 100.0),
    st.floats(1.0, 3600.0),
    st.lists(st.integers(2, 400), min_size=1, max_size=6, unique=True).map(sorted),
)
def test_the_plan_is_consistent(call_s: float, budget: float, looks: list[int]) -> None:
    plan = plan_budget(call_s, max_seconds=budget, looks=tuple(looks))
    assert isinstance(plan, BudgetPlan)
    assert 0 <= plan.looks_reached <= len(looks)
    assert plan.pairs <= looks[-1]
    assert plan.first_look_fits == (plan.looks_reached >= 1)
    if plan.looks_reached:
        assert plan.pairs >= looks[plan.looks_reached - 1]
    assert plan.seconds_for(looks[0]) <= plan.seconds_for(looks[-1])


@pytest.mark.parametrize(
    ("decision", "quantity", "stated"),
    [
        ("statistical", "typical", True),
        ("statistical", "throughput", True),
        ("point", "typical", False),
    ],
)
def test_a_tune_states_its_plan_up_front(
    decision: str, quantity: str, stated: bool, tmp_path: object
) -> None:
    import torch

    from aitune_fp.adapters.validation import validation_of, with_performance_validation
    from aitune_fp.backends.eager import TorchEagerBackend
    from aitune_fp.core.config import ProfilingConfig
    from aitune_fp.inputs import GraphSpec, Sample
    from aitune_fp.pipeline.strategies import OneBackendStrategy

    strategy = with_performance_validation(
        OneBackendStrategy(TorchEagerBackend()),
        profiling_config=ProfilingConfig(
            decision=decision,
            looks=(10, 20),
            max_seconds=2.0,
            warmup_max_calls=8,
            quantity=quantity,
        ),
        isolation="in_process",
    )
    module = torch.nn.Linear(4, 4).eval()
    strategy.tune(
        module, "m", GraphSpec(max_batch_size=2), [Sample((torch.ones(1, 4),))], "cpu", tmp_path
    )
    report = validation_of(strategy).last_report
    assert report is not None
    if stated:
        assert report.budget_plan is not None
        assert report.budget_plan.startswith("eager ")
        assert "the 2 s budget per candidate reaches all 2 looks" in report.budget_plan
        assert ("a call in blocks of" in report.budget_plan) == (quantity == "throughput")
    else:
        assert report.budget_plan is None
