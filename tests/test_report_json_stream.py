"""``report --format json`` streams its document run by run (issue 32).

Memory must grow with the runs a log holds, not with the document written: each run's JSON is
written before the next run's is made, and the bytes are the very document one ``json.dumps``
of the whole would give.
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any

import pytest

from aitune_fp.cli import report
from aitune_fp.cli._shared import json_text
from aitune_fp.cli.rendering import fmt_clock, run_dict
from aitune_fp.core.report import TuneReport
from aitune_fp.events import ingest
from tests.factories import fake_log, fake_result, write_log


class _Recorder(io.StringIO):
    """A stdout that keeps each write apart, in order, beside the events of ``seen``."""

    def __init__(self, seen: list[tuple[str, Any]]) -> None:
        super().__init__()
        self.seen = seen

    def write(self, text: str) -> int:
        """Record ``text`` as one write."""
        self.seen.append(("write", text))
        return super().write(text)


def _log(tmp_path: Path) -> Path:
    lines: list[str] = []
    for i in range(4):
        fast = fake_result(f"F{i}()", estimate=1.5, ci_low=1.4, ci_high=1.6, verdict="faster")
        lines += fake_log(f"run{i}", results=(fake_result(), fast), selected=f"F{i}()", outcome="candidate")  # fmt: skip
    lines.append("not an event")
    return write_log(tmp_path, lines)


def _whole_document(path: Path) -> str:
    """The document as one ``json_text`` of everything (what ``report`` wrote before streaming)."""
    read = ingest.ingest(path)
    runs = []
    for one in read.runs:
        at = None if one.baseline_at is None else fmt_clock(one.baseline_at)
        runs.append(run_dict(one, baseline_at=at))
    return json_text({"command": "report", **read.to_dict(), "runs": runs}) + "\n"


def test_json_report_is_written_run_by_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each run is written whole, in a write of its own, before the run after next is made."""
    path = _log(tmp_path)
    expected = _whole_document(path)
    seen: list[tuple[str, Any]] = []
    to_dict = TuneReport.to_dict

    def recorded(self: TuneReport) -> dict[str, Any]:
        seen.append(("to_dict", self.run_id))
        return to_dict(self)

    monkeypatch.setattr(TuneReport, "to_dict", recorded)
    out = _Recorder(seen)
    args = argparse.Namespace(log=str(path), plot=None, format="json")
    assert report.run(args, out, io.StringIO()) == 0

    assert out.getvalue() == expected  # the same bytes as the document built whole
    runs = json.loads(expected)["runs"]
    assert [r["run_id"] for r in runs] == [f"run{i}" for i in range(4)]
    texts = [json_text(r) for r in runs]
    writes = [i for i, (kind, _) in enumerate(seen) if kind == "write"]
    made = [i for i, (kind, _) in enumerate(seen) if kind == "to_dict"]
    for n, text in enumerate(texts):
        holding = [i for i in writes if text in seen[i][1]]
        assert len(holding) == 1, f"run {n} is not written whole in one write"
        assert sum(t in seen[holding[0]][1] for t in texts) == 1, "two runs in one write"
        if n + 2 < len(made):
            assert holding[0] < made[n + 2], f"run {n} was held until later runs were made"


def test_json_report_stays_one_valid_document(tmp_path: Path) -> None:
    """What the stream writes is one JSON document: every run, the bad line, the counts."""
    path = _log(tmp_path)
    out = io.StringIO()
    args = argparse.Namespace(log=str(path), plot=None, format="json")
    assert report.run(args, out, io.StringIO()) == 0
    doc = json.loads(out.getvalue())
    assert list(doc) == [
        "command",
        "runs",
        "bad_lines",
        "n_lines",
        "n_events",
        "repeats",
        "shared_run_ids",
    ]
    assert doc["command"] == "report" and len(doc["runs"]) == 4
    assert doc["bad_lines"][0]["line_no"] == doc["n_lines"]
    assert all(r["selected_estimate"] == 1.5 for r in doc["runs"])
