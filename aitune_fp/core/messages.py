"""Human text of the validation: byte-compatible with AITune's lines, colour as an argument."""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING

from aitune_fp.core._checks import check_int, check_nonnegative

if TYPE_CHECKING:
    from aitune_fp.core.results import PerformanceValidationResult
    from aitune_fp.core.verdict import SpeedupDecision

__all__ = [
    "ANSI_BACKEND",
    "ANSI_BOLD",
    "ANSI_EMOJI",
    "ANSI_FASTER",
    "ANSI_RESET",
    "ANSI_SLOWER",
    "ANSI_SPEEDUP",
    "counted",
    "decided_by_futility",
    "decided_interval",
    "fmt_apart",
    "fmt_baseline_line",
    "fmt_baseline_selected",
    "fmt_candidate_line",
    "fmt_disabled_line",
    "fmt_headline",
    "fmt_indicator",
    "fmt_interval",
    "fmt_isolation_line",
    "fmt_level",
    "fmt_mean_apart",
    "fmt_speedup_msg",
    "fmt_speedup_msg_short",
    "fmt_throughput_detail",
    "fmt_verdict_reason",
    "headline_speedup",
    "one_line",
    "ruled_out",
    "ruled_out_statement",
]

#: ANSI codes AITune uses when its stream is a terminal (reference §1.7, §1.8).
ANSI_RESET = "\033[0m"
ANSI_EMOJI = "\033[94m"
ANSI_SPEEDUP = "\033[92m\033[1m"
ANSI_BOLD = "\033[1m"
ANSI_BACKEND = "\033[96m"
ANSI_FASTER = "\033[92m"
ANSI_SLOWER = "\033[33m"

_LIGHTNING = "⚡"


def _paint(text: str, code: str, color: bool) -> str:
    return f"{code}{text}{ANSI_RESET}" if color else text


def _count(name: str, value: object) -> int:
    """A batch size as an int: any integer type (numpy's ``int64`` too, as AITune passes), no bool."""
    if not isinstance(value, bool) and isinstance(value, numbers.Integral):
        value = int(value)
    return check_int(name, value)


def _amount(name: str, value: object) -> float:
    """A throughput or speedup as a float >= 0: any real type (numpy's floats too), no bool."""
    if not isinstance(value, bool) and isinstance(value, numbers.Real):
        value = float(value)
    return check_nonnegative(name, value)


def fmt_throughput_detail(baseline_throughput: float, throughput: float) -> str:
    """Return ``"<baseline> → <throughput> samples/s"`` with two decimals (arrow U+2192)."""
    base, value = (
        _amount("baseline_throughput", baseline_throughput),
        _amount("throughput", throughput),
    )
    return f"{base:.2f} → {value:.2f} samples/s"


def fmt_mean_apart(ratio: float, low: float | None, high: float | None) -> str:
    """``", 1.17x by mean throughput"`` when the throughput ratio lies outside ``[low, high]``."""
    if not math.isfinite(ratio) or low is None:
        return ""
    if ratio >= low and (high is None or not math.isfinite(high) or ratio <= high):
        return ""
    return f", {ratio:.2f}x by mean throughput"


def fmt_speedup_msg_short(speedup: float, detail: str, *, color: bool = False) -> str:
    """Return the short summary ``"⚡ speedup: 2.00x (<detail>)"`` (no module or backend name)."""
    text = _paint(f"{_amount('speedup', speedup):.2f}x", ANSI_SPEEDUP, color)
    return f"{_paint(_LIGHTNING, ANSI_EMOJI, color)} speedup: {text} ({detail})"


def fmt_speedup_msg(
    speedup: float, detail: str, name: str, backend_desc: str, *, color: bool = False
) -> str:
    """Return the full summary ``"⚡ <name> | backend: <desc> | speedup: 2.00x (<detail>)"``."""
    short = fmt_speedup_msg_short(speedup, detail, color=color)
    emoji, _, rest = short.partition(" ")
    named = (
        f"{_paint(name, ANSI_BOLD, color)} | backend: {_paint(backend_desc, ANSI_BACKEND, color)}"
    )
    return f"{emoji} {named} | {rest}"


def fmt_indicator(passed: bool, *, color: bool = False) -> str:
    """Return ``"▲ faster"`` when the candidate passed, else ``"▼ slower"`` (AITune's words)."""
    if passed:
        return _paint("▲ faster", ANSI_FASTER, color)
    return _paint("▼ slower", ANSI_SLOWER, color)


def fmt_candidate_line(
    backend_desc: str,
    batch_size: int,
    throughput: float,
    speedup: float,
    passed: bool,
    *,
    color: bool = False,
) -> str:
    """Return the per-candidate line of AITune, e.g. ``"📊 X: batch size=8, ... (▲ faster)"``."""
    ratio = _amount("speedup", speedup)
    return (
        f"📊 {backend_desc}: {_batch_and_throughput(batch_size, throughput)}, "
        f"speedup={ratio:.2f}x ({fmt_indicator(passed, color=color)})"
    )


def _batch_and_throughput(batch_size: int, throughput: float) -> str:
    size, value = _count("batch_size", batch_size), _amount("throughput", throughput)
    return f"batch size={size}, throughput={value:.2f} samples/s"


def fmt_baseline_line(batch_size: int, throughput: float) -> str:
    """Return ``"📊 Eager baseline: batch size=8, throughput=123.45 samples/s"``."""
    return f"📊 Eager baseline: {_batch_and_throughput(batch_size, throughput)}"


def fmt_baseline_selected(backend_desc: str, baseline_throughput: float | None = None) -> str:
    """Return ``"ℹ️ Baseline was selected: <desc>"`` plus ``" (123.00 samples/s)"`` when known."""
    text = f"ℹ️ Baseline was selected: {backend_desc}"
    if baseline_throughput is not None:
        value = _amount("baseline_throughput", baseline_throughput)
        text += f" ({value:.2f} samples/s)"
    return text


def fmt_isolation_line(mode: str, note: str | None) -> str:
    """Where a tune's candidates ran until chosen, for a report's header (and why in process)."""
    if mode == "process":
        return (
            "Isolation: process (each candidate built, checked and timed in a worker process of "
            "its own, eager in another; the chosen one rebuilt and checked here)"
        )
    why = f": {note}" if note else ""
    return f"Isolation: in process{why} (docs/guarantees.md says what it cannot see)"


def fmt_disabled_line() -> str:
    """Return AITune's line for a tune with performance validation switched off."""
    return "⚠️ Performance validation against eager baseline is disabled."


# ---- The headline: the one speedup figure shown for a result, consistent with its verdict ----


def headline_speedup(result: PerformanceValidationResult) -> float | None:
    """The speedup to show for ``result``: the figure its verdict was decided on."""
    if result.sequential:
        return result.decided.estimate
    return result.speedup


def fmt_interval(low: float | None, high: float | None, digits: int = 3) -> str:
    """``"[0.900, 0.988]"``; an unbounded upper end is ``∞``, no interval at all is ``"—"``."""
    if low is None and high is None:
        return "—"
    lo = "—" if low is None else f"{low:.{digits}f}"
    hi = "∞" if high is None else f"{high:.{digits}f}"
    return f"[{lo}, {hi}]"


def decided_by_futility(result: PerformanceValidationResult) -> bool:
    """Whether ``result`` is a ``not_faster`` settled by the futility stop."""
    if (
        not result.sequential
        or result.verdict != "not_faster"
        or result.futility_high is None
        or result.required_speedup is None
    ):
        return False
    return result.ci_high is None or result.ci_high >= result.required_speedup


def decided_interval(
    result: PerformanceValidationResult,
) -> tuple[float | None, float | None, float | None]:
    """The interval ``result``'s verdict was decided on, and its level: ``(low, high, level)``."""
    if decided_by_futility(result):
        return None, result.futility_high, result.futility_level
    return result.ci_low, result.ci_high, result.confidence


def fmt_headline(result: PerformanceValidationResult, *, with_level: bool = False) -> str:
    """The headline speedup as text: ``"0.95x [0.900, 0.988]"`` (statistical) or ``"1.37x"``."""
    value = headline_speedup(result)
    if value is None:
        return "—"
    low, high, level = decided_interval(result)
    if result.sequential and (low is not None or high is not None):
        at = f" at {fmt_level(level)}" if with_level and level is not None else ""
        return f"{value:.2f}x {fmt_interval(low, high)}{at}"
    return f"{value:.2f}x"


def counted(n: int, noun: str) -> str:
    """``n`` and its noun agreeing: ``1 pair``, ``2 pairs``, ``0 lines``."""
    return f"{n} {noun if n == 1 else noun + 's'}"


def fmt_level(level: float) -> str:
    """A confidence level as a percentage with the precision it has."""
    pct = float(level) * 100.0
    digits = 0
    while digits < 2 and abs(round(pct, digits) - pct) > 1e-9 * max(1.0, abs(pct)):
        digits += 1
    text = f"{pct:.{digits}f}"
    while 0 < level < 1 and text in (f"{100:.{digits}f}", f"{0:.{digits}f}") and digits < 15:
        digits += 1
        text = f"{pct:.{digits}f}"
    return f"{text}%"


def _signed_percent(ratio: float) -> str:
    """A speedup as a signed percentage change against eager (1.04 -> '+4%')."""
    change = (ratio - 1.0) * 100.0
    size = abs(change)
    if size >= 1:
        digits = 0 if size >= 10 or round(change, 1) == round(change) else 1
    else:  # below 1 %: enough digits that a small bound never prints as "-0%"
        digits = 1 if size >= 0.1 else 2
    text = f"{change:+.{digits}f}%"
    return "±0%" if float(text[:-1]) == 0 else text


def ruled_out_statement(ci_low: float, ci_high: float, level: float) -> str:
    """Say which speedups an interval rules out and where it places the candidate."""
    parts = []
    if math.isfinite(ci_high):
        parts.append(f"faster than {ci_high:.3f}x")
    if ci_low > 0.0:
        parts.append(f"slower than {ci_low:.3f}x")
    if not parts:
        return "too few timings to rule anything out"
    both = 2.0 * level - 1.0  # Bonferroni over the two sides (exact for one look)
    where = (
        f"; the candidate is within {_signed_percent(ci_low)}/{_signed_percent(ci_high)} of eager at "
        f"{fmt_level(both)} (both sides together)"
        if math.isfinite(ci_high) and ci_low > 0.0 and both > 0.0
        else ""
    )
    each = " (one-sided each)" if len(parts) == 2 else ""
    verb = "are" if len(parts) == 2 else "is"
    return f"{' and '.join(parts)} {verb} ruled out at {fmt_level(level)}{each}{where}"


def ruled_out(decision: SpeedupDecision) -> str:
    """What a decision's interval rules out, as one sentence (the honest content of any verdict)."""
    return ruled_out_statement(decision.ci_low, decision.ci_high, decision.overall)


def fmt_apart(value: float, other: float, digits: int = 3) -> tuple[str, str]:
    """Both numbers with ``digits`` decimals, or more (up to 9) until they read differently."""
    places = digits
    while places < 9 and value != other and f"{value:.{places}f}" == f"{other:.{places}f}":
        places += 1
    return f"{value:.{places}f}", f"{other:.{places}f}"


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (lines joined), never empty, at most 1000 chars."""
    text = " ".join(line.strip() for line in str(exc).strip().splitlines() if line.strip())
    text = text or type(exc).__name__
    return text if len(text) <= 1000 else text[:999] + "…"


#: Flags that hold a settled-looking interval back, in words (the first found is said); a move the
#: paired ratio held across (``machine_moved_ratio_steady_at_pair_<k>``) holds nothing back.
_HELD_BACK_WORDS: tuple[tuple[str | tuple[str, ...], str], ...] = (
    (("machine_busy", "machine_changed", "machine_slowed"), "the machine moved"),
    ("carryover", "carry-over from eager's call"),
    ("throughput_disagrees", "mean throughput below the gate"),
    ("block_bound", "the ratio drifts"),
)


def _held_back(flags: tuple[str, ...]) -> str:
    """`` but held back: <why>`` for an interval on one side of the gate left inconclusive."""
    for stem, words in _HELD_BACK_WORDS:
        if any(flag.startswith(stem) for flag in flags):
            return f" but held back: {words}"
    return " but held back"


def _digits_apart(need: float, *values: float) -> int:
    """Decimals (3 or more) at which each of ``values`` reads differently from ``need``."""
    return max(len(fmt_apart(v, need)[0].partition(".")[2]) for v in values)


def fmt_verdict_reason(result: PerformanceValidationResult) -> str:
    """Why the verdict, in one short line: the figure that decided, against the gate."""
    verdict = result.verdict or ("faster" if result.passed else "not_faster")
    need = result.required_speedup
    if need is None:
        return f"{verdict}: no required speedup recorded"
    if not result.sequential:  # AITune's rule on its mean-latency figure
        value, gate = fmt_apart(result.speedup, need, 2)
        return f"speedup {value}x {'reaches' if result.passed else 'below'} {gate}x"
    pairs = (result.latencies_from or 0) + (result.n_baseline or 0)
    low, high = result.ci_low, result.ci_high
    if result.estimate is None or low is None:
        if "machine_too_busy" in result.flags:
            again = next((f[8:] for f in result.flags if f.startswith("retimed_")), "?")
            return (
                "no estimate: the machine was too busy before the first look "
                f"({counted(pairs, 'pair')}, {again} timed again)"
            )
        return f"no estimate: the budget ran out before the first look ({counted(pairs, 'pair')})"
    if verdict == "not_faster" and (high is None or high >= need):  # the futility stop
        bound = high if result.futility_high is None else result.futility_high
        margin = result.futility_margin_percent
        if bound is None or margin is None:
            value, gate = fmt_apart(result.estimate, need)
            return f"estimate {value}x below {gate}x: stopped for futility"
        value, edge = fmt_apart(bound, need + margin / 100)
        return f"futility bound {value}x below {edge}x (gate + {margin:g} pt margin)"
    held = "" if verdict != "inconclusive" else _held_back(result.flags)
    if verdict == "faster" or (held and low > need):
        value, gate = fmt_apart(low, need)
        return f"lower bound {value}x clears {gate}x{held}"
    if high is not None and (verdict == "not_faster" or high < need):
        value, gate = fmt_apart(high, need)
        return f"upper bound {value}x below {gate}x{held}"
    digits = _digits_apart(need, low, *(() if high is None else (high,)))
    text = f"interval {fmt_interval(low, high, digits)} straddles {need:.{digits}f}x"
    text += f" after {counted(pairs, 'pair')}"
    stopped = {"budget_spent": " (budget spent)", "machine_too_busy": " (machine too busy)"}
    return text + "".join(v for k, v in stopped.items() if k in result.flags)
