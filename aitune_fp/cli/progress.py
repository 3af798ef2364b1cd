"""``tune``'s stderr: a rich progress display and the JSON-lines log, both event sinks."""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import time
from collections.abc import Callable, MutableMapping, Sequence
from typing import IO, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from aitune_fp.cli._shared import escape_control
from aitune_fp.cli.rendering import fmt_clock, measured_line
from aitune_fp.core.report import CandidateFailure
from aitune_fp.events.candidates import (
    CANDIDATE_REJECTED,
    CORRECTNESS_CHECKED,
    CandidateFailed,
    CandidateMeasured,
)
from aitune_fp.events.kinds import Event, Payload, registered
from aitune_fp.events.sending import timestamp, to_record, write_records
from aitune_fp.events.validation import FINISHED, SELECTED, BaselineMeasured, Look, PhaseEntered

_PHASES = ("build", "correctness", "measure")
_EAGER = "eager baseline"


class TuneProgress:
    """An event sink that shows a tune's events on ``console`` (stderr)."""

    def __init__(
        self,
        console: Console,
        *,
        quiet: bool,
        candidates: Sequence[str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console = console
        self.clock = clock  # the pace of the pairs, for the time left
        self._measuring: dict[str, float] = {}  # when each candidate's measure phase began
        self.quiet = quiet
        self.live = console.is_terminal and not quiet
        self.candidates = list(candidates)
        self.baseline_at: str | None = None
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(bar_width=20),
            TextColumn("{task.fields[phase]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self._tasks: dict[str, TaskID] = {}

    def __enter__(self) -> TuneProgress:
        """Start the live display (terminal only)."""
        if self.live:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop and clear the live display."""
        if self.live:
            self.progress.stop()

    def __call__(self, event: Event) -> None:
        """Show ``event``. Display errors never stop the tune."""
        with contextlib.suppress(OSError, ValueError):
            self.show(event)

    def _task(self, key: str) -> TaskID:
        if key not in self._tasks:
            label = f"{self._position(key)}{key}"  # eager's: no position
            self._tasks[key] = self.progress.add_task(label, total=len(_PHASES), phase="")
        return self._tasks[key]

    def _phase(self, description: str, phase: str) -> None:
        if phase.startswith("baseline_"):
            key, step = _EAGER, phase.removeprefix("baseline_")
        else:
            key, step = description, phase
        done = _PHASES.index(step) if step in _PHASES else 0
        if self.live:
            self.progress.update(self._task(key), completed=done, phase=step)
        else:
            self.console.print(f"⏳ {self._position(key)}{escape_control(key)}: {step}")

    def _position(self, key: str) -> str:
        if key in self.candidates:
            return f"[{self.candidates.index(key) + 1}/{len(self.candidates)}] "
        return ""

    def _done(self, description: str) -> None:
        if self.live and description in self._tasks:
            self.progress.update(self._tasks[description], completed=len(_PHASES), phase="done")

    def show(self, event: Event) -> None:
        """Render one event from its typed payload."""
        if not event.name.startswith("aitune_fp."):
            return
        payload = _payload(event)
        description = str(getattr(payload, "backend_description", ""))
        if isinstance(payload, BaselineMeasured):
            self.baseline_at = fmt_clock(timestamp())
            self._done(_EAGER)
        if isinstance(payload, PhaseEntered):
            if payload.phase == "measure":
                self._measuring[description] = self.clock()
            if not self.quiet:
                self._phase(description, payload.phase)
            return
        if isinstance(payload, Look):
            if self.live and description in self._tasks:
                began = self._measuring.get(description)
                spent = None if began is None else self.clock() - began
                self.progress.update(self._tasks[description], phase=_look(payload, spent))
            return
        if event.name in _SAID_ELSEWHERE:
            return  # the table on stdout says it; the measured line said the verdict
        if isinstance(payload, CandidateMeasured):
            self._done(payload.result.backend_description)
            if not self.quiet:
                self.console.print(measured_line(payload.result))
            return
        if isinstance(payload, CandidateFailed):
            self._done(description)
            text = _failed(payload.failure)
        else:
            text = escape_control(payload.summary if payload is not None else event.name)
        if event.level in ("warning", "error") or not self.quiet:
            self.console.print(text)


#: Events the display does not print: the table on stdout, or the measured line, says them.
_SAID_ELSEWHERE = frozenset({SELECTED, FINISHED, CANDIDATE_REJECTED, CORRECTNESS_CHECKED})


def _failed(failure: CandidateFailure) -> str:
    """The stderr line of a failed (or unavailable) candidate."""
    description = escape_control(failure.backend_description)
    if failure.stage == "unavailable":
        reason = escape_control(failure.reason or failure.error_type)
        return f"⛔ {description} is unavailable here: {reason}"
    return (
        f"❌ {description} failed at {failure.stage}: "
        f"{escape_control(failure.error_type)} (reason in the table below)"
    )


def _payload(event: Event) -> Payload | None:
    """The typed value of ``event``: its own, or rebuilt from its fields (None if unknown)."""
    if event.payload is not None:
        return event.payload
    kind = registered().get(event.name)
    try:
        return None if kind is None else kind.from_fields(event.fields)
    except (TypeError, ValueError):
        return None


def _look(look: Look, spent_s: float | None = None) -> str:
    """The measure phase so far: ``measure 20/320 pairs [0.9, 1.1]``, the time left at its pace."""
    high = look.ci_high
    shown_high = f"{high:.3f}" if high is not None and math.isfinite(high) else "∞"
    interval = f" [{look.ci_low:.3f}, {shown_high}]" if math.isfinite(look.ci_low) else ""
    left = look.max_pairs - look.n_pairs
    eta = ""
    if spent_s is not None and look.n_pairs > 0 and left > 0:
        eta = f", at most about {spent_s / look.n_pairs * left:.0f} s left"
    return f"measure {look.n_pairs}/{look.max_pairs} pairs{interval}{eta}"


class JsonLines:
    """An event sink writing each event as one JSON line by ``write_records`` (as a sweep's log)."""

    def __init__(self, handle: IO[str]) -> None:
        self.handle = handle

    def __call__(self, event: Event) -> None:
        """Write ``event`` as one line and flush."""
        write_records(self.handle, [to_record(event)])


def _drop(logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> Any:
    import structlog

    raise structlog.DropEvent


def configure_logging() -> None:
    """Structlog drops every event (the sinks show and write them); stdlib logging to stderr."""
    import structlog

    structlog.configure(
        processors=[_drop],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, force=True)
