"""How a run is shown: the header, tables and final line; as GFM; the JSON document."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import IO, TYPE_CHECKING, Any

from rich.console import RenderableType
from rich.text import Text

from aitune_fp.cli._shared import escape_control, json_text
from aitune_fp.cli.plain import Column, Grid
from aitune_fp.cli.rows import (
    choice_lines,
    fmt_flags,
    fmt_rate,
    hidden_flags,
    interval_label,
    record,
    result_rows,
    results_table,
)
from aitune_fp.core.accuracy import fmt_noise_floor
from aitune_fp.core.messages import (
    counted,
    decided_by_futility,
    fmt_baseline_selected,
    fmt_headline,
    fmt_isolation_line,
    fmt_level,
    fmt_mean_apart,
    headline_speedup,
)
from aitune_fp.core.report import TuneReport
from aitune_fp.core.results import PerformanceValidationResult

if TYPE_CHECKING:  # ``tune`` imports this module and never reads a log
    from aitune_fp.events.ingest import IngestReport

#: Longest failure reason shown in a table (the full text and traceback are in the log file).
MAX_REASON = 300


def _int(value: float | None) -> str:
    return "—" if value is None else f"{int(value)}"


def fmt_clock(timestamp: str) -> str:
    """``2025-01-02T12:01:02.123Z`` -> ``2025-01-02 12:01:02 UTC`` (as written, escaped)."""
    date, _, time = timestamp.partition("T")
    return escape_control(f"{date} {time[:8]} UTC" if time else timestamp[:40])


def run_title(run: TuneReport, *more: str) -> Text:
    """A run's title line: its id, module, strategy and device, then ``more``."""
    parts = [f"Run {run.run_id}", run.module_name, *(x for x in (run.strategy, run.device) if x)]
    return Text(" · ".join([*map(escape_control, parts), *more]))


def measured_line(result: PerformanceValidationResult) -> str:
    """The stderr line for a measured candidate: headline, verdict and quality flags."""
    verdict = result.verdict or ("faster" if result.passed else "not_faster")
    text = (
        f"📊 {escape_control(result.backend_description)}: batch size {_int(result.batch_size)}, "
        f"speedup {fmt_headline(result)} → {verdict}"
    )
    if result.flags:
        text += f" (quality: {fmt_flags(result.flags)})"
    return text


def _about(results: Sequence[PerformanceValidationResult]) -> str:
    """What the statistical rows' verdicts are about, and how they were timed (older logs: by block)."""
    blocks = max(max(r.latencies_block, r.candidate_latencies_block or 0) for r in results)
    quantity = next((r.quantity for r in results if r.quantity), None)
    if quantity is None:  # logs before version 4 say it only through the block size
        quantity = "throughput" if blocks > 1 else "typical"
    if quantity == "typical":
        return "the typical call, timed one call at a time"
    timed = f"in blocks of up to {blocks} calls" if blocks > 1 else "one call a block (a long call)"
    return f"throughput, timed {timed}"


def head_lines(run: TuneReport, baseline_at: str | None, *, verbose: bool = False) -> list[str]:
    lines: list[str] = []
    if run.disabled:
        lines.append("Performance validation was disabled for this run.")
    if run.baseline_throughput is not None:
        when = f" at {baseline_at}" if baseline_at else ""
        # its mean-latency rate is what point rows compare with; statistical rows time eager
        # alongside, and the budget quotes the median call: one eager rate in a header
        rate = "" if run.sequential else f": {fmt_rate(run.baseline_throughput)} samples/s"
        lines.append(
            f"Eager baseline: {escape_control(run.baseline_backend or 'eager')}, batch size "
            f"{_int(run.batch_size)}; up-front check{when}{rate}"
            f"{fmt_noise_floor(run.noise_floor_rel_l2)}"
        )
    if run.baseline_error:
        lines.append(f"Eager baseline failed: {escape_control(run.baseline_error)}")
    if run.budget_plan:
        lines.append(f"Budget: {escape_control(run.budget_plan)}")
    if run.degenerate_outputs:
        lines.append(f"Warning: {escape_control(run.degenerate_outputs)}")
    if run.required_speedup is not None:
        pct = run.min_speedup_threshold_percent
        guarantee = next((r.guarantee for r in run.results if r.guarantee), None)
        overall = (
            f" (a wrong accept at most {fmt_level(1 - guarantee)} over all looks for independent"
            " or moderately correlated timings: docs/guarantees.md)"
            if guarantee
            else ""
        )
        rule = (
            f"faster only when the interval's lower bound clears it{overall}"
            if run.sequential
            else "AITune's rule: the mean-latency speedup must reach it"
        )
        lines.append(
            f"Gate: speedup >= {run.required_speedup:.4g}x "
            f"({'?' if pct is None else f'{pct:.4g}'}% threshold); {run.decision or '?'} "
            f"decision, {rule}"
        )
    if run.results and not run.sequential:
        lines.append(
            "Each row compares with eager measured once up front, as AITune does (Eager/s); "
            "Speedup is AITune's mean-latency figure the verdict was decided on."
        )
    elif run.results:
        futile = any(map(decided_by_futility, run.results))
        level = "" if verbose else "; -v shows its level"
        about = _about(run.results)
        lines.append(
            "Each row compares with eager timed alongside that candidate (Eager/s); "
            f"Speedup is the figure and the interval the verdict was decided on ({about}), a "
            "paired estimate that discounts outlying pairs: the mean rates shown can differ"
            + (
                f"; a futility stop: its one-sided bound [—, high], and an estimate that errs "
                f"low (the stop came on a low reading){level}."
                if futile
                else "."
            )
        )
    isolation = run.isolation and fmt_isolation_line(run.isolation, run.isolation_note)
    lines += [escape_control(x) for x in (_cpu_line(run.results), isolation) if x]
    return lines


def _cpu_line(results: Sequence[PerformanceValidationResult]) -> str | None:
    """The threads, cores and load from the first comparison's start to the last one's end, or None."""
    timed = [r for r in results if r.threads is not None]
    if not timed:
        return None
    first, last = timed[0], timed[-1]
    omp = " unset" if first.omp_num_threads is None else f"={first.omp_num_threads}"
    inter = "" if first.interop_threads is None else f", {first.interop_threads} inter-op"
    cores = "" if first.cpus is None else f"; {counted(first.cpus, 'core')}"
    text = f"CPU threads: {first.threads} intra-op{inter}, OMP_NUM_THREADS{omp}{cores}"
    if first.load_avg_start is not None or last.load_avg_end is not None:
        start = "—" if first.load_avg_start is None else f"{first.load_avg_start:.2f}"
        end = "—" if last.load_avg_end is None else f"{last.load_avg_end:.2f}"
        text += (
            f"; load average (1 min) {start} at the first comparison's start, "
            f"{end} at the last one's end"
        )
    return text


#: Where a reason cut short in a table is written in full when no log file names it.
_FULL_TEXT_JSON = "(full text: --format json)"


def short_text(text: str, limit: int = MAX_REASON, where: str = _FULL_TEXT_JSON) -> str:
    """``text`` escaped; when longer than ``limit``, cut and ended with where the rest is."""
    text = escape_control(text)
    if len(text) <= limit:
        return text
    return text[: max(limit - len(where) - 2, 1)].rstrip() + "… " + where


def _failures_table(run: TuneReport) -> tuple[RenderableType, list[str]]:
    """The failures table, and below it, whole (so they can be copied), the log paths it numbers."""
    failures = run.candidate_failures
    names = [escape_control(f.backend_description) for f in failures]
    columns = [
        Column("Backend", no_wrap=True, min_width=max(map(len, names), default=12)),
        Column("Stage", no_wrap=True),
        Column("Error", no_wrap=True),
        Column("Reason", overflow="fold", ratio=1),
        Column("Log", no_wrap=True),
    ]
    logs: list[str] = []
    records: list[RenderableType] = []
    rows: list[tuple[str, ...]] = []
    for f, name in zip(failures, names, strict=True):
        ref, where = "—", _FULL_TEXT_JSON
        if f.traceback_path:
            path = escape_control(f.traceback_path)
            if path not in logs:
                logs.append(path)
            ref = f"[{logs.index(path) + 1}]"
            where = f"(full text in log {ref})"
        error, reason = escape_control(f.error_type), short_text(f.reason, where=where)
        rows.append((name, f.stage, error, reason, ref))
        records.append(
            record(name, [("stage", f.stage), ("error", error), ("reason", reason), ("log", ref)])
        )
    return Grid(columns, rows, records, wrapping=24), logs


def _baseline_figure(run: TuneReport, baseline_at: str | None) -> str:
    """Eager's figure for the baseline-selected line: the one measured alongside the candidates."""
    rates = sorted(r.baseline_throughput for r in run.results)
    if rates:
        span = fmt_rate(rates[0]) + ("" if rates[0] == rates[-1] else f"–{fmt_rate(rates[-1])}")
        return f" (eager timed alongside the candidates: {span} samples/s)"
    if run.baseline_throughput is not None:
        when = f" at {baseline_at}" if baseline_at else ""
        return f" (up-front check{when}: {fmt_rate(run.baseline_throughput)} samples/s)"
    return ""


def _selected_result(run: TuneReport) -> PerformanceValidationResult | None:
    """The selected backend's result: its last passing one, else its last one (None: unmeasured)."""
    match = [r for r in run.results if r.backend_description == run.selected_backend]
    return next(reversed([r for r in match if r.passed] or match), None)


def final_line(
    run: TuneReport, *, error: str | None = None, baseline_at: str | None = None
) -> Text:
    """The ⚡ line for a selected candidate, the baseline-selected line, or why none was selected."""
    if run.selected_backend is None and not run.complete and error is None:
        where = f"; its last phase: {escape_control(run.last_phase)}" if run.last_phase else ""
        return Text(f"⚠️ Incomplete run: the log stops before the tune finished{where}.")
    if run.selected_backend is None:
        if error:
            first = error.strip().splitlines()[0].rstrip(":")
            more = " (each candidate's reason is in the tables above)" if "\n" in error else ""
            return Text(f"❌ No backend was selected: {escape_control(first)}{more}", style="red")
        strategy = next((f for f in run.failures if f.stage == "strategy"), None)
        if strategy is not None:
            why = short_text(f"{strategy.error_type}: {strategy.reason}")
            return Text(f"❌ No backend was selected: the strategy failed: {why}", style="red")
        return Text("ℹ️ No backend was selected.")
    chosen = escape_control(run.selected_backend)
    if run.selected_is_baseline:
        return Text(fmt_baseline_selected(chosen) + _baseline_figure(run, baseline_at))
    r = _selected_result(run)
    if r is None:
        return Text(f"Selected: {chosen} (not measured)")
    figure = fmt_headline(r)  # the row's figure and interval, as the row prints them
    detail = f"eager {fmt_rate(r.baseline_throughput)} → {fmt_rate(r.throughput)} samples/s"
    label = interval_label(run.results)
    if r.sequential and headline_speedup(r) is not None:  # the mean ratio when outside it
        detail += fmt_mean_apart(r.speedup, r.ci_low, r.ci_high)
        detail = f"{label}; {detail}" if label and " [" in figure else detail
    name = escape_control(run.module_name)
    return Text(f"⚡ {name} | backend: {chosen} | speedup: {figure} ({detail})", style="bold green")


def render_run(
    run: TuneReport,
    *,
    error: str | None = None,
    baseline_at: str | None = None,
    not_tried: Sequence[tuple[str, str]] = (),
    verbose: bool = False,
) -> list[RenderableType]:
    """Everything shown for one run, in order: header, tables, not tried, the final line."""
    lines = head_lines(run, baseline_at, verbose=verbose)
    parts: list[RenderableType] = [Text(line) for line in lines]
    if run.results:
        parts += [Text(""), results_table(run.results, verbose)]
        hidden = None if verbose else hidden_flags(run.results)
        parts += [hidden] if hidden is not None else []
    if run.candidate_failures:
        unavailable = any(f.stage == "unavailable" for f in run.candidate_failures)
        title = "Failed or unavailable candidates:" if unavailable else "Failed candidates:"
        table, logs = _failures_table(run)
        parts += [Text(""), Text(title), table]
        if logs:
            parts.append(Text("Logs (full reason and traceback):"))
            parts += [
                Text(f"[{i}] {path}", no_wrap=True, overflow="ignore")
                for i, path in enumerate(logs, start=1)
            ]
    if choice := choice_lines(run):
        parts += [Text("")] + [Text(line) for line in choice]
    if not_tried:
        parts.append(Text(""))
        parts += [Text(f"{name} not tried: {why}") for name, why in not_tried]
    parts += [Text(""), final_line(run, error=error, baseline_at=baseline_at)]
    return parts


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
        picked = None if run.selected_is_baseline else _selected_result(run)
        if picked is not None:
            data["selected_estimate"] = headline_speedup(picked)
            data["selected_speedup"] = picked.speedup
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


# ---- --format markdown: the tables' figures and words as GFM, cells escaped, one line each


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
