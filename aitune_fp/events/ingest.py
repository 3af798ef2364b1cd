"""Read aitune_fp event logs back into typed events and one report per run (nothing executed).

Runs are grouped by ``run_id`` and content (``docs/events.md``, "what a run is").
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, Any, Final, TypeAlias

import attrs

from aitune_fp.core.report import TuneReport
from aitune_fp.core.results import PARTS
from aitune_fp.errors import InvalidValueError
from aitune_fp.events.candidates import CANDIDATE_MEASURED, SELECTION_DECIDED
from aitune_fp.events.kinds import SCHEMA_VERSION, Payload, fold, registered
from aitune_fp.events.schema import ADDED_KEYS

__all__ = [
    "MAX_LINE_BYTES",
    "BadLine",
    "EventLine",
    "IngestReport",
    "RunSummary",
    "event_schema",
    "ingest",
    "read_events",
    "summarize",
]

#: Longest line read as an event; longer lines are reported as bad and skipped.
MAX_LINE_BYTES = 1 << 20

_PREFIX = "aitune_fp."

Source: TypeAlias = "str | os.PathLike[str] | Iterable[str] | Iterable[bytes]"


@attrs.frozen(kw_only=True)
class EventLine:
    """One valid event read from a log: its 1-based line number, JSON object and typed payload."""

    line_no: int
    event: str
    fields: Mapping[str, Any]
    payload: Payload = attrs.field(eq=False, repr=False)
    #: The line as read (stripped): what a run's content hash is made of.
    text: str = attrs.field(default="", eq=False, repr=False)


@attrs.frozen(kw_only=True)
class BadLine:
    """A line that is not a valid aitune_fp event: its 1-based number and why."""

    line_no: int
    reason: str


#: One run rebuilt from its events: the same frozen report the wrapper makes.
RunSummary = TuneReport


@attrs.frozen(kw_only=True)
class IngestReport:
    """The runs found in a log (in order of first event) and the lines that were not events."""

    runs: tuple[RunSummary, ...]
    bad_lines: tuple[tuple[int, str], ...]
    n_lines: int
    n_events: int
    #: Runs found more than once in the log (by id and content): the events left out per id.
    repeats: tuple[tuple[str, int], ...] = ()

    @property
    def shared_run_ids(self) -> tuple[tuple[str, int], ...]:
        """Run ids that more than one run carries (other content under one id), with how many."""
        counts = Counter(run.run_id for run in self.runs)
        return tuple((run_id, n) for run_id, n in counts.items() if n > 1)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of the whole report."""
        return {"runs": [run.to_dict() for run in self.runs], **self.rest_dict()}

    def rest_dict(self) -> dict[str, Any]:
        """JSON-ready dict of all but the runs (bad lines, counts, repeats): written after them."""
        return {
            "bad_lines": [{"line_no": n, "reason": why} for n, why in self.bad_lines],
            "n_lines": self.n_lines,
            "n_events": self.n_events,
            "repeats": [{"run_id": r, "n_events_left_out": n} for r, n in self.repeats],
            "shared_run_ids": [{"run_id": r, "n_runs": n} for r, n in self.shared_run_ids],
        }


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


def event_schema() -> dict[str, Any]:
    """A fresh copy of the shipped events JSON Schema (draft 2020-12), for outside readers."""
    text = importlib.resources.files("aitune_fp").joinpath("events.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


#: The common keys; in a version 1 line, every other key of these events was the record's.
_COMMON: Final = frozenset({"run_id", "module_name", "summary"})
#: Version 1 named two result fields with their units.
_V1_RENAMED: Final = {
    "throughput_samples_per_s": "throughput",
    "baseline_throughput_samples_per_s": "baseline_throughput",
}


def _upgraded(name: str, fields: dict[str, Any]) -> dict[str, Any]:
    """A version 1 payload in today's shape: the result and the selection were flat keys."""
    if name == CANDIDATE_MEASURED:
        own, key = _COMMON | {"duration_s"}, "result"
    elif name == SELECTION_DECIDED:
        own, key = _COMMON | {"delta"}, "selection"
        fields = {k: v for k, v in fields.items() if k != "gap_unbounded"}  # null is unbounded
    else:
        return fields
    record = {_V1_RENAMED.get(k, k): v for k, v in fields.items() if k not in own}
    if key == "result":
        record = _in_parts(record)
    return {**{k: v for k, v in fields.items() if k in own}, key: record}


def _in_parts(flat: Mapping[str, Any]) -> dict[str, Any]:
    """A version 1 result (every figure a flat key) as today's: the figures in their parts."""
    nested: dict[str, Any] = {}
    for part, cls in PARTS.items():
        names = {"decision" if a.name == "rule" else a.name: a.name for a in attrs.fields(cls)}
        nested[part] = {names[k]: v for k, v in flat.items() if k in names}
    taken = {k for part in nested.values() for k in part} | {"decision"}
    return {**{k: v for k, v in flat.items() if k not in taken}, **nested}


def _payload_fields(obj: Mapping[str, Any], kind: type[Payload], version: int) -> dict[str, Any]:
    """The payload keys of a line: renderer and sweep keys left out, older shapes upgraded."""
    own = set(kind.payload_keys())
    fields = {k: v for k, v in obj.items() if k in own or k not in ADDED_KEYS}
    fields.pop("schema_version", None)
    fields.pop("event", None)
    return _upgraded(obj["event"], fields) if version == 1 else fields


def _raw_lines(source: Source) -> Iterator[bytes | str | None]:
    """Yield the lines of ``source``; ``None`` stands for a line over MAX_LINE_BYTES."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as handle:
            yield from _bounded_lines(handle)
    else:
        yield from (None if len(line) > MAX_LINE_BYTES else line for line in source)


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
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        return BadLine(line_no=line_no, reason=f"no valid schema_version (got {version!r})")
    if version > SCHEMA_VERSION:
        return BadLine(
            line_no=line_no,
            reason=f"schema_version {version} is newer than this reader ({SCHEMA_VERSION})",
        )
    kind = registered().get(name)
    if kind is None:
        return BadLine(line_no=line_no, reason=f"unknown event {name!r}")
    try:
        payload = kind.from_fields(_payload_fields(obj, kind, version))
    except (TypeError, ValueError) as exc:
        return BadLine(line_no=line_no, reason=f"invalid event: {exc}")
    return EventLine(line_no=line_no, event=name, fields=obj, payload=payload, text=text)


def read_events(source: Source) -> Iterator[EventLine | BadLine]:
    """Yield each line of a log (a path, or str or bytes lines) as an :class:`EventLine` or a :class:`BadLine`."""
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


#: The events that open a tune run.
OPENINGS: Final = frozenset({"aitune_fp.validation.started", "aitune_fp.validation.disabled"})
_SWEEP: Final = "aitune_fp.sweep."


@attrs.define
class RunStretch:
    """The events of one run id between two openings: its report so far and its running hash."""

    report: TuneReport
    first: str
    digest: Any = attrs.field(factory=hashlib.sha256)
    n_events: int = 0


def summarize(items: Iterable[EventLine | BadLine]) -> IngestReport:
    """Group events into runs (a repeated run counted once); sweep events make no run."""
    stretches: list[tuple[str, RunStretch]] = []
    current: dict[str, RunStretch] = {}
    bad: list[tuple[int, str]] = []
    n_lines = n_events = n_sweep = 0
    for item in items:
        n_lines = max(n_lines, item.line_no)
        if isinstance(item, BadLine):
            bad.append((item.line_no, item.reason))
            continue
        if item.event.startswith(_SWEEP):  # a sweep's own bookkeeping, not part of a tune run
            n_sweep += 1
            continue
        fields = item.fields
        run_id = fields["run_id"]
        stretch = current.get(run_id)
        if stretch is None or (
            stretch.n_events and (item.event in OPENINGS or item.text == stretch.first)
        ):
            stretch = RunStretch(
                TuneReport(run_id=run_id, module_name=fields["module_name"]), item.text
            )
            current[run_id] = stretch
            stretches.append((run_id, stretch))
        stamp = fields.get("timestamp")
        stretch.report = fold(
            stretch.report, item.payload, stamp if isinstance(stamp, str) else None
        )
        stretch.digest.update(item.text.encode("utf-8", "surrogatepass") + b"\n")
        stretch.n_events += 1
    runs: list[TuneReport] = []
    seen: set[tuple[str, bytes]] = set()
    repeats: dict[str, int] = {}
    for run_id, stretch in stretches:
        key = (run_id, stretch.digest.digest())
        if key in seen:
            repeats[run_id] = repeats.get(run_id, 0) + stretch.n_events
            continue
        seen.add(key)
        if stretch.n_events:
            runs.append(stretch.report)
            n_events += stretch.n_events
    return IngestReport(
        runs=tuple(runs),
        bad_lines=tuple(bad),
        n_lines=n_lines,
        n_events=n_events + n_sweep,
        repeats=tuple(repeats.items()),
    )
