"""The events JSON Schema, generated from the payload classes (``python -m aitune_fp.events.schema``)."""

from __future__ import annotations

import collections.abc
import json
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal, Union

import attrs

from aitune_fp.core._checks import schema_keywords
from aitune_fp.errors import InvalidTypeError
from aitune_fp.events.kinds import ABSENT, SCHEMA_VERSION, Keywords, Payload, registered

#: The shipped schema file (package data read by ``aitune_fp.events.ingest.event_schema``).
SCHEMA_PATH: Final = Path(__file__).resolve().parent.parent / "events.schema.json"
#: The command that rewrites it.
REGENERATE: Final = "python -m aitune_fp.events.schema"

_DESCRIPTION: Final = (
    f"One event of aitune_fp (schema_version {SCHEMA_VERSION}), as a JSON object: the "
    "dotted event name under 'event', the common keys, and the keys of that event (a record "
    "it carries, such as a result, as a nested object). Renderer "
    "keys (timestamp, level, log_level, logger) and a sweep's (sweep_id, hostname, device_name) "
    "are allowed. "
    "Units are in the key names (_s: seconds, _samples_per_s: samples per second); speedups are "
    "ratios (throughput / eager throughput). See docs/events.md."
)
_LEVELS: Final = ["debug", "info", "warning", "error", "critical"]
#: Keys a renderer or ``aitune-fp sweep`` adds to every event (none of them a payload key).
ADDED_KEYS: Final[Mapping[str, Any]] = {
    "timestamp": {"type": "string"},
    "level": {"enum": _LEVELS},
    "log_level": {"enum": _LEVELS},
    "logger": {"type": "string"},
    "sweep_id": {
        "type": "string",
        "description": "the sweep this tune ran in (aitune-fp sweep adds it to every event of "
        "its log)",
    },
    "hostname": {
        "type": ["string", "null"],
        "description": "the machine that ran the event's tune (aitune-fp sweep)",
    },
    "device_name": {
        "type": "string",
        "description": "the device that ran the event's tune, e.g. 'NVIDIA H200' or the CPU "
        "model (aitune-fp sweep)",
    },
}
_SCALARS: Final[Mapping[Any, str]] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
}
_ARRAYS: Final = (list, tuple, collections.abc.Sequence)
_OBJECTS: Final = (dict, collections.abc.Mapping)


def _split(hint: Any) -> tuple[Any, dict[str, Any]]:
    """``Annotated[T, Keywords(...)]`` as ``T`` and its keywords (none for a plain type)."""
    if typing.get_origin(hint) is typing.Annotated:
        extra: dict[str, Any] = {}
        for item in hint.__metadata__:
            if isinstance(item, Keywords):
                extra.update(item)
        return hint.__origin__, extra
    return hint, {}


def _members(hint: Any) -> tuple[list[Any], bool, bool]:
    """A type's union members but None and ABSENT; whether it may be null, be left out."""
    if typing.get_origin(hint) not in (Union, types.UnionType):
        return [hint], False, False
    members, nullable, absent = [], False, False
    for member in typing.get_args(hint):
        if member is type(None):
            nullable = True
        elif typing.get_origin(member) is Literal and typing.get_args(member) == (ABSENT,):
            absent = True
        else:
            members.append(member)
    return members, nullable, absent


def _object(row: type) -> dict[str, Any]:
    """A ``TypedDict`` row or a nested attrs record: an object with its required keys' schemas."""
    if attrs.has(row):
        required, props = _keys(row)
    else:
        hints = typing.get_type_hints(row, include_extras=True)
        required = [key for key in hints if key in row.__required_keys__]  # type: ignore[attr-defined]
        props = {key: property_schema(hint) for key, hint in hints.items()}
    return {"type": "object", "required": required, "properties": props}


def _plain(hint: Any) -> dict[str, Any]:
    """The schema of one non-union type: a scalar, a Literal, a list, a mapping or a row."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return {}
    if isinstance(hint, type) and hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    if origin is Literal:
        return {"enum": list(args)}
    if typing.is_typeddict(hint) or attrs.has(hint):  # a row, or a record the payload nests
        return _object(hint)
    if origin in _ARRAYS and args:
        return {"type": "array", "items": property_schema(args[0])}
    if origin in _OBJECTS or hint in _OBJECTS:
        if len(args) == 2 and args[1] is not Any:
            return {"type": "object", "additionalProperties": property_schema(args[1])}
        return {"type": "object"}
    raise InvalidTypeError(f"no JSON Schema for the event key type {hint!r}")


def property_schema(hint: Any, keywords: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON Schema of one key from its type hint and extra ``keywords`` (``minimum``, ...)."""
    base, extra = _split(hint)
    members, nullable, _ = _members(base)
    literals = [m for m in members if typing.get_origin(m) is Literal]
    if literals and len(literals) == len(members):
        members = [Literal[tuple(v for m in literals for v in typing.get_args(m))]]
    if len(members) != 1:
        raise InvalidTypeError(f"no JSON Schema for the event key type {hint!r}")
    schema = _plain(members[0])
    words = {**extra, **(keywords or {})}
    if "enum" in words:
        schema = {"enum": list(words.pop("enum"))}
    if nullable and "enum" in schema:
        schema["enum"] = [*schema["enum"], *([None] if None not in schema["enum"] else [])]
    elif nullable and "type" in schema:
        schema["type"] = [schema["type"], "null"]
    return {**schema, **words}


def _is_optional(field: attrs.Attribute[Any], hint: Any) -> bool:
    """A key with a default is optional (one whose default is ABSENT is also left out)."""
    return field.default is not attrs.NOTHING or _members(_split(hint)[0])[2]


def _keys(cls: type) -> tuple[list[str], dict[str, Any]]:
    """An attrs class's required keys and each key's schema (with its validators' bounds)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    required: list[str] = []
    props: dict[str, Any] = {}
    for field in attrs.fields(cls):
        hint = hints.get(field.name, field.type)
        props[field.name] = property_schema(
            hint, {**schema_keywords(field.validator), **field.metadata}
        )
        if not _is_optional(field, hint):
            required.append(field.name)
    return required, props


def _block(name: str, cls: type[Payload]) -> dict[str, Any]:
    """The ``if event == name then`` block of one event: its required keys and their schemas."""
    required, props = _keys(cls)
    own = set(cls.payload_keys())
    return {
        "if": {"properties": {"event": {"const": name}}},
        "then": {
            "required": [k for k in required if k in own],
            "properties": {k: v for k, v in props.items() if k in own},
        },
    }


def build_schema() -> dict[str, Any]:
    """The whole events JSON Schema (draft 2020-12): common keys, then one block per event."""
    kinds = registered()
    common = _keys(Payload)[1]  # every common key is required (a summary left out is written)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://github.com/aitune_fp/aitune_fp/events.schema.json",
        "title": "aitune_fp structured log event",
        "description": _DESCRIPTION,
        "type": "object",
        "required": ["event", "schema_version", *common],
        "properties": {
            "event": {"enum": list(kinds)},
            "schema_version": {"const": SCHEMA_VERSION},
            **common,
            **ADDED_KEYS,
        },
        "allOf": [_block(name, cls) for name, cls in kinds.items()],
    }


def schema_text() -> str:
    """:func:`build_schema` as the file's text: two-space indented JSON and a final newline."""
    return json.dumps(build_schema(), indent=2, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite the shipped schema from the classes; with ``--check``, 1 when it is stale."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m aitune_fp.events.schema",
        description="Write aitune_fp/events.schema.json from the event classes.",
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 when the file is stale"
    )
    args = parser.parse_args(argv)
    current = SCHEMA_PATH.read_text(encoding="utf-8") if SCHEMA_PATH.exists() else ""
    return rewrite(SCHEMA_PATH, current, schema_text(), args.check, f"{SCHEMA_PATH}", REGENERATE)


def rewrite(path: Path, current: str, new: str, check: bool, name: str, fix: str) -> int:
    """Write ``new`` over ``current`` at ``path`` and say so; ``check``: write nothing, 1 if stale."""
    stale = new != current
    if stale and not check:
        path.write_text(new, encoding="utf-8")
    print(f"{name} is {('stale: run ' + fix if check else 'rewritten') if stale else 'up to date'}")
    return int(stale and check)


if __name__ == "__main__":
    sys.exit(main())
