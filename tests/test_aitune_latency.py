"""AITune's profiling strategies decorated: the choice among passing candidates, latency budgets.

Real AITune 0.6.0 through ``ait.Module`` + ``ait.tune``, on the fake clock of ``test_aitune``
(eager ~11x the pruned backend), so verdicts, head-to-heads and latency bounds are deterministic.
Spec: MaxThroughput and MinLatency keep the candidate ``aitune_fp.pipeline.choosing.choose`` picks among
those shown faster (MinLatency at batch size 1); LatencyBudget first holds each one's p90
latency to its budget and raises AITune's own error when none is within.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from structlog.testing import LogCapture

from aitune_fp.adapters.validation import validation_of
from tests.test_aitune import (
    BUILD,
    MODES,
    PREFIX,
    PrunedEager,
    SlowerEager,
    _isolated,  # noqa: F401 - the autouse fixture: a fresh clock, AITune's handlers removed
    _logs,  # noqa: F401 - the ``logs`` fixture, events validated against the schema
    ait,
    check_output,
    gated,
    names,
    quiet,
    run_tune,
)

pytestmark = pytest.mark.aitune


class PrunedTwin(PrunedEager):
    """As fast as :class:`PrunedEager`, under another name."""

    _execution_modes, _build_mode = MODES, BUILD


def events(cap: LogCapture, short: str) -> list[dict[str, Any]]:
    return [e for e in cap.entries if e["event"] == PREFIX + short]


class Sink:
    """AITune's log sink (its ``sink=``): keeps every line AITune's strategy logs."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, msg: str, *args: Any) -> None:
        self.lines.append(msg % args)

    def having(self, *markers: str) -> list[str]:
        """The lines with one of ``markers``, in order."""
        return [line for line in self.lines if any(m in line for m in markers)]


# -- MaxThroughput: the head-to-head ------------------------------------------------------------


@pytest.mark.usefixtures("pinned_draws")
def test_max_throughput_equally_fast_candidates_meet_head_to_head(
    logs: LogCapture,
) -> None:
    sink = Sink()
    cls = gated(ait.MaxThroughputStrategy)
    strategy = quiet(cls(backends=[PrunedEager(), PrunedTwin()], sink=sink))
    module, model = run_tune(strategy)
    assert [(r.backend_description, r.passed) for r in strategy.perf_validation_results] == [
        ("PrunedEager()", True),
        ("PrunedTwin()", True),
    ]
    (decided,) = events(logs, "selection_decided")
    report = validation_of(strategy).last_report
    assert report is not None and report.selection is not None
    assert report.selection.outcome == "settled" and "within 2 %" in report.selection.reason
    assert report.selected_backend == report.selection.chosen == decided["selection"]["chosen"]
    assert names(logs)[-2:] == ["selected", "finished"]
    lines = sink.having("backend profiled - throughput", "new best")
    assert len(lines) == 2 + 1  # each profiled; the chosen one is the new best
    assert report.selected_backend in lines[-1] and "🎯 new best throughput" in lines[-1]
    check_output(module, model)


# -- MinLatency ---------------------------------------------------------------------------------


def test_min_latency_selects_the_faster_at_batch_size_one(
    logs: LogCapture,
) -> None:
    sink = Sink()
    cls = gated(ait.MinLatencyStrategy)
    strategy = quiet(cls(backends=[SlowerEager(), PrunedEager()], sink=sink))
    module, model = run_tune(strategy)
    view = validation_of(strategy)
    assert view.resolved_batch_size == 1
    assert [(r.backend_description, r.batch_size) for r in view.perf_validation_results] == [
        ("SlowerEager()", 1),
        ("PrunedEager()", 1),
    ]
    report = view.last_report
    assert report is not None and report.selected_backend == "PrunedEager()"
    assert report.batch_size == 1
    slower, pruned = strategy.perf_validation_results  # AITune's records: latencies in ms
    assert not slower.passed and slower.metric > slower.baseline_metric
    assert pruned.passed and pruned.metric < pruned.baseline_metric / 5
    assert pruned.metric == pytest.approx(1e3 / view.perf_validation_results[1].throughput)
    entry = strategy.backend_results[-1]
    assert entry["latency"] == pytest.approx(pruned.metric) and entry["selected_batch_size"] == 1
    (best,) = sink.having("🎯 new best latency")
    assert "PrunedEager()" in best and " ms" in best
    check_output(module, model)


def test_min_latency_with_nothing_faster_falls_back_to_eager() -> None:
    strategy = quiet(gated(ait.MinLatencyStrategy(backends=[SlowerEager()])))
    run_tune(strategy)
    report = validation_of(strategy).last_report
    assert report is not None and report.outcome == "baseline"


# -- LatencyBudget ------------------------------------------------------------------------------


def budget(
    latency_budget_ms: float, backends: list[Any], mixin: type | None = None, **kwargs: Any
) -> Any:
    cls = gated(ait.LatencyBudgetStrategy)
    if mixin is not None:
        cls = type(cls.__name__, (mixin, cls), {})
    return quiet(cls(latency_budget_ms, backends=backends, **kwargs))


def test_latency_budget_generous_keeps_the_faster(logs: LogCapture) -> None:
    strategy = budget(1000.0, [SlowerEager(), PrunedEager()])
    module, model = run_tune(strategy)
    report = validation_of(strategy).last_report
    assert report is not None and report.selected_backend == "PrunedEager()"
    (checked,) = events(logs, "latency_checked")  # only a candidate shown faster is checked
    assert checked["backend_description"] == "PrunedEager()" and checked["within"]
    assert checked["upper_s"] <= checked["budget_s"] == pytest.approx(1.0)
    assert checked["quantile"] == pytest.approx(0.9)
    (check,) = report.latency_checks
    assert check.within
    entry = strategy.backend_results[-1]
    assert {"throughput", "latency", "selected_batch_size"} <= entry.keys()
    check_output(module, model)


class _TightAfterBaseline:
    """AITune profiles its eager baseline under a generous budget; the candidates get 1e-6 ms."""

    def _pre_tune(self, *args: Any) -> None:
        super()._pre_tune(*args)  # type: ignore[misc]
        self.latency_budget_ms = 1e-6


def test_latency_budget_none_within_raises_aitune_error(logs: LogCapture) -> None:
    sink = Sink()
    strategy = budget(1000.0, [PrunedEager(), PrunedTwin()], mixin=_TightAfterBaseline, sink=sink)
    with pytest.raises(RuntimeError, match="No backend satisfied latency budget"):
        run_tune(strategy)
    failed = sink.having("❌ backend failed")  # AITune's line; the reason in its build.log
    assert len(failed) == 2
    log_file = Path(failed[0].split("log file: ")[1].rstrip(")"))
    assert "Latency budget not met" in log_file.read_text(encoding="utf-8")
    checked = events(logs, "latency_checked")
    assert [(e["backend_description"], e["within"]) for e in checked] == [
        ("PrunedEager()", False),
        ("PrunedTwin()", False),
    ]
    report = validation_of(strategy).last_report
    assert report is not None and report.outcome == "error"
    assert all("over the budget" in c.reason for c in report.latency_checks)


def test_latency_budget_impossible_from_the_start_raises_aitune_error() -> None:
    """AITune's eager baseline is over 1e-6 ms too: nothing is compared, nothing kept."""
    strategy = budget(1e-6, [PrunedEager()])
    with pytest.raises(RuntimeError, match="No backend satisfied latency budget"):
        run_tune(strategy)


def test_latency_budget_nothing_faster_falls_back_to_eager() -> None:
    strategy = budget(1000.0, [SlowerEager()])
    run_tune(strategy)
    report = validation_of(strategy).last_report
    assert report is not None and report.outcome == "baseline" and not report.latency_checks


def test_latency_budget_diagnostic_still_holds_the_budget(logs: LogCapture) -> None:
    strategy = budget(1000.0, [SlowerEager()])
    strategy.enable_performance_validation("diagnostic")
    run_tune(strategy)
    (checked,) = events(logs, "latency_checked")
    assert checked["within"]
    report = validation_of(strategy).last_report
    assert report is not None and report.selected_backend == "SlowerEager()"
