"""What an event is: its names, levels, schema version and the one payload builder.

Every builder returns an :class:`Event` made by :func:`_event`, which stamps the schema version,
run id and module name and makes values JSON-safe; ``EVENT_NAMES`` lists every name emitted.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from typing import Any, Final, Literal, TypeAlias

import attrs

from aitune_fp.errors import InvalidValueError

__all__ = [
    "EVENT_NAMES",
    "LOGGER_NAME",
    "SCHEMA_VERSION",
    "SWEEP_EVENT_NAMES",
    "Event",
    "new_run_id",
]


LOGGER_NAME: Final = "aitune_fp"
#: Bumped when a key is removed or changes meaning; adding keys keeps the version.
SCHEMA_VERSION: Final = 1

_PREFIX = "aitune_fp.validation."
STARTED: Final = _PREFIX + "started"
DISABLED: Final = _PREFIX + "disabled"
EVAL_MODE: Final = _PREFIX + "eval_mode"
PHASE: Final = _PREFIX + "phase"
LOOK: Final = _PREFIX + "look"
BASELINE_MEASURED: Final = _PREFIX + "baseline_measured"
BASELINE_FAILED: Final = _PREFIX + "baseline_failed"
CORRECTNESS_CHECKED: Final = _PREFIX + "correctness_checked"
CANDIDATE_MEASURED: Final = _PREFIX + "candidate_measured"
CANDIDATE_REJECTED: Final = _PREFIX + "candidate_rejected"
CANDIDATE_FAILED: Final = _PREFIX + "candidate_failed"
HEADTOHEAD_LOOK: Final = _PREFIX + "headtohead_look"
SELECTION_DECIDED: Final = _PREFIX + "selection_decided"
LATENCY_CHECKED: Final = _PREFIX + "latency_checked"
SELECTED: Final = _PREFIX + "selected"
FINISHED: Final = _PREFIX + "finished"
_SWEEP = "aitune_fp.sweep."
SWEEP_STARTED: Final = _SWEEP + "started"
TASK_FINISHED: Final = _SWEEP + "task_finished"
TASK_FAILED: Final = _SWEEP + "task_failed"
SWEEP_FINISHED: Final = _SWEEP + "finished"
#: The sweep's own events (``aitune-fp sweep``): ``run_id`` is the sweep's id, ``module_name``
#: the model entry (the sweep's name for ``started`` / ``finished``). Ingest builds no run of them.
SWEEP_EVENT_NAMES: Final = (SWEEP_STARTED, TASK_FINISHED, TASK_FAILED, SWEEP_FINISHED)

EVENT_NAMES: Final = (
    STARTED,
    DISABLED,
    EVAL_MODE,
    PHASE,
    LOOK,
    BASELINE_MEASURED,
    BASELINE_FAILED,
    CORRECTNESS_CHECKED,
    CANDIDATE_MEASURED,
    CANDIDATE_REJECTED,
    CANDIDATE_FAILED,
    HEADTOHEAD_LOOK,
    SELECTION_DECIDED,
    LATENCY_CHECKED,
    SELECTED,
    FINISHED,
    *SWEEP_EVENT_NAMES,
)

Level = Literal["debug", "info", "warning", "error"]
#: How eager is kept out of the candidates' reach (``baseline_measured``).
EagerIsolation: TypeAlias = Literal["private_copy", "shared"]

Phase = Literal["baseline_build", "baseline_measure", "build", "correctness", "measure"]
#: Keys renderers own; never used as payload keys (design §5).
RESERVED_KEYS: Final = frozenset(
    {"message", "name", "level", "timestamp", "logger", "exception", "event"}
)


def _clean(value: Any) -> Any:
    """Make a payload value JSON-safe: finite floats only (a non-finite float becomes None)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@attrs.frozen
class Event:
    """One log event: its dotted name, level and flat payload (no reserved keys)."""

    name: str
    level: Level
    fields: Mapping[str, Any]

    def __attrs_post_init__(self) -> None:
        """Refuse payload keys that renderers own."""
        clash = RESERVED_KEYS.intersection(self.fields)
        if clash:
            raise InvalidValueError(f"event {self.name!r} uses reserved keys {sorted(clash)}")


def _event(name: str, level: Level, run_id: str, module_name: str, **fields: Any) -> Event:
    payload = {"schema_version": SCHEMA_VERSION, "run_id": run_id, "module_name": module_name}
    payload.update({k: _clean(v) for k, v in fields.items()})
    return Event(name, level, payload)


def new_run_id() -> str:
    """Return a fresh id shared by all events of one tune call."""
    return uuid.uuid4().hex
