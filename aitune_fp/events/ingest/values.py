"""What reading a log gives: event lines, bad lines, and the runs they make."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import attrs

from aitune_fp.core.report import TuneReport
from aitune_fp.events.kinds import Payload


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
