"""docs/events.md, the event classes and the JSON Schema generated from them cannot drift apart.

Every event name has its section in docs/events.md, and every key the schema requires of an
event is named in that section (or among the keys every event carries).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from aitune_fp.events.candidates import CandidateMeasured
from aitune_fp.events.ingest import event_schema
from aitune_fp.events.kinds import event_names
from aitune_fp.events.schema import build_schema
from tests.factories import result_of

DOC = (Path(__file__).resolve().parents[1] / "docs" / "events.md").read_text(encoding="utf-8")
COMMON = {"schema_version", "run_id", "module_name", "summary"}


def _sections() -> dict[str, str]:
    """Each ``### `event.name``` section of docs/events.md, by event name."""
    parts = re.split(r"^### `([a-z_.]+)`.*$", DOC, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _required(schema: Mapping[str, Any]) -> dict[str, list[str]]:
    return {
        block["if"]["properties"]["event"]["const"]: list(block["then"].get("required", []))
        for block in schema["allOf"]
    }


def missing_sections(names: Iterable[str]) -> list[str]:
    """The event names among ``names`` that docs/events.md has no section for."""
    return sorted(set(names) - set(_sections()))


def undocumented_keys(name: str, schema: Mapping[str, Any]) -> list[str]:
    """The keys ``schema`` requires of event ``name`` that its section does not name."""
    named = set(re.findall(r"`([a-z_0-9]+)`", _sections().get(name, "")))
    return [k for k in _required(schema)[name] if k not in named and k not in COMMON]


def test_every_event_name_has_its_section() -> None:
    """The registered names and the documented sections are one list."""
    assert missing_sections(event_names()) == []
    assert set(_sections()) == set(event_names())


def test_the_checks_read_the_generated_schema() -> None:
    """The shipped schema the docs are checked against is the generated one."""
    assert _required(event_schema()) == _required(build_schema())


@pytest.mark.parametrize("name", sorted(_required(event_schema())))
def test_every_required_key_is_documented(name: str) -> None:
    """Each key the schema requires of an event is named in backticks in its section."""
    missing = undocumented_keys(name, event_schema())
    assert not missing, f"docs/events.md's section for {name} does not name {missing}"


def _example_line() -> dict[str, Any]:
    """docs/events.md's example ``candidate_measured`` line (its ```json block)."""
    block = re.search(r"^```json\n(.*?)^```", DOC, flags=re.S | re.M)
    assert block is not None, "docs/events.md lost its example line"
    line: dict[str, Any] = json.loads(block.group(1))
    return line


def test_the_example_line_is_what_a_tune_writes_for_its_figures() -> None:
    """Its summary is the one candidate_measured writes today: the figure the verdict was
    decided on (the estimate and its interval), not AITune's mean ratio."""
    line = _example_line()
    result = result_of(line)
    event = CandidateMeasured(
        run_id=line["run_id"],
        module_name=line["module_name"],
        result=result,
        duration_s=line["duration_s"],
    ).to_event()
    assert line["summary"] == event.fields["summary"]
    assert f"{line['result']['decided']['estimate']:.2f}x" in line["summary"]


def test_reading_back_prints_the_decided_figure() -> None:
    """The read-back example prints each result's estimate, never ``r.speedup`` alone."""
    block = DOC[DOC.index("Reading a log back") :]
    code = block[block.index("```python") : block.index("```", block.index("```python") + 3)]
    assert "r.estimate" in code and "r.speedup" not in code
