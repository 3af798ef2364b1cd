"""Read aitune_fp event logs (JSON lines) back into results and one summary per tune run.

Streaming and defensive: a log of any size is read line by line (lines over 1 MiB are skipped),
nothing in it is executed or unpickled (``json.loads`` only), and every line that is not a valid
event of this schema is reported with its line number instead of stopping the read. Events are
checked against ``events.schema.json`` by a small built-in interpreter of the schema keywords the
file uses (no runtime dependency on ``jsonschema``; the tests cross-check both). No torch import.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterable, Iterator
from typing import IO, Any, TypeAlias

from aitune_fp.errors import InvalidValueError
from aitune_fp.events.ingest.runs import summarize
from aitune_fp.events.ingest.schema import event_schema, validate_event
from aitune_fp.events.ingest.values import (
    BadLine,
    EventLine,
    IngestReport,
)
from aitune_fp.events.names import SCHEMA_VERSION

__all__ = ["MAX_LINE_BYTES", "ingest", "read_events"]

#: Longest line read as an event; longer lines are reported as bad and skipped.
MAX_LINE_BYTES = 1 << 20

_PREFIX = "aitune_fp."

Source: TypeAlias = "str | os.PathLike[str] | Iterable[str] | Iterable[bytes]"


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------


def _refuse_constant(name: str) -> float:
    raise InvalidValueError(f"non-finite number {name} is not valid JSON")


def _finite_float(text: str) -> float:
    """A JSON number as a float; one beyond float range (``1e400``) is refused, not made inf."""
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise InvalidValueError(f"number {text[:40]} is beyond float range")
    return value


def _bounded_int(text: str) -> int:
    """A JSON integer; one too long for a float (over 300 digits) is refused."""
    if len(text.lstrip("-")) > 300:
        raise InvalidValueError(f"integer of {len(text)} digits is beyond float range")
    return int(text)


@functools.cache
def _integer_keys() -> frozenset[str]:
    """Keys the schema types as integers (anywhere in it): ``batch_size``, ``n_calls``, ..."""
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, sub in node.get("properties", {}).items():
                kind = sub.get("type") if isinstance(sub, dict) else None
                if kind == "integer" or (isinstance(kind, list) and "integer" in kind):
                    found.add(key)
            for sub in node.values():
                walk(sub)
        elif isinstance(node, list):
            for sub in node:
                walk(sub)

    walk(event_schema())
    return frozenset(found)


def _integral(obj: dict[str, Any]) -> dict[str, Any]:
    """Integer fields written as integral floats (``"batch_size": 32.0``, schema-valid) as ints."""
    keys = _integer_keys()
    for key, value in obj.items():
        if key in keys and isinstance(value, float) and value.is_integer():
            obj[key] = int(value)
    return obj


def _raw_lines(source: Source) -> Iterator[bytes | str | None]:
    """Yield the lines of ``source``; ``None`` stands for a line over MAX_LINE_BYTES."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as handle:
            yield from _bounded_lines(handle)
    else:
        for line in source:
            if len(line) > MAX_LINE_BYTES:
                yield None
            else:
                yield line


def _bounded_lines(handle: IO[bytes]) -> Iterator[bytes | None]:
    while True:
        line = handle.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            while True:  # discard the rest of the overlong line
                rest = handle.readline(MAX_LINE_BYTES)
                if not rest or rest.endswith(b"\n"):
                    break
            yield None
        else:
            yield line


def _parse(line_no: int, raw: bytes | str) -> EventLine | BadLine | None:
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return BadLine(line_no=line_no, reason=f"not UTF-8 text ({exc.reason})")
    else:
        text = raw
    text = text.strip().removeprefix("\ufeff")  # a byte-order mark some editors write
    if not text:
        return None
    try:
        obj = json.loads(
            text, parse_constant=_refuse_constant, parse_float=_finite_float, parse_int=_bounded_int
        )
    except (ValueError, RecursionError) as exc:
        return BadLine(line_no=line_no, reason=f"not JSON: {exc}")
    if not isinstance(obj, dict):
        return BadLine(line_no=line_no, reason=f"not a JSON object (a {type(obj).__name__})")
    name = obj.get("event")
    if not isinstance(name, str) or not name.startswith(_PREFIX):
        return BadLine(
            line_no=line_no, reason="not an aitune_fp event (no 'aitune_fp.*' event key)"
        )
    version = obj.get("schema_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        return BadLine(
            line_no=line_no,
            reason=f"schema_version {version} is newer than this reader ({SCHEMA_VERSION})",
        )
    errors = validate_event(obj)
    if errors:
        more = f" (+{len(errors) - 3} more)" if len(errors) > 3 else ""
        return BadLine(line_no=line_no, reason="invalid event: " + "; ".join(errors[:3]) + more)
    return EventLine(line_no=line_no, event=name, fields=_integral(obj), text=text)


def read_events(source: Source) -> Iterator[EventLine | BadLine]:
    """Yield each line of a JSON-lines log as a valid :class:`EventLine` or a :class:`BadLine`.

    ``source`` is a path, or an iterable of lines (str or bytes). Blank lines are skipped.
    """
    for line_no, raw in enumerate(_raw_lines(source), start=1):
        if raw is None:
            yield BadLine(line_no=line_no, reason=f"line longer than {MAX_LINE_BYTES} bytes")
            continue
        parsed = _parse(line_no, raw)
        if parsed is not None:
            yield parsed


def ingest(source: Source) -> IngestReport:
    """Read a JSON-lines event log (a path or lines) into one :class:`RunSummary` per run."""
    return summarize(read_events(source))
