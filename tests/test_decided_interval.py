"""Show what decided (issue 22): each row shows the interval its verdict was decided on, at the
level it was decided at; a futility stop shows the futility bound, and the header names both
levels."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from rich.console import Console

from aitune_fp.cli.plain import print_parts
from aitune_fp.cli.rendering import render_run
from aitune_fp.core.messages import decided_interval, fmt_headline
from aitune_fp.core.report import TuneReport
from aitune_fp.core.results import PerformanceValidationResult
from aitune_fp.events.candidates import CandidateMeasured
from tests.factories import fake_result, result_of, schema_errors
from tests.test_decision_engine import _measure, _noisy


def _stat(desc: str = "B()", **overrides: Any) -> PerformanceValidationResult:
    fields: dict[str, Any] = {
        "throughput": 1000.0,
        "baseline_throughput": 1000.0,
        "speedup": 1.0,
        "estimate": 0.84,
        "ci_low": 0.224,
        "ci_high": 2.037,
        "confidence": 0.9972,
        "guarantee": 0.95,
        "futility_high": 0.995,
        "futility_level": 1 - 0.2 / 6,
        "reason": "estimate 0.840x is below required 1.010x and the upper bound 0.995x is below",
    }
    return fake_result(desc, **{**fields, **overrides})


def _table(*results: PerformanceValidationResult, width: int = 240, verbose: bool = True) -> str:
    """The table as ``-v`` prints it (the levels); ``verbose=False``: as printed by default."""
    run = TuneReport(run_id="r", module_name="m", results=results, decision="statistical")
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=False, color_system=None)
    print_parts(console, render_run(run, verbose=verbose))
    return buf.getvalue()


class TestMeasuredResults:
    def test_a_futility_stop_carries_its_bound_and_level(self) -> None:
        """An identical candidate stops by futility: the result carries the futility bound the
        reason quotes and its one-sided level per look, and shows that bound."""
        m = _measure(_noisy(0.002, 1), _noisy(0.002, 2))
        r = m.result
        assert r.verdict == "not_faster" and "futility margin" in r.reason
        assert r.ci_high is not None and r.ci_high >= r.required_speedup  # still straddles
        assert r.futility_high is not None and r.futility_high < r.required_speedup + 0.01
        assert f"upper bound {r.futility_high:.3f}" in r.reason
        assert r.futility_level == pytest.approx(1 - 0.2 / 6)
        assert decided_interval(r) == (None, r.futility_high, r.futility_level)
        assert fmt_headline(r) == f"{r.estimate:.2f}x [—, {r.futility_high:.3f}]"

    def test_an_accept_shows_the_accept_interval(self) -> None:
        """A clear 1.5x: decided on the accept interval, at the deciding look's level."""
        m = _measure(_noisy(0.003, 1), _noisy(0.002, 2))
        r = m.result
        assert r.verdict == "faster"
        assert r.futility_high is not None and r.futility_level is not None
        assert decided_interval(r) == (r.ci_low, r.ci_high, r.confidence)
        assert fmt_headline(r).endswith(f"[{r.ci_low:.3f}, {r.ci_high:.3f}]")

    def test_the_fields_round_trip_through_the_event(self) -> None:
        """candidate_measured carries both fields, validates, and folds back into the result."""
        r = _measure(_noisy(0.002, 1), _noisy(0.002, 2)).result
        event = CandidateMeasured(
            run_id="0123456789abcdef", module_name="m", result=r, duration_s=1.0
        ).to_event()
        line = json.loads(json.dumps({"event": event.name, **event.fields}))
        assert schema_errors(line) == []
        assert line["result"]["decided"]["futility_high"] == r.futility_high
        assert result_of(line) == r
        assert f"[—, {r.futility_high:.3f}]" in line["summary"]


class TestTable:
    def test_a_futility_row_shows_the_futility_bound(self) -> None:
        """The issue's row: not "0.84x [0.224, 2.037]" but the bound that decided, and the header
        names both levels."""
        text = _table(_stat(), _stat("F()", verdict="faster", estimate=1.5, ci_low=1.2))
        assert "0.84x [—, 0.995]" in text
        assert "[0.224, 2.037]" not in text
        assert "1.50x [1.200, 2.037]" in text
        assert "Speedup [accept 99.72%; futility 96.67%] 95% overall" in text

    def test_by_default_the_bound_shows_without_its_level(self) -> None:
        """Without -v: the same bound, the overall level in the header, the row's own level
        named as behind -v."""
        text = _table(
            _stat(), _stat("F()", verdict="faster", estimate=1.5, ci_low=1.2), verbose=False
        )
        assert "0.84x [—, 0.995]" in text and "[0.224, 2.037]" not in text
        assert "Speedup [95% overall]" in text and "96.67%" not in text
        flowing = " ".join(text.split())  # the header wraps at the console's width
        assert (
            "; a futility stop: its one-sided bound [—, high], and an estimate that errs low "
            "(the stop came on a low reading); -v shows its level." in flowing
        )

    def test_without_a_futility_row_the_header_names_the_interval_only(self) -> None:
        """An upper bound below the gate decides on the accept interval: no futility level."""
        text = _table(_stat(ci_high=1.005, estimate=0.95), _stat("F()", verdict="inconclusive"))
        assert "0.95x [0.224, 1.005]" in text
        assert "0.84x [0.224, 2.037]" in text
        assert "Speedup [accept 99.72%] 95% overall" in text
        assert "futility" not in text.splitlines()[-5]

    def test_rows_decided_at_different_looks_show_their_levels(self) -> None:
        """Error spent by look: each look has its own level, so the cells carry theirs."""
        text = _table(
            _stat("A()", verdict="faster", estimate=1.5, ci_low=1.2),
            _stat("B()", verdict="faster", estimate=1.5, ci_low=1.2, confidence=0.9694),
        )
        assert "1.50x [1.200, 2.037] at 99.72%" in text
        assert "1.50x [1.200, 2.037] at 96.94%" in text
        assert "Speedup [accept at the level shown] 95% overall" in text

    def test_older_results_without_the_fields_show_as_before(self) -> None:
        """A log written before these fields: the interval it carries, under the old reading."""
        old = _stat(futility_high=None, futility_level=None)
        assert decided_interval(old) == (0.224, 2.037, 0.9972)
        assert "0.84x [0.224, 2.037]" in _table(old)
