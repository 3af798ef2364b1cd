"""``aitune-fp sweep``: every model of a TOML file × its backends, locally or on Ray (``--ray``)."""

from __future__ import annotations

import argparse
from typing import IO, Any

import attrs
from rich import box
from rich.table import Table
from rich.text import Text

from aitune_fp.cli._shared import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PARTIAL,
    PROG,
    UsageError,
    escape_control,
    json_text,
    make_console,
    stdout_to_stderr,
    usage_errors,
)
from aitune_fp.cli.check import threshold_warning
from aitune_fp.cli.plain import print_parts
from aitune_fp.cli.progress import configure_logging
from aitune_fp.cli.rendering import md_table, run_dict
from aitune_fp.cli.report import write_runs
from aitune_fp.cli.tune_args import add_rows
from aitune_fp.core.messages import counted, fmt_interval
from aitune_fp.profiling.threads import too_many_threads


def _spec(path: str) -> Any:
    from aitune_fp.sweep.spec import load_sweep

    try:
        return load_sweep(path)
    except OSError as exc:
        raise UsageError(f"cannot read sweep file {path!r}: {exc.strerror or exc}") from exc
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{escape_control(path)}: {exc}") from exc


def _executor(args: argparse.Namespace, spec: Any) -> Any:
    if args.ray is None:
        from aitune_fp.sweep.task import LocalExecutor

        return LocalExecutor()
    from aitune_fp.sweep.ray_executor import RayExecutor, import_ray

    with usage_errors((Exception,)):
        import_ray()
    address = None if args.ray == "local" else args.ray
    return RayExecutor(address, device=spec.device, max_retries=spec.max_retries)


def _outcome_line(outcome: Any) -> str:
    last = outcome.records[-1] if outcome.records else {}
    model = escape_control(outcome.model)
    if outcome.ok:
        where = f"{last.get('hostname', '?')}, {last.get('device_name', '?')}"
        return (
            f"✅ {model}: {escape_control(str(last.get('outcome')))} "
            f"({escape_control(where)}, {last.get('duration_s', 0.0):.1f}s)"
        )
    return (
        f"❌ {model}: {escape_control(str(last.get('error_type')))}: "
        f"{escape_control(str(last.get('reason')))[:300]}"
    )


def _cell_text(cell: Any) -> Text:
    if cell is None:
        return Text("—")
    if cell.verdict == "failed":
        return Text(f"failed ({escape_control(cell.note)})", style="red")
    figure = "—" if cell.estimate is None else f"{cell.estimate:.2f}x"
    if cell.ci_low is not None or cell.ci_high is not None:
        figure += f" {fmt_interval(cell.ci_low, cell.ci_high)}"
    style = {"faster": "green", "inconclusive": "yellow"}.get(cell.verdict, "red")
    return Text(f"{cell.verdict} {figure}", style=style)


def _summary_rows(summary: Any) -> tuple[list[str], list[list[str | Text]]]:
    """Models as rows, backends as columns; a failed model's reason fills its first cell."""
    columns = list(summary.backends) or ["Result"]
    failed = {s.model: s for s in summary.failed}
    rows: list[list[str | Text]] = []
    for model in summary.models:
        f = failed.get(model)
        if f is not None:
            why = f"failed: {escape_control(str(f.error_type))}: {escape_control(str(f.reason))}"
            cells: list[str | Text] = [Text(why[:300], style="red"), *[""] * (len(columns) - 1)]
        else:
            cells = [_cell_text(summary.cell(model, b)) for b in columns]
        rows.append([escape_control(model), *cells])
    return columns, rows


def _summary_table(summary: Any) -> Table:
    """The models × backends summary as a rich table."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    columns, rows = _summary_rows(summary)
    table.add_column("Model", no_wrap=True)
    for backend in columns:
        table.add_column(escape_control(backend), overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def _summary_markdown(name: str, summary: Any) -> str:
    """The models × backends summary as a GFM table."""
    columns, rows = _summary_rows(summary)
    cells = [[c.plain if isinstance(c, Text) else c for c in row] for row in rows]
    return f"### Sweep {name}\n\n" + md_table(["Model", *columns], cells)


def run(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """Run ``sweep`` with parsed ``args``; return its exit code."""
    from aitune_fp.events import ingest
    from aitune_fp.sweep.run import run_sweep, summarize_sweep

    spec = _spec(args.sweep)
    threads = spec.profiling.threads
    here = threads is not None and args.ray in (None, "local")  # a cluster's nodes: their own
    if here and (problem := too_many_threads(threads, "budget.threads")) is not None:
        raise UsageError(f"{escape_control(args.sweep)}: {problem}")
    warning = threshold_warning(spec.threshold, "threshold")
    if warning is not None:  # as tune and check warn, whatever --quiet says
        err.write(f"{PROG}: warning: {escape_control(args.sweep)}: {warning}\n")
    log_path = args.json_log or spec.log or f"{spec.name}-events.jsonl"
    try:
        open(log_path, "a", encoding="utf-8").close()
    except OSError as exc:
        raise UsageError(f"cannot write the event log {log_path!r}: {exc.strerror}") from exc
    executor = _executor(args, spec)
    configure_logging()  # tasks collect their events into the log; nothing else is printed
    console = make_console(err)
    if not args.quiet:
        where = "Ray" + (f" at {args.ray}" if args.ray not in (None, "local") else " (local)")
        console.print(
            f"{PROG}: sweep {escape_control(spec.name)}: {counted(len(spec.models), 'model')} × "
            f"{', '.join(spec.backend_names())} on {spec.device}, "
            f"{where if args.ray is not None else 'one after another, each in a child process'}; "
            f"events to {escape_control(log_path)}"
        )

    def show(outcome: Any) -> None:
        if not args.quiet:
            console.print(_outcome_line(outcome))

    with stdout_to_stderr():
        result = run_sweep(
            spec,
            log_path=log_path,
            executor=executor,
            resume=args.resume,
            cache_dir=args.cache_dir,
            on_outcome=show,
        )
    if result.cache_dir is not None and args.cache_dir is None and not args.quiet:
        console.print(
            f"{PROG}: builds kept in {escape_control(result.cache_dir)} (delete when done)"
        )
    for line_no, why in result.skipped_lines:  # --resume: a line cut mid-event, left alone
        err.write(
            f"{PROG}: warning: {escape_control(log_path)} line {line_no} skipped "
            f"(not an event: {escape_control(why)[:120]})\n"
        )
    wanted = {s.tune_run_id for s in result.statuses if s.tune_run_id}
    reports = {r.run_id: r for r in ingest.ingest(log_path).runs if r.run_id in wanted}
    summary = summarize_sweep(result.statuses, reports)
    skipped = ["from an earlier sweep (--resume)"]
    runs = [
        (reports[s.tune_run_id], skipped if s.state == "skipped" else [])
        for s in result.statuses
        if s.tune_run_id in reports
    ]
    if args.format == "json":
        doc = {
            "command": "sweep",
            "sweep_id": result.sweep_id,
            "log": log_path,
            "executor": result.executor,
            "interrupted": result.interrupted,
            "duration_s": result.duration_s,
            "statuses": [attrs.asdict(s) for s in result.statuses],
            "summary": attrs.asdict(summary),
            "runs": [run_dict(run) for run, _ in runs],
        }
        out.write(json_text(doc) + "\n")
    elif args.format == "markdown":
        write_runs(out, runs, markdown=True, verbose=args.verbose)
        out.write(_summary_markdown(spec.name, summary) + "\n")
    else:
        write_runs(out, runs, markdown=False, verbose=args.verbose)
        out.write("\n" if runs else "")
        names = ", ".join(escape_control(s.model) for s in summary.failed)
        last = (
            Text(f"❌ {counted(len(summary.failed), 'model')} failed: {names}", style="red")
            if summary.failed
            else Text(f"✅ every model has a report ({counted(len(summary.models), 'model')})")
        )
        name = escape_control(spec.name)
        head = f"Sweep {name} ({result.executor}, {result.duration_s:.1f}s):"
        print_parts(make_console(out), [Text(head), _summary_table(summary), last])
    out.flush()
    if result.interrupted:
        err.write(f"{PROG}: interrupted: what finished is in {log_path}; rerun with --resume\n")
        return EXIT_INTERRUPTED
    return EXIT_PARTIAL if summary.failed else EXIT_OK


def add_parser(sub: Any) -> None:
    """Add the ``sweep`` subcommand to ``sub``."""
    sweep = sub.add_parser(
        "sweep",
        help="validate many models × backends from a TOML file, locally or on Ray",
        description="Run one tune per model of SWEEP (a TOML file, see examples/sweep.toml), "
        "write all events to one JSON-lines log, print each run and a models × backends summary.",
    )
    sweep.add_argument("sweep", help="the sweep description (TOML)")
    sweep.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="run the tasks on Ray: a local Ray (no ADDRESS) or the cluster at ADDRESS "
        "(ray://host:10001, auto); needs the ray extra",
    )
    sweep.add_argument(
        "--resume", action="store_true", help="skip models whose result is already in the log"
    )
    add_rows(
        sweep,
        ("json_log", "cache_dir", "format", "quiet", "verbose"),
        json_log="the JSON-lines event log; without it, the file's log, or NAME-events.jsonl",
        cache_dir="where builds go; without it, a new temp dir",
    )
    sweep.set_defaults(func=run)
