"""The results table, at a glance or in full (``-v``), and the head-to-head's lines below it."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.text import Text

from aitune_fp.cli._shared import escape_control
from aitune_fp.cli.plain import Column, Grid
from aitune_fp.core.messages import (
    counted,
    decided_by_futility,
    decided_interval,
    fmt_headline,
    fmt_level,
    fmt_verdict_reason,
)
from aitune_fp.core.report import TuneReport
from aitune_fp.core.results import PerformanceValidationResult

_FLAG_WORDS = {
    "warmup_not_steady": "warm-up not steady",
    "budget_spent": "budget spent",
    "recompiled": "recompiled",
    "serial_correlation": "serially correlated (interval widened)",
    "throughput_disagrees": "throughput ratio below the gate (held back)",
    "block_bound": "ratio drifts (block means held it back)",
}
_AT_PAIR = {"level_shift_after": "level shift", "ratio_shift_at": "ratio shifted"}


def fmt_flags(flags: Iterable[str]) -> str:
    """Measurement-quality flags in words (``level_shift_after_pair_12`` -> "level shift at pair 12")."""
    words = []
    for flag in flags:
        stem, _, pair = flag.rpartition("_pair_")
        if stem and pair.isdigit():  # level_shift_after_pair_12 -> "level shift at pair 12"
            words.append(f"{_AT_PAIR.get(stem, stem.removesuffix('_at').replace('_', ' '))} at pair {pair}")  # fmt: skip
        elif flag.startswith("retimed_") and flag[8:].isdigit():
            words.append(
                f"{counted(int(flag[8:]), 'pair')} timed again (another process had a core)"
            )
        else:
            words.append(_FLAG_WORDS.get(flag, flag.replace("_", " ")))
    return escape_control(", ".join(words))


def fmt_rate(value: float | None) -> str:
    """A throughput in samples/s with thousands separators (two decimals below 100)."""
    if value is None:
        return "—"
    return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"


def verdict_text(result: PerformanceValidationResult) -> Text:
    """The verdict word, coloured: green faster, yellow inconclusive, red not faster."""
    word = result.verdict or ("faster" if result.passed else "not_faster")
    style = "green" if result.passed else ("yellow" if word == "inconclusive" else "red")
    return Text(word, style=style)


def record(name: str, fields: Sequence[tuple[str, str]]) -> Group:
    """One row as a record: the name on its own line, then ``label: value`` lines, indented."""
    lines = [Padding(Text(f"{label}: {value}"), (0, 0, 0, 2)) for label, value in fields]
    return Group(Text(name, style="bold"), *lines)


def _speed_head(results: Sequence[PerformanceValidationResult]) -> tuple[str, set[bool]]:
    """The Speedup header naming the levels of what decided, and which kinds' cells carry theirs."""
    levels: dict[bool, set[float]] = {False: set(), True: set()}
    for r in results:
        level = decided_interval(r)[2]
        if r.sequential and level is not None:
            levels[decided_by_futility(r)].add(level)
    guarantee = next((r.guarantee for r in results if r.guarantee), None)
    if not any(r.sequential for r in results):
        return "Speedup", set()
    parts = [
        f"{what} {fmt_level(next(iter(seen))) if len(seen) == 1 else 'at the level shown'}"
        for what, seen in (("accept", levels[False]), ("futility", levels[True]))
        if seen
    ]
    head = f"Speedup [{'; '.join(parts) or 'CI'}]"
    head += f" {fmt_level(guarantee)} overall" if guarantee else ""
    return head, {kind for kind, seen in levels.items() if len(seen) > 1}


def interval_label(results: Sequence[PerformanceValidationResult]) -> str | None:
    """What the intervals of ``results`` hold at: ``"95% overall"``, an older log's, or None."""
    stated = [r for r in results if r.sequential]
    if not stated:
        return None
    guarantee = next((r.guarantee for r in stated if r.guarantee), None)
    if guarantee:
        return f"{fmt_level(guarantee)} overall"
    levels = {r.confidence for r in stated if not decided_by_futility(r) and r.confidence}
    return f"{fmt_level(levels.pop())} CI" if len(levels) == 1 else "CI"


def speedup_column(
    results: Sequence[PerformanceValidationResult], *, verbose: bool = False
) -> tuple[str, list[str]]:
    """The Speedup column's header and cells: each row's decided figure and interval (``verbose``: levels)."""
    if verbose:
        head, leveled = _speed_head(results)
        cells = [fmt_headline(r, with_level=decided_by_futility(r) in leveled) for r in results]
        return head, cells
    label = interval_label(results)
    return ("Speedup" if label is None else f"Speedup [{label}]"), list(map(fmt_headline, results))


def result_rows(
    results: Sequence[PerformanceValidationResult], verbose: bool = False
) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The results table's head and cells as text (``verbose``: the quality and full reason)."""
    speed_head, figures = speedup_column(results, verbose=verbose)
    quality = ("Quality",) if verbose else ()
    timed = [r.n_baseline != 0 for r in results]  # no pair timed: the warm-up's rates are not
    rows = [
        (
            escape_control(r.backend_description),
            fmt_rate(r.baseline_throughput if on else None),
            fmt_rate(r.throughput if on else None),
            figure,
            verdict_text(r).plain,
            *((fmt_flags(r.flags) or "ok",) if verbose else ()),
            escape_control(r.reason or "") if verbose else fmt_verdict_reason(r),
        )
        for r, figure, on in zip(results, figures, timed, strict=True)
    ]
    return ("Backend", "Eager/s", "Candidate/s", speed_head, "Verdict", *quality, "Reason"), rows


def results_table(
    results: Sequence[PerformanceValidationResult], verbose: bool = False
) -> RenderableType:
    """One line per candidate: throughputs, speedup, verdict, reason (``verbose``: quality too)."""
    head, rows = result_rows(results, verbose)
    # names and figures are never split (a backend name cut mid-word cannot be read or copied);
    # the quality flags and the reason wrap on words, and take the width that is left
    quality_column = [Column("Quality", overflow="fold", max_width=24)] if verbose else []
    columns = [
        Column("Backend", no_wrap=True, min_width=max((len(r[0]) for r in rows), default=7)),
        Column("Eager/s", justify="right", no_wrap=True),
        Column("Candidate/s", justify="right", no_wrap=True),
        Column(Text(head[3]), no_wrap=True),
        Column("Verdict", no_wrap=True),
        *quality_column,
        Column("Reason", overflow="fold", ratio=1),
    ]
    records: list[RenderableType] = []
    cells: list[tuple[str | Text, ...]] = []
    for r, (name, eager, candidate, figure, verdict, *rest) in zip(results, rows, strict=True):
        cells.append((name, eager, candidate, figure, verdict_text(r), *rest))
        fields = [
            ("eager → candidate", f"{eager} → {candidate} samples/s"),
            (head[3], figure),
            ("verdict", verdict),
            *([("quality", rest[0])] if verbose else []),
            ("reason", rest[-1]),
        ]
        records.append(record(name, fields))
    return Grid(columns, cells, records, wrapping=8 * verbose + 20)


def hidden_flags(results: Sequence[PerformanceValidationResult]) -> Text | None:
    """The line under a table without the Quality column when some row has flags."""
    n = sum(1 for r in results if r.flags)
    if not n:
        return None
    rows = "1 row has" if n == 1 else f"{n} rows have"
    return Text(
        f"{rows} quality flags (what may weaken a measurement): -v shows them, with each "
        "row's level and full reason"
    )


def _high(value: float) -> str:
    return "inf" if not math.isfinite(value) else f"{value:.3f}"


def choice_lines(run: TuneReport) -> list[str]:
    """The head-to-head and the latency checks of ``run`` as lines (none when neither ran)."""
    lines = [f"{escape_control(c.backend_description)}: {c.reason}" for c in run.latency_checks]
    state = run.selection
    if state is None:
        return lines
    names = ", ".join(escape_control(c.name) for c in state.contenders)
    lines.append(f"Head-to-head among {names} ({state.rounds} rounds, interleaved):")
    for e in state.eliminated:
        lines.append(
            f"  {escape_control(e.name)} lost to {escape_control(e.lost_to)}: "
            f"{e.ratio:.3f}x [{e.low:.3f}, {_high(e.high)}] faster, after {e.at_rounds} rounds"
        )
    for f in state.failed:
        lines.append(f"  {escape_control(f.name)} failed: {escape_control(f.error)}")
    if state.outcome != "one_left":  # a tie-break or a budget: the reason says how it was made
        lines.append(f"  {escape_control(state.reason)}")
    if state.chosen is None:
        return lines
    level = f"{state.confidence * 100:g} %"
    chosen = escape_control(state.chosen)
    if not math.isfinite(state.gap_bound):
        lines.append(f"  {chosen} kept; no guarantee at {level}: the head-to-head ended first")
    elif state.gap_bound <= 1.0:
        lines.append(f"  {chosen} kept: shown the fastest (no contender faster, at {level})")
    else:
        gap = (state.gap_bound - 1.0) * 100
        lines.append(f"  {chosen} kept: no contender is more than {gap:.1f} % faster (at {level})")
    return lines
