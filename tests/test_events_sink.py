"""Event sinks: every event a tune emits reaches this context's sinks as an ``Event`` value.

Spec: ``sinks(*callables)`` hands each emitted event, in order, to the sinks of the
current context only (two tunes in two threads never cross), whatever structlog's
configuration; the CLI's progress display and JSON-lines writer are such sinks.
"""

from __future__ import annotations

import contextlib
import io
import json
import threading
from pathlib import Path
from typing import Any

import jsonschema
import structlog
from rich.console import Console

from aitune_fp.adapters.validation import validation_of
from aitune_fp.cli.progress import JsonLines, TuneProgress
from aitune_fp.events.ingest import event_schema
from aitune_fp.events.kinds import Event, registered
from aitune_fp.events.sending import emit, sinks, to_record
from aitune_fp.events.validation import (
    FINISHED,
    PHASE,
    STARTED,
    Disabled,
    Look,
    PhaseEntered,
)
from aitune_fp.pipeline.strategies import FirstWinsStrategy, MaxThroughputStrategy
from aitune_fp.pipeline.values import NoValidBackendError
from aitune_fp.profiling.watchdog import _MONITOR
from aitune_fp.testing import capture_events
from tests.validation_helpers import BrokenBuild, Pruned, Slower, gated, make_case


def _tune(strategy: Any, cache: Path, name: str = "m") -> None:
    module, spec, data = make_case()
    with contextlib.suppress(NoValidBackendError):
        strategy.tune(module, name, spec, data, "cpu", cache)


def test_a_sink_gets_every_event_of_a_tune_in_order(tmp_path: Path) -> None:
    """The sink sees the very events the logger sees, as ``Event`` values, in order."""
    strategy = gated(MaxThroughputStrategy([BrokenBuild(), Slower(), Pruned()]))
    seen: list[Event] = []
    with capture_events() as logged, sinks(seen.append):
        _tune(strategy, tmp_path)
    assert all(isinstance(e, Event) for e in seen)
    assert [e.name for e in seen] == [e["event"] for e in logged]
    assert [dict(e.fields) for e in seen] == [
        {k: v for k, v in e.items() if k not in ("event", "log_level")} for e in logged
    ]
    assert [e.level for e in seen] == [e["log_level"] for e in logged]
    assert seen[0].name == STARTED and seen[-1].name == FINISHED
    # each carries the typed value of its registered class, whose fields are the payload
    classes = registered()
    for e in seen:
        assert isinstance(e.payload, classes[e.name]) and e.payload.to_fields() == dict(e.fields)
    report = validation_of(strategy).last_report
    assert report is not None and report.n_events == len(seen)


def test_two_tunes_in_two_threads_see_only_their_own(tmp_path: Path) -> None:
    """Sinks are context-local: each thread's sink gets its own tune's events, all of them."""
    seen: dict[str, list[Event]] = {"a": [], "b": []}
    strategies = {
        "a": gated(FirstWinsStrategy([Slower(), Pruned()])),
        "b": gated(MaxThroughputStrategy([Pruned(), Slower()])),
    }
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def work(key: str) -> None:
        try:
            with sinks(seen[key].append):
                start.wait()
                _tune(strategies[key], tmp_path / key, name=key)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(key,)) for key in seen]
    with capture_events():  # the logger's configuration is global; the sinks are not
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []
    for key, got in seen.items():
        report = validation_of(strategies[key]).last_report
        assert report is not None
        assert {e.fields["run_id"] for e in got} == {report.run_id}
        assert {e.fields["module_name"] for e in got} == {key}
        assert len(got) == report.n_events
        assert got[-1].name == FINISHED


def test_sinks_nest_and_end_with_their_block() -> None:
    """An inner block adds to the outer sinks; after each block its sinks get nothing more."""
    outer: list[Event] = []
    inner: list[Event] = []
    first, second, third = (
        Disabled(run_id="r", module_name="m", strategy=s).to_event() for s in ("1", "2", "3")
    )
    with capture_events():
        with sinks(outer.append):
            with sinks(inner.append):
                emit(first)
            emit(second)
        emit(third)
    assert outer == [first, second]
    assert inner == [first]


def test_sinks_do_not_depend_on_structlog() -> None:
    """Debug events reach a sink even when structlog drops everything; a collector too."""
    seen: list[Event] = []
    records: list[dict[str, Any]] = []
    event = PhaseEntered(
        run_id="r", module_name="m", backend_description="A()", phase="build"
    ).to_event()

    def drop(*_: Any) -> Any:
        raise structlog.DropEvent

    saved = structlog.get_config()
    structlog.configure(processors=[drop], wrapper_class=structlog.make_filtering_bound_logger(40))
    try:
        with sinks(seen.append):
            emit(event)
            with sinks(lambda e: records.append(to_record(e)), log=False):
                emit(event)
    finally:
        structlog.configure(**saved)
    assert seen == [event, event]
    assert [r["event"] for r in records] == [PHASE]


def test_the_watchdog_reports_in_the_tune_context() -> None:
    """An event the watchdog's thread emits for a stuck step reaches the tune's sinks."""
    seen: list[Event] = []
    done = threading.Event()
    event = Disabled(run_id="r", module_name="m", strategy="S").to_event()

    def action() -> None:
        emit(event)
        done.set()

    with capture_events(), sinks(seen.append):
        _MONITOR.schedule(0.0, action)
        assert done.wait(10)
    assert seen == [event]


def test_the_cli_sinks_show_and_write_a_tune(tmp_path: Path) -> None:
    """Progress shows each event's typed payload; JSON lines validate, payload first."""
    strategy = gated(MaxThroughputStrategy([BrokenBuild(), Slower(), Pruned()]))
    buf, log = io.StringIO(), io.StringIO()
    console = Console(file=buf, width=200, force_terminal=False, color_system=None)
    progress = TuneProgress(
        console, quiet=False, candidates=["BrokenBuild()", "Slower()", "Pruned()"]
    )
    with capture_events(), progress, sinks(progress, JsonLines(log)):
        _tune(strategy, tmp_path)
    report = validation_of(strategy).last_report
    assert report is not None
    assert progress.baseline_at is not None and progress.baseline_at.endswith(" UTC")
    text = buf.getvalue()
    assert "❌ BrokenBuild() failed at build" in text
    assert "📊 Pruned(): batch size" in text and "⏳ [3/3] Pruned(): measure" in text
    lines = [json.loads(line) for line in log.getvalue().splitlines()]
    assert len(lines) == report.n_events
    validator = jsonschema.Draft202012Validator(event_schema())
    for line in lines:
        validator.validate(line)
        assert list(line)[:3] == ["event", "level", "timestamp"]  # as a sweep log writes
        assert line["timestamp"].endswith("Z")


def test_the_progress_display_reads_typed_payloads_not_dicts() -> None:
    """Phase and look lines come from the event's payload class; a bare event is rebuilt."""
    import io

    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    progress = TuneProgress(console, quiet=False, candidates=["B()"])
    phase = PhaseEntered(
        run_id="r", module_name="m", backend_description="B()", phase="build"
    ).to_event()
    look = Look(
        run_id="r",
        module_name="m",
        backend_description="B()",
        n_pairs=20,
        max_pairs=320,
        verdict="inconclusive",
        estimate=1.0,
        ci_low=0.9,
        ci_high=float("inf"),
    ).to_event()
    assert isinstance(phase.payload, PhaseEntered) and isinstance(look.payload, Look)
    with progress:
        progress(phase)
        progress(Event(look.name, look.level, look.fields))  # no payload: rebuilt
        (task,) = progress.progress.tasks
        assert task.fields["phase"] == "measure 20/320 pairs [0.900, ∞]"
