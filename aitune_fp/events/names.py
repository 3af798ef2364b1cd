"""What an event is on the wire: its name prefixes, levels, schema version and :class:`Event`."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

import attrs

from aitune_fp.errors import InvalidValueError

if TYPE_CHECKING:
    from aitune_fp.events.kinds import Payload

__all__ = [
    "LOGGER_NAME",
    "SCHEMA_VERSION",
    "SWEEP_PREFIX",
    "VALIDATION_PREFIX",
    "Event",
    "new_run_id",
]


LOGGER_NAME: Final = "aitune_fp"
#: Bumped whenever an event's keys change (a reader refuses keys it does not know). 2: the
#: measured and selection events carry their records nested (``result``, ``selection``).
SCHEMA_VERSION: Final = 2

#: The prefixes of a tune's own events and of a sweep's (``aitune-fp sweep``).
VALIDATION_PREFIX: Final = "aitune_fp.validation."
SWEEP_PREFIX: Final = "aitune_fp.sweep."

Level = Literal["debug", "info", "warning", "error"]
#: How eager is kept out of the candidates' reach (``baseline_measured``).
EagerIsolation: TypeAlias = Literal["private_copy", "shared", "process"]

Phase = Literal["baseline_build", "baseline_measure", "build", "correctness", "measure"]
#: Keys renderers own; never used as payload keys (design §5).
RESERVED_KEYS: Final = frozenset(
    {"message", "name", "level", "timestamp", "logger", "exception", "event"}
)


@attrs.frozen
class Event:
    """One log event: its dotted name, level and flat payload, and the typed value it was made from."""

    name: str
    level: Level
    fields: Mapping[str, Any]
    payload: Payload | None = attrs.field(default=None, kw_only=True, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        """Refuse payload keys that renderers own."""
        clash = RESERVED_KEYS.intersection(self.fields)
        if clash:
            raise InvalidValueError(f"event {self.name!r} uses reserved keys {sorted(clash)}")


def new_run_id() -> str:
    """Return a fresh id shared by all events of one tune call."""
    return uuid.uuid4().hex
