"""How a run is shown: rich tables of results and failures, the header and the final line.

One figure per result: :func:`aitune_fp.core.messages.headline_speedup` (the estimate the verdict
was decided on, with its interval, in statistical mode; AITune's figure in point mode). The mean
latency ratio stays in the JSON and the events as ``speedup``. ``tune`` and ``report`` print the
same lines for the same run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich import box
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from aitune_fp.cli._shared import escape_control
from aitune_fp.core.messages import (
    fmt_baseline_selected,
    fmt_headline,
    fmt_speedup_msg,
    headline_speedup,
)
from aitune_fp.core.report import TuneReport
from aitune_fp.core.results import PerformanceValidationResult

__all__ = [
    "MAX_REASON",
    "final_line",
    "fmt_flags",
    "fmt_rate",
    "measured_line",
    "print_parts",
    "render_run",
]

#: Longest failure reason shown in a table (the full text and traceback are in the log file).
MAX_REASON = 300

_FLAG_WORDS = {
    "warmup_not_steady": "warm-up not steady",
    "budget_spent": "budget spent",
    "recompiled": "recompiled",
    "serial_correlation": "serially correlated (interval widened)",
}


def fmt_flags(flags: Iterable[str]) -> str:
    """Measurement-quality flags in words (``level_shift_after_pair_12`` -> "level shift at pair 12")."""
    words = []
    for flag in flags:
        if flag.startswith("level_shift_after_pair_"):
            words.append(f"level shift at pair {flag.rsplit('_', 1)[-1]}")
        elif flag.startswith("ratio_shift_at_pair_"):
            words.append(f"ratio shifted at pair {flag.rsplit('_', 1)[-1]}")
        else:
            words.append(_FLAG_WORDS.get(flag, flag.replace("_", " ")))
    return escape_control(", ".join(words))


def fmt_rate(value: float | None) -> str:
    """A throughput in samples/s with thousands separators (two decimals below 100)."""
    if value is None:
        return "—"
    return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"


def _int(value: float | None) -> str:
    return "—" if value is None else f"{int(value)}"


def _verdict(result: PerformanceValidationResult) -> Text:
    word = result.verdict or ("faster" if result.passed else "not_faster")
    style = "green" if result.passed else ("yellow" if word == "inconclusive" else "red")
    return Text(word, style=style)


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


def _head(run: TuneReport, baseline_at: str | None) -> list[str]:
    lines: list[str] = []
    if run.disabled:
        lines.append("Performance validation was disabled for this run.")
    if run.baseline_throughput is not None:
        when = f" at {baseline_at}" if baseline_at else ""
        lines.append(
            f"Eager baseline: {escape_control(run.baseline_backend or 'eager')}, batch size "
            f"{_int(run.batch_size)}; up-front check{when}: {fmt_rate(run.baseline_throughput)} "
            "samples/s"
        )
    if run.baseline_error:
        lines.append(f"Eager baseline failed: {escape_control(run.baseline_error)}")
    if run.required_speedup is not None:
        pct = run.min_speedup_threshold_percent
        guarantee = next((r.guarantee for r in run.results if r.guarantee), None)
        overall = (
            f" (a wrong accept at most {1 - guarantee:.0%} over all looks)" if guarantee else ""
        )
        rule = (
            f"faster only when the interval's lower bound clears it{overall}"
            if run.decision == "statistical"
            else "AITune's rule: the mean-latency speedup must reach it"
        )
        lines.append(
            f"Gate: speedup >= {run.required_speedup:.4g}x "
            f"({'?' if pct is None else f'{pct:.4g}'}% threshold); {run.decision or '?'} "
            f"decision, {rule}"
        )
    if run.results and run.decision == "point":
        lines.append(
            "Each row compares with eager measured once up front, as AITune does (Eager/s); "
            "Speedup is AITune's mean-latency figure the verdict was decided on."
        )
    elif run.results:
        lines.append(
            "Each row compares with eager timed alongside that candidate (Eager/s); "
            "Speedup is the figure the verdict was decided on."
        )
    return lines


def _results_table(results: Sequence[PerformanceValidationResult]) -> Table:
    confidence = next((r.confidence for r in results if r.confidence), None)
    guarantee = next((r.guarantee for r in results if r.guarantee), None)
    statistical = any(r.decision == "statistical" for r in results)
    speed_head = "Speedup"
    if statistical:
        speed_head += f" [{confidence:.0%} CI]" if confidence else " [CI]"
        if guarantee:
            speed_head += f" {guarantee:.0%} overall"
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    names = [escape_control(r.backend_description) for r in results]
    qualities = [fmt_flags(r.flags) or "ok" for r in results]
    table.add_column("Backend", overflow="fold")
    table.add_column("Eager/s", justify="right", overflow="fold")
    table.add_column("Candidate/s", justify="right", overflow="fold")
    table.add_column(speed_head)
    table.add_column("Verdict")
    table.add_column("Quality", overflow="fold", max_width=24)
    table.add_column("Reason", overflow="fold", ratio=1)
    for r, name, quality in zip(results, names, qualities, strict=True):
        table.add_row(
            name,
            fmt_rate(r.baseline_throughput),
            fmt_rate(r.throughput),
            fmt_headline(r),
            _verdict(r),
            quality,
            escape_control(r.reason or ""),
        )
    return table


def _short(text: str, limit: int = MAX_REASON) -> str:
    text = escape_control(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _failures_table(run: TuneReport) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("Backend", overflow="fold", min_width=12)
    table.add_column("Stage")
    table.add_column("Error", overflow="fold")
    table.add_column("Reason", overflow="fold", ratio=1)
    table.add_column("Log", overflow="fold")
    for f in run.candidate_failures:
        table.add_row(
            escape_control(f.backend_description),
            f.stage,
            escape_control(f.error_type),
            _short(f.reason),
            escape_control(f.traceback_path or "—"),
        )
    return table


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


def final_line(
    run: TuneReport, *, error: str | None = None, baseline_at: str | None = None
) -> Text:
    """The ⚡ line for a selected candidate, the baseline-selected line, or why none was selected."""
    if run.selected_backend is None:
        if error:
            first = error.strip().splitlines()[0].rstrip(":")
            more = " (each candidate's reason is in the tables above)" if "\n" in error else ""
            return Text(f"❌ No backend was selected: {escape_control(first)}{more}", style="red")
        strategy = next((f for f in run.failures if f.stage == "strategy"), None)
        if strategy is not None:
            why = _short(f"{strategy.error_type}: {strategy.reason}")
            return Text(f"❌ No backend was selected: the strategy failed: {why}", style="red")
        return Text("ℹ️ No backend was selected.")
    chosen = escape_control(run.selected_backend)
    if run.selected_is_baseline:
        return Text(fmt_baseline_selected(chosen) + _baseline_figure(run, baseline_at))
    match = [r for r in run.results if r.backend_description == run.selected_backend]
    picked = ([r for r in match if r.passed] or match)[-1:] if match else []
    if not picked:
        return Text(f"Selected: {chosen} (not measured)")
    r = picked[0]
    value = headline_speedup(r)
    detail = f"eager {fmt_rate(r.baseline_throughput)} → {fmt_rate(r.throughput)} samples/s"
    if r.decision == "statistical":
        interval = fmt_headline(r).partition(" ")[2]
        detail = f"CI {interval}; {detail}" if interval else detail
    name = escape_control(run.module_name)
    return Text(fmt_speedup_msg(value or 0.0, detail, name, chosen), style="bold green")


def render_run(
    run: TuneReport, *, error: str | None = None, baseline_at: str | None = None
) -> list[RenderableType]:
    """Everything shown for one run, in order: header lines, tables, the final line."""
    parts: list[RenderableType] = [Text(line) for line in _head(run, baseline_at)]
    if run.results:
        parts += [Text(""), _results_table(run.results)]
    if run.candidate_failures:
        unavailable = any(f.stage == "unavailable" for f in run.candidate_failures)
        title = "Failed or unavailable candidates:" if unavailable else "Failed candidates:"
        parts += [Text(""), Text(title), _failures_table(run)]
    parts += [Text(""), final_line(run, error=error, baseline_at=baseline_at)]
    return parts


def print_parts(console: Console, parts: Iterable[RenderableType]) -> None:
    """Print ``parts`` on ``console``, each line without the padding rich leaves at its end."""
    for part in parts:
        with console.capture() as captured:
            console.print(part)
        text = "\n".join(line.rstrip() for line in captured.get().split("\n"))
        console.file.write(text)
    console.file.flush()
