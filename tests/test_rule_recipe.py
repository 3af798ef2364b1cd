"""The decision-rule recipe, counted: a toy rule is its module plus one ``register`` line.

The toy rule below stands for a new module under ``aitune_fp/measure/``; the fixture's
``register`` call is the one registry line. Nothing else is edited, and the config, the session,
the events, the CLI's ``--decision`` and sweep files all take it.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest

from aitune_fp.adapters.validation import with_performance_validation
from aitune_fp.cli import build_parser
from aitune_fp.core.config import ProfilingConfig
from aitune_fp.core.results import Decision
from aitune_fp.core.speedup import Gate
from aitune_fp.errors import InvalidTypeError, InvalidValueError
from aitune_fp.inputs import Sample
from aitune_fp.measure.measurement import Comparison, Measurement, OnLook, RunContext, assemble
from aitune_fp.measure.rules import (
    DecisionRule,
    decision_modes,
    measure_baseline_point,
    register,
    rule_for,
    unregister,
)
from aitune_fp.pipeline.strategies import FirstWinsStrategy
from aitune_fp.profiling.calls import time_calls
from aitune_fp.sweep.spec import parse_sweep
from aitune_fp.testing import FakeClock, capture_events
from tests.validation_helpers import CLOCK, Pruned, make_case

TOY = "median-of-9"


# ---- the toy rule's module ---------------------------------------------------------------------


def _compare_median(c: Comparison, on_look: OnLook | None = None) -> Measurement:
    """Nine calls of each arm; faster when the candidate's median call clears the gate."""
    eager = time_calls(c.eager, c.batch, 9, timer=c.timer)
    cand = time_calls(c.candidate, c.batch, 9, timer=c.timer)
    ratio = statistics.median(eager) / statistics.median(cand)
    decided = Decision(
        rule=TOY,
        verdict="faster" if c.gate.passes(ratio) else "not_faster",
        n_baseline=len(eager),
        n_candidate=len(cand),
        batch_size=c.size,
        required_speedup=c.gate.required_speedup,
        reason=f"median ratio {ratio:.3f}x over 9 calls each",
    )
    result = assemble(c.description, eager, cand, c.size, decided, RunContext(), c.mismatch)
    return Measurement(result=result, decision=None, wall_s=0.0)


TOY_RULE = DecisionRule(TOY, measure_baseline_point, _compare_median, True, False)


# ---- the one registry line ---------------------------------------------------------------------


@pytest.fixture
def toy() -> Iterator[DecisionRule]:
    """The toy rule registered for one test, then taken away."""
    register(TOY_RULE)
    try:
        yield TOY_RULE
    finally:
        unregister(TOY)


# ---- and everything else takes it --------------------------------------------------------------


def test_unregistered_the_name_is_refused_and_named() -> None:
    """Before registration the name is not a decision mode: the shell's edge names it."""
    assert TOY not in decision_modes()
    with pytest.raises(InvalidValueError, match=TOY):
        rule_for(ProfilingConfig(decision=TOY))
    with pytest.raises(InvalidValueError, match=TOY):
        with_performance_validation(
            FirstWinsStrategy([]), profiling_config=ProfilingConfig(decision=TOY)
        )


def test_the_config_and_the_rule_lookup_take_it(toy: DecisionRule) -> None:
    """``decision=<name>`` is valid and picks the rule; the built-ins come first and stay."""
    assert decision_modes()[:2] == ("statistical", "point") and TOY in decision_modes()
    assert rule_for(ProfilingConfig(decision=TOY)) is toy


def test_a_tune_decides_by_it_and_labels_its_results(toy: DecisionRule, tmp_path: Path) -> None:
    """A validated tune runs the toy rule: its result, event and report carry the rule's name."""
    module, spec, data = make_case()
    strategy = with_performance_validation(
        FirstWinsStrategy([Pruned()]), profiling_config=ProfilingConfig(decision=TOY), timer=CLOCK
    )
    with capture_events() as captured:
        strategy.tune(module, "m", spec, data, "cpu", tmp_path)
    (result,) = strategy.perf_validation_results
    assert result.decision == TOY and result.reason.startswith("median ratio")
    assert result.max_abs_error is not None  # the closeness the session found, kept by the rule
    measured = [e for e in captured if e["event"].endswith("candidate_measured")]
    assert [e["result"]["decided"]["rule"] for e in measured] == [TOY]
    assert strategy.last_report.decision == TOY


def test_the_cli_and_sweep_files_take_it(toy: DecisionRule) -> None:
    """``--decision <name>`` parses, and a sweep file may name it."""
    args = build_parser().parse_args(["tune", "--decision", TOY])
    assert args.decision == TOY
    spec = parse_sweep(
        {
            "name": "t",
            "device": "cpu",
            "decision": TOY,
            "models": [{"name": "mlp", "model": "embedded:mlp"}],
            "backends": ["eager"],
        }
    )
    assert spec.profiling.decision == TOY


def test_after_unregister_it_is_gone_and_the_built_ins_stay(toy: DecisionRule) -> None:
    """Taking a rule away refuses its name again; a built-in cannot be taken away."""
    unregister(TOY)
    assert TOY not in decision_modes()
    unregister("statistical")
    assert rule_for(ProfilingConfig()).name == "statistical"


@pytest.mark.parametrize("bad", ["two words", "", "a/b"])
def test_a_bad_rule_name_is_refused(bad: str) -> None:
    """A rule's name must be one word: the error names it."""
    with pytest.raises(InvalidValueError, match="decision rule's name"):
        register(DecisionRule(bad, measure_baseline_point, _compare_median, True, False))


def test_register_takes_only_a_rule() -> None:
    """Anything else is refused by type."""
    with pytest.raises(InvalidTypeError, match="DecisionRule"):
        register("statistical")  # type: ignore[arg-type]


def test_the_toy_rule_on_its_own_measures_what_it_says() -> None:
    """Called directly, the toy rule's verdict follows the medians (2x: faster, 1x: not)."""
    clock = FakeClock()
    config = ProfilingConfig()
    for cand_s, passed in ((0.001, True), (0.002, False)):
        comparison = Comparison(
            eager=clock.arm(0.002),
            candidate=clock.arm(cand_s),
            batch=Sample(),
            size=4,
            config=config,
            gate=Gate(1.0),
            timer=clock,
        )
        assert _compare_median(comparison).result.passed is passed
