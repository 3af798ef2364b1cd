"""What ``--format json`` and the notes under the tables say about a run beyond its report."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Any

from aitune_fp.cli._shared import escape_control, json_text
from aitune_fp.cli.rendering import final_line
from aitune_fp.core.messages import headline_speedup
from aitune_fp.core.report import TuneReport

if TYPE_CHECKING:  # ``tune`` imports this module and never reads a log
    from aitune_fp.events.ingest.values import IngestReport


def run_dict(
    run: TuneReport,
    *,
    baseline_at: str | None = None,
    not_tried: Sequence[tuple[str, str]] = (),
) -> dict[str, Any]:
    """``run.to_dict()`` for ``--format json``, its ``selected_summary`` the tables' final line.

    ``selected_summary_aitune`` keeps AITune's line; ``not_tried``: the candidates never tried, and why.
    """
    data = run.to_dict()
    data["not_tried"] = [{"backend_description": n, "reason": why} for n, why in not_tried]
    data["selected_summary_aitune"] = run.selected_summary
    data["selected_estimate"] = data["selected_speedup"] = None
    if run.selected_backend is not None:
        data["selected_summary"] = final_line(run, baseline_at=baseline_at).plain
        if not run.selected_is_baseline:
            match = [r for r in run.results if r.backend_description == run.selected_backend]
            picked = ([r for r in match if r.passed] or match)[-1:]
            if picked:
                data["selected_estimate"] = headline_speedup(picked[0])
                data["selected_speedup"] = picked[0].speedup
    return data


def write_report(
    report: IngestReport, out: IO[str], baseline_at: Callable[[TuneReport], str | None]
) -> None:
    """``report --format json``: one document, written run by run so only one run's dict is held."""
    out.write(json_text({"command": "report"})[:-1] + ', "runs": [')
    for i, run in enumerate(report.runs):
        text = json_text(run_dict(run, baseline_at=baseline_at(run)))
        out.write(f", {text}" if i else text)
    out.write("], " + json_text(report.rest_dict())[1:] + "\n")


def not_tried(run: TuneReport, candidates: Sequence[str], strategy: str) -> list[tuple[str, str]]:
    """The candidates the strategy never built or timed, each with why (``first-wins`` stops early)."""
    tried = {r.backend_description for r in run.results}
    tried |= {f.backend_description for f in run.failures}
    missing = [c for c in candidates if c not in tried]
    if not missing:
        return []
    if run.selected_backend is not None and not run.selected_is_baseline:
        why = f"{strategy} stopped at {escape_control(run.selected_backend)}"
    else:
        why = f"{strategy} stopped before it"
    return [(escape_control(c), why) for c in missing]
