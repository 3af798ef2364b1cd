"""Choosing among candidates that passed the gate: head-to-head, min-latency, latency budgets.

Spec: among passing candidates, the strategies that choose time them against each other on the
gate's inputs and keep one within the indifference zone of the fastest; the choice, each
elimination and each latency check reach the report, the events and ingest alike.
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from aitune_fp import NoValidBackendError, ProfilingConfig, validation_of
from aitune_fp.core.quantiles import LatencyCheck, quantile_upper_bound
from aitune_fp.errors import InvalidValueError
from aitune_fp.events.candidates import SelectionDecided
from aitune_fp.events.ingest import ingest
from aitune_fp.pipeline.strategies import (
    LatencyBudgetStrategy,
    MaxThroughputStrategy,
    MinLatencyStrategy,
)
from aitune_fp.pipeline.strategy_registry import make_strategy
from aitune_fp.testing import capture_events
from tests.cli_checks import usage_error
from tests.validation_helpers import (
    CLOCK,
    FAST_CONFIG,
    WASTE_NS,
    Pruned,
    Slower,
    _ModuleBackend,
    gated,
    make_case,
)

PREFIX = "aitune_fp.validation."


class SlowFirstCall(Pruned):
    """Pruned, whose first call also spends a second of real time (its correctness check)."""

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        if not self.__dict__.get("slept"):
            self.slept = True
            time.sleep(1.0)
        return super()._infer(*args, **kwargs)


class HalfPruned(_ModuleBackend):
    """Faster than eager (skips half the waste) but slower than :class:`Pruned`."""

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        CLOCK.advance(WASTE_NS / 2 / 1e9)
        with torch.no_grad():
            return self.module.useful_forward(*args)


def _tune(strategy: Any, tmp_path: Path) -> tuple[Any, Any]:
    module, spec, data = make_case()
    backend = strategy.tune(module, "m", spec, data, "cpu", tmp_path)
    return backend, validation_of(strategy).last_report


def _names(events: list[dict[str, Any]], short: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == PREFIX + short]


class TestHeadToHead:
    @pytest.mark.usefixtures("pinned_draws")
    def test_equally_fast_candidates_settle_and_the_earlier_is_kept(self, tmp_path: Path) -> None:
        """Two copies of one backend are within delta: a tie, kept by the stated key."""
        a, b = Pruned("a"), Pruned("b")
        backend, report = _tune(gated(MaxThroughputStrategy([a, b])), tmp_path)
        state = report.selection
        assert state is not None and state.outcome == "settled"
        assert state.chosen == backend.describe() == "Pruned(tag=a)"
        assert set(state.remaining) == {"Pruned(tag=a)", "Pruned(tag=b)"}
        assert "within 2 %" in state.reason
        assert state.gap_bound is not None and 1.0 <= state.gap_bound <= 1.02

    def test_a_build_time_is_the_builds_alone(self, tmp_path: Path) -> None:
        """Neither the worker's start nor the candidate's vetting is its build time: a candidate
        whose first call (in its correctness check) takes a second of real time still built in
        no time, and two equal candidates tie on it."""
        slow, quick = SlowFirstCall("a"), Pruned("b")
        backend, report = _tune(gated(MaxThroughputStrategy([slow, quick])), tmp_path)
        state = report.selection
        assert state is not None and state.outcome == "settled"
        assert {c.name: c.build_s for c in state.contenders} == {
            "SlowFirstCall(tag=a)": 0.0,
            "Pruned(tag=b)": 0.0,
        }
        assert state.chosen == backend.describe() == "SlowFirstCall(tag=a)"  # first in order

    def test_the_slower_passing_candidate_is_eliminated_and_released(self, tmp_path: Path) -> None:
        """A candidate faster than eager but slower than another loses to it, with its interval."""
        backend, report = _tune(gated(MaxThroughputStrategy([HalfPruned(), Pruned()])), tmp_path)
        assert backend.describe() == "Pruned()"
        state = report.selection
        assert state is not None and state.chosen == "Pruned()"
        (lost,) = state.eliminated
        assert (lost.name, lost.lost_to) == ("HalfPruned()", "Pruned()")
        assert 1.0 < lost.low <= lost.ratio
        # each kept its own gate verdict against eager: the winner's speedup is its own
        assert {r.backend_description for r in report.results if r.passed} == {
            "HalfPruned()",
            "Pruned()",
        }

    def test_point_mode_keeps_the_best_estimate_without_a_head_to_head(
        self, tmp_path: Path
    ) -> None:
        """decision='point' is AITune's rule: no head-to-head is run or recorded."""
        config = ProfilingConfig(**{**FAST_CONFIG.to_dict(), "decision": "point"})  # type: ignore[arg-type]
        strategy = gated(MaxThroughputStrategy([HalfPruned(), Pruned()]), profiling_config=config)
        backend, report = _tune(strategy, tmp_path)
        assert backend.describe() == "Pruned()"
        assert report.selection is None

    def test_events_carry_the_selection_and_ingest_rebuilds_it(self, tmp_path: Path) -> None:
        """selection_decided holds the whole selection; ingest of the log gives it back."""
        with capture_events() as events:
            _, report = _tune(gated(MaxThroughputStrategy([HalfPruned(), Pruned()])), tmp_path)
        looks = _names(events, "headtohead_look")
        (decided,) = _names(events, "selection_decided")
        assert looks and looks[-1]["rounds"] == decided["selection"]["rounds"]
        assert decided["selection"]["chosen"] == "Pruned()" and decided["delta"] == pytest.approx(
            0.02
        )
        lines = [json.dumps({k: v for k, v in e.items() if k != "log_level"}) for e in events]
        (run,) = ingest(lines).runs
        assert run.selection == report.selection


class TestOperatingPointAndBudget:
    def test_min_latency_tunes_at_batch_size_one(self, tmp_path: Path) -> None:
        """MinLatency validates and chooses at batch size 1 (AITune's MinLatency does too)."""
        backend, report = _tune(gated(MinLatencyStrategy([Slower(), Pruned()])), tmp_path)
        assert backend.describe() == "Pruned()"
        assert report.batch_size == 1
        assert all(r.batch_size == 1 for r in report.results)

    def test_a_generous_budget_keeps_the_fastest(self, tmp_path: Path) -> None:
        """Every faster candidate is within 1 s at p90: the choice is the head-to-head's."""
        strategy = gated(LatencyBudgetStrategy([HalfPruned(), Pruned()], budget_ms=1000.0))
        with capture_events() as events:
            backend, report = _tune(strategy, tmp_path)
        assert backend.describe() == "Pruned()"
        assert [c.within for c in report.latency_checks] == [True, True]
        checked = _names(events, "latency_checked")
        assert [e["backend_description"] for e in checked] == ["HalfPruned()", "Pruned()"]
        assert all(e["upper_s"] <= e["budget_s"] for e in checked)

    def test_no_candidate_within_the_budget_raises(self, tmp_path: Path) -> None:
        """Faster than eager but over the budget: nothing is kept (AITune raises too)."""
        strategy = gated(LatencyBudgetStrategy([Pruned()], budget_ms=1e-6))
        module, spec, data = make_case()
        with pytest.raises(NoValidBackendError):
            strategy.tune(module, "m", spec, data, "cpu", tmp_path)
        report = validation_of(strategy).last_report
        (check,) = report.latency_checks
        assert not check.within and "over the budget" in check.reason

    def test_none_faster_than_eager_falls_back_to_eager(self, tmp_path: Path) -> None:
        """The gate comes first: no faster candidate means the eager baseline, no budget check."""
        strategy = gated(LatencyBudgetStrategy([Slower()], budget_ms=1000.0))
        backend, report = _tune(strategy, tmp_path)
        assert backend is validation_of(strategy).baseline_backend
        assert report.latency_checks == ()


class TestValues:
    def test_latency_check_round_trips_through_its_dict(self) -> None:
        """What the event carries rebuilds the same check."""
        bound = quantile_upper_bound([0.001 * (1 + i / 100) for i in range(100)], 0.9)
        check = LatencyCheck(backend_description="B()", bound=bound, budget_s=0.0011)
        again = LatencyCheck.from_dict(check.to_dict())
        assert again == check and again.within == check.within

    def test_selection_round_trips_through_its_event(self, tmp_path: Path) -> None:
        """A selection written as its event's JSON reads back equal, infinite bounds included."""
        from tests.factories import read_back

        _, report = _tune(gated(MaxThroughputStrategy([HalfPruned(), Pruned()])), tmp_path)
        state = report.selection
        event = SelectionDecided(
            run_id="r", module_name="m", selection=state, delta=0.02
        ).to_event()
        line = json.loads(json.dumps({"event": event.name, **event.fields}))
        payload = read_back(line)
        assert isinstance(payload, SelectionDecided) and payload.selection == state
        assert math.isfinite(state.rounds)

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({}, "needs budget_ms"),
            ({"budget_ms": -1.0}, "-1.0"),
            ({"budget_ms": 1.0, "quantile": 1.5}, "1.5"),
        ],
    )
    def test_latency_budget_refuses_bad_settings(self, kwargs: dict[str, Any], match: str) -> None:
        """A missing or bad budget or quantile is refused by name."""
        with pytest.raises(InvalidValueError, match=match):
            make_strategy("latency-budget", [Pruned()], **kwargs)


class TestSettings:
    @pytest.mark.parametrize(
        ("args", "match"),
        [
            (["--strategy", "latency-budget"], "needs --budget-ms"),
            (["--budget-ms", "5"], "--budget-ms applies to strategy 'latency-budget' only"),
            (["--strategy", "latency-budget", "--budget-ms", "0"], "got 0.0"),
            (["--strategy", "latency-budget", "--budget-ms", "5", "--quantile", "2"], "got 2.0"),
            (["--delta", "0"], "--delta"),
            (["--decision", "point", "--delta", "3"], "--delta applies to --decision statistical"),
        ],
    )
    def test_cli_refuses_bad_selection_flags(
        self, args: list[str], match: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Selection and budget flags are checked before anything is built (exit 2, one line)."""
        assert match in usage_error(["tune", *args], capsys)

    def test_sweep_file_carries_the_budget_to_each_task(self, tmp_path: Path) -> None:
        """A sweep's latency-budget settings reach the strategy each task builds."""
        from aitune_fp.sweep.spec import parse_sweep
        from aitune_fp.sweep.task import make_tasks

        spec = parse_sweep(
            {"models": ["mlp"], "strategy": "latency-budget", "budget_ms": 5, "quantile": 0.95}
        )
        (task,) = make_tasks(spec, "s", str(tmp_path))
        strategy = make_strategy(task.spec.strategy, [Pruned()], **dict(task.spec.strategy_options))
        assert isinstance(strategy, LatencyBudgetStrategy)
        assert (strategy.budget_ms, strategy.quantile) == (5.0, 0.95)

    @pytest.mark.parametrize(
        ("extra", "match"),
        [
            ({"strategy": "latency-budget"}, "needs budget_ms"),
            ({"budget_ms": 5}, "latency-budget' only"),
            ({"strategy": "latency-budget", "budget_ms": -1}, "-1"),
        ],
    )
    def test_sweep_file_refuses_bad_budget(self, extra: dict[str, Any], match: str) -> None:
        """A missing, misplaced or bad budget names the key."""
        from aitune_fp.sweep.spec import parse_sweep

        with pytest.raises(InvalidValueError, match=match):
            parse_sweep({"models": ["mlp"], **extra})


class TurnsWrong(_ModuleBackend):
    """Fastest and right through the gate, then wrong once the head-to-head starts."""

    armed = False

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            out = self.module.useful_forward(*args)
        return out + 1.0 if type(self).armed else out


def test_a_winner_wrong_after_the_head_to_head_is_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The head-to-head's winner is checked again; wrong by then, it is recorded and dropped."""
    import aitune_fp.pipeline.choosing as choosing

    original = choosing.head_to_head

    def select_then_arm(*args: Any, **kwargs: Any) -> Any:
        state = original(*args, **kwargs)
        TurnsWrong.armed = True  # right through the rounds, wrong from the re-check on
        return state

    monkeypatch.setattr(choosing, "head_to_head", select_then_arm)
    monkeypatch.setattr(TurnsWrong, "armed", False)
    # the switch is a class attribute of this process: candidates must run here to see it
    backend, report = _tune(
        gated(MaxThroughputStrategy([TurnsWrong(), HalfPruned()]), isolation="in_process"),
        tmp_path,
    )
    assert backend.describe() == "HalfPruned()"
    (failure,) = report.candidate_failures
    assert (failure.backend_description, failure.stage) == ("TurnsWrong()", "correctness")
    assert "head-to-head" not in failure.reason  # caught by the winner's re-check


def test_a_candidate_wrong_while_timed_head_to_head_is_caught_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Right through the gate, wrong in the rounds: the rounds' spot checks record it."""
    import aitune_fp.pipeline.choosing as choosing

    original = choosing.head_to_head

    def arm_then_select(*args: Any, **kwargs: Any) -> Any:
        TurnsWrong.armed = True
        try:
            return original(*args, **kwargs)
        finally:
            TurnsWrong.armed = False  # right again for the re-check: only the rounds saw it

    monkeypatch.setattr(choosing, "head_to_head", arm_then_select)
    monkeypatch.setattr(TurnsWrong, "armed", False)
    with capture_events() as events:
        backend, report = _tune(  # the switch is this process's: candidates run here
            gated(MaxThroughputStrategy([TurnsWrong(), HalfPruned()]), isolation="in_process"),
            tmp_path,
        )
    assert backend.describe() == "HalfPruned()"
    (failure,) = report.candidate_failures
    assert (failure.backend_description, failure.stage) == ("TurnsWrong()", "correctness")
    assert "wrong output while timed head-to-head" in failure.reason
    assert "SpotCheckError: timed call" in failure.reason
    (decided,) = _names(events, "selection_decided")
    assert decided["selection"]["chosen"] == "HalfPruned()"


class TestShown:
    def test_the_table_says_who_lost_to_whom_and_what_was_kept(self, tmp_path: Path) -> None:
        """Each elimination with its interval, then the kept one and its guarantee."""
        from aitune_fp.cli.rows import choice_lines

        _, report = _tune(gated(MaxThroughputStrategy([HalfPruned(), Pruned()])), tmp_path)
        lines = choice_lines(report)
        assert lines[0].startswith("Head-to-head among HalfPruned(), Pruned() (")
        assert re.match(
            r"  HalfPruned\(\) lost to Pruned\(\): [0-9.]+x \[[0-9.]+, [0-9.]+\]", lines[1]
        )
        assert lines[-1] == "  Pruned() kept: shown the fastest (no contender faster, at 95 %)"

    def test_a_tie_says_how_it_was_broken(self, tmp_path: Path) -> None:
        """Within delta of each other: the reason names the tie-break; the gap bound is stated."""
        from aitune_fp.cli.rows import choice_lines

        _, report = _tune(gated(MaxThroughputStrategy([Pruned("a"), Pruned("b")])), tmp_path)
        lines = choice_lines(report)
        assert any("within 2 %" in line and "kept" in line for line in lines[1:-1])
        assert re.match(
            r"  Pruned\(tag=a\) kept: no contender is more than [0-9.]+ % faster \(at 95 %\)",
            lines[-1],
        )


@pytest.mark.usefixtures("pinned_draws")
def test_two_candidates_with_one_description_are_told_apart(tmp_path: Path) -> None:
    """The same backend listed twice meets itself head-to-head as two numbered contenders."""
    backend, report = _tune(gated(MaxThroughputStrategy([Pruned(), Pruned()])), tmp_path)
    assert backend.describe() == "Pruned()"
    state = report.selection
    assert state is not None
    assert [c.name for c in state.contenders] == ["Pruned()", "Pruned() #2"]
    assert state.chosen == "Pruned()" and state.outcome == "settled"
