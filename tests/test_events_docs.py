"""docs/events.md, the event classes and the JSON Schema generated from them cannot drift apart.

Every event name has its section in docs/events.md; every key the schema gives an event, at any
depth (a result's parts, a list's items), is named in that section, and a row of its table where
the section documents that object in a table; the keys every event carries are in "Conventions";
the schema version the page states is the schema's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from aitune_fp.core.results import PARTS
from aitune_fp.events.candidates import CandidateMeasured
from aitune_fp.events.ingest import event_schema
from aitune_fp.events.kinds import event_names
from aitune_fp.events.schema import build_schema
from tests.factories import result_of, schema_errors

DOC = (Path(__file__).resolve().parents[1] / "docs" / "events.md").read_text(encoding="utf-8")
COMMON = {"schema_version", "run_id", "module_name", "summary"}


def _sections() -> dict[str, str]:
    """Each section of docs/events.md (up to the next heading), by its heading: the event name
    for a ``### `event.name``` section."""
    parts = re.split(r"^##+ (.*)$", DOC, flags=re.M)
    headings = [re.sub(r"^`([a-z_.]+)`.*", r"\1", h) for h in parts[1::2]]
    return dict(zip(headings, parts[2::2], strict=True))


def _named(text: str) -> set[str]:
    """The keys ``text`` names in backticks."""
    return set(re.findall(r"`([a-z_0-9]+)`", text))


def _rows(text: str) -> set[str]:
    """The keys named in the first column of ``text``'s table rows."""
    return {k for row in re.findall(r"^\|([^|]*)\|", text, flags=re.M) for k in _named(row)}


def _then(schema: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Each event's own part of ``schema`` (its payload's keys), by event name."""
    return {b["if"]["properties"]["event"]["const"]: b["then"] for b in schema["allOf"]}


def _keys(node: Mapping[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The path of every key under ``node``: into nested objects and into a list's items."""
    for key, sub in node.get("properties", {}).items():
        yield (*path, key)
        yield from _keys(sub, (*path, key))
    if "items" in node:
        yield from _keys(node["items"], path)


def _at(node: Mapping[str, Any], path: tuple[str, ...]) -> Mapping[str, Any]:
    for key in path:
        node = node["properties"][key]
    return node


def _required(schema: Mapping[str, Any]) -> dict[str, list[str]]:
    return {name: list(then.get("required", [])) for name, then in _then(schema).items()}


def missing_sections(names: Iterable[str]) -> list[str]:
    """The event names among ``names`` that docs/events.md has no section for."""
    return sorted(set(names) - set(_sections()))


def undocumented_keys(name: str, schema: Mapping[str, Any]) -> list[str]:
    """The keys ``schema`` gives event ``name`` (at any depth) that its section does not name."""
    named = _named(_sections().get(name, ""))
    return [".".join(p) for p in _keys(_then(schema)[name]) if p[-1] not in named | COMMON]


#: The objects docs/events.md lists key by key in a table, by event (``()``: the payload); a
#: measured candidate's result has a table of its own fields and of each part's.
TABLED: dict[str, list[tuple[str, ...]]] = {
    "aitune_fp.validation.started": [()],
    "aitune_fp.validation.baseline_measured": [()],
    "aitune_fp.validation.correctness_checked": [()],
    "aitune_fp.validation.candidate_measured": [("result",), *(("result", p) for p in PARTS)],
    "aitune_fp.validation.selection_decided": [("selection",)],
}


def unlisted_rows(name: str, schema: Mapping[str, Any]) -> list[str]:
    """The keys of event ``name``'s objects in ``TABLED`` that its section's table has no row for."""
    then, rows = _then(schema)[name], _rows(_sections()[name])
    paths = [(*p, k) for p in TABLED[name] for k in _at(then, p)["properties"]]
    return [".".join(p) for p in paths if p[-1] not in rows]


def test_every_event_name_has_its_section() -> None:
    """The registered names and the documented sections are one list."""
    assert missing_sections(event_names()) == []
    assert {h for h in _sections() if h.startswith("aitune_fp.")} == set(event_names())


def test_the_checks_read_the_generated_schema() -> None:
    """The shipped schema the docs are checked against is the generated one."""
    assert _required(event_schema()) == _required(build_schema())


@pytest.mark.parametrize("name", sorted(_then(event_schema())))
def test_every_key_is_documented(name: str) -> None:
    """Each key the schema gives an event, optional or nested, is named in backticks in its
    section."""
    missing = undocumented_keys(name, event_schema())
    assert not missing, f"docs/events.md's section for {name} does not name {missing}"


@pytest.mark.parametrize("name", sorted(TABLED))
def test_every_key_of_a_table_has_its_row(name: str) -> None:
    """Where a section documents an object in a table, each of its keys is a row, not a mention."""
    missing = unlisted_rows(name, event_schema())
    assert not missing, f"docs/events.md's table for {name} has no row for {missing}"


def test_the_keys_every_event_carries_are_in_the_conventions() -> None:
    """The schema's common keys (and the renderer's and a sweep's) are named in "Conventions"."""
    assert set(event_schema()["properties"]) - _named(_sections()["Conventions"]) == set()


def test_the_stated_schema_version_is_the_schema_s() -> None:
    """The version the page states (the common keys' table, the example line) is the schema's
    const, and "Schema versions" says what changed in it."""
    const = event_schema()["properties"]["schema_version"]["const"]
    stated = re.findall(r"^\| `schema_version` \| int \| `(\d+)`", DOC, flags=re.M)
    stated += re.findall(r'"schema_version": (\d+)', DOC)
    assert stated and {int(n) for n in stated} == {const}
    assert max(int(n) for n in re.findall(r"^- \*\*(\d+)\*\*:", DOC, flags=re.M)) == const


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
    assert line["result"] == event.fields["result"], "the example line lacks keys a tune writes"
    assert schema_errors(line) == []
    assert f"{line['result']['decided']['estimate']:.2f}x" in line["summary"]


def test_reading_back_prints_the_decided_figure() -> None:
    """The read-back example prints each result's estimate, never ``r.speedup`` alone."""
    block = DOC[DOC.index("Reading a log back") :]
    code = block[block.index("```python") : block.index("```", block.index("```python") + 3)]
    assert "r.estimate" in code and "r.speedup" not in code
