"""What an event is on the wire: its name prefixes, levels, schema version and run ids."""

from __future__ import annotations

import uuid
from typing import Final, Literal, TypeAlias

LOGGER_NAME: Final = "aitune_fp"
#: Bumped whenever an event's keys change (a reader refuses keys it does not know). 2: the
#: measured and selection events carry their records nested (``result``, ``selection``).
SCHEMA_VERSION: Final = 3

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


def new_run_id() -> str:
    """Return a fresh id shared by all events of one tune call."""
    return uuid.uuid4().hex
