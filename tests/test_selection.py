"""Sequential elimination among contenders timed in rounds (aitune_fp.core.selection)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aitune_fp.core.selection import (
    Contender,
    SelectionRule,
    SelectionState,
    choose_on_budget,
    record_failures,
    select_at_look,
    start_selection,
)
from aitune_fp.errors import InvalidStateError, InvalidTypeError, InvalidValueError

RULE = SelectionRule()


def rounds(scales: dict[str, float], n: int, seed: int, sd: float = 0.05) -> dict[str, list[float]]:
    """``n`` rounds of lognormal latencies around each contender's scale, with a shared factor."""
    rng = random.Random(seed)
    out: dict[str, list[float]] = {name: [] for name in scales}
    for _ in range(n):
        common = rng.lognormvariate(0.0, 0.02)
        for name in sorted(scales):
            out[name].append(scales[name] * common * rng.lognormvariate(0.0, sd))
    return out


def run(
    contenders: Sequence[Contender],
    scales: dict[str, float],
    seed: int,
    rule: SelectionRule = RULE,
    sd: float = 0.05,
) -> list[SelectionState]:
    """Every look's state of one selection (each look sees the rounds up to it)."""
    data = rounds(scales, rule.looks[-1], seed, sd)
    states: list[SelectionState] = []
    state = None
    for look, n in enumerate(rule.looks, 1):
        names = state.remaining if state is not None else [c.name for c in contenders]
        state = select_at_look(
            contenders, {m: data[m][:n] for m in names}, look, rule, previous=state
        )
        states.append(state)
        if state.done:
            break
    return states


def test_a_clearly_faster_one_wins_at_the_first_look() -> None:
    cs = [Contender("eager-ish", 0, 1.0), Contender("compile", 1, 30.0)]
    states = run(cs, {"eager-ish": 1.25, "compile": 1.0}, seed=3, sd=0.01)
    last = states[-1]
    assert (last.outcome, last.chosen, last.gap_bound, last.rounds) == (
        "one_left",
        "compile",
        1.0,
        10,
    )
    (loss,) = last.eliminated
    assert (loss.name, loss.lost_to, loss.at_rounds) == ("eager-ish", "compile", 10)
    assert 1.0 < loss.low <= loss.ratio <= loss.high and abs(loss.ratio - 1.25) < 0.03
    assert "compile is the fastest" in last.reason and "eager-ish lost to compile" in last.reason


def test_a_tie_goes_to_the_lower_build_time_and_says_so() -> None:
    cs = [Contender("aot-inductor", 0, 40.1), Contender("compile", 1, 12.0)]
    last = run(cs, {"aot-inductor": 1.0, "compile": 1.0}, seed=1, sd=0.002)[-1]
    assert last.outcome == "settled" and last.settled and last.chosen == "compile"
    assert "aot-inductor and compile are within 2 % of each other" in last.reason
    assert "compile kept: lower build time (12.0 s vs 40.1 s)" in last.reason
    assert last.gap_bound is not None and last.gap_bound <= 1.02
    assert all(p.within(0.02) for p in last.pairs)


def test_without_build_times_the_tie_goes_to_the_lower_order() -> None:
    cs = [Contender("b", 1), Contender("a", 2), Contender("c", 0)]
    last = run(cs, {"a": 1.0, "b": 1.0, "c": 1.0}, seed=2, sd=0.002)[-1]
    assert (last.outcome, last.chosen) == ("settled", "c")
    assert "first in order (build times unknown)" in last.reason
    equal = [Contender("x", 1, 5.0), Contender("y", 0, 5.0)]
    assert run(equal, {"x": 1.0, "y": 1.0}, seed=2, sd=0.002)[-1].chosen == "y"


def test_unresolved_at_the_last_look_is_chosen_with_its_bound() -> None:
    rule = SelectionRule(looks=(10, 20))
    cs = [Contender("a", 0, 50.0), Contender("b", 1, 10.0)]
    states = run(cs, {"a": 1.0, "b": 1.01}, seed=5, rule=rule, sd=0.08)
    last = states[-1]
    assert last.outcome == "looks_spent" and not last.settled and last.look == 2
    assert last.chosen in ("a", "b") and last.gap_bound is not None and last.gap_bound > 1.0
    assert last.reason.startswith("the looks ran out after 20 rounds with a and b not told apart")
    assert "widest: a vs b" in last.reason


def test_choose_on_budget_after_a_look_and_before_any() -> None:
    cs = [Contender("a", 0, 50.0), Contender("b", 1, 10.0), Contender("c", 2, 1.0)]
    first = run(cs, {"a": 1.0, "b": 1.0, "c": 1.0}, seed=4, sd=0.08)[0]
    assert first.outcome == "open" and first.chosen is None and not first.done
    chosen = choose_on_budget(first, RULE)
    assert chosen.outcome == "budget" and chosen.chosen in first.remaining
    assert chosen.reason.startswith("the time budget ran out after 10 rounds")
    assert chosen.gap_bound == max(
        b.high for b in (chosen.bound(o, chosen.chosen) for o in chosen.remaining) if b is not None
    )
    assert choose_on_budget(chosen, RULE) is chosen  # a finished state is returned as it is
    blind = choose_on_budget(start_selection(cs, RULE), RULE)
    assert (blind.chosen, blind.gap_bound) == ("c", math.inf)  # lowest build time
    assert "nothing is known" in blind.reason


def test_failures_leave_the_running_and_never_raise() -> None:
    cs = [Contender("a", 0), Contender("b", 1), Contender("c", 2)]
    state = record_failures(start_selection(cs, RULE), {"b": "RuntimeError: boom"})
    assert state.remaining == ("a", "c") and not state.done
    assert state.failed[0].error == "RuntimeError: boom" and state.failed[0].at_rounds == 0
    state = record_failures(state, {"a": "OutOfMemoryError: cuda"})
    assert (state.outcome, state.chosen, state.gap_bound) == ("unopposed", "c", math.inf)
    assert "only contender that ran" in state.reason
    assert "b failed (RuntimeError: boom)" in state.reason
    with pytest.raises(InvalidStateError):
        record_failures(state, {"c": "x"})
    every = record_failures(start_selection(cs, RULE), {"a": "E: 1", "b": "E: 2", "c": "E: 3"})
    assert (every.outcome, every.chosen, every.done) == ("none_ran", None, True)
    assert every.reason.startswith("every contender failed")
    with pytest.raises(InvalidValueError, match="'z'"):
        record_failures(start_selection(cs, RULE), {"z": "E"})


def test_a_failure_between_looks_is_kept_by_later_looks() -> None:
    cs = [Contender("a", 0), Contender("b", 1), Contender("c", 2)]
    data = rounds({"a": 1.0, "b": 1.0, "c": 1.3}, 20, seed=0, sd=0.002)
    state = select_at_look(cs, {n: data[n][:10] for n in "abc"}, 1, RULE)
    state = record_failures(state, {"a": "ValueError: bad"})
    state = select_at_look(cs, {n: data[n] for n in "bc"}, 2, RULE, previous=state)
    assert "a" not in state.remaining and state.failed[0].name == "a"
    assert state.chosen == "b" and {e.name for e in state.eliminated} == {"c"}


def test_misuse_is_refused() -> None:
    cs = [Contender("a", 0), Contender("b", 1)]
    data = rounds({"a": 1.0, "b": 1.3}, 10, seed=0, sd=0.002)
    done = select_at_look(cs, data, 1, RULE)
    assert done.done
    with pytest.raises(InvalidStateError, match="over"):
        select_at_look(cs, data, 2, RULE, previous=done)
    open_state = select_at_look(cs, rounds({"a": 1.0, "b": 1.0}, 10, 0, 0.1), 1, RULE)
    with pytest.raises(InvalidValueError, match="look"):
        select_at_look(cs, data, 1, RULE, previous=open_state)
    with pytest.raises(InvalidValueError, match="look"):
        select_at_look(cs, data, 7, RULE)
    with pytest.raises(InvalidValueError, match="'b'"):
        select_at_look(cs, {"a": data["a"]}, 1, RULE)
    with pytest.raises(InvalidValueError, match=r"latencies\['a'\]\[2\]"):
        select_at_look(cs, {"a": [1.0, 1.0, -1.0], "b": [1.0, 1.0, 1.0]}, 1, RULE)
    with pytest.raises(InvalidValueError, match="equal round counts"):
        select_at_look(cs, {"a": [1.0, 1.0, 1.0], "b": [1.0, 1.0]}, 1, RULE)
    with pytest.raises(InvalidValueError, match="unique"):
        start_selection([Contender("a", 0), Contender("a", 1)], RULE)
    with pytest.raises(InvalidValueError, match="at least 2"):
        start_selection([Contender("a", 0)], RULE)
    with pytest.raises(InvalidTypeError):
        start_selection(["a", "b"], RULE)  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: SelectionRule(delta=0.0), InvalidValueError),
        (lambda: SelectionRule(confidence=1.0), InvalidValueError),
        (lambda: SelectionRule(looks=(10, 10)), InvalidValueError),
        (lambda: SelectionRule(looks=(1, 10)), InvalidValueError),
        (lambda: SelectionRule(looks=()), InvalidValueError),
        (lambda: SelectionRule(guard_serial_correlation=1), InvalidTypeError),  # type: ignore[arg-type]
        (lambda: Contender("", 0), InvalidValueError),
        (lambda: Contender(3, 0), InvalidTypeError),  # type: ignore[arg-type]
        (lambda: Contender("a", -1), InvalidValueError),
        (lambda: Contender("a", 0, -1.0), InvalidValueError),
        (lambda: Contender("a", 0, math.nan), InvalidValueError),
    ],
)
def test_values_check_themselves(make: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        make()  # type: ignore[operator]


def test_the_error_is_spent_over_the_pairs_of_the_fastest_and_the_looks() -> None:
    rule = SelectionRule(confidence=0.9)
    for k in (2, 3, 5):
        spent = sum(rule.pair_alpha(k, look) for look in range(1, len(rule.looks) + 1))
        assert math.isclose(spent * (k - 1), 0.1)
        assert rule.pair_alpha(k, 1) < rule.pair_alpha(k, len(rule.looks))  # late spending


def test_probability_of_correct_selection_in_a_small_simulation() -> None:
    """k = 3, the others 3 % slower, 5 % noise: the best is chosen every time here."""
    for seed in range(25):
        rng = random.Random(seed)
        best = rng.choice("abc")
        scales = {n: 1.0 if n == best else 1.03 for n in "abc"}
        cs = [Contender(n, i, rng.uniform(1, 50)) for i, n in enumerate("abc")]
        assert run(cs, scales, seed)[-1].chosen == best


scenario = st.fixed_dictionaries(
    {
        "k": st.integers(2, 4),
        "gaps": st.lists(st.sampled_from([1.0, 1.0, 1.01, 1.03, 1.1]), min_size=4, max_size=4),
        "builds": st.lists(
            st.one_of(st.none(), st.sampled_from([1.0, 5.0, 9.0])), min_size=4, max_size=4
        ),
        "seed": st.integers(0, 10_000),
        "sd": st.sampled_from([0.002, 0.03, 0.1]),
        "looks": st.sampled_from([(10, 20, 40), (10, 20), (12,)]),
    }
)


@settings(max_examples=60, deadline=None)
@given(case=scenario, order=st.randoms(use_true_random=False))
def test_invariants(case: dict, order: random.Random) -> None:  # type: ignore[type-arg]
    k = case["k"]
    names = [f"n{i}" for i in range(k)]
    cs = [Contender(n, i, case["builds"][i]) for i, n in enumerate(names)]
    scales = {n: case["gaps"][i] for i, n in enumerate(names)}
    rule = SelectionRule(looks=case["looks"])
    states = run(cs, scales, case["seed"], rule, case["sd"])
    # the order of the input sequence changes nothing (same states, field by field)
    shuffled = cs[:]
    order.shuffle(shuffled)
    assert run(shuffled, scales, case["seed"], rule, case["sd"]) == states
    before: set[str] = set(names)
    for state in states:
        out = {e.name for e in state.eliminated}
        new = [e for e in state.eliminated if e.at_rounds == state.rounds]
        assert set(state.remaining) | out == set(names) and not set(state.remaining) & out
        for e in new:
            assert e.lost_to in before and e.lost_to not in out  # never loses to a loser
            assert e.low > 1.0 and e.name in before
        if state.settled:
            assert all(p.within(rule.delta) for p in state.pairs)
            assert len(state.remaining) >= 2
        if state.chosen is not None:
            assert state.chosen in state.remaining and state.chosen not in out
            assert state.gap_bound is not None and state.gap_bound >= 1.0
        if state.outcome == "settled":
            left = [c for c in cs if c.name in state.remaining]
            key = [(c.build_s is None, c.build_s or 0.0, c.order) for c in left]
            assert state.chosen == left[key.index(min(key))].name
        before = set(state.remaining)
    assert states[-1].done
