"""Where an event goes: this context's sinks, then (unless a sink replaces it) the structlog logger."""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import json
import logging
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import IO, Any, TypeAlias

import structlog

from aitune_fp.events.kinds import LOGGER_NAME, Event

#: A callable that receives each emitted :class:`Event` value (see :func:`sinks`).
EventSink: TypeAlias = Callable[[Event], None]

#: Whether :func:`emit` also logs this context's events (a sink may replace the logger).
_LOG: contextvars.ContextVar[bool] = contextvars.ContextVar("aitune_fp_event_log", default=True)
#: The sinks of this context, outermost first (see :func:`sinks`).
_SINKS: contextvars.ContextVar[tuple[EventSink, ...]] = contextvars.ContextVar(
    "aitune_fp_event_sinks", default=()
)


def timestamp() -> str:
    """Now as an ISO 8601 UTC timestamp with a ``Z`` suffix (what the logs carry)."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def to_record(event: Event) -> dict[str, Any]:
    """``event`` as one JSON-lines record: name, level, UTC ISO timestamp, then its payload."""
    return {"event": event.name, "level": event.level, "timestamp": timestamp(), **event.fields}


def write_records(handle: IO[str], records: Iterable[Mapping[str, Any]]) -> None:
    """Write ``records`` one JSON line each (the only writer; non-finite as null), then flush."""
    for record in records:
        line = json.dumps(_finite(record), ensure_ascii=False, allow_nan=False, default=str)
        handle.write(line.translate(_LINE_BREAKS) + "\n")
    handle.flush()


#: Characters some readers split lines at (``str.splitlines``) that JSON leaves raw: escaped,
#: so one record is one line for every reader.
_LINE_BREAKS = {ord(c): f"\\u{ord(c):04x}" for c in "\x85\u2028\u2029"}


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float, at any depth, as None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


@contextlib.contextmanager
def sinks(*callables: EventSink, log: bool = True) -> Iterator[None]:
    """Within the block, also hand this context's events to ``callables`` (docs/architecture.md)."""
    token = _SINKS.set((*_SINKS.get(), *callables))
    logging_on = _LOG.set(_LOG.get() and log)
    try:
        yield
    finally:
        _LOG.reset(logging_on)
        _SINKS.reset(token)


def _logger() -> Any:
    return structlog.get_logger(LOGGER_NAME)


def info_enabled() -> bool:
    """Whether the aitune_fp logger lets info events through (stdlib or structlog filtering)."""
    if not _LOG.get():
        return True
    bound = _logger().bind()
    check = getattr(bound, "is_enabled_for", None) or getattr(bound, "isEnabledFor", None)
    return True if check is None else bool(check(logging.INFO))


def emit(event: Event) -> None:
    """Hand ``event`` to this context's sinks, then log it at its level (unless sinks replace it)."""
    for deliver in _SINKS.get():
        deliver(event)
    if _LOG.get():
        getattr(_logger(), event.level)(event.name, **event.fields)


def open_log(path: str | os.PathLike[str]) -> IO[str]:
    """Open a JSON-lines log for appending, on a fresh line, so a cut last line stays alone."""
    handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - the caller closes it
    try:
        if handle.tell() > 0:
            with open(path, "rb") as raw:
                raw.seek(-1, os.SEEK_END)
                if raw.read(1) != b"\n":
                    handle.write("\n")
                    handle.flush()
    except BaseException:
        handle.close()
        raise
    return handle
