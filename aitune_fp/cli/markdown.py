"""``--format markdown``: the rich tables' figures and words as GFM tables, cells escaped, one line each."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from aitune_fp.cli._shared import escape_control
from aitune_fp.cli.rendering import choice_lines, final_line, head_lines, short_text
from aitune_fp.cli.rows import hidden_flags, result_rows
from aitune_fp.core.report import TuneReport


def md_cell(text: object) -> str:
    """One GFM table cell: control characters escaped, ``|`` escaped, on one line."""
    value = escape_control(str(text)).replace("\\n", " ")
    return value.replace("\\", "\\\\").replace("|", "\\|").strip() or " "


def md_table(
    head: Sequence[str], rows: Iterable[Sequence[object]], right: Sequence[int] = ()
) -> str:
    """A GFM table; the columns numbered in ``right`` are right-aligned."""
    lines = [
        "| " + " | ".join(md_cell(h) for h in head) + " |",
        "|" + "|".join("---:" if i in right else "---" for i in range(len(head))) + "|",
    ]
    lines += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def markdown_run(
    run: TuneReport,
    *,
    error: str | None = None,
    baseline_at: str | None = None,
    not_tried: Sequence[tuple[str, str]] = (),
    title: str | None = None,
    verbose: bool = False,
) -> str:
    """One run as markdown: heading, gate, results and failures tables, outcome (``-v``)."""
    parts = [f"### {md_cell(title or run.module_name)}", ""]
    parts += [f"{md_cell(line)}  " for line in head_lines(run, baseline_at, verbose=verbose)]
    if run.results:
        head, rows = result_rows(run.results, verbose)
        parts += ["", md_table(head, rows, right=(1, 2))]
        hidden = None if verbose else hidden_flags(run.results)
        parts += ["", md_cell(hidden.plain)] if hidden is not None else []
    if run.candidate_failures:
        failed = [
            (
                f.backend_description,
                f.stage,
                f.error_type,
                short_text(f.reason),
                f.traceback_path or "—",
            )
            for f in run.candidate_failures
        ]
        parts += ["", md_table(("Failed", "Stage", "Error", "Reason", "Log"), failed)]
    if choice := choice_lines(run):
        parts += [""] + [f"{md_cell(line.strip())}  " for line in choice]
    if not_tried:
        parts += [""] + [f"- {md_cell(n)} not tried: {md_cell(w)}" for n, w in not_tried]
    parts += ["", f"**{md_cell(final_line(run, error=error, baseline_at=baseline_at).plain)}**"]
    return "\n".join(parts) + "\n"
