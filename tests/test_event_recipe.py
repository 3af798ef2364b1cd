"""The recipe of docs/architecture.md for an event, counted: its class, its fold line, its docs.

A toy event defined here (its class, registered for these tests only; ``to_event`` makes its
Event, as the code that emits it does) is in the generated schema with no other edit, its payload validates
with jsonschema and with ingest's checker, it reaches the sinks through ``emit`` and the fold
counts it; what is left is its docs/events.md section (and regenerating the shipped file).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Literal

import attrs
import jsonschema
import pytest

from aitune_fp.core.report import TuneReport
from aitune_fp.events import kinds
from aitune_fp.events.ingest import ingest
from aitune_fp.events.kinds import Event, Payload, event_names, fold
from aitune_fp.events.kinds import event as event_kind
from aitune_fp.events.schema import SCHEMA_PATH, build_schema, schema_text
from aitune_fp.events.sending import emit, sinks
from aitune_fp.testing import capture_events

from .test_events_docs import missing_sections, undocumented_keys

TOY = "aitune_fp.validation.toy_checked"
RUN = "0123456789abcdef"


@pytest.fixture(name="toy")
def _toy() -> Iterator[type[Payload]]:
    """The one class the recipe asks for, registered for one test and taken back after it."""

    @event_kind(TOY, "info")
    @attrs.frozen(kw_only=True)
    class ToyChecked(Payload):
        """A toy: a backend was checked ``n_checks`` times."""

        backend_description: str
        n_checks: int = attrs.field(metadata={"minimum": 1, "description": "checks run"})
        ratio: float | None = attrs.field(default=None, metadata={"minimum": 0})
        mode: Literal["quick", "full"] = "quick"

    try:
        yield ToyChecked
    finally:
        kinds.unregister(TOY)
    assert TOY not in kinds.registered()


def _built(toy: type[Payload], **overrides: Any) -> Event:
    values: dict[str, Any] = {
        "run_id": RUN,
        "module_name": "mlp",
        "summary": "toy checked",
        "backend_description": "A()",
        "n_checks": 3,
        "ratio": 1.5,
    }
    return toy.from_fields({**values, **overrides}).to_event()


def _line(event: Event) -> dict[str, Any]:
    return {"event": event.name, **event.fields}


def test_the_toy_is_in_the_generated_schema(toy: type[Payload]) -> None:
    """Its name, its required keys (no default) and each key's schema, from the class alone."""
    generated = build_schema()
    assert TOY in generated["properties"]["event"]["enum"]
    block = next(
        b["then"] for b in generated["allOf"] if b["if"]["properties"]["event"]["const"] == TOY
    )
    assert block == {
        "required": ["backend_description", "n_checks"],
        "properties": {
            "backend_description": {"type": "string"},
            "n_checks": {"type": "integer", "minimum": 1, "description": "checks run"},
            "ratio": {"type": ["number", "null"], "minimum": 0},
            "mode": {"enum": ["quick", "full"]},
        },
    }
    # the shipped file is now stale: the freshness test fails until it is regenerated
    assert SCHEMA_PATH.read_text(encoding="utf-8") != schema_text()


def test_the_toy_payload_validates(toy: type[Payload]) -> None:
    """jsonschema accepts it against the generated schema and refuses a bad one; ingest reads it
    through its class (a missing key or a wrong type is a bad line)."""
    generated = build_schema()
    validator = jsonschema.Draft202012Validator(generated)
    good = _line(_built(toy))
    validator.validate(good)
    for bad in ({"n_checks": 0}, {"mode": "slow"}, {"ratio": -1.0}):
        assert not validator.is_valid({**good, **bad}), bad
    missing = {k: v for k, v in good.items() if k != "n_checks"}
    assert not validator.is_valid(missing)
    read = ingest([json.dumps(line) for line in (missing, {**good, "mode": "slow"})])
    assert read.n_events == 0 and len(read.bad_lines) == 2


def test_the_toy_reaches_the_sinks_and_the_fold(toy: type[Payload]) -> None:
    """``emit`` hands it to the sinks with its typed payload; the fold counts it, sets nothing."""
    built = _built(toy, ratio=float("nan"))
    assert built.fields["ratio"] is None and built.fields["mode"] == "quick"
    seen: list[Event] = []
    with capture_events() as logged, sinks(seen.append):
        emit(built)
    assert seen == [built] and isinstance(seen[0].payload, toy)
    assert [e["event"] for e in logged] == [TOY]
    report = fold(TuneReport(run_id=RUN, module_name="mlp"), seen[0].payload)
    assert report == TuneReport(run_id=RUN, module_name="mlp", n_events=1)
    # ingest reads it through its class: no schema step between
    read = ingest([json.dumps(_line(built))])
    assert read.n_events == 1 and read.bad_lines == ()


def test_what_is_left_is_its_docs_section(toy: type[Payload]) -> None:
    """The docs check names the toy as the one event without a section, its keys undocumented."""
    assert missing_sections(kinds.event_names()) == [TOY]
    undocumented = undocumented_keys(TOY, build_schema())  # optional ones too
    assert sorted(undocumented) == ["backend_description", "mode", "n_checks", "ratio"]
    assert missing_sections([n for n in event_names() if n != TOY]) == []
