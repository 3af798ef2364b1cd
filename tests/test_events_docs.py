"""docs/events.md, the shipped JSON Schema and the event builders cannot drift apart.

Every event name has its section in docs/events.md, and every key the schema requires of an
event is named in that section (or among the keys every event carries).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aitune_fp import events
from aitune_fp.ingest import event_schema

DOC = (Path(__file__).resolve().parents[1] / "docs" / "events.md").read_text(encoding="utf-8")
COMMON = {"schema_version", "run_id", "module_name", "summary"}


def _sections() -> dict[str, str]:
    """Each ``### `event.name``` section of docs/events.md, by event name."""
    parts = re.split(r"^### `([a-z_.]+)`.*$", DOC, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _required() -> dict[str, list[str]]:
    schema = event_schema()
    return {
        block["if"]["properties"]["event"]["const"]: list(block["then"].get("required", []))
        for block in schema["allOf"]
    }


def test_every_event_name_has_its_section() -> None:
    """The schema's names, the builders' names and the documented sections are one list."""
    assert set(_sections()) == set(events.EVENT_NAMES)


@pytest.mark.parametrize("name", sorted(_required()))
def test_every_required_key_is_documented(name: str) -> None:
    """Each key the schema requires of an event is named in backticks in its section."""
    section = _sections().get(name, "")
    named = set(re.findall(r"`([a-z_0-9]+)`", section))
    missing = [k for k in _required()[name] if k not in named and k not in COMMON]
    assert not missing, f"docs/events.md's section for {name} does not name {missing}"
