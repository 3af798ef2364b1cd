"""One fold from events to a report: the session's report and ingest's agree by construction.

Spec: whatever a tune records (results, rejections, failures, the head-to-head, latency checks,
the pick), the report the session keeps is the one ``ingest`` rebuilds from its log.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

from aitune_fp import validation_of
from aitune_fp.core.report import TuneReport
from aitune_fp.events.candidates import CORRECTNESS_CHECKED, CorrectnessChecked
from aitune_fp.events.ingest import ingest
from aitune_fp.events.kinds import fold
from aitune_fp.events.validation import Look
from aitune_fp.pipeline.strategies import (
    FirstWinsStrategy,
    LatencyBudgetStrategy,
    MaxThroughputStrategy,
)
from aitune_fp.pipeline.values import NoValidBackendError
from aitune_fp.testing import capture_events
from tests.strategies import mismatches
from tests.test_choosing import HalfPruned
from tests.validation_helpers import BrokenBuild, Pruned, Slower, Wrong, gated, make_case


def _lines(events: list[dict[str, Any]]) -> list[str]:
    return [json.dumps({k: v for k, v in e.items() if k != "log_level"}) for e in events]


@pytest.mark.parametrize(
    "make",
    [
        lambda: MaxThroughputStrategy([BrokenBuild(), Wrong(), Slower(), HalfPruned(), Pruned()]),
        lambda: FirstWinsStrategy([Slower(), Pruned()]),
        lambda: LatencyBudgetStrategy([HalfPruned(), Pruned()], budget_ms=1000.0),
        lambda: MaxThroughputStrategy([Slower()]),
    ],
    ids=["max-throughput", "first-wins", "latency-budget", "eager-fallback"],
)
def test_the_session_report_is_the_fold_of_its_log(make: Any, tmp_path: Path) -> None:
    """Results, failures, rejections, selection, latency checks, the pick: equal both ways."""
    strategy = gated(make())
    module, spec, data = make_case()
    with capture_events() as events, contextlib.suppress(NoValidBackendError):
        strategy.tune(module, "m", spec, data, "cpu", tmp_path)
    kept = validation_of(strategy).last_report
    (rebuilt,) = ingest(_lines(events)).runs
    assert rebuilt == kept
    assert kept.outcome is not None and kept.n_events == len(events)
    checked = [e["backend_description"] for e in events if e["event"] == CORRECTNESS_CHECKED]
    assert checked and [name for name, _ in kept.accuracy] == checked


def test_a_progress_event_is_counted_and_sets_nothing() -> None:
    """A look changes nothing in the report but its event count."""

    report = TuneReport(run_id="r", module_name="m")
    event = Look(
        run_id="r",
        module_name="m",
        backend_description="B()",
        n_pairs=1,
        max_pairs=2,
        verdict="inconclusive",
        estimate=1.0,
        ci_low=0.5,
        ci_high=None,
    ).to_event()
    assert event.payload is not None
    assert fold(report, event.payload) == TuneReport(run_id="r", module_name="m", n_events=1)


@given(mismatch=mismatches())
def test_a_correctness_check_folds_into_the_report_whole(mismatch: Any) -> None:
    """``correctness_checked`` carries the mismatch; the fold rebuilds it exactly, by candidate."""

    event = CorrectnessChecked.of("r", "m", "B()", mismatch)
    record = json.loads(json.dumps({"event": event.name, **event.fields}))  # as a log line reads
    (run,) = ingest([json.dumps(record)]).runs
    report = run
    assert report.accuracy == (("B()", mismatch),)
    (row,) = report.to_dict()["accuracy"]
    assert row["backend_description"] == "B()"
    assert row["criteria"] == [c.to_dict() for c in mismatch.criteria]
