"""The ``report --plot`` figure: each run's rows on a log speedup axis, one panel per module."""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aitune_fp.cli._shared import escape_control
from aitune_fp.cli.rendering import short_text
from aitune_fp.core.messages import fmt_headline, headline_speedup

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from aitune_fp.core.report import TuneReport
    from aitune_fp.events.ingest import IngestReport

#: Legend label of each verdict.
VERDICT_LABELS = {"faster": "faster", "not_faster": "not faster", "inconclusive": "inconclusive"}
#: Okabe–Ito colours (told apart with colour-blindness too); each verdict has its marker shape.
VERDICT_COLOURS = {"faster": "#009E73", "not_faster": "#D55E00", "inconclusive": "#E69F00"}
_SHAPES = {"faster": "o", "not_faster": "s", "inconclusive": "D"}
#: Label of a row (or a run) that has no speedup figure.
NO_ESTIMATE = "no estimate"
_GREY = "#777777"
_DASHED: dict[str, Any] = {"color": "black", "linestyle": "--", "linewidth": 1, "zorder": 1}
_NOTE_LIMIT = 240
_WHERE = "(full text: aitune-fp report --format json)"
_WIDTH_IN = 10.0  # at the default 100 dpi: 1000 px, whatever the number of runs


@dataclass(frozen=True)
class _Row:
    label: str
    verdict: str | None  # None: no estimate
    value: float | None = None
    low: float | None = None
    high: float | None = None
    open_above: bool = False
    need: float | None = None
    figure: str = "—"
    note: str | None = None
    who: str = ""  # module, run and backend, for the note


def _label(text: str, limit: int = 48) -> str:
    text = escape_control(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _short_note(text: str) -> str:
    return short_text(text, _NOTE_LIMIT, _WHERE)


def _tag(run: TuneReport) -> str:
    return f"run {escape_control(run.run_id[:6])}"


def _rows_of(run: TuneReport, tagged: bool) -> list[_Row]:
    """One row per result and per failed candidate, else one; ``tagged``: labels name the run."""
    tag = _tag(run)
    where = f"{_label(run.module_name)} · {tag}"

    def named(description: str) -> str:
        return f"{_label(description)} · {tag}" if tagged else _label(description)

    rows: list[_Row] = []
    for r in run.results:
        name = named(r.backend_description)
        need = r.required_speedup if r.required_speedup is not None else run.required_speedup
        value = headline_speedup(r)
        if value is None:
            why = _short_note(r.reason or "no decision was reached")
            who = f"{where} · {_label(r.backend_description)}"
            rows.append(_Row(name, None, need=need, note=why, who=who))
            continue
        verdict = r.verdict or ("faster" if r.passed else "not_faster")
        low = high = value
        if r.sequential:
            low = r.ci_low if r.ci_low is not None else value
            high = r.ci_high if r.ci_high is not None else value
        open_above = r.sequential and r.ci_high is None and r.ci_low is not None
        figure = escape_control(fmt_headline(r))
        rows.append(_Row(name, verdict, value, low, high, open_above, need, figure))
    for f in run.candidate_failures:
        why = _short_note(f"failed at {f.stage}: {f.error_type}: {f.reason}")
        who = f"{where} · {_label(f.backend_description)}"
        rows.append(
            _Row(named(f.backend_description), None, need=run.required_speedup, note=why, who=who)
        )
    if not rows:
        strategy = next((f for f in run.failures if f.stage == "strategy"), None)
        if run.disabled:
            why = "performance validation was disabled"
        elif run.baseline_error:
            why = f"eager baseline failed: {run.baseline_error}"
        elif strategy is not None:
            why = f"the strategy failed: {strategy.error_type}: {strategy.reason}"
        else:
            why = "no candidate was measured"
        name = f"{tag} (whole run)"
        rows.append(_Row(name, None, need=run.required_speedup, note=_short_note(why), who=where))
    return rows


def _panels(report: IngestReport) -> dict[str, list[_Row]]:
    """Rows by panel title: one panel per module; its run named in the title when alone."""
    runs: dict[str, list[TuneReport]] = {}
    for run in report.runs:
        runs.setdefault(run.module_name, []).append(run)
    panels: dict[str, list[_Row]] = {}
    for module, mine in runs.items():
        title = _label(module) + (f" · {_tag(mine[0])}" if len(mine) == 1 else "")
        panels[title] = [row for run in mine for row in _rows_of(run, len(mine) > 1)]
    return panels


def no_estimate_notes(report: IngestReport) -> list[str]:
    """The notes under the plot, ``"[n] module · run · backend: reason"``, one a row."""
    rows = [row for rows in _panels(report).values() for row in rows if row.verdict is None]
    return [f"[{i}] {row.who}: {row.note}" for i, row in enumerate(rows, start=1)]


def _limits(rows: list[_Row]) -> tuple[float, float]:
    """Log-axis limits holding every figure, bound, gate and 1x, with a margin."""
    xs = [1.0] + [
        x for row in rows for x in (row.value, row.low, row.high, row.need) if x is not None
    ]
    positive = [x for x in xs if x > 0]
    low, high = min(positive) / 1.15, max(positive) * 1.15
    if high / low < 1.4:  # a narrow range still gets a readable span around it
        mid = math.sqrt(low * high)
        low, high = mid / math.sqrt(1.4), mid * math.sqrt(1.4)
    return low, high


def _ticks(low: float, high: float) -> list[float]:
    """Round speedups (0.5x, 1x, 2x, 5x, ...) in range: the coarsest set giving 4 or more."""
    mantissas: tuple[tuple[float, ...], ...] = (
        (1, 2, 5),
        (1, 1.5, 2, 3, 5, 7),
        (1, 1.1, 1.2, 1.3, 1.5, 1.7, 2, 2.5, 3, 4, 5, 6, 7, 8, 9),
        (1, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.4, 1.5, 1.6, 1.8, 2, 2.5, 3, 4, 5, 6, 7, 8, 9, 9.5),
    )
    ticks: list[float] = []
    for subs in mantissas:  # the finest set still gives 4 over the narrowest span (1.4x)
        ticks = [
            round(m * 10.0**k, 6)
            for k in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
            for m in subs
            if low <= m * 10.0**k <= high
        ]
        if len(ticks) >= 4:
            break
    return ticks


def _draw_panel(ax: Axes, module: str, rows: list[_Row], first_note: int) -> int:
    """Draw one module's rows on ``ax``; return the number of the next note."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter
    from matplotlib.transforms import ScaledTranslation, blended_transform_factory

    ax.set_gid("panel")
    ax.set_xscale("log")
    low, high = _limits(rows)
    ax.set_xlim(low, high)
    ys = list(range(len(rows)))[::-1]
    points = [(row, y) for row, y in zip(rows, ys, strict=True) if row.value is not None]
    bars = [(row, y) for row, y in points if row.low != row.high or row.open_above]
    if bars:
        values = [max(row.value or low, low) for row, _ in bars]
        lows = [max(row.low or low, low) for row, _ in bars]
        highs = [
            high if row.open_above else (row.high or v)
            for (row, _), v in zip(bars, values, strict=True)
        ]
        ax.errorbar(
            values,
            [y for _, y in bars],
            xerr=[
                [v - lo for v, lo in zip(values, lows, strict=True)],
                [hi - v for v, hi in zip(values, highs, strict=True)],
            ],
            fmt="none",
            ecolor="black",
            elinewidth=1,
            capsize=4,
            zorder=4,  # over the markers: a narrow interval still shows its ends
        )
    opened = [y for row, y in bars if row.open_above]
    if opened:
        ax.scatter(
            [high] * len(opened), opened, marker=">", color="black", clip_on=False, gid="open"
        )
    for verdict, colour in VERDICT_COLOURS.items():
        mine = [(row, y) for row, y in points if row.verdict == verdict]
        if mine:
            ax.scatter(
                [max(row.value or low, low) for row, _ in mine],
                [y for _, y in mine],
                color=colour,
                marker=_SHAPES[verdict],
                s=30,
                zorder=3,
                label=VERDICT_LABELS[verdict],
                gid=f"verdict:{verdict}",
            )
    # a hollow marker just inside the left spine (clear of the tick), its label beside it
    edge = blended_transform_factory(ax.transAxes, ax.transData) + ScaledTranslation(
        7 / 72, 0, ax.figure.dpi_scale_trans
    )
    missing = [y for row, y in zip(rows, ys, strict=True) if row.verdict is None]
    if missing:
        ax.scatter(
            [0.0] * len(missing),
            missing,
            transform=edge,
            facecolors="none",
            edgecolors=_GREY,
            s=30,
            zorder=3,
            clip_on=False,
            label=NO_ESTIMATE,
            gid="verdict:none",
        )
    note = first_note
    figures: list[str] = []
    for row, y in zip(rows, ys, strict=True):
        if row.verdict is None:
            ax.annotate(
                f"{NO_ESTIMATE} [{note}]",
                (0.0, y),
                xycoords=edge,
                xytext=(7, 0),
                textcoords="offset points",
                va="center",
                fontsize=8,
                color=_GREY,
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.0},
                zorder=4,
            )
            figures.append(f"— [{note}]")
            note += 1
        else:
            figures.append(row.figure)
    ax.axvline(1.0, color="grey", linewidth=0.8, zorder=1, label="eager (1x)", gid="eager")
    needs = sorted({row.need for row in rows if row.need is not None})
    if len(needs) == 1:
        need = needs[0]
        ax.axvline(need, label=f"required speedup {need:.4g}x", gid="threshold", **_DASHED)
        at_right = (math.log(need) - math.log(low)) / (math.log(high) - math.log(low)) > 0.7
        ax.text(
            need,
            len(rows) - 0.4,
            f" required {need:.4g}x ",
            fontsize=8,
            va="center",
            ha="right" if at_right else "left",
        )
    else:
        for row, y in zip(rows, ys, strict=True):
            if row.need is not None:
                ax.plot([row.need] * 2, [y - 0.4, y + 0.4], gid="threshold", **_DASHED)
        figures = [
            f if row.need is None else f"{f} · gate {row.need:.4g}x"
            for f, row in zip(figures, rows, strict=True)
        ]
    ax.set_yticks(ys, [row.label for row in rows], fontsize=9)
    ax.set_ylim(-0.7, len(rows) - 0.1)  # headroom above the top row for the gate's label
    right = ax.secondary_yaxis("right")
    right.set_yticks(ys, figures, fontsize=8)
    right.tick_params(length=0)
    right.set_gid("figures")
    ax.xaxis.set_major_locator(FixedLocator(_ticks(low, high)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}x"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("speedup over eager (log scale)", fontsize=9)
    ax.set_title(f"{module}: speedup over eager, estimate and confidence interval", fontsize=10)
    return note


def _legend_handles(panels: dict[str, list[_Row]]) -> list[object]:
    from matplotlib.lines import Line2D

    rows = [row for rows in panels.values() for row in rows]
    seen = {row.verdict for row in rows}
    handles: list[object] = [
        Line2D([], [], color=colour, marker=_SHAPES[v], linestyle="none", label=VERDICT_LABELS[v])
        for v, colour in VERDICT_COLOURS.items()
        if v in seen
    ]
    if None in seen:
        hollow: dict[str, Any] = {"marker": "o", "markerfacecolor": "none", "color": _GREY}
        handles.append(Line2D([], [], linestyle="none", label=NO_ESTIMATE, **hollow))
    needs = {row.need for row in rows if row.need is not None}
    if needs:
        what = f"{next(iter(needs)):.4g}x" if len(needs) == 1 else "(per run)"
        handles.append(Line2D([], [], label=f"required speedup {what}", **_DASHED))
    handles.append(Line2D([], [], color="grey", linewidth=0.8, label="eager (1x)"))
    return handles


def build_figure(report: IngestReport) -> Figure:
    """The plot ``report --plot`` writes: one panel per module, every row of every run."""
    from matplotlib.figure import Figure

    panels = _panels(report)
    notes = no_estimate_notes(report)
    lines = [
        line
        for note in notes
        for line in textwrap.wrap(note, 150, subsequent_indent="      ", break_long_words=True)
    ]
    heights = [max(1.7, 0.32 * len(rows) + 1.1) for rows in panels.values()]
    key = 0.55 + (0.15 + 0.14 * (len(lines) + 1) if lines else 0.0)
    total = sum(heights) + key + 0.2
    fig = Figure(figsize=(_WIDTH_IN, total))
    axes = fig.subplots(len(panels), 1, squeeze=False, gridspec_kw={"height_ratios": heights})
    note = 1
    for ax, (module, rows) in zip(axes[:, 0], panels.items(), strict=True):
        note = _draw_panel(ax, module, rows, note)
    fig.tight_layout(rect=(0.0, key / total, 1.0, 1.0), h_pad=1.2)
    handles = _legend_handles(panels)
    fig.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, key / total),
        ncol=len(handles),
        fontsize=8,
        frameon=False,
    )
    if lines:
        fig.text(
            0.01,
            (key - 0.45) / total,
            "Rows without an estimate:\n" + "\n".join(lines),
            va="top",
            ha="left",
            fontsize=7.5,
            gid="notes",
            linespacing=1.25,
        )
    return fig
