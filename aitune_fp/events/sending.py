"""Where an event goes: the aitune_fp structlog logger, or a collector for this context.

:func:`emit` sends an :class:`~aitune_fp.events.names.Event` through
``structlog.get_logger("aitune_fp")``; :func:`collecting` routes this context's events to a
callable instead (a sweep task carries its tune's events back that way).
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import logging
from collections.abc import Callable, Iterator
from typing import Any

import structlog

from aitune_fp.events.names import LOGGER_NAME, Event

__all__ = ["collecting", "emit", "info_enabled", "to_record"]


#: Where :func:`emit` sends this context's events instead of the logger (see :func:`collecting`).
_SINK: contextvars.ContextVar[Callable[[dict[str, Any]], None] | None] = contextvars.ContextVar(
    "aitune_fp_event_sink", default=None
)


def to_record(event: Event) -> dict[str, Any]:
    """``event`` as one JSON-lines record: name, level, UTC ISO timestamp, then its payload."""
    now = datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z")
    return {"event": event.name, "level": event.level, "timestamp": now, **event.fields}


@contextlib.contextmanager
def collecting(sink: Callable[[dict[str, Any]], None]) -> Iterator[None]:
    """Within the block, this context's events go to ``sink`` as records, not to the logger.

    A sweep task uses it to carry its tune's events back to the driver, which writes one log;
    no logging configuration is touched, so other threads and contexts log as before.
    """
    token = _SINK.set(sink)
    try:
        yield
    finally:
        _SINK.reset(token)


def _logger() -> Any:
    return structlog.get_logger(LOGGER_NAME)


def info_enabled(logger: Any = None) -> bool:
    """Whether the aitune_fp logger lets info events through (stdlib or structlog filtering)."""
    if logger is None and _SINK.get() is not None:
        return True
    bound = (logger or _logger()).bind()
    check = getattr(bound, "is_enabled_for", None) or getattr(bound, "isEnabledFor", None)
    if check is None:
        return True
    return bool(check(logging.INFO))


def emit(event: Event, logger: Any = None) -> None:
    """Send ``event`` through the aitune_fp structlog logger at its level (or to the collector)."""
    sink = _SINK.get()
    if logger is None and sink is not None:
        sink(to_record(event))
        return
    log = logger or _logger()
    getattr(log, event.level)(event.name, **event.fields)
