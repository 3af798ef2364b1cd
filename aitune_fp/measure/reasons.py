"""The sentence that says why a statistical verdict is what it is, and what it rules out."""

from __future__ import annotations

from aitune_fp.core.messages import fmt_apart, ruled_out
from aitune_fp.core.verdict import SpeedupDecision


def fmt_figure(x: float) -> str:
    return f"{x:.3f}x"


def reason_text(
    decision: SpeedupDecision, n_pairs: int, *, budget_s: float | None, last_look: bool
) -> str:
    """One sentence saying why the statistical verdict is what it is, and what it rules out."""
    req = fmt_figure(decision.required_speedup)
    interval = f"[{fmt_figure(decision.ci_low)}, {fmt_figure(decision.ci_high)}]"
    if decision.verdict == "faster":
        low, need = fmt_apart(decision.ci_low, decision.required_speedup)
        what = "" if "throughput_bound" in decision.flags else " (typical call)"
        text = f"lower bound {low}x{what} clears required {need}x at {n_pairs} pairs"
    elif decision.verdict == "not_faster" and decision.ci_high < decision.required_speedup:
        high, need = fmt_apart(decision.ci_high, decision.required_speedup)
        text = f"upper bound {high}x is below required {need}x at {n_pairs} pairs"
    elif decision.verdict == "not_faster":
        limit = decision.required_speedup + decision.futility_margin
        high, edge = fmt_apart(decision.upper_for_futility, limit)
        text = (
            f"estimate {fmt_figure(decision.speedup)} is below required {req} and the upper bound "
            f"{high}x is below {edge}x (required + {decision.futility_margin * 100:g} pt futility "
            f"margin) at {n_pairs} pairs: not faster by a margin that matters"
        )
    elif decision.held_back == "carryover":  # the note says by how much
        low, need = fmt_apart(decision.ci_low, decision.required_speedup)
        text = (
            f"lower bound {low}x clears required {need}x but not on the pairs where the "
            f"candidate ran after itself ({n_pairs} pairs): not called faster; {ruled_out(decision)}"
        )
    elif decision.held_back == "machine":  # the note says what moved
        text = (
            f"no verdict from pairs taken across a change of the machine ({n_pairs} pairs); "
            f"{ruled_out(decision)}"
        )
    elif "throughput_disagrees" in decision.flags:  # the interval clears it; throughput not
        low, need = fmt_apart(decision.ci_low, decision.required_speedup)
        where = f"budget of {budget_s:g} s spent" if budget_s is not None else "held back"
        text = (
            f"lower bound {low}x clears required {need}x but the mean-latency throughput ratio "
            f"of the same pairs does not ({where} at {n_pairs} pairs): not called faster; "
            f"{ruled_out(decision)}"
        )
    elif budget_s is not None:
        text = (
            f"budget of {budget_s:g} s spent at {n_pairs} pairs, "
            f"interval {interval} straddles required {req}; {ruled_out(decision)}"
        )
    else:
        where = "after the last look" if last_look else "when sampling stopped"
        text = (
            f"interval {interval} still straddles required {req} {where} ({n_pairs} pairs); "
            f"{ruled_out(decision)}"
        )
    notes = []
    if decision.shift_index is not None:
        notes.append(
            f"the ratio shifted at pair {decision.shift_index}: the estimate and throughputs are "
            "from the pairs after it, and the verdict needed them and the whole run to agree"
        )
    if "carryover" in decision.flags and decision.carryover is not None:
        notes.append(
            f"carry-over: the candidate ran {(decision.carryover - 1.0) * 100:+.1f}% right after "
            "an eager call against after itself; a faster needs the pairs after itself to clear "
            "the gate alone"
        )
    if "serial_correlation" in decision.flags and decision.autocorrelation is not None:
        notes.append(
            f"interval widened for serial correlation (lag-1 {decision.autocorrelation:.2f})"
        )
    return text + (f" ({'; '.join(notes)})" if notes else "")
