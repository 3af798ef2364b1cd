"""The choice among passing candidates as plain lines: who lost to whom, by how much, and why."""

from __future__ import annotations

import math

from aitune_fp.cli._shared import escape_control
from aitune_fp.core.report import TuneReport


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
