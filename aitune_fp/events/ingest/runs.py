"""Events grouped into runs by ``run_id`` and content (``docs/events.md``, "what a run is")."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any, Final

import attrs

from aitune_fp.core.report import TuneReport
from aitune_fp.events.ingest.values import BadLine, EventLine, IngestReport
from aitune_fp.events.kinds import fold

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
