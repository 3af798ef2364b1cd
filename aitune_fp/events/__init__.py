"""The one place values become log events: names, schema version, builders and ``emit``.

Builders are pure (they return an :class:`Event`); :func:`emit` hands one to this context's
sinks (:func:`sinks`, as the ``Event`` value) and sends it through
``structlog.get_logger("aitune_fp")``. The library never configures structlog or logging.
One concept per module, every public name (and each event-name constant) re-exported here:

- :mod:`~aitune_fp.events.names`: the event names, levels, schema version, :class:`Event`;
- :mod:`~aitune_fp.events.sending`: :func:`emit`, :func:`sinks`, :func:`collecting`,
  :func:`to_record`;
- :mod:`~aitune_fp.events.validation`: a tune's own events (``started`` ... ``finished``);
- :mod:`~aitune_fp.events.candidates`: a candidate's events and the selection among candidates;
- :mod:`~aitune_fp.events.sweep`: a sweep's events.

The schema of every event is ``aitune_fp/events.schema.json`` (beside this package).
"""

from __future__ import annotations

from aitune_fp.events.candidates import (
    candidate_failed,
    candidate_measured,
    candidate_rejected,
    correctness_checked,
    failed,
    headtohead_look,
    latency_checked,
    selection_decided,
)
from aitune_fp.events.names import BASELINE_FAILED as BASELINE_FAILED
from aitune_fp.events.names import BASELINE_MEASURED as BASELINE_MEASURED
from aitune_fp.events.names import CANDIDATE_FAILED as CANDIDATE_FAILED
from aitune_fp.events.names import CANDIDATE_MEASURED as CANDIDATE_MEASURED
from aitune_fp.events.names import CANDIDATE_REJECTED as CANDIDATE_REJECTED
from aitune_fp.events.names import CORRECTNESS_CHECKED as CORRECTNESS_CHECKED
from aitune_fp.events.names import DISABLED as DISABLED
from aitune_fp.events.names import EVAL_MODE as EVAL_MODE
from aitune_fp.events.names import (
    EVENT_NAMES,
    LOGGER_NAME,
    SCHEMA_VERSION,
    SWEEP_EVENT_NAMES,
    Event,
    new_run_id,
)
from aitune_fp.events.names import FINISHED as FINISHED
from aitune_fp.events.names import HEADTOHEAD_LOOK as HEADTOHEAD_LOOK
from aitune_fp.events.names import LATENCY_CHECKED as LATENCY_CHECKED
from aitune_fp.events.names import LOOK as LOOK
from aitune_fp.events.names import PHASE as PHASE
from aitune_fp.events.names import RESERVED_KEYS as RESERVED_KEYS
from aitune_fp.events.names import SELECTED as SELECTED
from aitune_fp.events.names import SELECTION_DECIDED as SELECTION_DECIDED
from aitune_fp.events.names import STARTED as STARTED
from aitune_fp.events.names import SWEEP_FINISHED as SWEEP_FINISHED
from aitune_fp.events.names import SWEEP_STARTED as SWEEP_STARTED
from aitune_fp.events.names import TASK_FAILED as TASK_FAILED
from aitune_fp.events.names import TASK_FINISHED as TASK_FINISHED
from aitune_fp.events.names import EagerIsolation as EagerIsolation
from aitune_fp.events.names import Level as Level
from aitune_fp.events.names import Phase as Phase
from aitune_fp.events.sending import (
    EventSink,
    collecting,
    emit,
    info_enabled,
    sinks,
    timestamp,
    to_record,
)
from aitune_fp.events.sweep import sweep_finished, sweep_started, task_failed, task_finished
from aitune_fp.events.validation import (
    baseline_failed,
    baseline_measured,
    disabled,
    eval_mode,
    finished,
    look,
    phase,
    selected,
    started,
)

# cpu_environment: what ``started`` reports, read by the session where it emits the event
from aitune_fp.profiling import cpu_environment

__all__ = [
    "EVENT_NAMES",
    "LOGGER_NAME",
    "SCHEMA_VERSION",
    "SWEEP_EVENT_NAMES",
    "Event",
    "EventSink",
    "baseline_failed",
    "baseline_measured",
    "candidate_failed",
    "candidate_measured",
    "candidate_rejected",
    "collecting",
    "correctness_checked",
    "cpu_environment",
    "disabled",
    "emit",
    "eval_mode",
    "failed",
    "finished",
    "headtohead_look",
    "info_enabled",
    "latency_checked",
    "look",
    "new_run_id",
    "phase",
    "selected",
    "selection_decided",
    "sinks",
    "started",
    "sweep_finished",
    "sweep_started",
    "task_failed",
    "task_finished",
    "timestamp",
    "to_record",
]
