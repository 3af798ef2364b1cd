"""The one place values become log events: their classes, builders, schema and ``emit``.

Each event is a frozen payload class (its keys) registered with its name and level, and a pure
builder beside it that returns an :class:`Event`; :func:`emit` hands one to this context's sinks
(:func:`sinks`, as the ``Event`` value) and sends it through
``structlog.get_logger("aitune_fp")``. The library never configures structlog or logging.
One concept per module, every public name (and each event-name constant) re-exported here:

- :mod:`~aitune_fp.events.names`: the name prefixes, levels, schema version, :class:`Event`;
- :mod:`~aitune_fp.events.kinds`: :class:`Payload`, the registering decorator :func:`event`,
  the registry (``EVENT_NAMES`` is its names);
- :mod:`~aitune_fp.events.sending`: :func:`emit`, :func:`sinks`,
  :func:`to_record`;
- :mod:`~aitune_fp.events.validation`: a tune's own events (``started`` ... ``finished``);
- :mod:`~aitune_fp.events.baseline`: eager's events (``baseline_measured``, ``baseline_failed``);
- :mod:`~aitune_fp.events.candidates`: a candidate's events and the selection among candidates;
- :mod:`~aitune_fp.events.sweep`: a sweep's events;
- :mod:`~aitune_fp.events.schema`: the JSON Schema generated from the classes
  (``python -m aitune_fp.events.schema`` rewrites ``aitune_fp/events.schema.json``).
"""

from __future__ import annotations

from typing import Final

from aitune_fp.events import baseline, candidates, sweep, validation
from aitune_fp.events.baseline import *
from aitune_fp.events.candidates import *
from aitune_fp.events.kinds import Payload, event, event_names, fold, registered
from aitune_fp.events.names import (
    LOGGER_NAME,
    SCHEMA_VERSION,
    SWEEP_PREFIX,
    Event,
    new_run_id,
)
from aitune_fp.events.names import RESERVED_KEYS as RESERVED_KEYS
from aitune_fp.events.names import EagerIsolation as EagerIsolation
from aitune_fp.events.names import Level as Level
from aitune_fp.events.names import Phase as Phase
from aitune_fp.events.sending import (
    EventSink,
    emit,
    info_enabled,
    open_log,
    sinks,
    timestamp,
    to_record,
    write_records,
)
from aitune_fp.events.sweep import *
from aitune_fp.events.validation import *

# cpu_environment: what ``started`` reports, read by the session where it emits the event
from aitune_fp.profiling import cpu_environment

#: Every event name, from the registered classes (sorted by name).
EVENT_NAMES: Final = event_names()
#: The sweep's own events (``aitune-fp sweep``): ``run_id`` is the sweep's id, ``module_name``
#: the model entry (the sweep's name for ``started`` / ``finished``). Ingest builds no run of them.
SWEEP_EVENT_NAMES: Final = event_names(SWEEP_PREFIX)

__all__ = [
    "EVENT_NAMES",
    "LOGGER_NAME",
    "SCHEMA_VERSION",
    "SWEEP_EVENT_NAMES",
    "Event",
    "EventSink",
    "Payload",
    "cpu_environment",
    "emit",
    "event",
    "fold",
    "info_enabled",
    "new_run_id",
    "open_log",
    "registered",
    "sinks",
    "timestamp",
    "to_record",
    "write_records",
]
__all__ += baseline.__all__
__all__ += candidates.__all__
__all__ += sweep.__all__
__all__ += validation.__all__
