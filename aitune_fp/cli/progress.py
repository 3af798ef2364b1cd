"""``tune``'s stderr: a rich progress display driven by aitune_fp events, and the JSON-lines log.

Both are structlog processors (the CLI is the only place logging is configured). On a terminal,
one progress task per candidate shows its phase (build, correctness, measure with the pairs timed
and the interval at each look) and time; the
bars are cleared at the end. Not on a terminal: one plain line per phase. Either way, a line per
measured or failed candidate, with the same headline figure the results table shows.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import sys
from collections.abc import Callable, Mapping, MutableMapping, Sequence
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
from aitune_fp.cli.rendering import measured_line

__all__ = ["JsonLines", "TuneProgress", "configure_logging"]

_PHASES = ("build", "correctness", "measure")
_EAGER = "eager baseline"


class TuneProgress:
    """A structlog processor that shows aitune_fp events on ``console`` (stderr)."""

    def __init__(self, console: Console, *, quiet: bool, candidates: Sequence[str]) -> None:
        self.console = console
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

    def __call__(self, logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> Any:
        """Show the event; pass it on unchanged. Display errors never stop the tune."""
        with contextlib.suppress(OSError, ValueError):
            self.show(method, event_dict)
        return event_dict

    def _task(self, key: str) -> TaskID:
        if key not in self._tasks:
            index = self.candidates.index(key) + 1 if key in self.candidates else 0
            label = _EAGER if key == _EAGER else f"[{index}/{len(self.candidates)}] {key}"
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
            where = self._position(key)
            self.console.print(f"⏳ {where}{escape_control(key)}: {step}")

    def _position(self, key: str) -> str:
        if key in self.candidates:
            return f"[{self.candidates.index(key) + 1}/{len(self.candidates)}] "
        return ""

    def _done(self, description: str) -> None:
        if self.live and description in self._tasks:
            self.progress.update(self._tasks[description], completed=len(_PHASES), phase="done")

    def show(self, method: str, event: Mapping[str, Any]) -> None:
        """Render one event dict (as a structlog processor sees it)."""
        name = str(event.get("event", ""))
        if not name.startswith("aitune_fp."):
            return
        level = str(event.get("level", method))
        short = name.rsplit(".", 1)[-1]
        description = str(event.get("backend_description", ""))
        if short == "baseline_measured":
            self.baseline_at = _clock(event.get("timestamp"))
            self._done(_EAGER)
        if short == "phase":
            if not self.quiet:
                self._phase(description, str(event.get("phase", "")))
            return
        if short == "look":
            if self.live and description in self._tasks:
                self.progress.update(self._tasks[description], phase=_look(event))
            return
        if short in ("selected", "finished", "candidate_rejected", "correctness_checked"):
            return  # the table on stdout says it; the measured line said the verdict
        if short == "candidate_measured":
            self._done(description)
            if not self.quiet:
                self.console.print(_measured(event))
            return
        if short == "candidate_failed":
            self._done(description)
            if event.get("stage") == "unavailable":
                reason = escape_control(str(event.get("reason") or event.get("error_type")))
                text = f"⛔ {escape_control(description)} is unavailable here: {reason}"
            else:
                text = (
                    f"❌ {escape_control(description)} failed at {event.get('stage')}: "
                    f"{escape_control(str(event.get('error_type')))} (reason in the table below)"
                )
        else:
            text = escape_control(str(event.get("summary", name)))
        if level in ("warning", "error", "critical") or not self.quiet:
            self.console.print(text)


def _measured(event: Mapping[str, Any]) -> str:
    from aitune_fp.ingest import result_from_event

    try:
        return measured_line(result_from_event(event))
    except (TypeError, ValueError, KeyError):
        return escape_control(str(event.get("summary", "")))


def _look(event: Mapping[str, Any]) -> str:
    """The measure phase with its pairs and interval so far: ``measure 20/320 pairs [0.9, 1.1]``."""
    low, high = event.get("ci_low"), event.get("ci_high")
    interval = ""
    if isinstance(low, (int, float)):
        shown_high = f"{high:.3f}" if isinstance(high, (int, float)) else "∞"
        interval = f" [{low:.3f}, {shown_high}]"
    return f"measure {event.get('n_pairs')}/{event.get('max_pairs')} pairs{interval}"


def _clock(timestamp: object) -> str | None:
    if not isinstance(timestamp, str) or "T" not in timestamp:
        return None
    return escape_control(timestamp.replace("T", " ")[:19] + " UTC")


class JsonLines:
    """structlog processor writing each event as one JSON line (finite numbers, UTF-8)."""

    def __init__(self, handle: IO[str]) -> None:
        self.handle = handle

    def __call__(self, logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> Any:
        """Write the event dict and pass it on."""
        data = {k: _jsonable(v) for k, v in event_dict.items()}
        self.handle.write(json.dumps(data, ensure_ascii=False, allow_nan=False, default=str) + "\n")
        self.handle.flush()
        return event_dict


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _drop(logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> Any:
    import structlog

    raise structlog.DropEvent


def configure_logging(processors: Sequence[Callable[..., Any]]) -> None:
    """Route structlog through ``processors`` (then drop); stdlib logging to stderr, warnings up."""
    import structlog

    chain: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="timestamp"),
        *processors,
        _drop,
    ]
    structlog.configure(
        processors=chain,
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, force=True)
