"""``aitune-fp report``: tables (and a plot) from a ``--json-log`` event file, strings escaped."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from aitune_fp.cli._shared import EXIT_OK, UsageError, escape_control, make_console
from aitune_fp.cli.plain import print_parts
from aitune_fp.cli.rendering import fmt_clock, markdown_run, render_run, run_title, write_report
from aitune_fp.cli.tune_args import add_rows
from aitune_fp.core.messages import counted
from aitune_fp.core.report import TuneReport
from aitune_fp.events.ingest import IngestReport, RunSummary

#: Bad lines listed one by one on stderr; the rest are counted.
MAX_BAD_SHOWN = 20


def _read(path: str) -> IngestReport:
    from aitune_fp.events import ingest

    try:
        return ingest.summarize(ingest.read_events(path))
    except OSError as exc:
        why = exc.strerror or exc
        raise UsageError(f"cannot read {escape_control(path)!r}: {why}") from exc


def _baseline_at(run: RunSummary) -> str | None:
    return None if run.baseline_at is None else fmt_clock(run.baseline_at)


def write_runs(
    out: IO[str],
    runs: Sequence[tuple[TuneReport, Sequence[str]]],
    *,
    markdown: bool,
    verbose: bool,
    baseline_at: Callable[[TuneReport], str | None] = lambda run: None,
) -> None:
    """Each run under its title (``more`` after it in a table), as GFM or as tables."""
    console = make_console(out)
    for i, (run, more) in enumerate(runs):
        at = baseline_at(run)
        if markdown:
            title = f"{run.module_name} · run {run.run_id}"
            out.write(markdown_run(run, baseline_at=at, title=title, verbose=verbose) + "\n")
            continue
        if i:
            out.write("\n")
        print_parts(
            console, [run_title(run, *more), *render_run(run, baseline_at=at, verbose=verbose)]
        )


def _bad_lines(report: IngestReport, err: IO[str]) -> None:
    if not report.bad_lines:
        return
    n = len(report.bad_lines)
    were = "was not an aitune_fp event" if n == 1 else "were not aitune_fp events"
    lines = [f"{n} of {counted(report.n_lines, 'line')} {were}:"]
    for line_no, why in report.bad_lines[:MAX_BAD_SHOWN]:
        lines.append(f"  line {line_no}: {escape_control(why)}")
    if len(report.bad_lines) > MAX_BAD_SHOWN:
        lines.append(f"  ... and {len(report.bad_lines) - MAX_BAD_SHOWN} more")
    err.write("\n".join(lines) + "\n")


def run(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """Run ``report`` with parsed ``args``; return its exit code."""
    if args.plot is not None:
        _check_plot_target(args.plot)
    report = _read(args.log)
    if not report.runs:
        first = (
            f"; line {report.bad_lines[0][0]}: {escape_control(report.bad_lines[0][1])[:120]}"
            if report.bad_lines
            else ""
        )
        what = "tune events" if report.n_events else "aitune_fp events"
        raise UsageError(
            f"no {what} in {escape_control(args.log)!r} "
            f"({counted(report.n_lines, 'line')}{first}); write one with: "
            "aitune-fp tune --json-log FILE"
        )
    for run_id, n in report.repeats:
        err.write(
            f"warning: run {escape_control(run_id)} appears more than once in the log; "
            f"{counted(n, 'repeated event')} left out\n"
        )
    for run_id, n in report.shared_run_ids:
        starts = [
            fmt_clock(r.started_at) for r in report.runs if r.run_id == run_id and r.started_at
        ]
        when = f" (started {', '.join(starts)})" if starts else ""
        err.write(
            f"warning: run id {escape_control(run_id)} is shared by {n} different runs in the "
            f"log{when}; each is shown on its own\n"
        )
    if args.format == "json":
        write_report(report, out, _baseline_at)
    else:
        started = [(r, [] if r.started_at is None else [f"started {fmt_clock(r.started_at)}"]) for r in report.runs]  # fmt: skip
        markdown = args.format == "markdown"
        write_runs(out, started, markdown=markdown, verbose=args.verbose, baseline_at=_baseline_at)
    out.flush()
    _bad_lines(report, err)
    if args.plot is not None:  # report.runs is not empty: an empty log was refused above
        from aitune_fp.cli.plot import build_figure, no_estimate_notes

        build_figure(report).savefig(args.plot)
        missing = len(no_estimate_notes(report))
        rows = "row" if missing == 1 else "rows"
        why = f" ({missing} {rows} without an estimate: see the notes under it)" if missing else ""
        err.write(f"plot written to {escape_control(args.plot)}{why}\n")
    return EXIT_OK


def _check_plot_target(path: str) -> None:
    suffix = Path(path).suffix.lower()
    if suffix not in {".png", ".svg", ".pdf"}:
        raise UsageError(
            f"--plot needs a .png, .svg or .pdf file name, got {escape_control(path)!r}"
        )
    folder = Path(path).parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist (create it first)"
        raise UsageError(f"--plot {escape_control(path)}: {escape_control(str(folder))!r} {what}")
    if not os.access(folder, os.W_OK):
        raise UsageError(
            f"--plot {escape_control(path)}: the folder {escape_control(str(folder))!r} is not "
            "writable"
        )
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(
            "--plot needs matplotlib: pip install 'aitune-fp[plot]' (or pip install matplotlib)"
        ) from None


def add_parser(sub: Any) -> None:
    """Add the ``report`` subcommand to ``sub``."""
    report = sub.add_parser(
        "report",
        help="tables (and a plot) from a --json-log event file",
        description="Read a JSON-lines event log; print one table per run; list bad lines. "
        "Exit 2 when the file holds no tune event.",
    )
    report.add_argument("log", help="JSON-lines file written by --json-log")
    report.add_argument("--plot", help="write a speedup/CI plot (.png, .svg or .pdf)")
    add_rows(report, ("format", "verbose"))
    report.set_defaults(func=run)
