"""The events JSON Schema, compiled once into checking closures (no ``jsonschema`` at runtime).

Interprets the keywords ``events.schema.json`` uses. The schema's ``allOf`` of
``if {event: const} then {...}`` blocks is compiled into one lookup by event name, so an event is
checked against its own block only: a log reads at the speed of ``json.loads`` (issue 32).
"""

from __future__ import annotations

import functools
import importlib.resources
import json
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

__all__ = ["compile_schema", "event_schema", "validate_event"]

#: A compiled schema node: checks ``value`` at ``path``, appending why it is not valid.
Checker: TypeAlias = Callable[[Any, str, list[str]], None]


@functools.cache
def _schema_text() -> str:
    return importlib.resources.files("aitune_fp").joinpath("events.schema.json").read_text("utf-8")


def event_schema() -> dict[str, Any]:
    """Return a fresh copy of the events JSON Schema (draft 2020-12) shipped with the package."""
    schema: dict[str, Any] = json.loads(_schema_text())
    return schema


def _is_type(value: object, name: str) -> bool:
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "string":
        return isinstance(value, str)
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if name == "integer":
        return isinstance(value, int) or float(value).is_integer()
    return name == "number"


def _json_equal(a: object, b: object) -> bool:
    """JSON equality: booleans are not numbers."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _bounds(schema: Mapping[str, Any]) -> list[Checker]:
    """The numeric and string-length keywords of ``schema``, one checker each."""
    steps: list[Checker] = []
    if "minimum" in schema:
        low = schema["minimum"]
        steps.append(
            lambda v, p, e: (
                e.append(f"{p}: {v!r} is below the minimum {low!r}")
                if _is_number(v) and v < low
                else None
            )
        )
    if "exclusiveMinimum" in schema:
        above = schema["exclusiveMinimum"]
        steps.append(
            lambda v, p, e: (
                e.append(f"{p}: {v!r} must be > {above!r}")
                if _is_number(v) and v <= above
                else None
            )
        )
    if "exclusiveMaximum" in schema:
        below = schema["exclusiveMaximum"]
        steps.append(
            lambda v, p, e: (
                e.append(f"{p}: {v!r} must be < {below!r}")
                if _is_number(v) and v >= below
                else None
            )
        )
    if "minLength" in schema:
        shortest = schema["minLength"]
        steps.append(
            lambda v, p, e: (
                e.append(f"{p}: string shorter than {shortest}")
                if isinstance(v, str) and len(v) < shortest
                else None
            )
        )
    return steps


def _object_steps(schema: Mapping[str, Any]) -> list[Checker]:
    """``required``, ``properties`` and ``additionalProperties`` (they apply to objects only)."""
    required = tuple(schema.get("required", ()))
    props = {key: compile_schema(sub) for key, sub in schema.get("properties", {}).items()}
    extra = schema.get("additionalProperties")
    extra_check = compile_schema(extra) if isinstance(extra, dict) else None
    if not (required or props or extra_check):
        return []

    def check(value: Any, path: str, errors: list[str]) -> None:
        if not isinstance(value, dict):
            return
        for key in required:
            if key not in value:
                errors.append(f"{path}: missing required key {key!r}")
        for key, sub in props.items():
            if key in value:
                sub(value[key], f"{path}.{key}", errors)
        if extra_check is not None:
            for key in [k for k in value if k not in props]:
                extra_check(value[key], f"{path}.{key}", errors)

    return [check]


def _dispatch_key(block: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(key, name)`` of an ``if {properties: {key: {const: name}}} then ...`` block, else None."""
    probe = block.get("if")
    if set(block) - {"if", "then"} or not isinstance(probe, dict) or set(probe) != {"properties"}:
        return None
    props = probe["properties"]
    if not isinstance(props, dict) or len(props) != 1:
        return None
    ((key, sub),) = props.items()
    if not isinstance(sub, dict) or set(sub) != {"const"} or not isinstance(sub["const"], str):
        return None
    return key, sub["const"]


def _all_of(blocks: list[Mapping[str, Any]]) -> list[Checker]:
    """``allOf``: blocks keyed on one constant string (the event name) become one lookup."""
    keys = [_dispatch_key(b) for b in blocks]
    if not blocks or any(k is None for k in keys) or len({k[0] for k in keys if k}) != 1:
        return [compile_schema(b) for b in blocks]
    key = keys[0][0] if keys[0] else ""
    table: dict[str, list[Checker]] = {}
    every: list[Checker] = []
    for block, found in zip(blocks, keys, strict=True):
        then = compile_schema(block.get("then", {}))
        every.append(then)
        table.setdefault(found[1] if found else "", []).append(then)

    def check(value: Any, path: str, errors: list[str]) -> None:
        if isinstance(value, dict) and key in value:  # the `if` holds for its own block only
            name = value[key]
            chosen = table.get(name, []) if isinstance(name, str) else []
        else:  # `if` holds vacuously: every block applies
            chosen = every
        for then in chosen:
            then(value, path, errors)

    return [check]


def _if_then(schema: Mapping[str, Any]) -> list[Checker]:
    probe = compile_schema(schema["if"])
    then = compile_schema(schema["then"]) if "then" in schema else None

    def check(value: Any, path: str, errors: list[str]) -> None:
        found: list[str] = []
        probe(value, path, found)
        if not found and then is not None:
            then(value, path, errors)

    return [check]


def compile_schema(schema: Mapping[str, Any]) -> Checker:
    """One checker for ``schema`` (the keywords the events schema uses), built once."""
    types = schema.get("type")
    names = None if types is None else ([types] if isinstance(types, str) else list(types))
    steps: list[Checker] = []
    if "const" in schema:
        const = schema["const"]
        steps.append(
            lambda v, p, e: (
                None
                if _json_equal(v, const)
                else e.append(f"{p}: expected {const!r}, got {v!r:.80}")
            )
        )
    if "enum" in schema:
        options = list(schema["enum"])
        simple = frozenset(o for o in options if isinstance(o, str))
        steps.append(
            lambda v, p, e: (
                None
                if (isinstance(v, str) and v in simple) or any(_json_equal(v, o) for o in options)
                else e.append(f"{p}: {v!r:.80} is not one of {options!r}")
            )
        )
    steps += _bounds(schema)
    steps += _object_steps(schema)
    if "items" in schema:
        item = compile_schema(schema["items"])

        def items(value: Any, path: str, errors: list[str]) -> None:
            if isinstance(value, list):
                for i, one in enumerate(value):
                    item(one, f"{path}[{i}]", errors)

        steps.append(items)
    steps += _all_of(list(schema.get("allOf", ())))
    if "if" in schema:
        steps += _if_then(schema)

    plain = _PLAIN_TYPES.get(names[0]) if names is not None and len(names) == 1 else None

    def check(value: Any, path: str, errors: list[str]) -> None:
        if names is not None and not (
            isinstance(value, plain) if plain else any(_is_type(value, n) for n in names)
        ):
            errors.append(f"{path}: expected {'/'.join(names)}, got {type(value).__name__}")
            return
        for step in steps:
            step(value, path, errors)

    return check


#: JSON types that are one Python type exactly (numbers and booleans are not: bool is an int).
_PLAIN_TYPES: dict[str, type] = {"string": str, "object": dict, "array": list}


@functools.cache
def _shipped() -> Checker:
    return compile_schema(event_schema())


def validate_event(obj: object, schema: Mapping[str, Any] | None = None) -> list[str]:
    """Return why ``obj`` is not a valid event (an empty list when it is).

    ``schema``: the events schema to check against (the shipped one, compiled once, when None).
    """
    errors: list[str] = []
    (_shipped() if schema is None else compile_schema(schema))(obj, "$", errors)
    return errors
